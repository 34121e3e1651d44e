//! Retention: old events, finished webhook deliveries and ended purchase intents removed
//! from the store ([`RetentionStore`](crate::store::RetentionStore) says what each kind
//! keeps), as `retention:` sets how long each is kept. A pass runs every [`PRUNE_EVERY`] on
//! a thread of its own, in batches of [`PRUNE_BATCH`], and counts what it removed in
//! `paycred_pruned_total`. The audit log is never pruned.

use crate::app::App;
use crate::config::retention::Retention;
use crate::error::ApiResult;
use crate::store::Prunable;

/// How often a pass runs.
pub const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Most records one batch looks at (each batch is one short write).
pub const PRUNE_BATCH: usize = 500;

/// Most batches of one kind in a pass (the next pass takes the rest).
const MAX_BATCHES: usize = 200;

/// How long `kind` is kept.
fn kept(retention: &Retention, kind: Prunable) -> std::time::Duration {
    match kind {
        Prunable::Events => retention.events,
        Prunable::Deliveries => retention.deliveries,
        Prunable::EndedIntents => retention.ended_intents,
    }
}

/// One pass at the app's time: each kind removed in batches while older records remain (up
/// to [`MAX_BATCHES`]), counted in the metrics; how many of each kind it removed.
pub async fn prune_old(app: &App) -> ApiResult<Vec<(Prunable, usize)>> {
    let now = app.now_micros();
    let mut removed = Vec::new();
    for kind in Prunable::ALL {
        let keep = i64::try_from(kept(&app.config.retention, kind).as_micros()).unwrap_or(i64::MAX);
        let before = now.saturating_sub(keep);
        let mut total = 0;
        for _ in 0..MAX_BATCHES {
            let pruned = app.store.prune(kind, before, PRUNE_BATCH).await?;
            total += pruned.removed;
            app.metrics
                .record_pruned(kind.as_str(), u64::try_from(pruned.removed).unwrap_or(0));
            if !pruned.more {
                break;
            }
        }
        removed.push((kind, total));
    }
    Ok(removed)
}

/// Runs [`prune_old`] every [`PRUNE_EVERY`] on a thread of its own while `app` lives.
/// Instances sharing a store may all run it: each removal is conditional.
pub fn spawn_pruner(app: std::sync::Weak<App>) {
    super::spawn_every("retention", PRUNE_EVERY, app, |runtime, app| match runtime
        .block_on(prune_old(app))
    {
        Ok(removed) => {
            for (kind, n) in removed.into_iter().filter(|(_, n)| *n > 0) {
                tracing::info!(kind = kind.as_str(), removed = n, "retention: pruned");
            }
        }
        Err(e) => tracing::warn!(error = ?e, "retention: pruning"),
    });
}
