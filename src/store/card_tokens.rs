//! [`CardTokenStore`]: the token vault's cards ([`CardTokenRecord`]), and the rules both
//! backends apply to them: a take ([`take_at`]) and the tidy-up of spent tokens
//! ([`tidy_at`], [`TOMBSTONE_KEEP_MICROS`]).
//!
//! A consumed token stays as a tombstone without its sealed card data, so a second use is told
//! apart from an unknown id.

use super::{CardTokenRecord, Scope, StoreResult, TokenTake};
use async_trait::async_trait;

/// Card tokens.
#[async_trait]
pub trait CardTokenStore: Send + Sync + 'static {
    /// Stores a token-vault card ([`CardTokenRecord`]), after the scope's tidy-up
    /// ([`tidy_at`] at the token's creation). Durable when it returns.
    async fn insert_card_token(&self, scope: Scope<'_>, token: &CardTokenRecord)
        -> StoreResult<()>;

    /// Consumes a token of this scope: only an unused, unexpired one is taken (once;
    /// [`take_at`]).
    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake>;
}

/// How long a spent (used or expired) token's tombstone is kept, so that a late second use
/// is still told "used" or "expired" rather than "unknown".
pub const TOMBSTONE_KEEP_MICROS: i64 = 24 * 3600 * 1_000_000;

/// The expiry before which a spent token's tombstone is gone at `now_micros`
/// ([`TOMBSTONE_KEEP_MICROS`] earlier).
pub fn tombstones_kept_from(now_micros: i64) -> i64 {
    now_micros.saturating_sub(TOMBSTONE_KEEP_MICROS)
}

impl CardTokenRecord {
    /// The record without its sealed card data: what stays of a spent token.
    pub fn tombstone(&self) -> Self {
        CardTokenRecord {
            number_sealed: None,
            cvc_sealed: None,
            ..self.clone()
        }
    }
}

/// What a take of the stored `rec` at `now_micros` finds, and the record to store in its
/// place (`None`: it stays as it is). A token used before is [`TokenTake::Used`]; one past its
/// expiry is [`TokenTake::Expired`] and loses its card data now; any other is
/// [`TokenTake::Taken`] (the returned copy with its sealed data), stored as a used tombstone.
pub fn take_at(rec: CardTokenRecord, now_micros: i64) -> (TokenTake, Option<CardTokenRecord>) {
    if rec.used {
        return (TokenTake::Used, None);
    }
    if now_micros >= rec.expires_micros {
        return (TokenTake::Expired, Some(rec.tombstone()));
    }
    let used = CardTokenRecord {
        used: true,
        ..rec.tombstone()
    };
    (TokenTake::Taken(Box::new(rec)), Some(used))
}

/// What the scope's tidy-up at `now_micros` (a new token's creation) does to a stored token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tidy {
    /// Unexpired, or a tombstone still kept: it stays as it is.
    Keep,
    /// Expired with its card data: that data goes (this record in its place).
    Strip(Box<CardTokenRecord>),
    /// Expired more than [`TOMBSTONE_KEEP_MICROS`] ago: the record goes.
    Remove,
}

/// See [`Tidy`].
pub fn tidy_at(old: &CardTokenRecord, now_micros: i64) -> Tidy {
    if old.expires_micros > now_micros {
        Tidy::Keep
    } else if old.expires_micros < tombstones_kept_from(now_micros) {
        Tidy::Remove
    } else if old.number_sealed.is_some() || old.cvc_sealed.is_some() {
        Tidy::Strip(Box::new(old.tombstone()))
    } else {
        Tidy::Keep
    }
}
