//! [`WebhookStore`]: a project's webhook endpoints ([`WebhookEndpointRecord`]) and the
//! deliveries of its events to them ([`super::deliveries`]: the outbox, its fan-out and its
//! claims).

use super::{AuditEvent, DeliveryRecord, StoreResult, WebhookEndpointRecord};
use async_trait::async_trait;

/// Webhook endpoints and deliveries.
#[async_trait]
pub trait WebhookStore: Send + Sync + 'static {
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

    /// Turns up to `limit` fan-out markers into pending deliveries, one per endpoint of the
    /// event's project that [`super::deliveries::sends`] its type, each marker removed in the
    /// transaction that writes its deliveries ([`super::deliveries`]); how many events it
    /// fanned out. Durable when it returns.
    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize>;

    /// Queues a fresh pending delivery of event `seq` to each of `endpoints`, due at
    /// `now_micros` (a redelivery); `false`, queueing nothing, when the project has no such
    /// event. Exclusive with retention's removal of the event ([`super::retention`]): either
    /// the deliveries are queued and keep the event, or the event is gone and nothing is
    /// queued. Durable when it returns.
    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<bool>;

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
