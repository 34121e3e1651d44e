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
/// record in place of the live one, its `pi_due` entries gone, and its event
/// (`purchase_intent.expired`, `.exhausted` or `.canceled`). Whatever else is written with an
/// end is written here, in the same transaction.
pub(super) fn end_in(
    t: &EndTrees<'_>,
    key: &[u8],
    rec: &mut IntentRecord,
    end: IntentEnd,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    rec.finish(end);
    let value = serde_json::to_vec(rec).map_err(|e| abort(corrupt(e)))?;
    t.pi.insert(key, value)?;
    t.due.remove(keys::pi_due(rec.expires_micros, key))?;
    t.due.remove(keys::pi_due(0, key))?;
    super::events::write(t.events, &[events::intent_ended(rec, end, t.at_micros)])?;
    Ok(())
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

    /// Ends one intent in a transaction, when `end` ends it at `now_micros`.
    pub(super) fn end_one(
        &self,
        key: &[u8],
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>> {
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
                end_in(
                    &EndTrees {
                        pi: t_pi,
                        due: t_due,
                        events: t_events,
                        at_micros: now_micros,
                    },
                    key,
                    &mut rec,
                    end,
                )?;
                Ok(Some(rec))
            })
            .map_err(super::tx_error)
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
