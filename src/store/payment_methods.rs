//! [`PaymentMethodStore`]: stored cards ([`PaymentMethodRecord`]), deduplicated by
//! fingerprint per entity, and whether each passed network-token verification.

use super::{AuditEvent, Inserted, Page, PaymentMethodRecord, Scope, StoreResult};
use async_trait::async_trait;
use std::sync::Arc;

/// What a second create of a card the entity already has makes of the stored record, and
/// the audit event of that change: given the stored record, the record to store in its place.
/// (The payment-method API takes the new expiry and cvc, the cvc sealed for the stored
/// record's id.)
pub type Refresh<'a> =
    &'a (dyn Fn(&PaymentMethodRecord) -> (PaymentMethodRecord, AuditEvent) + Send + Sync);

/// Payment methods.
#[async_trait]
pub trait PaymentMethodStore: Send + Sync + 'static {
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

    /// Whether the payment method passed network-token verification once.
    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool>;
}
