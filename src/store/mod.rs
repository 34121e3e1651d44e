//! Persistence behind one trait, [`Store`]: the embedded sled backend ([`sled::SledStore`])
//! is the default, PostgreSQL ([`postgres::PgStore`]) the store several instances share;
//! records are in [`records`], sealed values in [`sealed`]. [`open`] opens the configured one.
//!
//! Everything is scoped by (project, entity): a lookup with another scope finds nothing,
//! exactly as for an id that never existed. A write returns only after it is durable.
//!
//! May import: `audit` (the log the store writes), `config`, `clock`, `error`, `secret`.
//! Never the vault, the handlers or the edge.

#[cfg(test)]
mod contract_tests;
pub mod copy;
pub mod deliveries;
pub mod events;
#[cfg(any(test, feature = "test-support"))]
pub mod faulty;
pub mod pm_cache;
pub mod postgres;
pub mod records;
pub mod sealed;
pub mod sled;

use crate::audit::head_mac::HeadKeys;
use crate::audit::{AuditEntry, AuditEvent, AuditHead};
use crate::error::ApiError;
use async_trait::async_trait;
use std::sync::Arc;

pub use deliveries::{DeliveryRecord, DeliveryStatus};
pub use events::{EventQuery, EventRecord, NewEvent};
pub use postgres::PgStore;
pub use records::*;
pub use sealed::Sealed;
pub use sled::SledStore;

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

/// What a second create of a card the entity already has makes of the stored record, and
/// the audit event of that change: given the stored record, the record to store in its place.
/// (The payment-method API takes the new expiry and cvc, the cvc sealed for the stored
/// record's id.)
pub type Refresh<'a> =
    &'a (dyn Fn(&PaymentMethodRecord) -> (PaymentMethodRecord, AuditEvent) + Send + Sync);

/// How often the finalizer asks the store to purge erased credential keys
/// ([`Store::purge_erased_keys`]).
pub const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

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

    /// Applies one verification attempt (or the choice of where the code goes) to an intent in
    /// `verify` atomically (a passed one also marks the payment method verified and writes
    /// `audit`); the updated record.
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
        kind: crate::domain::issuer::CredentialType,
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
    /// with ` count=<n>` added to the resource ([`crate::audit::tally`]).
    fn count_audit(&self, audit: AuditEvent);

    /// The whole audit log, oldest first, once everything appended or committed before the
    /// call is in it. Blocks the calling thread until then.
    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>>;

    /// The chain head as the store last recorded it apart from the log, so that `audit
    /// --verify` notices entries cut off the log before it.
    fn audit_head(&self) -> StoreResult<Option<AuditHead>>;

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

    /// Releases a claim of [`Store::claim_idempotent`].
    async fn release_idempotent(&self, _scope: Scope<'_>, _key: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Removes stored idempotent responses expired at `now_micros`; how many.
    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize>;

    /// The project's wrapped keyring, if one was created.
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// The project's wrapped keyring as the store holds it now, past any cache of the
    /// store's own (a value sealed under a key this process does not know yet).
    fn reload_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.load_keyring(project)
    }

    /// Stores a keyring unless one exists; returns the one that is stored.
    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>>;

    /// Replaces the keyring if it still is `expected` (durable when it returns); `false` when
    /// it changed meanwhile.
    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool>;

    /// Whether the store answers now (readiness): a read that reaches the backend.
    async fn ready(&self) -> StoreResult<()>;

    /// Counters.
    fn stats(&self) -> StoreStats;

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

    /// The project's client-encryption keyset (private keys wrapped), if created.
    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Replaces the keyset if it still is `expected`; `false` when it changed meanwhile.
    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool>;

    /// The events a query asks for, newest first ([`events`]; every change above writes its
    /// own in its transaction).
    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>>;

    /// Stores a webhook endpoint and its audit entry in one transaction: a new one, or (with
    /// `replace`) in place of the stored one, only while that exists (`false` otherwise).
    /// Durable when it returns.
    async fn put_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        replace: bool,
        audit: AuditEvent,
    ) -> StoreResult<bool>;

    /// One webhook endpoint of the project.
    async fn get_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpointRecord>>;

    /// The project's webhook endpoints, newest first.
    async fn list_webhook_endpoints(
        &self,
        project: &str,
    ) -> StoreResult<Vec<WebhookEndpointRecord>>;

    /// Removes a webhook endpoint and writes the audit entry in the same transaction; `false`
    /// when the project has no such id. Durable when it returns.
    async fn delete_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool>;
    /// Ends an intent for good, in one transaction: its final status ([`IntentEnd::status`])
    /// and its issued credential made impossible to open; its metadata stays. Only when
    /// [`IntentRecord::ends_with`] holds at `now_micros`, checked inside the transaction, so
    /// racing callers and instances end it once. The ended record; `None` when there is no
    /// such intent or it does not end so (already ended, not due). Durable when it returns.
    /// Everything written with an end (other rows of the same transaction) is written here.
    async fn end_intent(
        &self,
        scope: Scope<'_>,
        id: &str,
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>>;

    /// Up to `limit` intents still stored live whose end is due at `now_micros` (past
    /// `expiresAt`, or a used-up limit whose end a crash interrupted): what the finalizer
    /// ends.
    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>>;

    /// Removes what the store keeps of erased credential keys beyond their deletion, where
    /// it has such a thing (PostgreSQL: `VACUUM` of `intent_keys`); the finalizer calls it
    /// every [`PURGE_EVERY`].
    async fn purge_erased_keys(&self) -> StoreResult<()> {
        Ok(())
    }

    /// MACs the recorded audit head again with the store's first head key (a master-key
    /// rotation's last step), once its MAC verifies under one of the keys; whether it changed
    /// it (no head, or MACed by that key already: no).
    fn remac_audit_head(&self) -> StoreResult<bool>;
    /// Stores a passkey: a new one (`audit` given) with its audit entry in one transaction,
    /// unless its id is taken; or (`audit` none) in place of the stored one, only while that
    /// exists (a use: its counter and last use). `false` when nothing was stored. Durable
    /// when it returns.
    async fn put_passkey(
        &self,
        passkey: &PasskeyRecord,
        audit: Option<AuditEvent>,
    ) -> StoreResult<bool>;

    /// The scope's passkeys, oldest first.
    async fn list_passkeys(&self, scope: Scope<'_>) -> StoreResult<Vec<PasskeyRecord>>;

    /// Removes a passkey and writes the audit entry in the same transaction; `false` when the
    /// scope has no such id. Durable when it returns.
    async fn delete_passkey(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool>;

    /// Stores the state of a WebAuthn ceremony of the scope under `key`, in place of any
    /// stored there (and drops the scope's states expired at `now_micros`). Durable when it returns.
    async fn put_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        state: &WebauthnStateRecord,
        now_micros: i64,
    ) -> StoreResult<()>;

    /// Takes the state stored under `key`, once: it is removed, and `None` when there is none
    /// or it expired at `now_micros`.
    async fn take_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<WebauthnStateRecord>>;

    /// One event of the project, by its sequence number.
    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>>;

    /// Turns up to `limit` fan-out markers into pending deliveries, one per endpoint of the
    /// event's project that [`deliveries::sends`] its type, each marker removed in the
    /// transaction that writes its deliveries ([`deliveries`]); how many events it fanned
    /// out. Durable when it returns.
    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize>;

    /// Queues a fresh pending delivery of event `seq` to each of `endpoints`, due at
    /// `now_micros` (a redelivery). Durable when it returns.
    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<()>;

    /// Claims up to `limit` pending deliveries due at `now_micros`, none to an endpoint of
    /// `skip`: each one's next attempt moves to `lease_until_micros`, which the returned
    /// records carry. Several instances claim each delivery once; a claim not recorded by
    /// the end of its lease (or, on a store one process owns, after a restart) is due again.
    async fn claim_deliveries(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<DeliveryRecord>>;

    /// Stores an attempt's outcome (`delivery` as it is now) if the claim that leased it
    /// until `claimed_until_micros` still holds; whether it did. Durable when it returns.
    async fn record_delivery(
        &self,
        delivery: &DeliveryRecord,
        claimed_until_micros: i64,
    ) -> StoreResult<bool>;

    /// The deliveries of one event, oldest first.
    async fn list_deliveries(&self, project: &str, seq: u64) -> StoreResult<Vec<DeliveryRecord>>;

    /// How many deliveries are pending (claimed ones included).
    async fn deliveries_pending(&self) -> StoreResult<u64>;
}
