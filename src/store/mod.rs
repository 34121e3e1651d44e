//! Persistence behind one trait, [`Store`], so the embedded sled backend
//! ([`sled_store::SledStore`]) can later be joined by a networked one.
//!
//! Everything is scoped by (project, entity): a lookup with another scope finds nothing,
//! exactly as for an id that never existed. A write returns only after it is durable.

pub mod audit_batch;
pub mod audit_chain;
pub mod audit_file;
pub mod audit_log;
pub mod audit_tally;
pub mod card_tokens;
pub mod faulty;
pub mod group_commit;
pub mod idempotency;
pub mod keys;
pub mod pm_cache;
pub mod sled_store;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use audit_file::AuditHead;
pub use card_tokens::{CardTokenRecord, TokenTake};
pub use idempotency::IdempotentRecord;
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

/// A backend error as [`StoreError::Unavailable`] (its text only: sled and io errors carry no
/// card data).
fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A value that does not decode, as [`StoreError::Corrupt`].
fn corrupt(e: impl std::fmt::Display) -> StoreError {
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
    pub number_sealed: crate::vault::Sealed,
    /// The cvc, sealed under a short-lived cvc key (unreadable once that key is destroyed).
    pub cvc_sealed: Option<crate::vault::Sealed>,
}

/// The token-vault entry of a card.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub fingerprint: String,
    pub created_micros: i64,
    pub masked_data: String,
}

/// The stored status of a purchase intent. `expired` is not stored: it is computed from the
/// clock and the usage count when the intent is read ([`IntentRecord::status_at`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IntentStatus {
    Active,
    Verify,
    Unavailable,
    Expired,
    Canceled,
}

impl IntentStatus {
    /// The API name.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentStatus::Active => "active",
            IntentStatus::Verify => "verify",
            IntentStatus::Unavailable => "unavailable",
            IntentStatus::Expired => "expired",
            IntentStatus::Canceled => "canceled",
        }
    }
}

/// A stored purchase intent. The credential is sealed by the vault (`pan` intents store
/// none: they read the payment method's card when revealed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IntentRecord {
    pub id: String,
    pub project: String,
    pub entity: String,
    pub payment_method_id: String,
    pub credential_type: crate::issuer::CredentialType,
    pub status: IntentStatus,
    pub created_micros: i64,
    pub expires_micros: i64,
    pub mandates: crate::mandate::Mandates,
    /// The issued credential (JSON), sealed under `pi/{project}/{id}/credential`.
    pub credential_sealed: Option<crate::vault::Sealed>,
    /// Approved uses so far.
    pub uses: u32,
    /// Wrong verification codes so far.
    pub failed_verifications: u32,
}

impl IntentRecord {
    /// The status a caller sees at `now_micros`: a `verify` or `active` intent past
    /// `expiresAt`, or an active one whose usage limit is used up, is `expired`.
    pub fn status_at(&self, now_micros: i64) -> IntentStatus {
        match self.status {
            IntentStatus::Active | IntentStatus::Verify if now_micros >= self.expires_micros => {
                IntentStatus::Expired
            }
            IntentStatus::Active
                if self
                    .mandates
                    .usage_limit
                    .is_some_and(|limit| self.uses >= limit) =>
            {
                IntentStatus::Expired
            }
            s => s,
        }
    }
}

/// What [`Store::record_use`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseOutcome {
    /// Counted; the number of uses including this one.
    Recorded(u32),
    /// No such intent in this scope.
    NotFound,
    /// Not `active` (verify, unavailable, canceled).
    NotActive,
    /// Past `expiresAt`.
    Expired,
    /// The usage limit is used up.
    UsageLimitReached,
}

/// One verification attempt, as [`Store::record_verification`] applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerificationAttempt {
    /// The code was right: the intent turns `active` and its payment method counts as verified.
    Passed,
    /// A wrong code: counted.
    Failed,
}

/// What an insert found.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// The record was stored.
    Created,
    /// The entity already has this card (same fingerprint): the existing record, as
    /// [`Refresh`] changed it.
    Existing(Box<PaymentMethodRecord>),
}

/// What a second create of a card the entity already has makes of the stored record, and
/// the audit event of that change: given the stored record, the record to store in its place.
/// (The payment-method API takes the new expiry and cvc, the cvc sealed for the stored
/// record's id.)
pub type Refresh<'a> =
    &'a (dyn Fn(&PaymentMethodRecord) -> (PaymentMethodRecord, AuditEvent) + Send + Sync);

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

/// A chained audit entry as stored: `hash = H(prev_hash || event json)`, H named by the
/// hash ([`audit_chain::HashFunction`]).
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
    /// fingerprint: then stores what `refresh` makes of that one instead, with its audit
    /// event. Durable when it returns.
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
        refresh: Refresh<'_>,
    ) -> StoreResult<Inserted>;

    /// One payment method of this scope.
    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<Arc<PaymentMethodRecord>>>;

    /// The scope's payment methods, newest first.
    async fn list_payment_methods(
        &self,
        scope: Scope<'_>,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Page<PaymentMethodRecord>>;

    /// Removes a payment method and writes the audit entry in the same transaction, which
    /// also cancels the method's purchase intents (found through the `pi_by_pm` index).
    /// `false` when the scope has no such id. Durable when it returns.
    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool>;

    /// Stores a new purchase intent and its audit entry, in one transaction, if its payment
    /// method still exists (`false` otherwise). Durable when it returns.
    async fn insert_intent(&self, intent: &IntentRecord, audit: AuditEvent) -> StoreResult<bool>;

    /// One purchase intent of this scope.
    async fn get_intent(&self, scope: Scope<'_>, id: &str) -> StoreResult<Option<IntentRecord>>;

    /// Every purchase intent of the scope (no order promised).
    async fn list_intents(&self, scope: Scope<'_>) -> StoreResult<Vec<IntentRecord>>;

    /// Sets an intent's stored status; the updated record, `None` when there is no such intent.
    async fn set_intent_status(
        &self,
        scope: Scope<'_>,
        id: &str,
        status: IntentStatus,
    ) -> StoreResult<Option<IntentRecord>>;

    /// Applies one verification attempt to an intent in `verify` atomically (a passed one also
    /// marks the payment method verified and writes `audit`); the updated record.
    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>>;

    /// Whether the payment method passed network-token verification once.
    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool>;

    /// Counts one use of an intent, atomically: only an `active`, unexpired intent below its
    /// usage limit is counted. Durable when it returns.
    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome>;

    /// The newest intent of `kind` for the payment method that is `active` at `now`.
    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: crate::issuer::CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>>;

    /// Appends to the audit log. Durable when it returns.
    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()>;

    /// Appends to the audit log without waiting for the disk: the entry is written in order
    /// within 5 ms, batched with others (the proxy's hot path), and flushed at most 20 ms
    /// later. A crash may lose the entries of that window.
    fn append_audit_nowait(&self, audit: AuditEvent);

    /// Counts an event that anyone can repeat at will (an authentication failure): the
    /// first of a quiet spell is appended as [`Store::append_audit_nowait`] appends it, and
    /// its repeats (same project, action and resource) within a second become one entry
    /// with ` count=<n>` added to the resource ([`audit_tally`]).
    fn count_audit(&self, audit: AuditEvent);

    /// The whole audit log, oldest first, once everything appended or committed before the
    /// call is in it. Blocks the calling thread until then.
    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>>;

    /// The chain head as the store last recorded it apart from the log, so that `audit
    /// --verify` notices entries cut off the log before it.
    fn audit_head(&self) -> StoreResult<Option<AuditHead>>;

    /// The stored first response of an `Idempotency-Key` of this scope, unless expired at
    /// `now_micros` ([`idempotency`]).
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

    /// Removes stored idempotent responses expired at `now_micros`; how many.
    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize>;

    /// The project's wrapped keyring, if one was created.
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Stores a keyring unless one exists; returns the one that is stored.
    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>>;

    /// Replaces the keyring if it still is `expected` (durable when it returns); `false` when
    /// it changed meanwhile.
    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool>;

    /// Counters.
    fn stats(&self) -> StoreStats;

    /// Stores a token-vault card ([`card_tokens`]). Durable when it returns.
    async fn insert_card_token(&self, scope: Scope<'_>, token: &CardTokenRecord)
        -> StoreResult<()>;

    /// Consumes a token of this scope: only an unused, unexpired one is taken (once).
    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake>;

    /// The project's client-encryption keyset (private keys wrapped), if created.
    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Replaces the keyset if it still is `expected`; `false` when it changed meanwhile.
    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool>;
}
