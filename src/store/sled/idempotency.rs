//! [`IdempotencyStore`] on sled: stored responses of `Idempotency-Key` requests (the `idem`
//! tree); no claims (one process owns the store: the edge's in-process guard suffices).
//!
//! Key: `project \0 entity \0 idempotency-key` (so keys are scoped per project and entity);
//! value: an [`IdempotentRecord`] as JSON. The response body is sealed by the vault before it
//! gets here; a purchase-intent answer is kept as the intent's id only, never its credential.
//! Records past `expires_micros` are ignored on read and removed by [`sweep`].

use super::{keys, SledStore};
use crate::store::{
    unavailable, IdempotencyStore, IdempotentRecord, Scope, StoreError, StoreResult,
};
use async_trait::async_trait;

/// The tree key of an idempotency key.
pub fn key(scope: Scope<'_>, idempotency_key: &str) -> Vec<u8> {
    keys::pm(scope, idempotency_key)
}

/// The record of a key, `None` when absent or expired at `now_micros`.
pub fn get(
    tree: &sled::Tree,
    scope: Scope<'_>,
    idempotency_key: &str,
    now_micros: i64,
) -> StoreResult<Option<IdempotentRecord>> {
    let Some(bytes) = tree.get(key(scope, idempotency_key)).map_err(unavailable)? else {
        return Ok(None);
    };
    let rec: IdempotentRecord =
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok((rec.expires_micros > now_micros).then_some(rec))
}

/// Stores a record (the caller makes it durable).
pub fn put(
    tree: &sled::Tree,
    scope: Scope<'_>,
    idempotency_key: &str,
    rec: &IdempotentRecord,
) -> StoreResult<()> {
    let value = serde_json::to_vec(rec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    tree.insert(key(scope, idempotency_key), value)
        .map_err(unavailable)?;
    Ok(())
}

/// Removes every record expired at `now_micros`; how many.
pub fn sweep(tree: &sled::Tree, now_micros: i64) -> StoreResult<usize> {
    let mut removed = 0;
    for entry in tree.iter() {
        let (k, v) = entry.map_err(unavailable)?;
        let expired = serde_json::from_slice::<IdempotentRecord>(&v)
            .map(|r| r.expires_micros <= now_micros)
            .unwrap_or(true);
        if expired {
            // Only if unchanged since read: a fresh record under the same key stays.
            if tree
                .compare_and_swap(&k, Some(&v), None as Option<&[u8]>)
                .map_err(unavailable)?
                .is_ok()
            {
                removed += 1;
            }
        }
    }
    Ok(removed)
}

#[async_trait]
impl IdempotencyStore for SledStore {
    async fn get_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<IdempotentRecord>> {
        get(&self.idem, scope, key, now_micros)
    }

    async fn put_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        record: &IdempotentRecord,
    ) -> StoreResult<()> {
        put(&self.idem, scope, key, record)?;
        self.durable().await
    }

    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize> {
        sweep(&self.idem, now_micros)
    }
}
