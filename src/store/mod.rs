//! Persistence: what paycred stores, one trait per resource, and [`Store`], their sum, which
//! every caller holds (`Arc<dyn Store>`). The embedded sled backend ([`sled::SledStore`]) is
//! the default, PostgreSQL ([`postgres::PgStore`]) the store several instances share; both
//! implement every trait, in files of the same names (`sled/intents.rs`,
//! `postgres/intents.rs`, ...). [`open`] opens the configured one.
//!
//! | file                   | what it holds |
//! |------------------------|--------------------|
//! | [`payment_methods`]    | [`PaymentMethodStore`]: cards, deduplicated by fingerprint |
//! | [`intents`]            | [`IntentStore`]: purchase intents, their uses and ends; the refusal of a use |
//! | [`idempotency`]        | [`IdempotencyStore`]: `Idempotency-Key` answers and claims |
//! | [`keyrings`]           | [`KeyringStore`]: data keyrings and client keysets (wrapped) |
//! | [`card_tokens`]        | [`CardTokenStore`]: token-vault cards; the take and tombstone rule |
//! | [`webhooks`]           | [`WebhookStore`]: webhook endpoints and deliveries |
//! | [`passkeys`]           | [`PasskeyStore`]: passkeys and WebAuthn ceremony states |
//! | [`browser_sessions`]   | [`BrowserSessionStore`]: browser checkout's sessions, found by id or stand-in |
//! | [`events`]             | [`EventStore`]: the events changes write; event types and ids |
//! | [`rate_limits`]        | [`RateLimitStore`]: rate-limit buckets the instances share (PostgreSQL) |
//! | [`retention`]          | [`RetentionStore`]: old events, finished deliveries and ended intents removed |
//! | [`audit`]              | [`AuditStore`]: the audit log the store keeps |
//! | this file              | [`StoreHealth`] (readiness, counters), [`Store`], [`open`], [`StoreError`] |
//! | [`records`]            | the records every backend reads and writes |
//! | [`deliveries`]         | delivery records, and how the webhook outbox works |
//! | [`sealed`]             | [`Sealed`]: a value the vault sealed, held parsed |
//! | [`pm_cache`]           | the cache of decoded records |
//! | [`copy`]               | `paycred store copy`: a sled store into PostgreSQL |
//! | [`sled`], [`postgres`] | the backends: a file per trait, named as above |
//! | `faulty`               | a wrapper that fails on demand (tests) |
//! | `contract_tests`       | what every backend must do, run against both |
//!
//! Everything is scoped by (project, entity): a lookup with another scope finds nothing,
//! exactly as for an id that never existed. A write returns only after it is durable.
//!
//! May import: `audit` (the log the store writes), `config`, `clock`, `domain`, `error`,
//! `secret`. Never the vault, the handlers or the edge.

pub mod audit;
pub mod browser_sessions;
pub mod card_tokens;
#[cfg(test)]
mod contract_tests;
pub mod copy;
pub mod deliveries;
pub mod events;
#[cfg(any(test, feature = "test-support"))]
pub mod faulty;
pub mod idempotency;
pub mod intents;
pub mod keyrings;
pub mod passkeys;
pub mod payment_methods;
pub mod pm_cache;
pub mod postgres;
pub mod rate_limits;
pub mod records;
pub mod retention;
pub mod sealed;
pub mod sled;
pub mod webhooks;

use crate::audit::head_mac::HeadKeys;
use crate::audit::{AuditEntry, AuditEvent, AuditHead};
use crate::error::ApiError;
use async_trait::async_trait;
use std::sync::Arc;

pub use audit::AuditStore;
pub use browser_sessions::{
    BrowserSessionRecord, BrowserSessionStatus, BrowserSessionStore, SessionChange,
};
pub use card_tokens::CardTokenStore;
pub use deliveries::{DeliveryRecord, DeliveryStatus};
pub use events::{EventQuery, EventRecord, EventStore, NewEvent};
pub use idempotency::IdempotencyStore;
pub use intents::{use_refused, IntentStore, PURGE_EVERY};
pub use keyrings::KeyringStore;
pub use passkeys::PasskeyStore;
pub use payment_methods::{PaymentMethodStore, Refresh};
pub use postgres::PgStore;
pub use rate_limits::RateLimitStore;
pub use records::*;
pub use retention::{Prunable, Pruned, RetentionStore};
pub use sealed::Sealed;
pub use sled::SledStore;
pub use webhooks::WebhookStore;

/// Opens the store `config` names (sled in `data_dir`, or the PostgreSQL database, applying
/// its migrations). The error names the directory or the database (never a password).
pub fn open(config: &crate::config::Config) -> Result<Arc<dyn Store>, String> {
    open_with(config, HeadKeys::default())
}

/// [`open`], the recorded audit heads MACed with `head_keys` (the master key's:
/// [`crate::audit::head_mac`]).
pub fn open_with(
    config: &crate::config::Config,
    head_keys: HeadKeys,
) -> Result<Arc<dyn Store>, String> {
    match &config.store {
        crate::config::store::StoreConfig::Sled => {
            let dir = &config.data_dir;
            std::fs::create_dir_all(dir).map_err(|e| format!("data_dir {}: {e}", dir.display()))?;
            let store = SledStore::open_with(dir, config.audit_hash, head_keys)
                .map_err(|e| format!("data_dir {}: {e}", dir.display()))?;
            Ok(Arc::new(store))
        }
        crate::config::store::StoreConfig::Postgres(pg) => Ok(Arc::new(
            PgStore::open_with(pg, config.audit_hash, head_keys).map_err(|e| e.to_string())?,
        )),
    }
}

/// A store failure. The message never carries card data.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend cannot serve now (disk full, I/O error); retrying later may work.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored record does not decode.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store error");
        match e {
            StoreError::Unavailable(_) => ApiError::new(
                crate::error::ErrorKind::StoreUnavailable,
                "storage temporarily unavailable",
            ),
            _ => ApiError::internal(),
        }
    }
}

/// A backend error as [`StoreError::Unavailable`] (its text only: sled and io errors carry no
/// card data).
pub(crate) fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A value that does not decode, as [`StoreError::Corrupt`].
pub(crate) fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// Runs `open` again while sled's directory lock is still held, for at most 5 s (tests that
/// reopen a directory in the same process): a dropped `Db` lets go of the lock only when
/// sled's IO threads have finished its last writes, a moment later. Any other error, or
/// success, is returned at once.
#[cfg(test)]
pub(crate) fn when_unlocked<T, E: std::fmt::Display>(
    mut open: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match open() {
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            done => return done,
        }
    }
}

/// The store's own operations: whether it answers, and its counters.
#[async_trait]
pub trait StoreHealth: Send + Sync + 'static {
    /// Whether the store answers now (readiness): a read that reaches the backend.
    async fn ready(&self) -> StoreResult<()>;

    /// Counters.
    fn stats(&self) -> StoreStats;

    /// At a clean stop, once no request is in flight: gives back what this process alone
    /// holds (sled: the uses reserved ahead and not taken, so the counts stay exact) and
    /// makes every write durable. Uses after it still work (they reserve again).
    fn close(&self) {}
}

/// `pub trait Name: A + B + … {}` with the blanket impl that makes every type implementing
/// them all a `Name`.
macro_rules! sum_of {
    ($(#[$doc:meta])* $name:ident: $first:ident $(+ $rest:ident)*) => {
        $(#[$doc])*
        pub trait $name: $first $(+ $rest)* {}

        impl<T: $first $(+ $rest)*> $name for T {}
    };
}

sum_of! {
    /// The persistence interface of paycred: every resource's trait. Any type that implements
    /// them all is a `Store`; a `dyn Store` answers every method of them without importing them.
    Store: PaymentMethodStore
        + IntentStore
        + IdempotencyStore
        + KeyringStore
        + CardTokenStore
        + WebhookStore
        + PasskeyStore
        + BrowserSessionStore
        + EventStore
        + RetentionStore
        + AuditStore
        + RateLimitStore
        + StoreHealth
}
