//! Webhook deliveries: the durable outbox between an event and the endpoints it goes to.
//!
//! 1. Every event is written with a fan-out marker, in the transaction of the change that
//!    causes it (sled: a key of the `events` tree; PostgreSQL: a `webhook_fanout` row), so no
//!    committed event can be missed, whatever order the events commit in.
//! 2. [`WebhookStore::fan_out_events`] turns each marker into one [`DeliveryRecord`] per
//!    enabled endpoint whose `enabledEvents` match ([`sends`]), and removes the marker, in
//!    one transaction.
//! 3. The delivery worker claims due pending deliveries
//!    ([`WebhookStore::claim_deliveries`]): a claim moves the delivery's next attempt to the
//!    end of a lease, so a claim whose instance died expires by itself and the delivery is
//!    due again. It records the outcome of each attempt with the lease as its proof of claim
//!    ([`WebhookStore::record_delivery`]): a claim lost meanwhile records nothing. (sled,
//!    which one process owns, keeps its claims in memory: a restart frees them all, and what
//!    was being sent is due at once.)
//!
//! [`WebhookStore::fan_out_events`]: super::WebhookStore::fan_out_events
//! [`WebhookStore::claim_deliveries`]: super::WebhookStore::claim_deliveries
//! [`WebhookStore::record_delivery`]: super::WebhookStore::record_delivery

use super::WebhookEndpointRecord;
use serde::{Deserialize, Serialize};

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Attempts remain; the next is due at `next_micros`.
    Pending,
    /// An attempt was answered 2xx.
    Delivered,
    /// Every attempt failed (or the endpoint is gone or disabled).
    Failed,
}

impl DeliveryStatus {
    /// The stored name (`pending`, `delivered`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    /// The status of a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Failed]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// One event on its way to one endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeliveryRecord {
    /// The store's number of the delivery.
    pub id: u64,
    pub project: String,
    /// The event's sequence number ([`super::events::id_of`]).
    pub event_seq: u64,
    pub endpoint_id: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due (while pending; a claim's lease while claimed).
    pub next_micros: i64,
    pub status: DeliveryStatus,
    /// The last attempt's outcome: `http_<status>` or an error kind (`timeout`, `connect`,
    /// `refused`, …); never a URL, a secret or a body.
    pub last_outcome: Option<String>,
    pub created_micros: i64,
}

impl DeliveryRecord {
    /// A pending delivery of event `seq` to `endpoint_id`, due at `now_micros`.
    pub fn new(project: &str, seq: u64, endpoint_id: &str, now_micros: i64) -> Self {
        DeliveryRecord {
            id: 0,
            project: project.to_string(),
            event_seq: seq,
            endpoint_id: endpoint_id.to_string(),
            attempts: 0,
            next_micros: now_micros,
            status: DeliveryStatus::Pending,
            last_outcome: None,
            created_micros: now_micros,
        }
    }
}

/// Whether `endpoint` is sent events of type `kind`: enabled, and `kind` (or `*`) among its
/// `enabledEvents`.
pub fn sends(endpoint: &WebhookEndpointRecord, kind: &str) -> bool {
    endpoint.enabled
        && endpoint
            .enabled_events
            .iter()
            .any(|t| t == "*" || t == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_have_stored_names() {
        for s in [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
        ] {
            assert_eq!(DeliveryStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(DeliveryStatus::parse("lost"), None);
    }
}
