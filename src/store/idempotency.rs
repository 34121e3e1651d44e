//! Stored responses of `Idempotency-Key` requests (the `idem` tree).
//!
//! Key: `project \0 entity \0 idempotency-key` (so keys are scoped per project and entity);
//! value: an [`IdempotentRecord`] as JSON. The response body is sealed by the vault before it
//! gets here; a purchase-intent answer is kept as the intent's id only, never its credential.
//! Records past `expires_micros` are ignored on read and removed by [`sweep`].

use super::{keys, unavailable, Scope, StoreError, StoreResult};
use serde::{Deserialize, Serialize};

/// The first response to an idempotent request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdempotentRecord {
    /// SHA-256 (hex) of method, path and body of the first request.
    pub fingerprint: String,
    /// HTTP status of the first response.
    pub status: u16,
    /// Its body, sealed by the vault; `None` for an empty body, and for an answer that showed
    /// a purchase intent (see `intent_id`).
    pub body_sealed: Option<crate::vault::Sealed>,
    /// The purchase intent the first answer showed. A replay shows that intent as it is then,
    /// so its credential is never kept here. `None` for other answers and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
    /// The role of the first request's token (`private` or `public`): a request of the other
    /// role with the same key is a different request. `None` in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub created_micros: i64,
    pub expires_micros: i64,
}

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
