//! The sled key layout. Every key starts with `project \0 entity \0`, so the records of
//! one entity are one contiguous range and a list never reads another entity's.
//! Project ids are checked by config and entity ids by auth: neither contains `\0`.
//!
//! | tree       | key                                         | value            |
//! |------------|---------------------------------------------|------------------|
//! | `pm`       | scope, id                                   | record (JSON)    |
//! | `pm_time`  | scope, u64::MAX - created_micros (BE), id    | empty            |
//! | `pm_fp`    | scope, fingerprint                          | id               |
//! | `keyrings` | project                                     | wrapped keyring  |
//! | `audit`    | seq (BE)                                    | entry (JSON)     |
//! | `meta`     | `audit_head`                                | last entry       |

use super::Scope;

/// `project \0 entity \0`
pub fn scope_prefix(scope: Scope<'_>) -> Vec<u8> {
    let mut k = Vec::with_capacity(scope.project.len() + scope.entity.len() + 2);
    k.extend_from_slice(scope.project.as_bytes());
    k.push(0);
    k.extend_from_slice(scope.entity.as_bytes());
    k.push(0);
    k
}

/// Key of a record in `pm`.
pub fn pm(scope: Scope<'_>, id: &str) -> Vec<u8> {
    let mut k = scope_prefix(scope);
    k.extend_from_slice(id.as_bytes());
    k
}

/// Key in `pm_time`: newest sorts first.
pub fn pm_time(scope: Scope<'_>, created_micros: i64, id: &str) -> Vec<u8> {
    let mut k = scope_prefix(scope);
    let inverted = u64::MAX - u64::try_from(created_micros).unwrap_or(0);
    k.extend_from_slice(&inverted.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// The id at the end of a `pm_time` key.
pub fn id_from_pm_time(prefix_len: usize, key: &[u8]) -> Option<&str> {
    key.get(prefix_len + 8..)
        .and_then(|b| std::str::from_utf8(b).ok())
}

/// Key in `pm_fp`.
pub fn pm_fingerprint(scope: Scope<'_>, fingerprint: &str) -> Vec<u8> {
    let mut k = scope_prefix(scope);
    k.extend_from_slice(fingerprint.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_sorts_first_and_scopes_do_not_overlap() {
        let s = Scope {
            project: "p",
            entity: "e",
        };
        assert!(pm_time(s, 2_000, "pm_b") < pm_time(s, 1_000, "pm_a"));
        let other = Scope {
            project: "p",
            entity: "e2",
        };
        assert!(!pm(other, "x").starts_with(&scope_prefix(s)));
        let p = scope_prefix(s);
        assert_eq!(
            id_from_pm_time(p.len(), &pm_time(s, 5, "pm_1")),
            Some("pm_1")
        );
    }
}
