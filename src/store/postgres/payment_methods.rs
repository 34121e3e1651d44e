//! [`PaymentMethodStore`] on PostgreSQL: the table `payment_methods` (a UNIQUE index on
//! project, entity and fingerprint deduplicates), read through the instance's record cache;
//! a delete cancels the method's intents in its transaction (`end_row` of [`super::intents`]).

use super::cache::{pm_key, Change};
use super::events::write_events;
use super::intents::{end_row, intent_of};
use super::{from_json, json, timed, PgStore, OUTBOX};
use crate::audit::AuditEvent;
use crate::store::events as event;
use crate::store::{
    Inserted, IntentEnd, Page, PaymentMethodRecord, PaymentMethodStore, Refresh, Scope, StoreError,
    StoreResult,
};
use async_trait::async_trait;
use std::sync::Arc;

#[async_trait]
impl PaymentMethodStore for PgStore {
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
        refresh: Refresh<'_>,
    ) -> StoreResult<Inserted> {
        let record = json(pm)?;
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let inserted = timed(tx.execute(
            "INSERT INTO payment_methods (project, entity, id, created_micros, fingerprint, record) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (project, entity, fingerprint) DO NOTHING",
            &[&pm.project, &pm.entity, &pm.id, &pm.created_micros, &pm.fingerprint, &record],
        ))
        .await?;
        let outcome = if inserted == 1 {
            timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
            write_events(&tx, &[event::pm_created(pm)]).await?;
            Inserted::Created
        } else {
            let row = timed(tx.query_opt(
                "SELECT record FROM payment_methods WHERE project = $1 AND entity = $2 \
                 AND fingerprint = $3 FOR UPDATE",
                &[&pm.project, &pm.entity, &pm.fingerprint],
            ))
            .await?
            .ok_or_else(|| StoreError::Unavailable("payment method changed meanwhile".into()))?;
            let existing: PaymentMethodRecord = from_json(row.get(0))?;
            let (refreshed, audit) = refresh(&existing);
            timed(tx.execute(
                "UPDATE payment_methods SET record = $4 WHERE project = $1 AND entity = $2 AND id = $3",
                &[&pm.project, &pm.entity, &existing.id, &json(&refreshed)?],
            ))
            .await?;
            timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
            Inserted::Existing(Box::new(refreshed))
        };
        let changed = match &outcome {
            Inserted::Existing(refreshed) => vec![Change::payment_method(
                Scope {
                    project: &pm.project,
                    entity: &pm.entity,
                },
                &refreshed.id,
            )],
            Inserted::Created => Vec::new(),
        };
        self.commit(tx, &changed).await?;
        self.audited();
        Ok(outcome)
    }

    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<Arc<PaymentMethodRecord>>> {
        let key = pm_key(scope.project, scope.entity, id);
        if let Some(record) = self.caches.pms.get(&key) {
            return Ok(Some(record));
        }
        let read_at = self.caches.pms.generation();
        let c = self.client().await?;
        let st = timed(c.prepare_cached(
            "SELECT record FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3",
        ))
        .await?;
        match timed(c.query_opt(&st, &[&scope.project, &scope.entity, &id])).await? {
            Some(row) => {
                let record = Arc::new(from_json(row.get(0))?);
                self.caches.pms.fill(&key, &record, read_at);
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
        let c = self.client().await?;
        let total: i64 = timed(c.query_one(
            "SELECT count(*) FROM payment_methods WHERE project = $1 AND entity = $2",
            &[&scope.project, &scope.entity],
        ))
        .await?
        .get(0);
        let (offset, limit) = (
            i64::try_from(offset).unwrap_or(i64::MAX),
            i64::try_from(limit).unwrap_or(i64::MAX),
        );
        let rows = timed(c.query(
            "SELECT record FROM payment_methods WHERE project = $1 AND entity = $2 \
             ORDER BY created_micros DESC, id OFFSET $3 LIMIT $4",
            &[&scope.project, &scope.entity, &offset, &limit],
        ))
        .await?;
        let items = rows
            .into_iter()
            .map(|r| from_json(r.get(0)))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Page {
            items,
            total: usize::try_from(total).unwrap_or(0),
        })
    }

    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(deleted) = timed(tx.query_opt(
            "DELETE FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3 \
             RETURNING record",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?
        else {
            return Ok(false);
        };
        let deleted: PaymentMethodRecord = from_json(deleted.get(0))?;
        write_events(&tx, &[event::pm_deleted(&deleted, audit.at_micros)]).await?;
        // The row lock of the delete makes an intent insert for it wait and then find it gone.
        let rows = timed(tx.query(
            "SELECT id, status, uses, record FROM intents WHERE project = $1 AND entity = $2 \
             AND payment_method_id = $3 AND status <> 'canceled' FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?;
        for row in rows {
            let mut rec = intent_of(&row)?;
            let (end, at) = (IntentEnd::Canceled, audit.at_micros);
            end_row(&tx, scope, &mut rec, end, at).await?;
        }
        timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
        self.commit(tx, &[Change::payment_method(scope, id)])
            .await?;
        self.audited();
        Ok(true)
    }

    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT verified FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &pm_id],
        ))
        .await?;
        Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
    }
}
