//! [`IdempotencyStore`]: the stored first responses of `Idempotency-Key` requests
//! ([`IdempotentRecord`], `edge::idempotency`) and the claims of the requests that run them.

use super::{IdempotentRecord, Scope, StoreResult};
use async_trait::async_trait;

/// Idempotent responses and their claims.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// The stored first response of an `Idempotency-Key` of this scope, unless expired at
    /// `now_micros` (`edge::idempotency`).
    async fn get_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<IdempotentRecord>>;

    /// Stores the first response of an `Idempotency-Key`. Durable when it returns.
    async fn put_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        record: &IdempotentRecord,
    ) -> StoreResult<()>;

    /// Claims an `Idempotency-Key` of this scope until `lease_until_micros`, for the one
    /// request that runs it: `false` when another holds an unexpired claim. A store that one
    /// process owns (sled) has no other claimant: the edge's in-process guard suffices.
    async fn claim_idempotent(
        &self,
        _scope: Scope<'_>,
        _key: &str,
        _now_micros: i64,
        _lease_until_micros: i64,
    ) -> StoreResult<bool> {
        Ok(true)
    }

    /// Releases a claim of [`IdempotencyStore::claim_idempotent`].
    async fn release_idempotent(&self, _scope: Scope<'_>, _key: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Removes stored idempotent responses expired at `now_micros`; how many.
    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize>;
}
