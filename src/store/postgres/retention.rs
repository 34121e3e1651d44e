//! [`RetentionStore`] on PostgreSQL ([`crate::store::retention`]): one `DELETE` a batch, of
//! at most `limit` rows a subquery picks through an index by time (migration 0009). Each
//! `DELETE` states the rule a row must still meet, so instances pruning together remove each
//! row once, and a row that changed meanwhile (a delivery sent again) stays. Events go in two
//! statements of one transaction: the batch locked, then removed where still unawaited, so
//! a redelivery (which share-locks its event) either keeps the event or finds it gone.

use super::{timed, PgStore};
use crate::store::retention::{Prunable, Pruned, RetentionStore};
use crate::store::StoreResult;
use async_trait::async_trait;

/// The rule an event must meet to go: not awaited by a fan-out marker or a pending delivery.
const EVENT_UNAWAITED: &str = "\
    NOT EXISTS (SELECT 1 FROM webhook_fanout f WHERE f.seq = e.seq) \
    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
        WHERE d.project = e.project AND d.event_seq = e.seq AND d.status = 'pending')";

/// Events created before `$1` that meet the rule, at most `$2`, locked: a redelivery
/// queueing meanwhile holds its event `FOR KEY SHARE` (`super::webhooks`), so it is skipped,
/// and one that comes later waits for the removal.
fn lock_events() -> String {
    format!(
        "SELECT seq FROM events e WHERE (event->>'created_micros')::bigint < $1 \
         AND {EVENT_UNAWAITED} LIMIT $2 FOR UPDATE OF e SKIP LOCKED"
    )
}

/// The locked events `$1` that still meet the rule, seen anew: a redelivery committed
/// after the lock's statement began keeps its event.
fn delete_events() -> String {
    format!("DELETE FROM events e WHERE seq = ANY($1) AND {EVENT_UNAWAITED}")
}

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
        let limit_rows = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut c = self.client().await?;
        let (removed, read) = match kind {
            Prunable::Events => {
                let tx = timed(c.transaction()).await?;
                let seqs: Vec<i64> =
                    timed(tx.query(&lock_events(), &[&before_micros, &limit_rows]))
                        .await?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                let removed = if seqs.is_empty() {
                    0
                } else {
                    timed(tx.execute(&delete_events(), &[&seqs])).await?
                };
                timed(tx.commit()).await?;
                (removed, seqs.len())
            }
            Prunable::Deliveries | Prunable::EndedIntents => {
                let sql = if kind == Prunable::Deliveries {
                    DELIVERIES
                } else {
                    ENDED_INTENTS
                };
                let removed = timed(c.execute(sql, &[&before_micros, &limit_rows])).await?;
                (removed, usize::try_from(removed).unwrap_or(usize::MAX))
            }
        };
        Ok(Pruned {
            removed: usize::try_from(removed).unwrap_or(usize::MAX),
            more: read >= limit,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::super::test_cluster;
    use super::*;
    use crate::audit::chain::HashFunction;
    use crate::store::contract_tests::delivered_events;
    use crate::store::{EventStore, WebhookStore};
    use std::sync::Arc;
    use std::time::Duration;

    /// A store with one event, fanned out and delivered (so retention may remove it): the
    /// store and the event's number.
    async fn a_delivered_event() -> (Arc<PgStore>, u64) {
        let config = test_cluster::fresh_config(4).unwrap();
        let store = Arc::new(PgStore::open(&config, HashFunction::Sha256).unwrap());
        let seq = delivered_events(&*store, 1).await[0];
        (store, seq)
    }

    /// The prune holds the event locked when a redelivery comes: the redelivery waits, then
    /// finds the event gone and queues nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_redelivery_during_the_removal_of_its_event_waits_and_queues_nothing() {
        let (store, seq) = a_delivered_event().await;
        let mut c = store.client().await.unwrap();
        let tx = c.transaction().await.unwrap();
        let locked = tx
            .query(&lock_events(), &[&i64::MAX, &10i64])
            .await
            .unwrap();
        assert_eq!(locked.len(), 1);
        let redelivery = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .queue_deliveries("p1", seq, &["we_all".to_string()], 30)
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!redelivery.is_finished(), "the redelivery did not wait");
        let seqs: Vec<i64> = locked.iter().map(|r| r.get(0)).collect();
        assert_eq!(tx.execute(&delete_events(), &[&seqs]).await.unwrap(), 1);
        tx.commit().await.unwrap();
        assert!(
            !redelivery.await.unwrap().unwrap(),
            "queued for a gone event"
        );
        assert_eq!(store.deliveries_pending().await.unwrap(), 0);
    }

    /// A redelivery holds its event while it queues: the prune skips the event, and once the
    /// delivery is committed keeps it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prune_during_a_redelivery_keeps_the_event() {
        let (store, seq) = a_delivered_event().await;
        let seq = i64::try_from(seq).unwrap();
        let mut c = store.client().await.unwrap();
        // The redelivery's transaction, stopped before its commit.
        let tx = c.transaction().await.unwrap();
        let event = tx
            .query_opt(
                "SELECT 1 FROM events WHERE project = 'p1' AND seq = $1 FOR KEY SHARE",
                &[&seq],
            )
            .await
            .unwrap();
        assert!(event.is_some());
        tx.execute(
            "INSERT INTO webhook_deliveries (project, event_seq, endpoint_id, attempts, \
             next_micros, status, created_micros) VALUES ('p1', $1, 'we_all', 0, 30, \
             'pending', 30)",
            &[&seq],
        )
        .await
        .unwrap();
        let pruned = store.prune(Prunable::Events, i64::MAX, 10).await.unwrap();
        assert_eq!(pruned.removed, 0);
        tx.commit().await.unwrap();
        let pruned = store.prune(Prunable::Events, i64::MAX, 10).await.unwrap();
        assert_eq!(pruned.removed, 0);
        assert!(store
            .get_event("p1", u64::try_from(seq).unwrap())
            .await
            .unwrap()
            .is_some());
        assert_eq!(store.deliveries_pending().await.unwrap(), 1);
    }
}
