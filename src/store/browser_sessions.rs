//! [`BrowserSessionStore`]: browser checkout's sessions ([`BrowserSessionRecord`]): a
//! purchase intent's stand-in card values and the proxy credentials a browser uses them
//! through, from their creation to their end.
//!
//! A session is found by its id alone ([`BrowserSessionStore::get_browser_session`]: the
//! id is the proxy's user name, and ids are unique across projects), and, while `active`,
//! by the keyed hash of its stand-in number
//! ([`BrowserSessionStore::browser_session_by_stand_in`]). No two `active` sessions hold
//! the same stand-in number: an insert whose number is held is refused, and the caller
//! draws another. The stand-ins are stored sealed, the password only as a hash.
//!
//! A session is live while it is `active` and before `expiresAt`
//! ([`BrowserSessionRecord::live_at`]); an end (a delete, its intent's expiry at the
//! finalizer, any other end of the session or its intent seen by a use or a read) is stored
//! by [`BrowserSessionStore::change_browser_session`] once, with its `browser_session.ended`
//! event, and frees the stand-in number.

use super::{AuditEvent, Scope, Sealed, StoreResult};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Browser sessions.
#[async_trait]
pub trait BrowserSessionStore: Send + Sync + 'static {
    /// Stores a new session with its `browser_session.created` event and its audit entry in
    /// one transaction, unless its id is taken or an `active` session holds its
    /// `stand_in_key` (`false` then: nothing is stored). Durable when it returns.
    async fn insert_browser_session(
        &self,
        session: &BrowserSessionRecord,
        audit: AuditEvent,
    ) -> StoreResult<bool>;

    /// The session `id`, whatever its project: the caller checks the scope.
    async fn get_browser_session(&self, id: &str) -> StoreResult<Option<BrowserSessionRecord>>;

    /// The `active` session whose stand-in number has the keyed hash `stand_in_key`.
    async fn browser_session_by_stand_in(
        &self,
        stand_in_key: &str,
    ) -> StoreResult<Option<BrowserSessionRecord>>;

    /// The sessions of the scope's intent `intent_id`, oldest first.
    async fn list_browser_sessions(
        &self,
        scope: Scope<'_>,
        intent_id: &str,
    ) -> StoreResult<Vec<BrowserSessionRecord>>;

    /// Makes `change` to the `active` session `id` at `now_micros`, with its event
    /// ([`SessionChange::event`]) and `audit` (if any) in one transaction; an end also frees
    /// its stand-in number. The changed record; `None` when there is no such session or it
    /// has ended. Durable when it returns.
    async fn change_browser_session(
        &self,
        id: &str,
        change: SessionChange,
        now_micros: i64,
        audit: Option<AuditEvent>,
    ) -> StoreResult<Option<BrowserSessionRecord>>;
}

/// A change of an `active` session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChange {
    /// A request that carried the intent's real values (the intent's own use is counted by
    /// [`IntentStore::record_use`](super::IntentStore::record_use)): `uses` + 1.
    Use,
    /// The end: `ended`, for good.
    End,
}

impl SessionChange {
    /// The event it writes.
    pub fn event(self) -> &'static str {
        match self {
            SessionChange::Use => super::events::BS_USED,
            SessionChange::End => super::events::BS_ENDED,
        }
    }

    /// `session` after the change at `now_micros`.
    pub fn apply(self, session: &BrowserSessionRecord, now_micros: i64) -> BrowserSessionRecord {
        match self {
            SessionChange::Use => BrowserSessionRecord {
                uses: session.uses.saturating_add(1),
                ..session.clone()
            },
            SessionChange::End => session.ended(now_micros),
        }
    }
}

/// A browser session's status.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[schema(description = "`active` until the session is deleted, expires, or its intent ends.")]
pub enum BrowserSessionStatus {
    Active,
    Ended,
}

impl BrowserSessionStatus {
    /// The API name (and the PostgreSQL column's value).
    pub fn as_str(self) -> &'static str {
        match self {
            BrowserSessionStatus::Active => "active",
            BrowserSessionStatus::Ended => "ended",
        }
    }
}

/// A stored browser session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrowserSessionRecord {
    /// `bs_…`; also the proxy's user name.
    pub id: String,
    pub project: String,
    pub entity: String,
    pub intent_id: String,
    pub status: BrowserSessionStatus,
    /// Host patterns (names or `*.` one-label wildcards) whose requests get the real values.
    pub allowed_hosts: Vec<String>,
    pub created_micros: i64,
    pub expires_micros: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_micros: Option<i64>,
    /// Requests that carried the real values.
    pub uses: u32,
    /// The stand-in number and CVC (JSON), sealed under `bs/{project}/{id}/stand-ins`.
    pub stand_ins_sealed: Sealed,
    /// The keyed hash of the stand-in number, which finds the session while it is active.
    pub stand_in_key: String,
    /// The proxy password's hash (hex SHA-256 of a 256-bit random password).
    pub password_hash: String,
}

impl BrowserSessionRecord {
    /// Whether the proxy may serve the session at `now_micros`: `active` and not expired.
    pub fn live_at(&self, now_micros: i64) -> bool {
        self.status == BrowserSessionStatus::Active && now_micros < self.expires_micros
    }

    /// The scope it belongs to.
    pub fn scope(&self) -> Scope<'_> {
        Scope {
            project: &self.project,
            entity: &self.entity,
        }
    }

    /// The record without its sealed stand-ins, index key and password hash (an event
    /// keeps it).
    pub fn without_secrets(&self) -> Self {
        Self {
            stand_ins_sealed: Sealed::from_stored(""),
            stand_in_key: String::new(),
            password_hash: String::new(),
            ..self.clone()
        }
    }

    /// The record ended at `now_micros`.
    pub fn ended(&self, now_micros: i64) -> Self {
        Self {
            status: BrowserSessionStatus::Ended,
            ended_micros: Some(now_micros),
            ..self.clone()
        }
    }
}
