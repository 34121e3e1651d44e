//! Where an intent's end is stored on sled: [`end_in`] applies an end inside a transaction
//! (the record's final status, its credential dropped, its `pi_due` entries removed), and the
//! `pi_due` index of live intents by when they end, which the finalizer reads.

use super::{abort, keys, SledStore};
use crate::store::events;
use crate::store::{
    corrupt, unavailable, DueEnd, IntentEnd, IntentRecord, StoreError, StoreResult,
};
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

/// The trees an end writes, inside the transaction of the change that ends the intent, and
/// the time of the end (its event's).
pub(super) struct EndTrees<'a> {
    pub pi: &'a TransactionalTree,
    pub due: &'a TransactionalTree,
    pub events: &'a TransactionalTree,
    pub at_micros: i64,
}

/// Ends `rec`, stored at `key` (a `pi` key), with `end` in the transaction of `t`: the ended
/// record in place of the live one (no credential, no key slot), its `pi_due` entries gone,
/// and its event (`purchase_intent.expired`, `.exhausted` or `.canceled`). Whatever else is
/// written with an end is written here, in the same transaction. The key-file slot of its
/// credential's key, which the caller erases ([`SledStore::erase_keys`]) once the transaction
/// is durable.
pub(super) fn end_in(
    t: &EndTrees<'_>,
    key: &[u8],
    rec: &mut IntentRecord,
    end: IntentEnd,
) -> Result<Option<u32>, ConflictableTransactionError<StoreError>> {
    let slot = rec.key_slot;
    rec.finish(end);
    let value = serde_json::to_vec(rec).map_err(|e| abort(corrupt(e)))?;
    t.pi.insert(key, value)?;
    t.due.remove(keys::pi_due(rec.expires_micros, key))?;
    t.due.remove(keys::pi_due(0, key))?;
    super::events::write(t.events, &[events::intent_ended(rec, end, t.at_micros)])?;
    Ok(slot)
}

/// Marks in `meta` that `pi_due` lists every live intent (built once, on the first start
/// that has the index).
const DUE_INDEX_BUILT: &[u8] = b"pi_due_built";

impl SledStore {
    /// Builds the `pi_due` index from the stored intents, unless it was built before: every
    /// intent stored live, by its `expiresAt`, and at 0 when its usage limit is used up.
    pub(super) fn index_live_intents(&self) -> StoreResult<()> {
        if self
            .meta
            .contains_key(DUE_INDEX_BUILT)
            .map_err(unavailable)?
        {
            return Ok(());
        }
        for item in self.pi.iter() {
            let (key, bytes) = item.map_err(unavailable)?;
            let rec = Self::decode_pi(&bytes)?;
            if rec.is_live_stored() {
                self.pi_due
                    .insert(keys::pi_due(rec.expires_micros, &key), &[] as &[u8])
                    .map_err(unavailable)?;
                if rec.ends_with(IntentEnd::UsedUp, i64::MIN) {
                    self.pi_due
                        .insert(keys::pi_due(0, &key), &[] as &[u8])
                        .map_err(unavailable)?;
                }
            }
        }
        self.meta
            .insert(DUE_INDEX_BUILT, &[] as &[u8])
            .map_err(unavailable)?;
        Ok(())
    }

    /// Ends one intent in a transaction, when `end` ends it at `now_micros`; the ended record
    /// and the key slot to erase.
    pub(super) fn end_one(
        &self,
        key: &[u8],
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<(IntentRecord, Option<u32>)>> {
        use sled::Transactional;
        (&self.pi, &self.pi_due, &self.events)
            .transaction(|(t_pi, t_due, t_events)| {
                let Some(bytes) = t_pi.get(key)? else {
                    return Ok(None);
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                if !rec.ends_with(end, now_micros) {
                    return Ok(None);
                }
                let t = EndTrees {
                    pi: t_pi,
                    due: t_due,
                    events: t_events,
                    at_micros: now_micros,
                };
                let slot = end_in(&t, key, &mut rec, end)?;
                Ok(Some((rec, slot)))
            })
            .map_err(super::tx_error)
    }

    /// Overwrites the key-file slots of ended intents (called once their end is durable). A
    /// slot that cannot be overwritten now stays taken and is erased at the next start.
    pub(super) fn erase_keys(&self, slots: impl IntoIterator<Item = u32>) {
        for slot in slots {
            if let Err(e) = self.key_file.erase(slot) {
                tracing::error!(error = %e, slot, "erasing an ended intent's key");
            }
        }
    }

    /// Erases the key-file slots no live intent names (after a crash between an end and its
    /// erasure, or between a key's write and its intent's create); at every start.
    pub(super) fn erase_orphan_keys(&self) -> StoreResult<()> {
        let mut live = std::collections::HashSet::new();
        for item in self.pi.iter().values() {
            let rec = Self::decode_pi(&item.map_err(unavailable)?)?;
            if let Some(slot) = rec.key_slot.filter(|_| rec.is_live_stored()) {
                live.insert(slot);
            }
        }
        let erased = self.key_file.keep_only(&live)?;
        if erased > 0 {
            tracing::info!(erased, "erased the keys of intents that are no longer live");
        }
        Ok(())
    }

    /// `rec`, read from `pi` at `key`, with its credential's key from the key file.
    pub(super) fn with_key(&self, key: &[u8], mut rec: IntentRecord) -> StoreResult<IntentRecord> {
        if let Some(slot) = rec.key_slot {
            rec.credential_key = self
                .key_file
                .read(slot, key)?
                .and_then(|k| String::from_utf8(k).ok())
                .map(|k| crate::store::Sealed::from_stored(&k));
        }
        Ok(rec)
    }

    /// Up to `limit` live intents whose end is due at `now_micros`, from `pi_due`.
    pub(super) fn due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>> {
        let upto = keys::pi_due(now_micros.saturating_add(1), &[]);
        let mut due = Vec::new();
        for item in self.pi_due.range(..upto).keys() {
            if due.len() >= limit {
                break;
            }
            let k = item.map_err(unavailable)?;
            let (_, pi_key) = keys::from_pi_due(&k).ok_or_else(|| corrupt("bad pi_due key"))?;
            let Some(bytes) = self.pi.get(pi_key).map_err(unavailable)? else {
                continue;
            };
            let rec = Self::decode_pi(&bytes)?;
            if let Some(end) = rec.due_end(now_micros) {
                due.push(DueEnd {
                    project: rec.project,
                    entity: rec.entity,
                    id: rec.id,
                    end,
                });
            }
        }
        Ok(due)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::super::key_file::{NAME, SLOT};
    use super::*;
    use crate::store::{when_unlocked, Scope, Store};

    /// The key file's taken slots.
    fn taken(dir: &std::path::Path) -> usize {
        let bytes = std::fs::read(dir.join(NAME)).unwrap();
        bytes.chunks(SLOT).filter(|s| s[0] != 0).count()
    }

    #[tokio::test]
    async fn a_start_erases_the_keys_no_live_intent_names_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let open = || when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        let store = open();
        let scope = Scope {
            project: "p1",
            entity: "e1",
        };
        // A live intent's key (written as a create writes it), and a key whose create never
        // committed (a crash between the two).
        let live_key = keys::pi(scope, "pi_live");
        let slot = store.key_file.write(&live_key, b"dk1.live-key").unwrap();
        let mut rec: IntentRecord = serde_json::from_value(serde_json::json!({
            "id": "pi_live", "project": "p1", "entity": "e1", "payment_method_id": "pm_1",
            "credential_type": "virtual-card", "status": "active", "created_micros": 0,
            "expires_micros": i64::MAX, "mandates": {}, "credential_sealed": null,
            "uses": 0, "failed_verifications": 0
        }))
        .unwrap();
        rec.key_slot = Some(slot);
        store
            .pi
            .insert(&live_key, serde_json::to_vec(&rec).unwrap())
            .unwrap();
        store
            .key_file
            .write(&keys::pi(scope, "pi_orphan"), b"dk1.orphan-key")
            .unwrap();
        assert_eq!(taken(dir.path()), 2);
        drop(store);
        let store = open();
        assert_eq!(taken(dir.path()), 1, "the orphan's slot is zeroed");
        let read = store.get_intent(scope, "pi_live").await.unwrap().unwrap();
        assert_eq!(
            read.credential_key.map(|k| k.to_stored()),
            Some("dk1.live-key".to_string())
        );
        // Ended (the slot not erased yet, as after a crash right after the end): the next
        // start erases it.
        rec.status = crate::store::IntentStatus::Expired;
        store
            .pi
            .insert(&live_key, serde_json::to_vec(&rec).unwrap())
            .unwrap();
        drop(store);
        let _store = open();
        assert_eq!(taken(dir.path()), 0);
        let bytes = std::fs::read(dir.path().join(NAME)).unwrap();
        assert!(!bytes.windows(8).any(|w| w == b"live-key"));
    }
}
