//! [`RetentionStore`]: what the store removes once it is old enough, in bounded batches
//! (`service::retention` decides when, and how old is old enough).
//!
//! | kind ([`Prunable`]) | removed                                                          | age counted from |
//! |---------------------|------------------------------------------------------------------|------------------|
//! | events              | an event, unless a delivery of it is pending or it is not fanned out yet | its `created_micros` |
//! | deliveries          | a webhook delivery `delivered` or `failed` (never a pending one) | its last attempt (`next_micros`: the end of that attempt's lease) |
//! | ended intents       | an intent stored `expired`, `canceled` or `unavailable`, and its index entries | its end ([`IntentRecord::ended_at`](super::IntentRecord::ended_at)) |
//!
//! Nothing else is ever removed so: not the audit log (a hash chain), not a live intent, not
//! a payment method. A removal is conditional on what is stored at the time, so instances
//! sharing a store may prune together: each record goes once.

use super::StoreResult;
use async_trait::async_trait;

/// What ages out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prunable {
    Events,
    Deliveries,
    EndedIntents,
}

impl Prunable {
    /// Every kind, in the order a pruning pass takes them (deliveries before events: a
    /// delivery removed may free its event).
    pub const ALL: [Prunable; 3] = [
        Prunable::Deliveries,
        Prunable::Events,
        Prunable::EndedIntents,
    ];

    /// Its name in the configuration and the metrics (`events`, `deliveries`,
    /// `ended_intents`).
    pub fn as_str(self) -> &'static str {
        match self {
            Prunable::Events => "events",
            Prunable::Deliveries => "deliveries",
            Prunable::EndedIntents => "ended_intents",
        }
    }
}

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Records removed.
    pub removed: usize,
    /// Whether more may be due: the batch stopped at its limit, not at the end of what it
    /// looks through.
    pub more: bool,
}

/// Removal of old records.
#[async_trait]
pub trait RetentionStore: Send + Sync + 'static {
    /// One batch: removes records of `kind` older than `before_micros` (see the module
    /// documentation for what counts and what is kept), looking at about `limit` of them at
    /// most. Durable when it returns.
    async fn prune(&self, kind: Prunable, before_micros: i64, limit: usize) -> StoreResult<Pruned>;
}
