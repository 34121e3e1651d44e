//! Events: what changed, written by the store in the same transaction as the change, so a
//! change and its events are durable together or not at all. Each holds the changed record
//! as it was right after the change, without its secrets (no sealed card number, cvc or
//! credential); the API renders it as it answers that object (`api::events`).
//!
//! | type                                | written by                                      |
//! |-------------------------------------|-------------------------------------------------|
//! | `payment_method.created`            | a create that stored a new card                 |
//! | `payment_method.deleted`            | a delete                                        |
//! | `purchase_intent.created`           | every intent create                             |
//! | `purchase_intent.verification_required` | a create whose intent is in `verify`        |
//! | `purchase_intent.unavailable`       | a create whose issuer could not issue           |
//! | `purchase_intent.activated`         | a verification that passed                      |
//! | `purchase_intent.used`              | every counted use                               |
//! | `purchase_intent.exhausted`         | the end at the use that reaches the usage limit |
//! | `purchase_intent.canceled`          | the end by the delete of its payment method, or a cancel (MCP) |
//! | `purchase_intent.expired`           | the end past `expiresAt` (the finalizer)        |
//! | `browser_session.created`           | a browser session's create                      |
//! | `browser_session.used`              | a proxied request that carried the real values  |
//! | `browser_session.ended`             | a session's end (delete, expiry, its intent's end) |
//!
//! The three ends are written where every end is stored (`IntentRecord::finish`, in each
//! backend's `intents`), in the end's transaction.
//!
//! Event ids are `evt_` and the event's sequence number (16 hex digits): a later event of a
//! store has a larger number, and lists go by it, newest first. [`EventStore`] reads them.

use super::{
    BrowserSessionRecord, IntentEnd, IntentRecord, IntentStatus, PaymentMethodRecord, Sealed,
    StoreResult,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Events (written by the changes of the other traits, read here).
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// The events a query asks for, newest first (every change writes its own in its
    /// transaction).
    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>>;

    /// One event of the project, by its sequence number.
    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>>;
}

/// Every event type, in the order of the table above.
pub const TYPES: &[&str] = &[
    PM_CREATED,
    PM_DELETED,
    PI_CREATED,
    PI_VERIFICATION_REQUIRED,
    PI_UNAVAILABLE,
    PI_ACTIVATED,
    PI_USED,
    PI_EXHAUSTED,
    PI_CANCELED,
    PI_EXPIRED,
    BS_CREATED,
    BS_USED,
    BS_ENDED,
];

pub const PM_CREATED: &str = "payment_method.created";
pub const PM_DELETED: &str = "payment_method.deleted";
pub const PI_CREATED: &str = "purchase_intent.created";
pub const PI_VERIFICATION_REQUIRED: &str = "purchase_intent.verification_required";
pub const PI_UNAVAILABLE: &str = "purchase_intent.unavailable";
pub const PI_ACTIVATED: &str = "purchase_intent.activated";
pub const PI_USED: &str = "purchase_intent.used";
pub const PI_EXHAUSTED: &str = "purchase_intent.exhausted";
pub const PI_CANCELED: &str = "purchase_intent.canceled";
pub const PI_EXPIRED: &str = "purchase_intent.expired";
pub const BS_CREATED: &str = "browser_session.created";
pub const BS_USED: &str = "browser_session.used";
pub const BS_ENDED: &str = "browser_session.ended";

/// The record an event is about, right after the change, without secrets.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum EventObject {
    PaymentMethod(Box<PaymentMethodRecord>),
    PurchaseIntent(Box<IntentRecord>),
    BrowserSession(Box<BrowserSessionRecord>),
}

/// An event before the store numbered it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NewEvent {
    pub project: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub created_micros: i64,
    pub object: EventObject,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// Its place in the store's order (the id's number).
    pub seq: u64,
    pub event: NewEvent,
}

impl EventRecord {
    /// `evt_` and the sequence number.
    pub fn id(&self) -> String {
        id_of(self.seq)
    }
}

/// The id of the event numbered `seq`.
pub fn id_of(seq: u64) -> String {
    format!("evt_{seq:016x}")
}

/// The number of the event `id`, if it is an event id.
pub fn seq_of(id: &str) -> Option<u64> {
    let hex = id.strip_prefix("evt_").filter(|h| h.len() == 16)?;
    u64::from_str_radix(hex, 16).ok()
}

/// Which events a list asks for: newest first, older than `before` (a sequence number),
/// of one type or all, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct EventQuery<'a> {
    pub project: &'a str,
    pub before: Option<u64>,
    pub kind: Option<&'a str>,
    pub limit: usize,
}

impl EventQuery<'_> {
    /// Whether `event` (numbered `seq`) is one the query asks for.
    pub fn matches(&self, seq: u64, event: &NewEvent) -> bool {
        self.before.is_none_or(|b| seq < b) && self.kind.is_none_or(|k| event.kind == k)
    }
}

impl PaymentMethodRecord {
    /// The record without the sealed number and cvc (an event keeps it).
    pub fn without_secrets(&self) -> Self {
        let mut r = self.clone();
        r.card.number_sealed = Sealed::from_stored("");
        r.card.cvc_sealed = None;
        r.token = None;
        r
    }
}

impl IntentRecord {
    /// The record without the sealed credential (an event keeps it).
    pub fn without_secrets(&self) -> Self {
        Self {
            credential_sealed: None,
            ..self.clone()
        }
    }
}

fn pm_event(kind: &str, pm: &PaymentMethodRecord, at_micros: i64) -> NewEvent {
    NewEvent {
        project: pm.project.clone(),
        kind: kind.to_string(),
        created_micros: at_micros,
        object: EventObject::PaymentMethod(Box::new(pm.without_secrets())),
    }
}

fn intent_event(kind: &str, intent: &IntentRecord, at_micros: i64) -> NewEvent {
    NewEvent {
        project: intent.project.clone(),
        kind: kind.to_string(),
        created_micros: at_micros,
        object: EventObject::PurchaseIntent(Box::new(intent.without_secrets())),
    }
}

/// `payment_method.created`.
pub fn pm_created(pm: &PaymentMethodRecord) -> NewEvent {
    pm_event(PM_CREATED, pm, pm.created_micros)
}

/// `payment_method.deleted`.
pub fn pm_deleted(pm: &PaymentMethodRecord, at_micros: i64) -> NewEvent {
    pm_event(PM_DELETED, pm, at_micros)
}

/// The events of a new intent: `created`, then `verification_required` or `unavailable`
/// by its status.
pub fn intent_created(intent: &IntentRecord) -> Vec<NewEvent> {
    let at = intent.created_micros;
    let mut events = vec![intent_event(PI_CREATED, intent, at)];
    match intent.status {
        IntentStatus::Verify => events.push(intent_event(PI_VERIFICATION_REQUIRED, intent, at)),
        IntentStatus::Unavailable => events.push(intent_event(PI_UNAVAILABLE, intent, at)),
        _ => {}
    }
    events
}

/// `purchase_intent.activated` (a verification passed).
pub fn intent_activated(intent: &IntentRecord, at_micros: i64) -> NewEvent {
    intent_event(PI_ACTIVATED, intent, at_micros)
}

/// `purchase_intent.used` (a counted use).
pub fn intent_used(intent: &IntentRecord, at_micros: i64) -> NewEvent {
    intent_event(PI_USED, intent, at_micros)
}

/// The event of an intent's end: `expired`, `exhausted` or `canceled`.
pub fn intent_ended(intent: &IntentRecord, end: IntentEnd, at_micros: i64) -> NewEvent {
    let kind = match end {
        IntentEnd::Expired => PI_EXPIRED,
        IntentEnd::UsedUp => PI_EXHAUSTED,
        IntentEnd::Canceled => PI_CANCELED,
    };
    intent_event(kind, intent, at_micros)
}

/// `browser_session.created`, `.used` or `.ended` (`kind`) of `session` as it is after the
/// change.
pub fn browser_session(kind: &str, session: &BrowserSessionRecord, at_micros: i64) -> NewEvent {
    NewEvent {
        project: session.project.clone(),
        kind: kind.to_string(),
        created_micros: at_micros,
        object: EventObject::BrowserSession(Box::new(session.without_secrets())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_sequence_number() {
        assert_eq!(id_of(26), "evt_000000000000001a");
        assert_eq!(seq_of(&id_of(u64::MAX)), Some(u64::MAX));
        for bad in ["evt_1a", "pi_000000000000001a", "evt_00000000000000zz", ""] {
            assert_eq!(seq_of(bad), None, "{bad}");
        }
    }
}
