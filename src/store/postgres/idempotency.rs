//! [`IdempotencyStore`] on PostgreSQL: stored answers in `idempotency`, and in
//! `idempotency_claims` the claim of the request that runs a key (a lease, so that instances
//! sharing the database run a key once, and a claim whose instance died lapses).

use super::{client, from_json, json, timed, PgStore};
use crate::store::{IdempotencyStore, IdempotentRecord, Scope, StoreResult};
use async_trait::async_trait;
use std::sync::atomic::Ordering;

#[async_trait]
impl IdempotencyStore for PgStore {
    async fn get_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<IdempotentRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT record FROM idempotency WHERE project = $1 AND entity = $2 AND key = $3 \
             AND expires_micros > $4",
            &[&scope.project, &scope.entity, &key, &now_micros],
        ))
        .await?;
        row.map(|r| from_json(r.get(0))).transpose()
    }

    async fn put_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        record: &IdempotentRecord,
    ) -> StoreResult<()> {
        let c = self.client().await?;
        timed(c.execute(
            "INSERT INTO idempotency (project, entity, key, expires_micros, record) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, entity, key) \
             DO UPDATE SET expires_micros = $4, record = $5",
            &[
                &scope.project,
                &scope.entity,
                &key,
                &record.expires_micros,
                &json(record)?,
            ],
        ))
        .await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn claim_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
        lease_until_micros: i64,
    ) -> StoreResult<bool> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "INSERT INTO idempotency_claims (project, entity, key, lease_until_micros) \
             VALUES ($1, $2, $3, $5) ON CONFLICT (project, entity, key) \
             DO UPDATE SET lease_until_micros = $5 \
             WHERE idempotency_claims.lease_until_micros <= $4 RETURNING 1",
            &[
                &scope.project,
                &scope.entity,
                &key,
                &now_micros,
                &lease_until_micros,
            ],
        ))
        .await?;
        Ok(row.is_some())
    }

    async fn release_idempotent(&self, scope: Scope<'_>, key: &str) -> StoreResult<()> {
        let c = self.client().await?;
        timed(c.execute(
            "DELETE FROM idempotency_claims WHERE project = $1 AND entity = $2 AND key = $3",
            &[&scope.project, &scope.entity, &key],
        ))
        .await
        .map(drop)
    }

    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize> {
        let pool = self.pool.clone();
        self.blocking(async move {
            let c = client(&pool).await?;
            let n = timed(c.execute(
                "DELETE FROM idempotency WHERE expires_micros <= $1",
                &[&now_micros],
            ))
            .await?;
            timed(c.execute(
                "DELETE FROM idempotency_claims WHERE lease_until_micros <= $1",
                &[&now_micros],
            ))
            .await?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }
}
