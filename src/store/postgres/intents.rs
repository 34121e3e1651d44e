//! [`IntentStore`] on PostgreSQL: the table `intents` (its `status` and `uses` columns
//! authoritative over the record's copies; `ended_micros`, when it ended, for retention), and `intent_keys`, the wrapped key of each live
//! intent's credential.
//!
//! Every end goes through `end_row`, inside the transaction of the change that ends the
//! intent: the final status, the key row deleted, the event. Each is a conditional update of
//! a row locked `FOR UPDATE` (or by the `UPDATE` that counts a use), so instances that race
//! end an intent once. The use that reaches the usage limit ends its intent so, in the use's
//! transaction (why: [`crate::store::intents`]); `DUE` finds the intents the finalizer ends.

use super::cache::{newest_key, pm_key, Change};
use super::events::write_events;
use super::{from_json, i64_of, json, timed, u32_of, PgStore, OUTBOX};
use crate::audit::AuditEvent;
use crate::clock::micros;
use crate::domain::issuer::CredentialType;
use crate::store::events as event;
use crate::store::{
    use_refused, DueEnd, IntentEnd, IntentRecord, IntentStatus, IntentStore, Scope, Sealed,
    StoreResult, UseOutcome, VerificationAttempt,
};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn status_of(text: &str) -> StoreResult<IntentStatus> {
    from_json(Value::String(text.to_string()))
}

/// An intent row (`status, uses, record`) as its record: the columns are authoritative.
pub(super) fn intent_of(row: &tokio_postgres::Row) -> StoreResult<IntentRecord> {
    let mut rec: IntentRecord = from_json(row.get::<_, Value>("record"))?;
    rec.status = status_of(row.get::<_, &str>("status"))?;
    rec.uses = u32_of(row.get::<_, i64>("uses"));
    rec.credential_key = row
        .try_get::<_, Option<String>>("credential_key")
        .ok()
        .flatten()
        .map(|k| Sealed::from_stored(&k));
    Ok(rec)
}

/// Ends `rec` (read `FOR UPDATE` in `tx`) with `end` at `at_micros`: the ended record, its
/// final status and its event (`purchase_intent.expired`, `.exhausted` or `.canceled`).
/// Whatever else is written with an end is written here, in the same transaction.
pub(super) async fn end_row(
    tx: &tokio_postgres::Transaction<'_>,
    scope: Scope<'_>,
    rec: &mut IntentRecord,
    end: IntentEnd,
    at_micros: i64,
) -> StoreResult<()> {
    rec.finish(end, at_micros);
    timed(tx.execute(
        "DELETE FROM intent_keys WHERE project = $1 AND entity = $2 AND id = $3",
        &[&scope.project, &scope.entity, &rec.id],
    ))
    .await?;
    timed(tx.execute(
        "UPDATE intents SET status = $4, record = $5, ended_micros = $6 \
         WHERE project = $1 AND entity = $2 AND id = $3",
        &[
            &scope.project,
            &scope.entity,
            &rec.id,
            &rec.status.as_str(),
            &json(&*rec)?,
            &at_micros,
        ],
    ))
    .await?;
    write_events(tx, &[event::intent_ended(rec, end, at_micros)]).await
}

/// Intents stored live whose end is due at `$1` (past `expiresAt`, or an `active` one whose
/// usage limit is used up: a record no use ended), at most `$2`; the end as `expired` or
/// `exhausted`.
pub(super) const DUE: &str = "\
    (SELECT project, entity, id, 'expired' AS due FROM intents \
     WHERE status IN ('active', 'verify') AND expires_micros <= $1 LIMIT $2) \
    UNION ALL \
    (SELECT project, entity, id, 'exhausted' AS due FROM intents \
     WHERE status = 'active' AND usage_limit IS NOT NULL AND uses >= usage_limit LIMIT $2)";

/// Stores the wrapped key of `rec`'s credential in `intent_keys`, in the transaction that
/// creates the intent.
pub(super) async fn insert_key(
    tx: &tokio_postgres::Transaction<'_>,
    rec: &IntentRecord,
    key: &Sealed,
) -> StoreResult<()> {
    timed(tx.execute(
        "INSERT INTO intent_keys (project, entity, id, key) VALUES ($1, $2, $3, $4) \
         ON CONFLICT DO NOTHING",
        &[&rec.project, &rec.entity, &rec.id, &key.to_stored()],
    ))
    .await?;
    Ok(())
}

/// The advisory lock whoever vacuums `intent_keys` holds ("pcvacuum" in ASCII).
const VACUUM_LOCK: i64 = 0x7063_7661_6375_756d;

/// Removes the dead rows of `intent_keys` (the keys of ended intents) from the table's pages:
/// `VACUUM` of that small table, by the one instance that holds [`VACUUM_LOCK`] now (the
/// others skip it). `VACUUM` does not run in a transaction: a pooled connection in autocommit.
pub(super) async fn vacuum_keys(c: &deadpool_postgres::Object) -> StoreResult<bool> {
    let locked: bool = timed(c.query_one("SELECT pg_try_advisory_lock($1)", &[&VACUUM_LOCK]))
        .await?
        .get(0);
    if !locked {
        return Ok(false);
    }
    let vacuumed = timed(c.batch_execute("VACUUM intent_keys")).await;
    timed(c.execute("SELECT pg_advisory_unlock($1)", &[&VACUUM_LOCK])).await?;
    vacuumed?;
    Ok(true)
}

#[async_trait]
impl IntentStore for PgStore {
    async fn insert_intent(&self, intent: &IntentRecord, audit: AuditEvent) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        // The payment method's row, locked against a concurrent delete until this commits.
        let exists = timed(tx.query_opt(
            "SELECT 1 FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3 FOR SHARE",
            &[&intent.project, &intent.entity, &intent.payment_method_id],
        ))
        .await?
        .is_some();
        if !exists {
            return Ok(false);
        }
        let usage_limit = intent.mandates.usage_limit.map(i64_of);
        timed(tx.execute(
            "INSERT INTO intents (project, entity, id, payment_method_id, status, created_micros, \
             expires_micros, usage_limit, uses, record, ended_micros) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &intent.project,
                &intent.entity,
                &intent.id,
                &intent.payment_method_id,
                &intent.status.as_str(),
                &intent.created_micros,
                &intent.expires_micros,
                &usage_limit,
                &i64_of(intent.uses),
                &json(intent)?,
                &intent.ended_at(),
            ],
        ))
        .await?;
        if let Some(key) = &intent.credential_key {
            insert_key(&tx, intent, key).await?;
        }
        timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
        write_events(&tx, &event::intent_created(intent)).await?;
        let scope = Scope {
            project: &intent.project,
            entity: &intent.entity,
        };
        self.commit(
            tx,
            &[Change::payment_method(scope, &intent.payment_method_id)],
        )
        .await?;
        self.audited();
        Ok(true)
    }

    async fn get_intent(&self, scope: Scope<'_>, id: &str) -> StoreResult<Option<IntentRecord>> {
        let c = self.client().await?;
        let st = timed(c.prepare_cached(
            "SELECT status, uses, record, \
             (SELECT key FROM intent_keys k WHERE (k.project, k.entity, k.id) = \
             (intents.project, intents.entity, intents.id)) AS credential_key FROM intents WHERE project = $1 AND entity = $2 AND id = $3",
        ))
        .await?;
        match timed(c.query_opt(&st, &[&scope.project, &scope.entity, &id])).await? {
            Some(row) => Ok(Some(intent_of(&row)?)),
            None => Ok(None),
        }
    }

    async fn list_intents(&self, scope: Scope<'_>) -> StoreResult<Vec<IntentRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT status, uses, record, \
             (SELECT key FROM intent_keys k WHERE (k.project, k.entity, k.id) = \
             (intents.project, intents.entity, intents.id)) AS credential_key FROM intents WHERE project = $1 AND entity = $2",
            &[&scope.project, &scope.entity],
        ))
        .await?;
        rows.iter().map(intent_of).collect()
    }

    async fn set_intent_status(
        &self,
        scope: Scope<'_>,
        id: &str,
        status: IntentStatus,
    ) -> StoreResult<Option<IntentRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let row = timed(tx.query_opt(
            "UPDATE intents SET status = $4 WHERE project = $1 AND entity = $2 AND id = $3 RETURNING status, uses, record",
            &[&scope.project, &scope.entity, &id, &status.as_str()],
        ))
        .await?;
        let updated = row.as_ref().map(intent_of).transpose()?;
        let changed: Vec<Change> = updated
            .iter()
            .map(|rec| Change::payment_method(scope, &rec.payment_method_id))
            .collect();
        self.commit(tx, &changed).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(updated)
    }

    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(row) = timed(tx.query_opt(
            "SELECT status, uses, record FROM intents WHERE project = $1 AND entity = $2 AND id = $3 \
             FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?
        else {
            return Ok(None);
        };
        let mut rec = intent_of(&row)?;
        let Some(passed) = rec.apply_verification(attempt) else {
            return Ok(Some(rec));
        };
        if passed {
            timed(tx.execute(
                "UPDATE payment_methods SET verified = true \
                 WHERE project = $1 AND entity = $2 AND id = $3",
                &[&scope.project, &scope.entity, &rec.payment_method_id],
            ))
            .await?;
            timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
            write_events(&tx, &[event::intent_activated(&rec, audit.at_micros)]).await?;
        }
        timed(tx.execute(
            "UPDATE intents SET status = $4, record = $5 WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id, &rec.status.as_str(), &json(&rec)?],
        ))
        .await?;
        let changed = match rec.status {
            IntentStatus::Active => vec![Change::payment_method(scope, &rec.payment_method_id)],
            _ => Vec::new(),
        };
        self.commit(tx, &changed).await?;
        self.audited();
        Ok(Some(rec))
    }

    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome> {
        let now = micros(now);
        let mut c = self.client().await?;
        let st = timed(c.prepare_cached(
            "UPDATE intents SET uses = uses + 1 WHERE project = $1 AND entity = $2 AND id = $3 \
             AND status = 'active' AND expires_micros > $4 \
             AND (usage_limit IS NULL OR uses < usage_limit) \
             RETURNING status, uses, usage_limit, record",
        ))
        .await?;
        let tx = timed(c.transaction()).await?;
        if let Some(row) =
            timed(tx.query_opt(&st, &[&scope.project, &scope.entity, &id, &now])).await?
        {
            let mut rec = intent_of(&row)?;
            let uses = rec.uses;
            write_events(&tx, &[event::intent_used(&rec, now)]).await?;
            if rec.ends_with(IntentEnd::UsedUp, now) {
                // The use that reaches the limit ends the intent in its transaction, on the row
                // its update locked; other instances drop it from their caches with the commit.
                end_row(&tx, scope, &mut rec, IntentEnd::UsedUp, now).await?;
                let ended = [Change::payment_method(scope, &rec.payment_method_id)];
                self.commit(tx, &ended).await?;
            } else {
                timed(tx.commit()).await?;
            }
            self.writes.fetch_add(1, Ordering::Relaxed);
            return Ok(UseOutcome::Recorded(uses));
        }
        drop(tx);
        // Not counted: why (read after the refused update; the refusal itself was atomic).
        let row = timed(c.query_opt(
            "SELECT status, expires_micros, usage_limit, uses FROM intents \
             WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?;
        let Some(row) = row else {
            return Ok(UseOutcome::NotFound);
        };
        let status = status_of(row.get::<_, &str>(0))?;
        let limit = row.get::<_, Option<i64>>(2).map(u32_of);
        let uses = u32_of(row.get::<_, i64>(3));
        // Refused by the update: a use counted meanwhile reads as the limit reached.
        Ok(use_refused(status, row.get(1), limit, uses, now)
            .unwrap_or(UseOutcome::UsageLimitReached))
    }

    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>> {
        let now = micros(now);
        let key = newest_key(&pm_key(scope.project, scope.entity, pm_id), kind);
        if let Some(found) = self.caches.newest.get(&key) {
            match found.as_ref() {
                None => return Ok(None),
                Some(rec) if rec.status_at(now) == IntentStatus::Active => {
                    return Ok(Some(rec.clone()))
                }
                // Ended by time or use since it was read: read again.
                Some(_) => {}
            }
        }
        let read_at = self.caches.newest.generation();
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT status, uses, record, \
             (SELECT key FROM intent_keys k WHERE (k.project, k.entity, k.id) = \
             (intents.project, intents.entity, intents.id)) AS credential_key FROM intents WHERE project = $1 AND entity = $2 \
             AND payment_method_id = $3 AND status = 'active' AND expires_micros > $4 \
             ORDER BY created_micros DESC, id",
            &[&scope.project, &scope.entity, &pm_id, &now],
        ))
        .await?;
        let mut newest = None;
        for row in &rows {
            let rec = intent_of(row)?;
            if rec.is_active_of(kind, now) {
                newest = Some(rec);
                break;
            }
        }
        self.caches
            .newest
            .fill(&key, &Arc::new(newest.clone()), read_at);
        Ok(newest)
    }

    async fn end_intent(
        &self,
        scope: Scope<'_>,
        id: &str,
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let row = timed(tx.query_opt(
            "SELECT status, uses, record FROM intents WHERE project = $1 AND entity = $2 AND id = $3 \
             FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?;
        let Some(row) = row else { return Ok(None) };
        let mut rec = intent_of(&row)?;
        if !rec.ends_with(end, now_micros) {
            return Ok(None);
        }
        end_row(&tx, scope, &mut rec, end, now_micros).await?;
        // Other instances drop the intent from their caches with the commit.
        let ended = [Change::payment_method(scope, &rec.payment_method_id)];
        self.commit(tx, &ended).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(Some(rec))
    }

    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>> {
        let c = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = timed(c.query(DUE, &[&now_micros, &limit])).await?;
        Ok(rows
            .iter()
            .map(|row| DueEnd {
                project: row.get(0),
                entity: row.get(1),
                id: row.get(2),
                end: if row.get::<_, &str>(3) == "expired" {
                    IntentEnd::Expired
                } else {
                    IntentEnd::UsedUp
                },
            })
            .collect())
    }

    async fn purge_erased_keys(&self) -> StoreResult<()> {
        let c = self.client().await?;
        vacuum_keys(&c).await.map(|_| ())
    }
}
