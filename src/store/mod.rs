//! Persistence behind one trait, [`Store`], so the embedded sled backend
//! ([`sled_store::SledStore`]) can later be joined by a networked one.
//!
//! Everything is scoped by (project, entity): a lookup with another scope finds nothing,
//! exactly as for an id that never existed. A write returns only after it is durable.

pub mod group_commit;
pub mod keys;
pub mod sled_store;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use sled_store::SledStore;

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

/// Who owns a record.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub project: &'a str,
    pub entity: &'a str,
}

/// A stored payment method. Card number and cvc are sealed by the vault.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PaymentMethodRecord {
    pub id: String,
    pub project: String,
    pub entity: String,
    /// Unix time in microseconds; orders lists newest first.
    pub created_micros: i64,
    pub card: StoredCard,
    /// Keyed HMAC of the number, per project.
    pub fingerprint: String,
    /// Present when the project has its own token-vault key.
    pub token: Option<TokenRecord>,
}

/// The card part of a payment method.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredCard {
    pub brand: String,
    pub funding: String,
    pub bin: String,
    pub last4: String,
    pub expiration_month: String,
    pub expiration_year: String,
    /// The number, sealed under the project's data key.
    pub number_sealed: String,
    /// The cvc, sealed under a short-lived cvc key (unreadable once that key is destroyed).
    pub cvc_sealed: Option<String>,
}

/// The token-vault entry of a card.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub fingerprint: String,
    pub created_micros: i64,
    pub masked_data: String,
}

/// What an insert found.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// The record was stored.
    Created,
    /// The entity already has this card (same fingerprint): the existing record.
    Existing(Box<PaymentMethodRecord>),
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: usize,
}

/// An audit-log entry. Carries ids and outcomes, never card values.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEvent {
    pub at_micros: i64,
    pub action: String,
    pub project: String,
    pub entity: String,
    pub resource: String,
}

/// A chained audit entry as stored: `hash = sha256(prev_hash || event json)`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub seq: u64,
    pub event: AuditEvent,
    pub prev_hash: String,
    pub hash: String,
}

/// Counters that show how the store works (for `/metrics`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    pub durable_writes: u64,
    pub flushes: u64,
}

/// The persistence interface of paycred.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Stores a payment method, unless the entity already has one with the same
    /// fingerprint. Durable when it returns.
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
    ) -> StoreResult<Inserted>;

    /// One payment method of this scope.
    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<PaymentMethodRecord>>;

    /// The scope's payment methods, newest first.
    async fn list_payment_methods(
        &self,
        scope: Scope<'_>,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Page<PaymentMethodRecord>>;

    /// Removes a payment method and writes the audit entry in the same transaction.
    /// `false` when the scope has no such id. Durable when it returns.
    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool>;

    /// Appends to the audit log. Durable when it returns.
    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()>;

    /// The whole audit log, oldest first.
    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>>;

    /// The project's wrapped keyring, if one was created.
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Stores a keyring unless one exists; returns the one that is stored.
    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>>;

    /// Counters.
    fn stats(&self) -> StoreStats;
}
