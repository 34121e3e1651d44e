//! The audit log: append-only and hash-chained (`hash = H(prev_hash || event JSON)`, H being
//! SHA-256 or BLAKE3 as each hash says: [`chain`]), a file of JSON lines in the
//! data dir ([`file`](mod@file)). The event of a change the
//! store commits is recorded in the change's own transaction and moved into the log right
//! after (`store::sled::audit`).
//!
//! Actions: `paymentMethod.create`, `paymentMethod.update` (a second create of the same card
//! took its expiry and cvc), `paymentMethod.delete`, `purchaseIntent.create`,
//! `purchaseIntent.verify`, `purchaseIntent.reveal` (a credential answered by the REST API),
//! `proxy.use` (one per proxied request, resource `host=<target host> status=<status>
//! templates=<n>[ revealed=<id>,…]`: the payment methods whose stored card and the purchase
//! intents whose credential the request's templates revealed; written when the request ends,
//! whatever its outcome),
//! `webhookEndpoint.create`, `webhookEndpoint.rotateSecret`, `webhookEndpoint.delete`
//! (resource: the endpoint's id), and
//! `auth.failure` (resource `route=<route shape> status=<401|403>`; entity empty, since an
//! unverified token names nobody). Anyone can fail authentication as fast as they can send,
//! so failures are counted, not each written: the first of a quiet spell is an entry, and
//! its repeats within a second (same project, route and status) become one entry a second,
//! `route=… status=… count=<n>`, n being the failures since the previous entry
//! ([`tally`]). Entries carry ids, hosts and outcomes, never a secret.
//!
//! `paycred audit -c FILE [--verify]` prints the log (one JSON entry per line) and, with
//! `--verify`, proves the chain: sequence numbers contiguous from 1, each `prev_hash` the
//! previous entry's `hash`, each `hash` recomputed from its event, and the head the store
//! recorded apart from the log (at every sync) among them (so entries cut off the end are
//! noticed), and the head's MAC under a key derived from the master key ([`head_mac`]), so a
//! chain and head recomputed without the master key are named forged. The first entry that
//! fails is named by its `seq`. The store is opened directly, so the server must be stopped.
//! A whole older copy of the store still verifies: `paycred audit head` prints the head to
//! keep elsewhere, and `--verify --head FILE` names a log rolled back before it, or
//! rewritten, as such.
//!
//! May import: `config`, `clock`, `error`, `secret`. The store writes the log; the log never reads the store.

pub mod chain;
pub mod file;
pub mod head_mac;
pub mod tally;
pub mod writer;

use chain::hash_holds;
use serde::{Deserialize, Serialize};

pub use file::AuditHead;

/// An audit-log entry. Carries ids and outcomes, never card values.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEvent {
    pub at_micros: i64,
    pub action: String,
    pub project: String,
    pub entity: String,
    pub resource: String,
}

/// A chained audit entry as stored: `hash = H(prev_hash || event json)`, H named by the
/// hash ([`chain::HashFunction`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub seq: u64,
    pub event: AuditEvent,
    pub prev_hash: String,
    pub hash: String,
}

/// Where the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit chain broken at seq {seq}: {reason}")]
pub struct Broken {
    pub seq: u64,
    pub reason: &'static str,
}

/// Proves the chain; the number of entries.
pub fn verify(entries: &[AuditEntry]) -> Result<usize, Broken> {
    let mut prev_hash = String::new();
    for (i, e) in entries.iter().enumerate() {
        let expected_seq = u64::try_from(i).unwrap_or(u64::MAX).saturating_add(1);
        if e.seq != expected_seq {
            return Err(Broken {
                seq: expected_seq.min(e.seq),
                reason: "sequence number missing or out of order",
            });
        }
        if e.prev_hash != prev_hash {
            return Err(Broken {
                seq: e.seq,
                reason: "prev_hash does not match the previous entry",
            });
        }
        if !hash_holds(e) {
            return Err(Broken {
                seq: e.seq,
                reason: "hash does not match the entry's content",
            });
        }
        prev_hash.clone_from(&e.hash);
    }
    Ok(entries.len())
}

/// Proves that the log reaches `head`, the chain head the store recorded apart from it, and
/// that its entry there is the head. Entries after it were written after it was recorded.
pub fn verify_head(entries: &[AuditEntry], head: Option<&AuditHead>) -> Result<(), Broken> {
    let Some(head) = head.filter(|h| h.seq > 0) else {
        return Ok(());
    };
    let at_head = usize::try_from(head.seq - 1)
        .ok()
        .and_then(|i| entries.get(i));
    match at_head {
        Some(e) if e.seq == head.seq && e.hash == head.hash => Ok(()),
        Some(_) => Err(Broken {
            seq: head.seq,
            reason: "the entry at the head the store recorded is another one",
        }),
        None => Err(Broken {
            seq: u64::try_from(entries.len())
                .unwrap_or(u64::MAX)
                .saturating_add(1),
            reason: "the log ends before the head the store recorded (entries cut off)",
        }),
    }
}

/// An event now.
pub fn event(project: &str, entity: &str, action: &str, resource: String) -> AuditEvent {
    AuditEvent {
        at_micros: i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000)
            .unwrap_or(0),
        action: action.to_string(),
        project: project.to_string(),
        entity: entity.to_string(),
        resource,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use chain::HashFunction;

    /// `n` entries, hashed with SHA-256 up to `sha256_until` and BLAKE3 after it.
    pub(crate) fn chain_of(n: u64, sha256_until: u64) -> Vec<AuditEntry> {
        let mut prev = String::new();
        (1..=n)
            .map(|seq| {
                let event = AuditEvent {
                    at_micros: 1,
                    action: "paymentMethod.create".into(),
                    project: "p".into(),
                    entity: "e".into(),
                    resource: format!("pm_{seq}"),
                };
                let function = if seq <= sha256_until {
                    HashFunction::Sha256
                } else {
                    HashFunction::Blake3
                };
                let hash = function.hash_event(&prev, &event).unwrap_or_default();
                let entry = AuditEntry {
                    seq,
                    event,
                    prev_hash: prev.clone(),
                    hash: hash.clone(),
                };
                prev = hash;
                entry
            })
            .collect()
    }

    /// `n` entries, SHA-256 for the first two and BLAKE3 after.
    fn chain(n: u64) -> Vec<AuditEntry> {
        chain_of(n, 2)
    }

    #[test]
    fn an_intact_chain_verifies() {
        for sha256_until in [0, 2, 5] {
            assert_eq!(verify(&chain_of(5, sha256_until)), Ok(5));
        }
        assert_eq!(verify(&[]), Ok(0));
    }

    #[test]
    fn a_log_cut_short_of_its_head_fails() {
        let head = |e: &AuditEntry| AuditHead {
            seq: e.seq,
            hash: e.hash.clone(),
            len: 0,
            mac: String::new(),
        };
        let c = chain(5);
        let last = head(&c[4]);
        assert_eq!(verify_head(&c, Some(&last)), Ok(()));
        assert_eq!(verify_head(&[], None), Ok(()));
        // Entries written after the head was recorded.
        assert_eq!(verify_head(&c, Some(&head(&c[2]))), Ok(()));
        // The last two entries are gone: the chain itself still verifies.
        assert_eq!(verify(&c[..3]), Ok(3));
        assert_eq!(verify_head(&c[..3], Some(&last)).map_err(|b| b.seq), Err(4));
        assert_eq!(verify_head(&[], Some(&last)).map_err(|b| b.seq), Err(1));
        // A head that is not the entry at its seq.
        let other = chain(6);
        assert_eq!(
            verify_head(&c, Some(&head(&other[5]))).map_err(|b| b.seq),
            Err(6)
        );
        let mut changed = head(&c[3]);
        changed.hash = last.hash.clone();
        assert_eq!(verify_head(&c, Some(&changed)).map_err(|b| b.seq), Err(4));
    }

    #[test]
    fn tampering_names_the_seq() {
        let mut c = chain(5);
        c[2].event.entity = "mallory".into();
        assert_eq!(verify(&c).map_err(|b| b.seq), Err(3));
        let mut c = chain(5);
        c.remove(1);
        assert_eq!(verify(&c).map_err(|b| b.seq), Err(2));
        // Recomputing the hash of a changed entry breaks the next link instead.
        let mut c = chain(5);
        c[2].event.resource = "pm_x".into();
        c[2].hash = HashFunction::Blake3
            .hash_event(&c[2].prev_hash, &c[2].event)
            .unwrap_or_default();
        assert_eq!(verify(&c).map_err(|b| b.seq), Err(4));
        // A SHA-256 entry's digits named BLAKE3.
        let mut c = chain(5);
        c[1].hash = format!("blake3:{}", c[1].hash);
        assert_eq!(verify(&c).map_err(|b| b.seq), Err(2));
    }
}
