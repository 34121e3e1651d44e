//! The sled key layout. Every key starts with `project \0 entity \0`, so the records of
//! one entity are one contiguous range and a list never reads another entity's.
//! Project ids are checked by config and entity ids by auth: neither contains `\0`.
//!
//! | tree       | key                                         | value            |
//! |------------|---------------------------------------------|------------------|
//! | `pm`       | scope, id                                   | record (JSON)    |
//! | `pm_time`  | scope, u64::MAX - created_micros (BE), id    | empty            |
//! | `pm_fp`    | scope, fingerprint                          | id               |
//! | `pm_verified` | scope, pm id                             | empty (network-token verification passed once) |
//! | `pi`       | scope, id                                   | intent (JSON)    |
//! | `pi_by_pm` | scope, pm id, `\0`, u64::MAX - created_micros (BE), id | empty |
//! | `pi_pm_n`  | scope, pm id                                | intents ever created for the pm (u64 BE) |
//! | `pi_due`   | due micros (BE), scope, id                  | empty (an intent stored live, by when it ends: its `expiresAt`, 0 for a used-up limit not ended yet) |
//! | `pi_ended` | end micros (BE), scope, id                  | empty (an intent stored ended, by when it ended: what retention removes, `super::retention`) |
//! | `keyrings` | project                                     | wrapped keyring  |
//! | `audit_outbox` | sled-generated id (BE)                  | audit event of a committed change (JSON), until it is in `audit.log` |
//! | `meta`     | `audit_file_head`                           | the audit log's recorded head: seq, hash, file length (JSON) |
//! | `events`   | project, sequence number (u64 BE)           | event of a committed change (JSON, `super::events`) |
//! | `webhooks` | project, id                                 | webhook endpoint (JSON) |
//! | `passkeys`, `webauthn_states` | scope, id                | `super::passkeys` |
//! | `browser_sessions`, `browser_by_intent`, `browser_stand_ins` | id; scope, intent, id; stand-in key | `super::browser_sessions` (a session's id is unique across scopes, so its key is the id alone) |
//!
//! The audit log itself is the file `audit.log` beside the trees (`super::audit_file`).
//! Data dirs from before it kept it in an `audit` tree (seq of a value's first entry →
//! 1–64 entry lines) with the last entry at `meta` `audit_head`; the first start moves it.

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

/// Key of a purchase intent in `pi`.
pub fn pi(scope: Scope<'_>, id: &str) -> Vec<u8> {
    pm(scope, id)
}

/// Key in `pm_verified` and `pi_pm_n`: scope, payment method id.
pub fn pm_ref(scope: Scope<'_>, pm_id: &str) -> Vec<u8> {
    pm(scope, pm_id)
}

/// Prefix of a payment method's intents in `pi_by_pm`: `scope pm_id \0`.
pub fn pi_by_pm_prefix(scope: Scope<'_>, pm_id: &str) -> Vec<u8> {
    let mut k = pm(scope, pm_id);
    k.push(0);
    k
}

/// Key in `pi_by_pm`: a payment method's intents, newest first.
pub fn pi_by_pm(scope: Scope<'_>, pm_id: &str, created_micros: i64, id: &str) -> Vec<u8> {
    let mut k = pi_by_pm_prefix(scope, pm_id);
    let inverted = u64::MAX - u64::try_from(created_micros).unwrap_or(0);
    k.extend_from_slice(&inverted.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// Key in `webhooks`: `project \0 id` (`id` empty: the project's prefix).
pub fn webhook(project: &str, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(project.len() + id.len() + 1);
    k.extend_from_slice(project.as_bytes());
    k.push(0);
    k.extend_from_slice(id.as_bytes());
    k
}

/// Key in `pi_due` (and `pi_ended`): the intent `pi_key` (a [`pi`] key), due (or ended) at
/// `due_micros`; the earliest sort first.
pub fn pi_due(due_micros: i64, pi_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + pi_key.len());
    k.extend_from_slice(&u64::try_from(due_micros).unwrap_or(0).to_be_bytes());
    k.extend_from_slice(pi_key);
    k
}

/// The due (or end) time and the `pi` key of a `pi_due` (or `pi_ended`) key.
pub fn from_pi_due(key: &[u8]) -> Option<(u64, &[u8])> {
    let (due, pi_key) = key.split_at_checked(8)?;
    Some((u64::from_be_bytes(due.try_into().ok()?), pi_key))
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

    #[test]
    fn intents_of_a_payment_method_are_one_range_newest_first() {
        let s = Scope {
            project: "p",
            entity: "e",
        };
        let prefix = pi_by_pm_prefix(s, "pm_1");
        let newer = pi_by_pm(s, "pm_1", 2_000, "pi_b");
        let older = pi_by_pm(s, "pm_1", 1_000, "pi_a");
        assert!(newer < older);
        assert!(newer.starts_with(&prefix) && older.starts_with(&prefix));
        // pm_1's range does not hold pm_10's intents.
        assert!(!pi_by_pm(s, "pm_10", 1_000, "pi_c").starts_with(&prefix));
        assert_eq!(id_from_pm_time(prefix.len(), &older), Some("pi_a"));
    }
}
