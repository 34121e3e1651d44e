//! [`PaymentMethodStore`] on sled: the trees `pm` (the records), `pm_time` (newest first),
//! `pm_fp` (one method per fingerprint and entity) and `pm_verified` ([`super::keys`]). A
//! delete cancels the method's intents in its own transaction (`end_in` of [`super::intents`]).

use super::audit::to_outbox;
use super::{abort, events, intents, keys, read_count, tx_error, SledStore};
use crate::audit::AuditEvent;
use crate::store::events as event;
use crate::store::{
    corrupt, unavailable, Inserted, IntentEnd, Page, PaymentMethodRecord, PaymentMethodStore,
    Refresh, Scope, StoreError, StoreResult,
};
use async_trait::async_trait;
use sled::transaction::TransactionError;
use sled::Transactional;
use std::sync::Arc;

/// Why a delete transaction must be run again.
const RETRY_DELETE: &str = "intent index changed during delete";

#[async_trait]
impl PaymentMethodStore for SledStore {
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
        refresh: Refresh<'_>,
    ) -> StoreResult<Inserted> {
        let scope = Scope {
            project: &pm.project,
            entity: &pm.entity,
        };
        let pm_key = keys::pm(scope, &pm.id);
        let time_key = keys::pm_time(scope, pm.created_micros, &pm.id);
        let fp_key = keys::pm_fingerprint(scope, &pm.fingerprint);
        let value = serde_json::to_vec(pm).map_err(corrupt)?;
        let created = [event::pm_created(pm)];
        let outcome = (
            &self.pm,
            &self.pm_time,
            &self.pm_fp,
            &self.outbox,
            &self.events,
        )
            .transaction(|(t_pm, t_time, t_fp, t_outbox, t_events)| {
                if let Some(existing_id) = t_fp.get(&fp_key)? {
                    let existing_id = std::str::from_utf8(&existing_id)
                        .map_err(|e| abort(corrupt(e)))?
                        .to_string();
                    let existing_key = keys::pm(scope, &existing_id);
                    if let Some(bytes) = t_pm.get(&existing_key)? {
                        let existing = Self::decode_pm(&bytes).map_err(abort)?;
                        let (refreshed, audit) = refresh(&existing);
                        let value =
                            serde_json::to_vec(&refreshed).map_err(|e| abort(corrupt(e)))?;
                        t_pm.insert(existing_key, value)?;
                        to_outbox(t_outbox, &audit)?;
                        return Ok(Inserted::Existing(Box::new(refreshed)));
                    }
                }
                t_pm.insert(pm_key.as_slice(), value.as_slice())?;
                t_time.insert(time_key.as_slice(), &[] as &[u8])?;
                t_fp.insert(fp_key.as_slice(), pm.id.as_bytes())?;
                to_outbox(t_outbox, &audit)?;
                events::write(t_events, &created)?;
                Ok(Inserted::Created)
            })
            .map_err(tx_error)?;
        if let Inserted::Existing(refreshed) = &outcome {
            self.pm_cache.invalidate(&keys::pm(scope, &refreshed.id));
        }
        self.durable_audited().await?;
        Ok(outcome)
    }

    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<Arc<PaymentMethodRecord>>> {
        let key = keys::pm(scope, id);
        if let Some(record) = self.pm_cache.get(&key) {
            return Ok(Some(record));
        }
        let read_at = self.pm_cache.generation();
        match self.pm.get(&key).map_err(unavailable)? {
            Some(bytes) => {
                let record = Arc::new(Self::decode_pm(&bytes)?);
                self.pm_cache.fill(&key, &record, read_at);
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    async fn list_payment_methods(
        &self,
        scope: Scope<'_>,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Page<PaymentMethodRecord>> {
        let prefix = keys::scope_prefix(scope);
        let mut items = Vec::new();
        let mut total = 0;
        for entry in self.pm_time.scan_prefix(&prefix).keys() {
            let key = entry.map_err(unavailable)?;
            total += 1;
            if total <= offset || items.len() >= limit {
                continue;
            }
            let id = keys::id_from_pm_time(prefix.len(), &key)
                .ok_or_else(|| corrupt("bad pm_time key"))?;
            if let Some(bytes) = self.pm.get(keys::pm(scope, id)).map_err(unavailable)? {
                items.push(Self::decode_pm(&bytes)?);
            }
        }
        Ok(Page { items, total })
    }

    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let pm_key = keys::pm(scope, id);
        let ref_key = keys::pm_ref(scope, id);
        // sled transactions cannot scan, so the intents are listed first and the transaction
        // checks the per-method counter: an intent created in between makes it run again.
        let mut attempts = 0;
        let deleted = loop {
            let intent_ids = self.intent_ids_of(scope, id)?;
            let outcome = (
                &self.pm,
                &self.pm_time,
                &self.pm_fp,
                &self.outbox,
                &self.pi,
                &self.pi_pm_n,
                &self.pm_verified,
                &self.pi_due,
                &self.pi_ended,
                &self.events,
            )
                .transaction(
                    |(
                        t_pm,
                        t_time,
                        t_fp,
                        t_outbox,
                        t_pi,
                        t_n,
                        t_verified,
                        t_due,
                        t_ended,
                        t_events,
                    )| {
                        let Some(bytes) = t_pm.remove(pm_key.as_slice())? else {
                            return Ok(None);
                        };
                        if read_count(t_n.get(&ref_key)?) != intent_ids.len() as u64 {
                            return Err(abort(StoreError::Unavailable(RETRY_DELETE.into())));
                        }
                        let rec = Self::decode_pm(&bytes).map_err(abort)?;
                        events::write(t_events, &[event::pm_deleted(&rec, audit.at_micros)])?;
                        let mut slots = Vec::new();
                        for intent_id in &intent_ids {
                            let key = keys::pi(scope, intent_id);
                            let Some(bytes) = t_pi.get(&key)? else {
                                continue;
                            };
                            let mut intent = Self::decode_pi(&bytes).map_err(abort)?;
                            if intent.ends_with(IntentEnd::Canceled, 0) {
                                let t = intents::EndTrees {
                                    pi: t_pi,
                                    due: t_due,
                                    ended: t_ended,
                                    events: t_events,
                                    at_micros: audit.at_micros,
                                };
                                let end = IntentEnd::Canceled;
                                slots.extend(intents::end_in(&t, &key, &mut intent, end)?);
                            }
                        }
                        t_n.remove(ref_key.as_slice())?;
                        t_verified.remove(ref_key.as_slice())?;
                        t_time.remove(keys::pm_time(scope, rec.created_micros, &rec.id))?;
                        t_fp.remove(keys::pm_fingerprint(scope, &rec.fingerprint))?;
                        to_outbox(t_outbox, &audit)?;
                        Ok(Some(slots))
                    },
                );
            match outcome {
                Err(TransactionError::Abort(StoreError::Unavailable(m)))
                    if m == RETRY_DELETE && attempts < 16 =>
                {
                    attempts += 1;
                }
                other => break other.map_err(tx_error)?,
            }
        };
        let Some(slots) = deleted else {
            return Ok(false);
        };
        self.pm_cache.invalidate(&pm_key);
        self.durable_audited().await?;
        self.erase_keys(slots);
        Ok(true)
    }

    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool> {
        self.pm_verified
            .contains_key(keys::pm_ref(scope, pm_id))
            .map_err(unavailable)
    }
}
