//! The records paycred stores, as every backend reads and writes them. Card numbers,
//! cvcs and credentials appear only sealed ([`Sealed`](super::Sealed)).

use serde::{Deserialize, Serialize};

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
    pub number_sealed: crate::store::Sealed,
    /// The cvc, sealed under a short-lived cvc key (unreadable once that key is destroyed).
    pub cvc_sealed: Option<crate::store::Sealed>,
}

/// The token-vault entry of a card.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub fingerprint: String,
    pub created_micros: i64,
    pub masked_data: String,
}

/// The stored status of a purchase intent. `expired` and `canceled` are stored by the
/// intent's end ([`IntentStore::end_intent`](super::IntentStore::end_intent)); between
/// `expiresAt` and the finalizer's pass, `expired` is computed from the clock when the intent
/// is read ([`IntentRecord::status_at`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[schema(
    description = "The purchase intent's status: `active`, `verify`, `unavailable`, or \
    the ends `expired` (past expiresAt or its usage limit) and `canceled` (payment method deleted)."
)]
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
    pub credential_type: crate::domain::issuer::CredentialType,
    pub status: IntentStatus,
    pub created_micros: i64,
    pub expires_micros: i64,
    pub mandates: crate::domain::mandate::Mandates,
    /// The issued credential (JSON), sealed under `pi/{project}/{id}/credential`.
    pub credential_sealed: Option<crate::store::Sealed>,
    /// Approved uses so far.
    pub uses: u32,
    /// Wrong verification codes so far.
    pub failed_verifications: u32,
    /// Where the end user asked for the one-time code (the reference client's `SELECT_OTP`),
    /// kept here so that any instance serving the next call knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otp_method: Option<OtpMethod>,
    /// The key that opens `credential_sealed`: a random key of this intent alone, wrapped
    /// under the project's data key. `None` for a credential sealed under the data key itself
    /// (issued before intents had keys of their own), and once the intent ended. Never part
    /// of the stored record: each backend keeps it apart, where the end destroys it (sled: a
    /// slot of the key file, [`key_slot`](Self::key_slot); PostgreSQL: a row of
    /// `intent_keys`).
    #[serde(skip)]
    pub credential_key: Option<crate::store::Sealed>,
    /// sled: the slot of the key file that holds `credential_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_slot: Option<u32>,
    /// When the intent ended ([`IntentRecord::finish`]; an `unavailable` one at its
    /// creation): the retention of ended intents counts from it (`store::retention`). `None`
    /// while it is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_micros: Option<i64>,
    /// sled: uses reserved ahead and not taken yet ([`crate::store::sled::ahead`]); always
    /// empty on PostgreSQL.
    #[serde(
        default,
        skip_serializing_if = "crate::store::sled::ahead::Ahead::is_empty"
    )]
    pub ahead: crate::store::sled::ahead::Ahead,
}

/// Where a one-time code is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtpMethod {
    Sms,
    Email,
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

impl IntentRecord {
    /// Whether `end` ends this record at `now_micros`
    /// ([`IntentStore::end_intent`](super::IntentStore::end_intent) applies it only then, so
    /// that racing callers and instances end an intent once):
    /// expiry ends an `active` or `verify` intent past `expiresAt`; a used-up limit ends an
    /// `active` one whose uses reached it; cancelation ends any intent not canceled yet.
    pub fn ends_with(&self, end: IntentEnd, now_micros: i64) -> bool {
        match end {
            IntentEnd::Expired => self.is_live_stored() && now_micros >= self.expires_micros,
            IntentEnd::UsedUp => {
                self.status == IntentStatus::Active
                    && self.mandates.usage_limit.is_some_and(|l| self.uses >= l)
            }
            IntentEnd::Canceled => self.status != IntentStatus::Canceled,
        }
    }

    /// The end this intent, stored live, has come to at `now_micros` (what the finalizer
    /// applies): expiry first, then a used-up limit.
    pub fn due_end(&self, now_micros: i64) -> Option<IntentEnd> {
        [IntentEnd::Expired, IntentEnd::UsedUp]
            .into_iter()
            .find(|end| self.ends_with(*end, now_micros))
    }

    /// Stored `active` or `verify`: the statuses whose credential can still be shown.
    pub fn is_live_stored(&self) -> bool {
        matches!(self.status, IntentStatus::Active | IntentStatus::Verify)
    }

    /// Applies `end` at `at_micros`: the final status and the time of the end, and the issued
    /// credential dropped from the record. The metadata (mandates, times, uses, type) stays;
    /// uses reserved ahead are dropped.
    pub fn finish(&mut self, end: IntentEnd, at_micros: i64) {
        self.status = end.status();
        self.ended_micros = Some(at_micros);
        self.credential_sealed = None;
        self.credential_key = None;
        self.key_slot = None;
        self.ahead = Default::default();
    }

    /// When this record's retention as an ended intent starts: the time of its end, or its
    /// creation for one stored `unavailable` (final from the start); `None` while it is live.
    pub fn ended_at(&self) -> Option<i64> {
        match self.status {
            IntentStatus::Active | IntentStatus::Verify => None,
            IntentStatus::Unavailable => Some(self.ended_micros.unwrap_or(self.created_micros)),
            IntentStatus::Expired | IntentStatus::Canceled => self.ended_micros,
        }
    }
}

/// How an intent ends for good ([`IntentStore::end_intent`](super::IntentStore::end_intent)).
/// `unavailable` is final too, but it is stored so from the start, holds no credential and
/// no end moves it (only the cancelation of its payment method does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntentEnd {
    /// Past its `expiresAt` (the finalizer finds it): status `expired`.
    Expired,
    /// Its usage limit is used up, at the use that reached it: status `expired`.
    #[serde(rename = "exhausted")]
    UsedUp,
    /// Its payment method was deleted: status `canceled`.
    Canceled,
}

impl IntentEnd {
    /// The status the intent is stored with from then on.
    pub fn status(self) -> IntentStatus {
        match self {
            IntentEnd::Expired | IntentEnd::UsedUp => IntentStatus::Expired,
            IntentEnd::Canceled => IntentStatus::Canceled,
        }
    }

    /// Its name: `expired`, `exhausted` or `canceled`.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentEnd::Expired => "expired",
            IntentEnd::UsedUp => "exhausted",
            IntentEnd::Canceled => "canceled",
        }
    }
}

/// An intent whose end is due, as
/// [`IntentStore::intents_due_to_end`](super::IntentStore::intents_due_to_end) finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueEnd {
    pub project: String,
    pub entity: String,
    pub id: String,
    pub end: IntentEnd,
}

/// What [`IntentStore::record_use`](super::IntentStore::record_use) did.
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

/// One verification attempt, as
/// [`IntentStore::record_verification`](super::IntentStore::record_verification) applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerificationAttempt {
    /// The code was right: the intent turns `active` and its payment method counts as verified.
    Passed,
    /// A wrong code: counted.
    Failed,
    /// The end user chose where the code goes (`None`: the choice is cleared); nothing else
    /// changes.
    OtpMethod(Option<OtpMethod>),
}

/// What an insert found.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// The record was stored.
    Created,
    /// The entity already has this card (same fingerprint): the existing record, as
    /// [`Refresh`](super::Refresh) changed it.
    Existing(Box<PaymentMethodRecord>),
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: usize,
}

/// Counters that show how the store works (for `/metrics`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    pub durable_writes: u64,
    pub flushes: u64,
    /// Reads answered from the store's cache of records ([`super::pm_cache`]).
    pub cache_hits: u64,
    /// Changes other instances announced that this one heard (PostgreSQL's NOTIFY).
    pub changes_heard: u64,
}

/// A card stored in the token vault (`POST /projects/:p/tokens`). Number and cvc are sealed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CardTokenRecord {
    pub id: String,
    pub fingerprint: String,
    pub masked_data: String,
    pub created_micros: i64,
    /// Unused tokens stop working at this time.
    pub expires_micros: i64,
    pub expiration_month: String,
    pub expiration_year: String,
    /// The number under the project's data key; `None` once consumed.
    pub number_sealed: Option<crate::store::Sealed>,
    /// The cvc under a short-lived cvc key; `None` once consumed.
    pub cvc_sealed: Option<crate::store::Sealed>,
    /// Set when a payment method was created from it.
    pub used: bool,
}

/// What consuming a token found.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenTake {
    /// The token, now marked used (the returned copy still carries the sealed data).
    Taken(Box<CardTokenRecord>),
    /// No such token in this scope.
    Unknown,
    /// Used before.
    Used,
    /// Past its expiry.
    Expired,
}

/// The first response to an idempotent request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdempotentRecord {
    /// The first request's method, path and body under a keyed hash (`k1:` and hex: see
    /// `edge::idempotency::fingerprint`); a plain SHA-256 (hex) in records of earlier
    /// releases.
    pub fingerprint: String,
    /// HTTP status of the first response.
    pub status: u16,
    /// Its body, sealed by the vault; `None` for an empty body, and for an answer that showed
    /// a purchase intent (see `intent_id`).
    pub body_sealed: Option<crate::store::Sealed>,
    /// The purchase intent the first answer showed. A replay shows that intent as it is then,
    /// so its credential is never kept here. `None` for other answers and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
    /// The role of the first request's token (`private` or `public`): a request of the other
    /// role with the same key is a different request. `None` in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub created_micros: i64,
    pub expires_micros: i64,
}

/// A webhook endpoint: where the project's events are sent (`api::webhook_endpoints`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebhookEndpointRecord {
    pub id: String,
    pub project: String,
    pub url: String,
    /// The event types sent to it; `*` alone: every type.
    pub enabled_events: Vec<String>,
    pub enabled: bool,
    pub created_micros: i64,
    /// Its signing secrets, newest first, sealed by the vault. The newest signs always; an
    /// older one until its `expires_micros` (the overlap after a rotation).
    pub secrets: Vec<WebhookSecret>,
}

/// One signing secret of a webhook endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebhookSecret {
    /// Which secret of the endpoint (1, 2, …; part of where it is sealed).
    pub n: u32,
    /// The secret's bytes, sealed under the project's data key.
    pub sealed: crate::store::Sealed,
    /// When an older secret stops signing; `None` for the newest.
    pub expires_micros: Option<i64>,
}

/// A passkey of an entity (`api::passkeys`): the WebAuthn credential as the WebAuthn library
/// serialises it (credential id, public key, signature counter, flags). Nothing in it is
/// secret (a public key), so it is stored as it is, not sealed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PasskeyRecord {
    /// `pk_` and 32 hex digits.
    pub id: String,
    pub project: String,
    pub entity: String,
    pub created_micros: i64,
    /// The last assertion that verified an intent with it.
    pub last_used_micros: Option<i64>,
    /// A name the caller gave it.
    pub name: Option<String>,
    /// The credential (its counter updated after each use).
    pub credential: serde_json::Value,
}

/// A WebAuthn ceremony under way (a passkey registration, or the assertion an intent waits
/// for): the library's state, taken once, and refused after `expires_micros`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebauthnStateRecord {
    pub expires_micros: i64,
    pub state: serde_json::Value,
}
