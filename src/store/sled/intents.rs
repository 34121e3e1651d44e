//! [`IntentStore`] on sled: the trees `pi` (the records), `pi_by_pm` (a payment method's
//! intents, newest first), `pi_pm_n` (how many it ever had) and `pi_due` (live intents by
//! when they end, which the finalizer reads) ([`super::keys`]); the key of each credential is
//! a slot of the key file ([`super::key_file`]).
//!
//! Every end goes through `end_in`, inside the transaction of the change that ends the
//! intent: the record's final status, its credential dropped, its `pi_due` entries removed,
//! its `pi_ended` entry written, its event; the slot of its key is erased once that transaction is durable. The use that
//! reaches the usage limit ends its intent so, in the use's transaction (why:
//! [`crate::store::intents`]).

use super::ahead::{self, Taken};
use super::audit::to_outbox;
use super::{abort, count_value, events, keys, read_count, tx_error, SledStore};
use crate::audit::AuditEvent;
use crate::clock::micros;
use crate::domain::issuer::CredentialType;
use crate::store::events as event;
use crate::store::{
    corrupt, unavailable, use_refused, DueEnd, IntentEnd, IntentRecord, IntentStatus, IntentStore,
    Scope, StoreError, StoreResult, UseOutcome, VerificationAttempt,
};
use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use sled::Transactional;
use std::sync::atomic::Ordering;

/// The trees an end writes, inside the transaction of the change that ends the intent, and
/// the time of the end (its event's).
pub(super) struct EndTrees<'a> {
    pub pi: &'a TransactionalTree,
    pub due: &'a TransactionalTree,
    pub ended: &'a TransactionalTree,
    pub events: &'a TransactionalTree,
    pub at_micros: i64,
}

/// Ends `rec`, stored at `key` (a `pi` key), with `end` in the transaction of `t`: the ended
/// record in place of the live one (no credential, no key slot), its `pi_due` entries gone,
/// its `pi_ended` entry (what retention reads), and its event (`purchase_intent.expired`, `.exhausted` or `.canceled`). Whatever else is
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
    rec.finish(end, t.at_micros);
    let value = serde_json::to_vec(rec).map_err(|e| abort(corrupt(e)))?;
    t.pi.insert(key, value)?;
    t.due.remove(keys::pi_due(rec.expires_micros, key))?;
    t.due.remove(keys::pi_due(0, key))?;
    t.ended
        .insert(keys::pi_due(t.at_micros, key), &[] as &[u8])?;
    events::write(t.events, &[event::intent_ended(rec, end, t.at_micros)])?;
    Ok(slot)
}

/// Marks in `meta` that `pi_due` lists every live intent (built once, on the first start
/// that has the index).
const DUE_INDEX_BUILT: &[u8] = b"pi_due_built";

/// Marks in `meta` that `pi_ended` lists every ended intent (built once, on the first start
/// that has the index).
pub(super) const ENDED_INDEX_BUILT: &[u8] = b"pi_ended_built";

impl SledStore {
    /// Ids of a payment method's intents, newest first (read outside a transaction; the
    /// `pi_pm_n` counter tells a transaction whether the list is still complete).
    pub(super) fn intent_ids_of(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<Vec<String>> {
        let prefix = keys::pi_by_pm_prefix(scope, pm_id);
        self.pi_by_pm
            .scan_prefix(&prefix)
            .keys()
            .map(|k| {
                let k = k.map_err(unavailable)?;
                keys::id_from_pm_time(prefix.len(), &k)
                    .map(str::to_string)
                    .ok_or_else(|| corrupt("bad pi_by_pm key"))
            })
            .collect()
    }

    /// Reads, changes and writes back one intent in a transaction; `None` when absent.
    fn update_intent<T>(
        &self,
        scope: Scope<'_>,
        id: &str,
        change: impl Fn(&mut IntentRecord) -> (bool, T),
    ) -> StoreResult<Option<(IntentRecord, T, bool)>> {
        let key = keys::pi(scope, id);
        self.pi
            .transaction(|t_pi| {
                let Some(bytes) = t_pi.get(&key)? else {
                    return Ok(None);
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                let (changed, out) = change(&mut rec);
                if changed {
                    let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                    t_pi.insert(key.as_slice(), value)?;
                }
                Ok(Some((rec, out, changed)))
            })
            .map_err(tx_error)
    }

    /// Builds the `pi_due` index from the stored intents, unless it was built before: every
    /// intent stored live, by its `expiresAt`, and at 0 when its usage limit is used up.
    pub(super) fn index_live_intents(&self) -> StoreResult<()> {
        self.build_once(DUE_INDEX_BUILT, || {
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
            Ok(())
        })
    }

    /// Builds the `pi_ended` index from the stored intents, unless it was built before: every
    /// intent stored ended, by [`IntentRecord::ended_at`]; one whose record does not say when
    /// it ended (stored so before records kept it) counts as ended now, so it is kept a full
    /// retention period from this start.
    pub(super) fn index_ended_intents(&self) -> StoreResult<()> {
        let now = micros(time::OffsetDateTime::now_utc());
        self.build_once(ENDED_INDEX_BUILT, || {
            for item in self.pi.iter() {
                let (key, bytes) = item.map_err(unavailable)?;
                let rec = Self::decode_pi(&bytes)?;
                if !rec.is_live_stored() {
                    let at = rec.ended_at().unwrap_or(now);
                    self.pi_ended
                        .insert(keys::pi_due(at, &key), &[] as &[u8])
                        .map_err(unavailable)?;
                }
            }
            Ok(())
        })
    }

    /// At a start, counts every use still reserved ahead as used ([`ahead`]): after a crash
    /// nothing tells the uses that went out from the others. Only live intents: an end was
    /// written after every use before it, so what an ended intent held was never taken.
    pub(super) fn count_uses_held(&self) -> StoreResult<()> {
        let listed = ahead::listed(&self.pi_ahead)?;
        let mut folded = 0usize;
        for key in &listed {
            let counted = (&self.pi, &self.pi_due, &self.pi_ahead)
                .transaction(|(t_pi, t_due, t_ahead)| {
                    t_ahead.remove(key)?;
                    let Some(bytes) = t_pi.get(key)? else {
                        return Ok(false);
                    };
                    let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                    if rec.ahead.is_empty() {
                        return Ok(false);
                    }
                    if rec.is_live_stored() {
                        rec.uses = rec.uses.saturating_add(rec.ahead.held());
                    }
                    rec.ahead = ahead::Ahead::default();
                    if rec.ends_with(IntentEnd::UsedUp, i64::MIN) {
                        t_due.insert(keys::pi_due(0, key), &[] as &[u8])?;
                    }
                    let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                    t_pi.insert(key.as_ref(), value)?;
                    Ok(true)
                })
                .map_err(tx_error)?;
            folded += usize::from(counted);
        }
        if folded > 0 {
            tracing::warn!(
                intents = folded,
                "uses reserved ahead at the last stop counted as used"
            );
        }
        self.db.flush().map(drop).map_err(unavailable)
    }

    /// At a clean stop: the uses reserved and not taken are handed back (the records' counts
    /// stay exact). Each entry of the list goes before its record's reservation, so a use
    /// still in flight that reserves again lists its record anew; the reservation it made is
    /// handed back with the rest or stays listed, never held unlisted.
    pub(super) fn hand_back_uses(&self) -> StoreResult<()> {
        for key in ahead::listed(&self.pi_ahead)? {
            self.pi_ahead.remove(&key).map_err(unavailable)?;
            self.swap_record(&key, |rec| {
                (!rec.ahead.is_empty()).then(|| rec.ahead = ahead::Ahead::default())
            })?;
        }
        Ok(())
    }

    /// Changes the record at `key` with one compare-and-swap (retried while another write
    /// races it), without a transaction: `change` edits the record and answers what to
    /// return, or `None` to leave it unchanged. `None` when there is no record or nothing
    /// changed.
    fn swap_record<T>(
        &self,
        key: &[u8],
        mut change: impl FnMut(&mut IntentRecord) -> Option<T>,
    ) -> StoreResult<Option<(T, IntentRecord)>> {
        loop {
            let Some(old) = self.pi.get(key).map_err(unavailable)? else {
                return Ok(None);
            };
            let mut rec = Self::decode_pi(&old)?;
            let Some(answer) = change(&mut rec) else {
                return Ok(None);
            };
            let new = serde_json::to_vec(&rec).map_err(corrupt)?;
            match self.pi.compare_and_swap(key, Some(&old), Some(new)) {
                Ok(Ok(())) => return Ok(Some((answer, rec))),
                Ok(Err(_raced)) => continue,
                Err(e) => return Err(unavailable(e)),
            }
        }
    }

    /// A use taken from the uses reserved ahead, alone ([`ahead`]): one compare-and-swap of
    /// the record, then its event. `None` when the use needs the transaction (nothing
    /// reserved that it may take alone, a refusal, no record).
    fn take_reserved_use(&self, key: &[u8], now: i64) -> StoreResult<Option<UseOutcome>> {
        let taken = self.swap_record(key, |rec| {
            let limit = rec.mandates.usage_limit;
            let refused = use_refused(rec.status, rec.expires_micros, limit, rec.uses, now);
            if refused.is_some() || !rec.ahead.takes_alone(limit, rec.uses) {
                return None;
            }
            rec.ahead.take();
            rec.uses = rec.uses.saturating_add(1);
            Some(())
        })?;
        let Some(((), rec)) = taken else {
            return Ok(None);
        };
        // The count bounds the credential; the event is its account. One that fails is
        // logged, and the use stands.
        if let Err(e) =
            events::write_alone(&self.db, &self.events, &[event::intent_used(&rec, now)])
        {
            tracing::error!(error = %e, "a use's event was not written");
        }
        Ok(Some(UseOutcome::Recorded(rec.uses)))
    }

    /// Ends one intent in a transaction, when `end` ends it at `now_micros`; the ended record
    /// and the key slot to erase.
    pub(super) fn end_one(
        &self,
        key: &[u8],
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<(IntentRecord, Option<u32>)>> {
        (&self.pi, &self.pi_due, &self.pi_ended, &self.events)
            .transaction(|(t_pi, t_due, t_ended, t_events)| {
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
                    ended: t_ended,
                    events: t_events,
                    at_micros: now_micros,
                };
                let slot = end_in(&t, key, &mut rec, end)?;
                Ok(Some((rec, slot)))
            })
            .map_err(tx_error)
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

#[async_trait]
impl IntentStore for SledStore {
    async fn insert_intent(&self, intent: &IntentRecord, audit: AuditEvent) -> StoreResult<bool> {
        let scope = Scope {
            project: &intent.project,
            entity: &intent.entity,
        };
        let pm_key = keys::pm(scope, &intent.payment_method_id);
        let ref_key = keys::pm_ref(scope, &intent.payment_method_id);
        let pi_key = keys::pi(scope, &intent.id);
        let index_key = keys::pi_by_pm(
            scope,
            &intent.payment_method_id,
            intent.created_micros,
            &intent.id,
        );
        let slot = match &intent.credential_key {
            Some(key) => Some(self.key_file.write(&pi_key, key.to_stored().as_bytes())?),
            None => None,
        };
        let stored = IntentRecord {
            key_slot: slot,
            ..intent.clone()
        };
        let value = serde_json::to_vec(&stored).map_err(corrupt)?;
        let created = event::intent_created(intent);
        let due_key = keys::pi_due(intent.expires_micros, &pi_key);
        let ended_key = intent.ended_at().map(|at| keys::pi_due(at, &pi_key));
        let inserted = (
            &self.pm,
            &self.pi,
            &self.pi_by_pm,
            &self.pi_pm_n,
            &self.outbox,
            &self.pi_due,
            &self.pi_ended,
            &self.events,
        )
            .transaction(
                |(t_pm, t_pi, t_index, t_n, t_outbox, t_due, t_ended, t_events)| {
                    if t_pm.get(&pm_key)?.is_none() {
                        return Ok(false);
                    }
                    let n = read_count(t_n.get(&ref_key)?);
                    t_n.insert(ref_key.as_slice(), &count_value(n + 1))?;
                    t_pi.insert(pi_key.as_slice(), value.as_slice())?;
                    t_index.insert(index_key.as_slice(), &[] as &[u8])?;
                    if intent.is_live_stored() {
                        t_due.insert(due_key.as_slice(), &[] as &[u8])?;
                    }
                    if let Some(ended_key) = &ended_key {
                        t_ended.insert(ended_key.as_slice(), &[] as &[u8])?;
                    }
                    to_outbox(t_outbox, &audit)?;
                    events::write(t_events, &created)?;
                    Ok(true)
                },
            )
            .map_err(tx_error);
        if !matches!(inserted, Ok(true)) {
            self.erase_keys(slot);
        }
        if inserted? {
            self.durable_audited().await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn get_intent(&self, scope: Scope<'_>, id: &str) -> StoreResult<Option<IntentRecord>> {
        let key = keys::pi(scope, id);
        match self.pi.get(&key).map_err(unavailable)? {
            Some(bytes) => Ok(Some(self.with_key(&key, Self::decode_pi(&bytes)?)?)),
            None => Ok(None),
        }
    }

    async fn list_intents(&self, scope: Scope<'_>) -> StoreResult<Vec<IntentRecord>> {
        self.pi
            .scan_prefix(keys::scope_prefix(scope))
            .map(|item| {
                let (k, v) = item.map_err(unavailable)?;
                self.with_key(&k, Self::decode_pi(&v)?)
            })
            .collect()
    }

    async fn set_intent_status(
        &self,
        scope: Scope<'_>,
        id: &str,
        status: IntentStatus,
    ) -> StoreResult<Option<IntentRecord>> {
        let updated = self.update_intent(scope, id, |rec| {
            let changed = rec.status != status;
            rec.status = status;
            (changed, ())
        })?;
        if updated.as_ref().is_some_and(|(_, _, changed)| *changed) {
            self.durable().await?;
        }
        Ok(updated.map(|(rec, _, _)| rec))
    }

    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>> {
        let key = keys::pi(scope, id);
        let updated = (&self.pi, &self.pm_verified, &self.outbox, &self.events)
            .transaction(|(t_pi, t_verified, t_outbox, t_events)| {
                let Some(bytes) = t_pi.get(&key)? else {
                    return Ok(None);
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                let Some(passed) = rec.apply_verification(attempt) else {
                    return Ok(Some(rec));
                };
                if passed {
                    t_verified.insert(keys::pm_ref(scope, &rec.payment_method_id), &[] as &[u8])?;
                    to_outbox(t_outbox, &audit)?;
                    events::write(t_events, &[event::intent_activated(&rec, audit.at_micros)])?;
                }
                let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                t_pi.insert(key.as_slice(), value)?;
                Ok(Some(rec))
            })
            .map_err(tx_error)?;
        if updated.is_some() {
            self.durable_audited().await?;
        }
        Ok(updated)
    }

    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome> {
        let now = micros(now);
        let key = keys::pi(scope, id);
        if let Some(taken) = self.take_reserved_use(&key, now)? {
            return Ok(taken);
        }
        // The reservation this use makes, if it makes one (see [`ahead`]).
        let lease = self.leases.fetch_add(1, Ordering::Relaxed) + 1;
        let (outcome, wait, reserved, slot) = (
            &self.pi,
            &self.pi_due,
            &self.pi_ended,
            &self.events,
            &self.pi_ahead,
        )
            .transaction(|(t_pi, t_due, t_ended, t_events, t_ahead)| {
                let Some(bytes) = t_pi.get(&key)? else {
                    return Ok((UseOutcome::NotFound, false, false, None));
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                let limit = rec.mandates.usage_limit;
                if let Some(refused) =
                    use_refused(rec.status, rec.expires_micros, limit, rec.uses, now)
                {
                    return Ok((refused, false, false, None));
                }
                rec.uses = rec.uses.saturating_add(1);
                let taken = rec.ahead.take();
                let reserved = rec.ahead.top_up(limit, rec.uses, lease);
                if reserved {
                    t_ahead.insert(key.as_slice(), &[] as &[u8])?;
                }
                events::write(t_events, &[event::intent_used(&rec, now)])?;
                let mut slot = None;
                if rec.ends_with(IntentEnd::UsedUp, now) {
                    // The use that reaches the limit ends the intent in its transaction.
                    let t = EndTrees {
                        pi: t_pi,
                        due: t_due,
                        ended: t_ended,
                        events: t_events,
                        at_micros: now,
                    };
                    slot = end_in(&t, &key, &mut rec, IntentEnd::UsedUp)?;
                } else {
                    let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                    t_pi.insert(key.as_slice(), value)?;
                }
                let wait = taken == Taken::Flush || reserved || slot.is_some();
                Ok((UseOutcome::Recorded(rec.uses), wait, reserved, slot))
            })
            .map_err(tx_error)?;
        if wait {
            self.durable().await?;
        }
        if reserved {
            self.swap_record(&key, |rec| rec.ahead.confirm(lease).then_some(()))?;
        }
        self.erase_keys(slot);
        Ok(outcome)
    }

    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>> {
        let now = micros(now);
        for id in self.intent_ids_of(scope, pm_id)? {
            let key = keys::pi(scope, &id);
            let Some(bytes) = self.pi.get(&key).map_err(unavailable)? else {
                continue;
            };
            let rec = Self::decode_pi(&bytes)?;
            if rec.is_active_of(kind, now) {
                return Ok(Some(self.with_key(&key, rec)?));
            }
        }
        Ok(None)
    }

    async fn end_intent(
        &self,
        scope: Scope<'_>,
        id: &str,
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>> {
        let Some((ended, slot)) = self.end_one(&keys::pi(scope, id), end, now_micros)? else {
            return Ok(None);
        };
        self.durable().await?;
        self.erase_keys(slot);
        Ok(Some(ended))
    }

    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>> {
        self.due_to_end(now_micros, limit)
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::super::key_file::{NAME, SLOT};
    use super::*;
    use crate::store::{when_unlocked, IntentStore, Scope};

    /// An intent of `p1`/`e1` as a test writes it straight into `pi`, with `status`.
    pub(in crate::store::sled) fn record(id: &str, status: &str) -> IntentRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "project": "p1", "entity": "e1", "payment_method_id": "pm_1",
            "credential_type": "virtual-card", "status": status, "created_micros": 0,
            "expires_micros": i64::MAX, "mandates": {}, "credential_sealed": null,
            "uses": 0, "failed_verifications": 0
        }))
        .unwrap()
    }

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
        let mut rec = record("pi_live", "active");
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

    /// An `active` virtual-card intent `id` of scope p1/e1 with `limit`, stored as a
    /// create stores it (no credential: uses do not open it).
    fn live_intent(store: &SledStore, id: &str, limit: Option<u32>) -> Vec<u8> {
        let mut rec: IntentRecord = serde_json::from_value(serde_json::json!({
            "id": id, "project": "p1", "entity": "e1", "payment_method_id": "pm_1",
            "credential_type": "virtual-card", "status": "active", "created_micros": 0,
            "expires_micros": i64::MAX, "mandates": {}, "credential_sealed": null,
            "uses": 0, "failed_verifications": 0
        }))
        .unwrap();
        rec.mandates.usage_limit = limit;
        let key = keys::pi(SCOPE, id);
        store
            .pi
            .insert(&key, serde_json::to_vec(&rec).unwrap())
            .unwrap();
        key
    }

    const SCOPE: Scope<'static> = Scope {
        project: "p1",
        entity: "e1",
    };

    #[tokio::test]
    async fn uses_taken_from_a_reservation_wait_for_no_flush_and_are_counted_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        live_intent(&store, "pi_free", None);
        let (waits, flushes) = (store.commit.waits(), store.commit.flushes());
        let now = time::OffsetDateTime::now_utc();
        for n in 1..=200 {
            let used = store.record_use(SCOPE, "pi_free", now).await.unwrap();
            assert_eq!(used, UseOutcome::Recorded(n));
        }
        // The first use waits (and makes its reservation durable); one of the uses that
        // follow tops it up.
        let waited = store.commit.waits() - waits;
        assert!(waited <= 2, "{waited} uses of 200 waited for a flush");
        assert!(store.commit.flushes() - flushes <= 2);
        let read = store.get_intent(SCOPE, "pi_free").await.unwrap().unwrap();
        assert_eq!(read.uses, 200);
        // A clean stop hands the rest back: the count stays exact.
        drop(store);
        let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        let read = store.get_intent(SCOPE, "pi_free").await.unwrap().unwrap();
        assert_eq!(read.uses, 200);
    }

    #[tokio::test]
    async fn a_limited_intent_is_used_exactly_to_its_limit_and_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        live_intent(&store, "pi_100", Some(100));
        let now = time::OffsetDateTime::now_utc();
        let mut waited = 0;
        for n in 1..=100 {
            let before = store.commit.waits();
            let used = store.record_use(SCOPE, "pi_100", now).await.unwrap();
            assert_eq!(used, UseOutcome::Recorded(n));
            waited += store.commit.waits() - before;
        }
        assert!(waited < 40, "{waited} of 100 uses waited");
        assert_eq!(
            store.record_use(SCOPE, "pi_100", now).await.unwrap(),
            UseOutcome::UsageLimitReached
        );
        let read = store.get_intent(SCOPE, "pi_100").await.unwrap().unwrap();
        assert_eq!((read.uses, read.status), (100, IntentStatus::Expired));
        assert!(read.ahead.is_empty());
    }

    #[tokio::test]
    async fn a_start_counts_the_uses_a_crash_left_reserved_as_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        let now = time::OffsetDateTime::now_utc();
        live_intent(&store, "pi_20", Some(20));
        live_intent(&store, "pi_free", None);
        for _ in 0..12 {
            store.record_use(SCOPE, "pi_20", now).await.unwrap();
        }
        store.record_use(SCOPE, "pi_free", now).await.unwrap();
        let held_of = |id: &str| {
            let bytes = store.pi.get(keys::pi(SCOPE, id)).unwrap().unwrap();
            SledStore::decode_pi(&bytes).unwrap().ahead.held()
        };
        let held = held_of("pi_20") + held_of("pi_free");
        assert!(held > 0);
        assert_eq!(ahead::listed(&store.pi_ahead).unwrap().len(), 2);
        // What a start after a crash does (a clean stop would hand them back first).
        store.count_uses_held().unwrap();
        assert!(ahead::listed(&store.pi_ahead).unwrap().is_empty());
        assert_eq!(held_of("pi_20") + held_of("pi_free"), 0);
        let limited = store.get_intent(SCOPE, "pi_20").await.unwrap().unwrap();
        let free = store.get_intent(SCOPE, "pi_free").await.unwrap().unwrap();
        assert_eq!(limited.uses + free.uses, 13 + held);
        assert!(limited.uses <= 20);
        // Used up by the count: the finalizer ends it; the unlimited one goes on.
        let key = keys::pi(SCOPE, "pi_20");
        store
            .swap_record(&key, |rec| {
                rec.ahead.reserved = 20 - limited.uses;
                Some(())
            })
            .unwrap();
        store.pi_ahead.insert(&key, &[] as &[u8]).unwrap();
        store.count_uses_held().unwrap();
        let due = store.intents_due_to_end(0, 10).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].id.as_str(), due[0].end),
            ("pi_20", IntentEnd::UsedUp)
        );
        assert_eq!(
            store.record_use(SCOPE, "pi_20", now).await.unwrap(),
            UseOutcome::UsageLimitReached
        );
        assert_eq!(
            store.record_use(SCOPE, "pi_free", now).await.unwrap(),
            UseOutcome::Recorded(free.uses + 1)
        );
    }
}
