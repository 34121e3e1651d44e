//! [`IntentStore`]: purchase intents ([`IntentRecord`]): their verification, their uses,
//! and their ends ([`IntentEnd`]); and the rules both backends apply to them: the refusal of
//! a use ([`use_refused`]), a verification attempt ([`IntentRecord::apply_verification`]),
//! the intent a proxy request takes ([`IntentRecord::is_active_of`]).
//!
//! A used-up intent ends inside the transaction of the use that reaches its limit, on both
//! backends: the counted use, its `purchase_intent.used` event, the final status, the
//! credential and its key destroyed and the `purchase_intent.exhausted` event commit
//! together or not at all. So no intent is ever stored used up but still `active` (with a
//! credential that can still be opened from the store's files), nothing is left for the
//! finalizer to finish after a crash, and the end costs no second round trip to the
//! database. [`IntentStore::intents_due_to_end`] still finds an `active` record whose limit
//! is used up, should the store hold one all the same (written by other means than
//! [`IntentStore::record_use`]): the finalizer ends it.

use super::{
    AuditEvent, DueEnd, IntentEnd, IntentRecord, IntentStatus, Scope, StoreResult, UseOutcome,
    VerificationAttempt,
};
use crate::domain::issuer::CredentialType;
use async_trait::async_trait;

/// How often the finalizer asks the store to purge erased credential keys
/// ([`IntentStore::purge_erased_keys`]).
pub const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Purchase intents.
#[async_trait]
pub trait IntentStore: Send + Sync + 'static {
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
    /// `verify` atomically ([`IntentRecord::apply_verification`]; a passed one also marks the
    /// payment method verified and writes `audit`); the updated record.
    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>>;

    /// Counts one use of an intent, atomically: only an `active`, unexpired intent below its
    /// usage limit is counted ([`use_refused`]). The use that reaches the limit ends the
    /// intent ([`IntentEnd::UsedUp`]) in the same transaction (see the module
    /// documentation). When it returns the use cannot be lost: it is durable, or (sled) it
    /// took one of the uses reserved ahead in a durable write, which a start after a crash
    /// counts as used ([`crate::store::sled::ahead`]).
    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome>;

    /// The newest intent of `kind` for the payment method that is `active` at `now`
    /// ([`IntentRecord::is_active_of`]).
    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>>;

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
    /// `expiresAt`, or an `active` one whose usage limit is used up: a record no use ended):
    /// what the finalizer ends.
    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>>;

    /// Removes what the store keeps of erased credential keys beyond their deletion, where
    /// it has such a thing (PostgreSQL: `VACUUM` of `intent_keys`); the finalizer calls it
    /// every [`PURGE_EVERY`].
    async fn purge_erased_keys(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// Why a use of an intent is refused, from its stored status, `expiresAt`, usage limit and
/// uses at `now_micros`; `None` when it may be counted. An intent ended by its usage limit
/// refuses as [`UseOutcome::UsageLimitReached`], one ended by time as [`UseOutcome::Expired`].
pub fn use_refused(
    status: IntentStatus,
    expires_micros: i64,
    usage_limit: Option<u32>,
    uses: u32,
    now_micros: i64,
) -> Option<UseOutcome> {
    let used_up = usage_limit.is_some_and(|l| uses >= l);
    match status {
        IntentStatus::Active | IntentStatus::Expired => {}
        _ => return Some(UseOutcome::NotActive),
    }
    if status == IntentStatus::Expired && used_up {
        return Some(UseOutcome::UsageLimitReached);
    }
    if status == IntentStatus::Expired || now_micros >= expires_micros {
        return Some(UseOutcome::Expired);
    }
    used_up.then_some(UseOutcome::UsageLimitReached)
}

impl IntentRecord {
    /// Applies one verification attempt to this intent if it is in `verify`: a passed one
    /// turns it `active`, a failed one is counted, a choice of where the code goes is kept.
    /// Whether it passed; `None` when the intent is not in `verify` (then nothing changes).
    pub fn apply_verification(&mut self, attempt: VerificationAttempt) -> Option<bool> {
        if self.status != IntentStatus::Verify {
            return None;
        }
        match attempt {
            VerificationAttempt::Passed => self.status = IntentStatus::Active,
            VerificationAttempt::Failed => {
                self.failed_verifications = self.failed_verifications.saturating_add(1);
            }
            VerificationAttempt::OtpMethod(method) => self.otp_method = method,
        }
        Some(attempt == VerificationAttempt::Passed)
    }

    /// Whether this is an intent of `kind` that is `active` at `now_micros`.
    pub fn is_active_of(&self, kind: CredentialType, now_micros: i64) -> bool {
        self.credential_type == kind && self.status_at(now_micros) == IntentStatus::Active
    }
}
