//! [`RetentionStore`] on PostgreSQL ([`crate::store::retention`]): one `DELETE` a batch, of
//! at most `limit` rows a subquery picks through an index by time (migration 0009). Each
//! `DELETE` states the rule a row must still meet, so instances pruning together remove each
//! row once, and a row that changed meanwhile (a delivery sent again) stays.

use super::{timed, PgStore};
use crate::store::retention::{Prunable, Pruned, RetentionStore};
use crate::store::StoreResult;
use async_trait::async_trait;

/// Events created before `$1`, not awaited by a fan-out marker or a pending delivery, at
/// most `$2`.
const EVENTS: &str = "\
    DELETE FROM events WHERE seq IN (\
        SELECT seq FROM events e WHERE (event->>'created_micros')::bigint < $1 \
        AND NOT EXISTS (SELECT 1 FROM webhook_fanout f WHERE f.seq = e.seq) \
        AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
            WHERE d.project = e.project AND d.event_seq = e.seq AND d.status = 'pending') \
        LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// Finished deliveries whose last attempt was before `$1`, at most `$2`.
const DELIVERIES: &str = "\
    DELETE FROM webhook_deliveries WHERE id IN (\
        SELECT id FROM webhook_deliveries WHERE status <> 'pending' AND next_micros < $1 \
        LIMIT $2 FOR UPDATE SKIP LOCKED) \
    AND status <> 'pending'";

/// Intents that ended before `$1`, at most `$2` (their key rows went with their end).
const ENDED_INTENTS: &str = "\
    DELETE FROM intents WHERE (project, entity, id) IN (\
        SELECT project, entity, id FROM intents WHERE ended_micros < $1 \
        AND status NOT IN ('active', 'verify') LIMIT $2 FOR UPDATE SKIP LOCKED) \
    AND status NOT IN ('active', 'verify')";

#[async_trait]
impl RetentionStore for PgStore {
    async fn prune(&self, kind: Prunable, before_micros: i64, limit: usize) -> StoreResult<Pruned> {
        let sql = match kind {
            Prunable::Events => EVENTS,
            Prunable::Deliveries => DELIVERIES,
            Prunable::EndedIntents => ENDED_INTENTS,
        };
        let limit_rows = i64::try_from(limit).unwrap_or(i64::MAX);
        let c = self.client().await?;
        let removed = timed(c.execute(sql, &[&before_micros, &limit_rows])).await?;
        let removed = usize::try_from(removed).unwrap_or(usize::MAX);
        Ok(Pruned {
            removed,
            more: removed >= limit,
        })
    }
}
