//! A [`Store`] wrapper that fails on demand, for tests of storage faults (disk full, I/O
//! error): `fail_writes_after(n)` lets the next `n` writes through and fails every write
//! after them with [`StoreError::Unavailable`] until [`FaultyStore::heal`]; `fail_reads`
//! fails reads too. It implements each of the store's traits over the inner store's. A failed write never reaches the inner store, like a write refused by a
//! full disk.

use super::{
    AuditEntry, AuditEvent, AuditHead, AuditStore, BrowserSessionRecord, BrowserSessionStore,
    CardTokenRecord, CardTokenStore, DeliveryRecord, DueEnd, EventQuery, EventRecord, EventStore,
    IdempotencyStore, IdempotentRecord, Inserted, IntentEnd, IntentRecord, IntentStatus,
    IntentStore, KeyringStore, Page, PasskeyRecord, PasskeyStore, PaymentMethodRecord,
    PaymentMethodStore, Prunable, Pruned, Refresh, RetentionStore, Scope, Store, StoreError,
    StoreHealth, StoreResult, StoreStats, TokenTake, UseOutcome, VerificationAttempt,
    WebauthnStateRecord, WebhookEndpointRecord, WebhookStore,
};
use crate::store::rate_limits::{RateLimitStore, Taken};
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

/// See the module documentation.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    /// Writes still allowed; negative: no fault armed.
    writes_left: AtomicI64,
    reads_fail: AtomicBool,
}

impl std::fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultyStore")
    }
}

fn injected() -> StoreError {
    StoreError::Unavailable("injected fault: no space left on device".into())
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            writes_left: AtomicI64::new(-1),
            reads_fail: AtomicBool::new(false),
        }
    }

    /// Lets `n` more writes through, then fails every write.
    pub fn fail_writes_after(&self, n: u32) {
        self.writes_left.store(i64::from(n), Ordering::SeqCst);
    }

    /// Fails reads as well (until [`Self::heal`]).
    pub fn fail_reads(&self) {
        self.reads_fail.store(true, Ordering::SeqCst);
    }

    /// Clears every fault.
    pub fn heal(&self) {
        self.writes_left.store(-1, Ordering::SeqCst);
        self.reads_fail.store(false, Ordering::SeqCst);
    }

    fn write(&self) -> StoreResult<()> {
        let r = self
            .writes_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                n if n < 0 => Some(n),
                0 => None,
                n => Some(n - 1),
            });
        r.map(|_| ()).map_err(|_| injected())
    }

    fn read(&self) -> StoreResult<()> {
        if self.reads_fail.load(Ordering::SeqCst) {
            Err(injected())
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl PaymentMethodStore for FaultyStore {
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
        refresh: Refresh<'_>,
    ) -> StoreResult<Inserted> {
        self.write()?;
        self.inner.insert_payment_method(pm, audit, refresh).await
    }

    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<Arc<PaymentMethodRecord>>> {
        self.read()?;
        self.inner.get_payment_method(scope, id).await
    }

    async fn list_payment_methods(
        &self,
        scope: Scope<'_>,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Page<PaymentMethodRecord>> {
        self.read()?;
        self.inner.list_payment_methods(scope, offset, limit).await
    }

    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner.delete_payment_method(scope, id, audit).await
    }

    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool> {
        self.read()?;
        self.inner.payment_method_verified(scope, pm_id).await
    }
}

#[async_trait]
impl IntentStore for FaultyStore {
    async fn insert_intent(&self, intent: &IntentRecord, audit: AuditEvent) -> StoreResult<bool> {
        self.write()?;
        self.inner.insert_intent(intent, audit).await
    }

    async fn get_intent(&self, scope: Scope<'_>, id: &str) -> StoreResult<Option<IntentRecord>> {
        self.read()?;
        self.inner.get_intent(scope, id).await
    }

    async fn list_intents(&self, scope: Scope<'_>) -> StoreResult<Vec<IntentRecord>> {
        self.read()?;
        self.inner.list_intents(scope).await
    }

    async fn set_intent_status(
        &self,
        scope: Scope<'_>,
        id: &str,
        status: IntentStatus,
    ) -> StoreResult<Option<IntentRecord>> {
        self.write()?;
        self.inner.set_intent_status(scope, id, status).await
    }

    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>> {
        self.write()?;
        self.inner
            .record_verification(scope, id, attempt, audit)
            .await
    }

    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome> {
        self.write()?;
        self.inner.record_use(scope, id, now).await
    }

    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: crate::domain::issuer::CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>> {
        self.read()?;
        self.inner
            .newest_active_intent(scope, pm_id, kind, now)
            .await
    }

    async fn end_intent(
        &self,
        scope: Scope<'_>,
        id: &str,
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>> {
        self.write()?;
        self.inner.end_intent(scope, id, end, now_micros).await
    }

    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>> {
        self.read()?;
        self.inner.intents_due_to_end(now_micros, limit).await
    }

    async fn purge_erased_keys(&self) -> StoreResult<()> {
        self.write()?;
        self.inner.purge_erased_keys().await
    }
}

#[async_trait]
impl IdempotencyStore for FaultyStore {
    async fn get_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<IdempotentRecord>> {
        self.read()?;
        self.inner.get_idempotent(scope, key, now_micros).await
    }

    async fn put_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        record: &IdempotentRecord,
    ) -> StoreResult<()> {
        self.write()?;
        self.inner.put_idempotent(scope, key, record).await
    }

    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize> {
        self.write()?;
        self.inner.sweep_idempotent(now_micros)
    }
}

impl KeyringStore for FaultyStore {
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read()?;
        self.inner.load_keyring(project)
    }

    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>> {
        self.write()?;
        self.inner.create_keyring(project, keyring)
    }

    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool> {
        self.write()?;
        self.inner.swap_keyring(project, expected, keyring)
    }

    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read()?;
        self.inner.load_client_keys(project)
    }

    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner.swap_client_keys(project, expected, keyset)
    }
}

#[async_trait]
impl CardTokenStore for FaultyStore {
    async fn insert_card_token(
        &self,
        scope: Scope<'_>,
        token: &CardTokenRecord,
    ) -> StoreResult<()> {
        self.write()?;
        self.inner.insert_card_token(scope, token).await
    }

    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake> {
        self.write()?;
        self.inner.take_card_token(scope, id, now_micros).await
    }
}

#[async_trait]
impl WebhookStore for FaultyStore {
    async fn put_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        replace: bool,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner
            .put_webhook_endpoint(endpoint, replace, audit)
            .await
    }

    async fn get_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        self.read()?;
        self.inner.get_webhook_endpoint(project, id).await
    }

    async fn list_webhook_endpoints(
        &self,
        project: &str,
    ) -> StoreResult<Vec<WebhookEndpointRecord>> {
        self.read()?;
        self.inner.list_webhook_endpoints(project).await
    }

    async fn delete_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner.delete_webhook_endpoint(project, id, audit).await
    }

    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize> {
        self.write()?;
        self.inner.fan_out_events(now_micros, limit).await
    }

    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner
            .queue_deliveries(project, seq, endpoints, now_micros)
            .await
    }

    async fn claim_deliveries(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        self.write()?;
        self.inner
            .claim_deliveries(now_micros, lease_until_micros, skip, limit)
            .await
    }

    async fn record_delivery(
        &self,
        delivery: &DeliveryRecord,
        claimed_until_micros: i64,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner
            .record_delivery(delivery, claimed_until_micros)
            .await
    }

    async fn list_deliveries(&self, project: &str, seq: u64) -> StoreResult<Vec<DeliveryRecord>> {
        self.read()?;
        self.inner.list_deliveries(project, seq).await
    }

    async fn deliveries_pending(&self) -> StoreResult<u64> {
        self.read()?;
        self.inner.deliveries_pending().await
    }
}

#[async_trait]
impl PasskeyStore for FaultyStore {
    async fn put_passkey(
        &self,
        passkey: &PasskeyRecord,
        audit: Option<AuditEvent>,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner.put_passkey(passkey, audit).await
    }

    async fn list_passkeys(&self, scope: Scope<'_>) -> StoreResult<Vec<PasskeyRecord>> {
        self.read()?;
        self.inner.list_passkeys(scope).await
    }

    async fn delete_passkey(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner.delete_passkey(scope, id, audit).await
    }

    async fn put_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        state: &WebauthnStateRecord,
        now_micros: i64,
    ) -> StoreResult<()> {
        self.write()?;
        self.inner
            .put_webauthn_state(scope, key, state, now_micros)
            .await
    }

    async fn take_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<WebauthnStateRecord>> {
        self.write()?;
        self.inner.take_webauthn_state(scope, key, now_micros).await
    }
}

#[async_trait]
impl BrowserSessionStore for FaultyStore {
    async fn insert_browser_session(
        &self,
        session: &BrowserSessionRecord,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.write()?;
        self.inner.insert_browser_session(session, audit).await
    }

    async fn get_browser_session(&self, id: &str) -> StoreResult<Option<BrowserSessionRecord>> {
        self.read()?;
        self.inner.get_browser_session(id).await
    }

    async fn browser_session_by_stand_in(
        &self,
        stand_in_key: &str,
    ) -> StoreResult<Option<BrowserSessionRecord>> {
        self.read()?;
        self.inner.browser_session_by_stand_in(stand_in_key).await
    }

    async fn list_browser_sessions(
        &self,
        scope: Scope<'_>,
        intent_id: &str,
    ) -> StoreResult<Vec<BrowserSessionRecord>> {
        self.read()?;
        self.inner.list_browser_sessions(scope, intent_id).await
    }

    async fn change_browser_session(
        &self,
        id: &str,
        change: super::browser_sessions::SessionChange,
        now_micros: i64,
        audit: Option<AuditEvent>,
    ) -> StoreResult<Option<BrowserSessionRecord>> {
        self.write()?;
        self.inner
            .change_browser_session(id, change, now_micros, audit)
            .await
    }
}

#[async_trait]
impl RetentionStore for FaultyStore {
    async fn prune(&self, kind: Prunable, before_micros: i64, limit: usize) -> StoreResult<Pruned> {
        self.write()?;
        self.inner.prune(kind, before_micros, limit).await
    }
}

#[async_trait]
impl EventStore for FaultyStore {
    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>> {
        self.read()?;
        self.inner.list_events(query).await
    }

    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>> {
        self.read()?;
        self.inner.get_event(project, seq).await
    }
}

#[async_trait]
impl AuditStore for FaultyStore {
    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()> {
        self.write()?;
        self.inner.append_audit(audit).await
    }

    fn append_audit_nowait(&self, audit: AuditEvent) {
        if self.write().is_ok() {
            self.inner.append_audit_nowait(audit);
        }
    }

    fn count_audit(&self, audit: AuditEvent) {
        if self.write().is_ok() {
            self.inner.count_audit(audit);
        }
    }

    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>> {
        self.read()?;
        self.inner.audit_log()
    }

    fn audit_head(&self) -> StoreResult<Option<AuditHead>> {
        self.read()?;
        self.inner.audit_head()
    }

    fn remac_audit_head(&self) -> StoreResult<bool> {
        self.write()?;
        self.inner.remac_audit_head()
    }
}

#[async_trait]
impl StoreHealth for FaultyStore {
    async fn ready(&self) -> StoreResult<()> {
        self.inner.ready().await
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }
}

#[async_trait]
impl RateLimitStore for FaultyStore {
    fn shares_rate_limits(&self) -> bool {
        self.inner.shares_rate_limits()
    }

    async fn take_shared(&self, taken: &[Taken]) -> StoreResult<Vec<f64>> {
        self.write()?;
        self.inner.take_shared(taken).await
    }
}
