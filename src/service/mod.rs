//! What the handlers and the proxy share: taking a card in from a request ([`intake`]),
//! revealing and using purchase intents' credentials ([`intents`]), browser checkout's
//! sessions ([`browser_sessions`]), where sealed values are
//! bound ([`aad`]), audit events of a caller's actions, and the target guard ([`target`]) every
//! URL paycred sends to passes (the proxy's targets, webhook endpoints); the removal of what
//! outlived its retention ([`retention`]), and the background threads that run such jobs
//! ([`spawn_every`]).
//!
//! May import: `app`, `auth`, `domain`, `store`, `vault`, `audit`, `config`, `clock`,
//! `error`, `secret`. Never `api`, `proxy` or `edge`.

pub mod aad;
pub mod browser_sessions;
pub mod intake;
pub mod intents;
pub mod passkeys;
pub mod retention;
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

/// Runs `job` every `every` on a thread of its own (`paycred-{name}`, with a runtime of its
/// own, so a job never holds up a request's thread) while `app` lives.
pub fn spawn_every(
    name: &str,
    every: std::time::Duration,
    app: std::sync::Weak<App>,
    mut job: impl FnMut(&tokio::runtime::Runtime, &App) + Send + 'static,
) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::error!(job = name, "a background job could not start its runtime");
        return;
    };
    let started = std::thread::Builder::new()
        .name(format!("paycred-{name}"))
        .spawn(move || loop {
            std::thread::sleep(every);
            let Some(app) = app.upgrade() else { return };
            job(&runtime, &app);
        });
    if let Err(e) = started {
        tracing::error!(job = name, error = %e, "a background job did not start");
    }
}
