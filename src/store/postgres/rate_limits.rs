//! [`RateLimitStore`] on PostgreSQL: the shared buckets in `rate_limit_buckets` (an
//! UNLOGGED table). One statement takes what an instance counted since its last report from
//! every bucket it names and returns what each holds then: an
//! `INSERT … ON CONFLICT DO UPDATE … RETURNING` that refills the bucket by the database's
//! clock, so the instances' clocks never matter. A bucket refilled to its burst is deleted
//! by [`purge_full_buckets`], which the store runs in the background.

use super::{client, timed, PgStore};
use crate::store::rate_limits::{RateLimitStore, Taken};
use crate::store::StoreResult;
use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::collections::HashMap;
use std::time::Duration;

/// How often full buckets are deleted.
pub const PURGE_FULL_EVERY: Duration = Duration::from_secs(10);

/// The refill since `at`, by the database's clock (never negative: a statement that waited
/// for the row's lock may have started before the one that wrote it).
const REFILLED: &str =
    "LEAST(EXCLUDED.burst, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM now() - b.at)::float8) * EXCLUDED.per_second)";

#[async_trait]
impl RateLimitStore for PgStore {
    fn shares_rate_limits(&self) -> bool {
        true
    }

    async fn take_shared(&self, taken: &[Taken]) -> StoreResult<Vec<f64>> {
        // Rows are locked in one order by every instance (no deadlock between two batches).
        let mut order: Vec<usize> = (0..taken.len()).collect();
        order.sort_by(|&a, &b| {
            (&taken[a].project, &taken[a].entity).cmp(&(&taken[b].project, &taken[b].entity))
        });
        let column = |f: &dyn Fn(&Taken) -> String| -> Vec<String> {
            order.iter().map(|&i| f(&taken[i])).collect()
        };
        let number = |f: &dyn Fn(&Taken) -> f64| -> Vec<f64> {
            order.iter().map(|&i| f(&taken[i])).collect()
        };
        let (projects, entities) = (
            column(&|t| t.project.clone()),
            column(&|t| t.entity.clone()),
        );
        let rates = number(&|t| t.limit.per_second);
        let bursts = number(&|t| t.limit.burst);
        let tokens = number(&|t| f64::from(t.tokens));
        let sql = format!(
            "INSERT INTO rate_limit_buckets AS b (project, entity, per_second, burst, tokens, at) \
             SELECT t.project, t.entity, t.per_second, t.burst, t.burst - t.taken, now() \
             FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::float8[]) \
             WITH ORDINALITY AS t(project, entity, per_second, burst, taken, n) ORDER BY t.n \
             ON CONFLICT (project, entity) DO UPDATE SET \
             per_second = EXCLUDED.per_second, burst = EXCLUDED.burst, \
             tokens = {REFILLED} - (EXCLUDED.burst - EXCLUDED.tokens), \
             at = GREATEST(b.at, now()) \
             RETURNING project, entity, tokens"
        );
        let c = self.client().await?;
        let rows = timed(c.query(
            sql.as_str(),
            &[&projects, &entities, &rates, &bursts, &tokens],
        ))
        .await?;
        let held: HashMap<(String, String), f64> = rows
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2)))
            .collect();
        Ok(taken
            .iter()
            .map(|t| {
                held.get(&(t.project.clone(), t.entity.clone()))
                    .copied()
                    .unwrap_or(t.limit.burst - f64::from(t.tokens))
            })
            .collect())
    }
}

/// Deletes, every [`PURGE_FULL_EVERY`], the buckets that have refilled to their burst (the
/// same as no row); runs as long as the store's runtime.
pub(crate) async fn purge_full_buckets(pool: Pool) {
    loop {
        tokio::time::sleep(PURGE_FULL_EVERY).await;
        let purged = async {
            let c = client(&pool).await?;
            timed(c.execute(
                // Rows a sync holds are skipped, never waited for: the purge takes no lock
                // a sync could be waiting on in its own order (no deadlock between them).
                "DELETE FROM rate_limit_buckets WHERE (project, entity) IN ( \
                 SELECT project, entity FROM rate_limit_buckets \
                 WHERE tokens + GREATEST(0, EXTRACT(EPOCH FROM now() - at)::float8) * per_second >= burst \
                 FOR UPDATE SKIP LOCKED)",
                &[],
            ))
            .await
        };
        if let Err(e) = purged.await {
            tracing::debug!(error = %e, "full rate-limit buckets not purged");
        }
    }
}
