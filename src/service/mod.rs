//! What the handlers and the proxy share: taking a card in from a request ([`intake`]),
//! revealing and using purchase intents' credentials ([`intents`]), browser checkout's
//! sessions ([`browser_sessions`]), where sealed values are
//! bound ([`aad`]), audit events of a caller's actions, and the target guard ([`target`]) every
//! URL paycred sends to passes (the proxy's targets, webhook endpoints).
//!
//! May import: `app`, `auth`, `domain`, `store`, `vault`, `audit`, `config`, `clock`,
//! `error`, `secret`. Never `api`, `proxy` or `edge`.

pub mod aad;
pub mod browser_sessions;
pub mod intake;
pub mod intents;
pub mod passkeys;
pub mod target;

use crate::app::App;
use crate::audit::AuditEvent;
use crate::auth::Principal;

/// An audit event of `principal`'s action, now.
pub fn audit_event(app: &App, principal: &Principal, action: &str, resource: &str) -> AuditEvent {
    AuditEvent {
        at_micros: app.now_micros(),
        action: action.to_string(),
        project: principal.project.clone(),
        entity: principal.entity.clone(),
        resource: resource.to_string(),
    }
}
