//! Records of the token vault and of the client-encryption keys, and their sled operations.
//!
//! | tree          | key                 | value                                  |
//! |---------------|---------------------|----------------------------------------|
//! | `card_tokens` | scope, token id     | [`CardTokenRecord`] (JSON)             |
//! | `client_keys` | project             | the project's keyset (JSON, private keys wrapped by the master key) |
//!
//! A consumed token stays as a tombstone without its sealed card data, so a second use is told
//! apart from an unknown id.

use super::{keys, Scope, StoreError, StoreResult};
use serde::{Deserialize, Serialize};

/// A card stored in the token vault (`POST /projects/:p/tokens`). Number and cvc are sealed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CardTokenRecord {
    pub id: String,
    pub fingerprint: String,
    pub masked_data: String,
    pub created_micros: i64,
    /// Unused tokens stop working at this time.
    pub expires_micros: i64,
    pub expiration_month: String,
    pub expiration_year: String,
    /// The number under the project's data key; `None` once consumed.
    pub number_sealed: Option<String>,
    /// The cvc under a short-lived cvc key; `None` once consumed.
    pub cvc_sealed: Option<String>,
    /// Set when a payment method was created from it.
    pub used: bool,
}

/// What consuming a token found.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenTake {
    /// The token, now marked used (the returned copy still carries the sealed data).
    Taken(Box<CardTokenRecord>),
    /// No such token in this scope.
    Unknown,
    /// Used before.
    Used,
    /// Past its expiry.
    Expired,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Stores a new token.
pub fn insert(tree: &sled::Tree, scope: Scope<'_>, rec: &CardTokenRecord) -> StoreResult<()> {
    let value = serde_json::to_vec(rec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    tree.insert(keys::pm(scope, &rec.id), value)
        .map_err(unavailable)?;
    Ok(())
}

/// Marks an unused, unexpired token used, atomically (compare and swap), and drops its
/// sealed data from the stored record.
pub fn take(
    tree: &sled::Tree,
    scope: Scope<'_>,
    id: &str,
    now_micros: i64,
) -> StoreResult<TokenTake> {
    let key = keys::pm(scope, id);
    loop {
        let Some(current) = tree.get(&key).map_err(unavailable)? else {
            return Ok(TokenTake::Unknown);
        };
        let rec: CardTokenRecord =
            serde_json::from_slice(&current).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if rec.used {
            return Ok(TokenTake::Used);
        }
        if now_micros >= rec.expires_micros {
            // Expired: its card data goes now.
            let tombstone = CardTokenRecord {
                number_sealed: None,
                cvc_sealed: None,
                ..rec
            };
            let value =
                serde_json::to_vec(&tombstone).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let _ = tree
                .compare_and_swap(&key, Some(&current), Some(value))
                .map_err(unavailable)?;
            return Ok(TokenTake::Expired);
        }
        let tombstone = CardTokenRecord {
            number_sealed: None,
            cvc_sealed: None,
            used: true,
            ..rec.clone()
        };
        let value =
            serde_json::to_vec(&tombstone).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        match tree
            .compare_and_swap(&key, Some(&current), Some(value))
            .map_err(unavailable)?
        {
            Ok(()) => return Ok(TokenTake::Taken(Box::new(rec))),
            // Someone else changed it meanwhile: read again.
            Err(_) => continue,
        }
    }
}

/// Replaces the value at `key` if it is still `expected`; `false` when it changed.
pub fn swap(
    tree: &sled::Tree,
    key: &str,
    expected: Option<&[u8]>,
    new: &[u8],
) -> StoreResult<bool> {
    Ok(tree
        .compare_and_swap(key, expected, Some(new))
        .map_err(unavailable)?
        .is_ok())
}
