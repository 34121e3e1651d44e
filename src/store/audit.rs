//! [`AuditStore`]: the audit log the store keeps ([`crate::audit`]): every change the store
//! commits writes its audit event in its own transaction, and the audit writer chains those
//! and the events appended here into the log.

use super::{AuditEntry, AuditEvent, AuditHead, StoreResult};
use async_trait::async_trait;

/// The audit log.
#[async_trait]
pub trait AuditStore: Send + Sync + 'static {
    /// Appends to the audit log. Durable when it returns.
    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()>;

    /// Appends to the audit log without waiting for the disk: the entry is written in order
    /// within 5 ms, batched with others (the proxy's hot path), and flushed at most 20 ms
    /// later. A crash may lose the entries of that window.
    fn append_audit_nowait(&self, audit: AuditEvent);

    /// Counts an event that anyone can repeat at will (an authentication failure): the
    /// first of a quiet spell is appended as [`AuditStore::append_audit_nowait`] appends it,
    /// and its repeats (same project, action and resource) within a second become one entry
    /// with ` count=<n>` added to the resource ([`crate::audit::tally`]).
    fn count_audit(&self, audit: AuditEvent);

    /// The whole audit log, oldest first, once everything appended or committed before the
    /// call is in it. Blocks the calling thread until then.
    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>>;

    /// The chain head as the store last recorded it apart from the log, so that `audit
    /// --verify` notices entries cut off the log before it.
    fn audit_head(&self) -> StoreResult<Option<AuditHead>>;

    /// MACs the recorded audit head again with the store's first head key (a master-key
    /// rotation's last step), once its MAC verifies under one of the keys; whether it changed
    /// it (no head, or MACed by that key already: no).
    fn remac_audit_head(&self) -> StoreResult<bool>;
}
