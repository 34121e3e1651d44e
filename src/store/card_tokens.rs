//! [`CardTokenStore`]: the token vault's cards ([`CardTokenRecord`]).
//!
//! A consumed token stays as a tombstone without its sealed card data, so a second use is told
//! apart from an unknown id.

use super::{CardTokenRecord, Scope, StoreResult, TokenTake};
use async_trait::async_trait;

/// Card tokens.
#[async_trait]
pub trait CardTokenStore: Send + Sync + 'static {
    /// Stores a token-vault card ([`CardTokenRecord`]). Durable when it returns.
    async fn insert_card_token(&self, scope: Scope<'_>, token: &CardTokenRecord)
        -> StoreResult<()>;

    /// Consumes a token of this scope: only an unused, unexpired one is taken (once).
    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake>;
}
