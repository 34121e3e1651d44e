//! [`RateLimitStore`]: token buckets of rate limits that every instance on one store spends
//! from together (`edge::ratelimit::shared`). PostgreSQL keeps them; sled keeps none (one
//! process owns a sled store, and its own buckets are the whole count).

use super::{StoreError, StoreResult};
use crate::config::rate_limits::Limit;
use async_trait::async_trait;

/// What an instance took from one shared bucket since it last reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    pub project: String,
    /// The entity whose bucket it is; empty for the project's own bucket (entity ids are
    /// never empty).
    pub entity: String,
    /// The bucket's limit as this instance's configuration has it.
    pub limit: Limit,
    /// Tokens taken.
    pub tokens: u32,
}

/// Shared rate-limit buckets.
#[async_trait]
pub trait RateLimitStore: Send + Sync + 'static {
    /// Whether instances on this store share their rate limits' buckets through it.
    fn shares_rate_limits(&self) -> bool {
        false
    }

    /// Takes `taken` from their shared buckets, in one round trip, each bucket refilled at
    /// its rate first (by the store's clock) and never above its burst; the tokens each
    /// bucket holds then, in the order of `taken` (below zero when the instances together
    /// took more than it held). An empty `taken` still reaches the store.
    async fn take_shared(&self, _taken: &[Taken]) -> StoreResult<Vec<f64>> {
        Err(StoreError::Unavailable(
            "this store keeps no shared rate limits".into(),
        ))
    }
}
