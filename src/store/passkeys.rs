//! [`PasskeyStore`]: an entity's passkeys ([`PasskeyRecord`]) and the WebAuthn ceremonies
//! under way ([`WebauthnStateRecord`], taken once and refused once expired:
//! [`WebauthnStateRecord::live_at`]).

use super::{AuditEvent, PasskeyRecord, Scope, StoreResult, WebauthnStateRecord};
use async_trait::async_trait;

/// Passkeys and WebAuthn ceremony states.
#[async_trait]
pub trait PasskeyStore: Send + Sync + 'static {
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
}

impl WebauthnStateRecord {
    /// Whether the ceremony may still go on at `now_micros` (not expired).
    pub fn live_at(&self, now_micros: i64) -> bool {
        self.expires_micros > now_micros
    }
}
