//! The audit log: append-only and hash-chained (`hash = sha256(prev_hash || event JSON)`,
//! written by the store in the same transaction as the change it records).
//!
//! Actions: `paymentMethod.create`, `paymentMethod.update` (a second create of the same card
//! took its expiry and cvc), `paymentMethod.delete`, `purchaseIntent.create`,
//! `purchaseIntent.verify`, `purchaseIntent.reveal` (a credential answered by the REST API),
//! `proxy.use` (one per proxied request, resource `host=<target host> status=<status>
//! templates=<n>[ revealed=<id>,…]`: the payment methods whose stored card and the purchase
//! intents whose credential the request's templates revealed; written when the request ends,
//! whatever its outcome) and
//! `auth.failure` (resource `route=<route shape> status=<401|403>`; entity empty, since an
//! unverified token names nobody). Anyone can fail authentication as fast as they can send,
//! so failures are counted, not each written: the first of a quiet spell is an entry, and
//! its repeats within a second (same project, route and status) become one entry a second,
//! `route=… status=… count=<n>`, n being the failures since the previous entry
//! (`store::audit_tally`). Entries carry ids, hosts and outcomes, never a secret.
//!
//! `paycred audit -c FILE [--verify]` prints the log (one JSON entry per line) and, with
//! `--verify`, proves the chain: sequence numbers contiguous from 1, each `prev_hash` the
//! previous entry's `hash`, each `hash` recomputed from its event, and the last entry the
//! head the store recorded apart from the log (so entries cut off the end are noticed). The
//! first entry that fails is named by its `seq`. The store is opened directly, so the server
//! must be stopped. Whoever can rewrite the whole store can also rewrite the head: compare
//! the printed head with one kept elsewhere to rule that out.

use crate::store::sled_store::audit_hash;
use crate::store::{AuditEntry, AuditEvent, Store};
use std::io::Write;
use std::sync::Arc;

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
        if audit_hash(&e.prev_hash, &e.event).as_deref() != Some(e.hash.as_str()) {
            return Err(Broken {
                seq: e.seq,
                reason: "hash does not match the entry's content",
            });
        }
        prev_hash.clone_from(&e.hash);
    }
    Ok(entries.len())
}

/// Proves that the log ends at `head`, the newest entry the store recorded.
pub fn verify_head(entries: &[AuditEntry], head: Option<&AuditEntry>) -> Result<(), Broken> {
    match (entries.last(), head) {
        (None, None) => Ok(()),
        (Some(last), Some(head)) if last.seq == head.seq && last.hash == head.hash => Ok(()),
        (last, head) => Err(Broken {
            seq: match (last, head) {
                (Some(last), Some(head)) => last.seq.min(head.seq).saturating_add(1),
                (Some(last), None) => last.seq,
                (None, _) => 1,
            },
            reason: "the log does not end at the head the store recorded (entries cut off)",
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

/// Appends without making the answer wait for the disk (`Store::append_audit_nowait`).
pub fn append_later(store: Arc<dyn Store>, event: AuditEvent) {
    store.append_audit_nowait(event);
}

/// `paycred audit`: prints every entry as a JSON line to `out`; with `verify`, proves the
/// chain and prints a summary line.
pub fn print(store: &dyn Store, verify_chain: bool, out: &mut impl Write) -> Result<(), String> {
    let entries = store.audit_log().map_err(|e| e.to_string())?;
    for e in &entries {
        let line = serde_json::to_string(e).map_err(|e| e.to_string())?;
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    if verify_chain {
        let n = verify(&entries).map_err(|b| b.to_string())?;
        let head = store.audit_head().map_err(|e| e.to_string())?;
        verify_head(&entries, head.as_ref()).map_err(|b| b.to_string())?;
        let head = entries.last().map(|e| e.hash.as_str()).unwrap_or("");
        writeln!(out, "audit log verified: {n} entries, head {head}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `paycred audit -c FILE [--verify]`: opens the store of `config` (read-only use; the
/// server must be stopped, sled holds a lock on the directory) and [`print`]s it.
pub fn run(
    config: &crate::config::Config,
    verify_chain: bool,
    out: &mut impl Write,
) -> Result<(), String> {
    let store = crate::store::SledStore::open(&config.data_dir)
        .map_err(|e| format!("data_dir {}: {e}", config.data_dir.display()))?;
    print(&store, verify_chain, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: u64) -> Vec<AuditEntry> {
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
                let hash = audit_hash(&prev, &event).unwrap_or_default();
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

    #[test]
    fn an_intact_chain_verifies() {
        assert_eq!(verify(&chain(5)), Ok(5));
        assert_eq!(verify(&[]), Ok(0));
    }

    #[test]
    fn a_log_cut_short_of_its_head_fails() {
        let c = chain(5);
        assert_eq!(verify_head(&c, c.last()), Ok(()));
        assert_eq!(verify_head(&[], None), Ok(()));
        // The last two entries are gone: the chain itself still verifies.
        assert_eq!(verify(&c[..3]), Ok(3));
        assert_eq!(verify_head(&c[..3], c.last()).map_err(|b| b.seq), Err(4));
        assert_eq!(verify_head(&[], c.last()).map_err(|b| b.seq), Err(1));
        // A head that disagrees with the last entry.
        let other = chain(6);
        assert_eq!(verify_head(&c, other.last()).map_err(|b| b.seq), Err(6));
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
        c[2].hash = audit_hash(&c[2].prev_hash, &c[2].event).unwrap_or_default();
        assert_eq!(verify(&c).map_err(|b| b.seq), Err(4));
    }
}
