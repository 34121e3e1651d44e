//! The recorded head's MAC: HMAC-SHA256 of the head's seq and hash under a key derived from
//! the master key (HKDF-Expand of the master key with the label [`LABEL`]: the master key is
//! already uniformly random, so no extract step), written as `<master key id>:<64 hex>`.
//! Whoever can write the data directory or the database but does not hold the master key can
//! rewrite entries and recompute the chain, but cannot make a head whose MAC verifies.
//!
//! The key id says which master key's derived key made the MAC, so a head MACed before a
//! master-key rotation is still checked (with the previous key) until the rotation MACs it
//! again. A head that is rolled back as a whole (a copy of an older data directory) still
//! verifies: only a head kept elsewhere (`paycred audit head`, then `--head FILE`) catches
//! that.

use super::AuditHead;
use crate::secret::KeyMaterial;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The command that accepts a recorded head the operator has verified (MACs it).
pub const ACCEPT: &str = "paycred audit accept-head -c FILE";

/// The label the MAC key is derived from the master key with.
pub const LABEL: &str = "paycred/audit-head\u{1}";

/// The MAC keys of the master keys a process holds, by master key id; the first MACs.
#[derive(Clone, Default)]
pub struct HeadKeys(Vec<(String, KeyMaterial)>);

impl std::fmt::Debug for HeadKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.0.iter().map(|(id, _)| id.as_str()).collect();
        write!(f, "HeadKeys({})", ids.join(", "))
    }
}

/// What a head's MAC says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MacCheck {
    /// Made by the key of master key (id).
    Valid(String),
    /// The head carries no MAC (recorded before heads were MACed, or stripped).
    Missing,
    /// Made by the key of a master key not held (its id, and the configured one's).
    UnknownKey { id: String, configured: String },
    /// Does not verify: the head was changed by someone without the master key.
    Forged,
}

impl MacCheck {
    /// Why a store holding the master key refuses to open on this head, with what to do:
    /// forged, without a MAC (recorded before heads were MACed, or stripped by whoever rewrote
    /// the log), or MACed by a key it does not hold. `None` when the MAC verifies.
    pub fn refused(&self) -> Option<String> {
        let problem = self.problem()?;
        Some(match self {
            MacCheck::Missing | MacCheck::Forged => format!(
                "{problem}: check the log with `paycred audit --verify` (and `--head FILE` \
                 against a head kept elsewhere); once it is the log you expect, accept its head \
                 with `{ACCEPT}`"
            ),
            _ => problem,
        })
    }

    /// Why the head is not authenticated, for an error; `None` when it is.
    pub fn problem(&self) -> Option<String> {
        match self {
            MacCheck::Valid(_) => None,
            MacCheck::Missing => Some(
                "the recorded audit head is unauthenticated: it carries no MAC (recorded before \
                 heads were MACed, or stripped by whoever rewrote the log)"
                    .into(),
            ),
            MacCheck::UnknownKey { id, configured } => Some(format!(
                "the recorded audit head is MACed by master key {id}, but the configured \
                 master key is {configured}: if a rotation from or to {id} was begun, give both \
                 keys (master_key and previous_master_key) and finish it with \
                 `paycred master-key rotate` (docs/operations.md)"
            )),
            MacCheck::Forged => Some(
                "the recorded audit head is forged: its MAC does not verify under the master key \
                 (the log or the head was rewritten without it)"
                    .into(),
            ),
        }
    }
}

fn mac_of(key: &KeyMaterial, head: &AuditHead) -> Option<Hmac<Sha256>> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.expose()).ok()?;
    mac.update(b"paycred audit head\n");
    mac.update(head.seq.to_string().as_bytes());
    mac.update(b"\n");
    mac.update(head.hash.as_bytes());
    Some(mac)
}

impl HeadKeys {
    /// From `(master key id, derived key)` pairs, the current master key's first.
    pub fn new(keys: Vec<(String, KeyMaterial)>) -> Self {
        Self(keys)
    }

    /// Whether this process may record a head over `head`: with the master key, or over a
    /// head that carries no MAC anyway (a store opened without the key never replaces a
    /// MACed head by one without a MAC).
    pub fn may_record_over(&self, head: &AuditHead) -> bool {
        self.held() || head.mac.is_empty()
    }

    /// Whether any key is held (a store opened without the master key holds none: it
    /// neither checks nor MACs heads).
    pub fn held(&self) -> bool {
        !self.0.is_empty()
    }

    /// The MAC of `head` under the first key (`""` when there is none).
    pub fn mac(&self, head: &AuditHead) -> String {
        let Some((id, key)) = self.0.first() else {
            return String::new();
        };
        mac_of(key, head).map_or_else(String::new, |m| {
            format!("{id}:{}", hex::encode(m.finalize().into_bytes()))
        })
    }

    /// `head` with its MAC.
    pub fn sign(&self, head: &AuditHead) -> AuditHead {
        AuditHead {
            mac: self.mac(head),
            ..head.clone()
        }
    }

    /// Checks `head.mac`.
    pub fn check(&self, head: &AuditHead) -> MacCheck {
        let Some((id, digits)) = head.mac.split_once(':') else {
            return if head.mac.is_empty() {
                MacCheck::Missing
            } else {
                MacCheck::Forged
            };
        };
        let Some((_, key)) = self.0.iter().find(|(k, _)| k == id) else {
            return MacCheck::UnknownKey {
                id: id.to_string(),
                configured: self.0.first().map(|(k, _)| k.clone()).unwrap_or_default(),
            };
        };
        let (Ok(bytes), Some(mac)) = (hex::decode(digits), mac_of(key, head)) else {
            return MacCheck::Forged;
        };
        match mac.verify_slice(&bytes) {
            Ok(()) => MacCheck::Valid(id.to_string()),
            Err(_) => MacCheck::Forged,
        }
    }

    /// Whether `head` is MACed by the first key already.
    pub fn is_current(&self, head: &AuditHead) -> bool {
        self.0
            .first()
            .is_some_and(|(id, _)| head.mac.split_once(':').is_some_and(|(m, _)| m == id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ids: &[(&str, u8)]) -> HeadKeys {
        HeadKeys::new(
            ids.iter()
                .map(|(id, b)| (id.to_string(), KeyMaterial::new([*b; 32])))
                .collect(),
        )
    }

    #[test]
    fn a_mac_verifies_only_for_its_head_and_key() {
        let head = AuditHead {
            seq: 7,
            hash: "ab".repeat(32),
            len: 900,
            mac: String::new(),
        };
        let k = keys(&[("k1", 1)]);
        assert_eq!(k.check(&head), MacCheck::Missing);
        // Refused at start like a forged head, naming the check and the acceptance.
        let refused = k.check(&head).refused().unwrap_or_default();
        assert!(refused.contains("audit --verify") && refused.contains(ACCEPT));
        let signed = k.sign(&head);
        assert!(signed.mac.starts_with("k1:"));
        assert_eq!(k.check(&signed), MacCheck::Valid("k1".into()));
        for changed in [
            AuditHead {
                seq: 8,
                ..signed.clone()
            },
            AuditHead {
                hash: "cd".repeat(32),
                ..signed.clone()
            },
            AuditHead {
                mac: signed.mac.replace("k1:", "k1:00"),
                ..signed.clone()
            },
            AuditHead {
                mac: "garbage".into(),
                ..signed.clone()
            },
        ] {
            assert_eq!(k.check(&changed), MacCheck::Forged, "{changed:?}");
            assert!(k.check(&changed).problem().is_some());
        }
        // Another key of the same id does not verify it; a key it does not hold is named.
        assert_eq!(keys(&[("k1", 2)]).check(&signed), MacCheck::Forged);
        assert_eq!(
            keys(&[("k2", 1)]).check(&signed),
            MacCheck::UnknownKey {
                id: "k1".into(),
                configured: "k2".into()
            }
        );
        // After a rotation both keys are held: the old MAC still verifies, and is not current.
        let both = keys(&[("k2", 2), ("k1", 1)]);
        assert_eq!(both.check(&signed), MacCheck::Valid("k1".into()));
        assert!(!both.is_current(&signed));
        assert!(both.is_current(&both.sign(&head)));
    }
}
