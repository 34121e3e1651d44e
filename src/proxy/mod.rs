//! The proxy route: `ANY /projects/:projectId/proxy` forwards the caller's request to
//! `Svc-Target-URL` with credential templates in the body substituted: JSON or form-encoded,
//! chosen by `Content-Type` ([`crate::template::Format`]). Any other body passes as it is,
//! unless it holds `{{` (400: a template there would reach the target unsubstituted).
//!
//! - [`start`]: a request authenticated by the edge becomes a [`ProxyCtx`]: the target
//!   checked ([`target`]), and a small body read and substituted whole before the target is
//!   contacted.
//! - [`forward`]: the one forwarding policy (which headers reach the target, `Host`, URI).
//! - [`direct`]: a prepared body sent to the target in one write and the answer relayed,
//!   outside pingora's proxy pipeline, over paycred's own idle pool.
//! - [`body`]: streaming substitution of larger or chunked bodies as pingora forwards them.
//! - [`guard`]: card numbers kept out of the target's answer, on both paths.
//! - [`substitute`] and [`credentials`]: the substitution over body chunks and the values a
//!   template names. [`peer`]: the pingora peer. [`failure`]: what a failure answers.
//!
//! Bodies up to [`PREFLIGHT_LIMIT`] with a `Content-Length` are read and substituted
//! whole before the target is contacted, so a bad template answers 400 and the target sees
//! nothing. Larger or chunked bodies stream; a template error mid-stream aborts the
//! upstream request before its end, so the target never receives a complete request.
//!
//! May import: `service`, `template`, `app`, `auth`, `audit`, `http`, `config`, `error`, and
//! pingora. Never `api` or `edge`.

pub mod body;
pub mod credentials;
pub mod direct;
pub mod failure;
pub mod forward;
pub mod guard;
pub mod peer;
pub mod start;
pub mod substitute;
pub use crate::service::target;

use crate::audit::AuditEvent;
use crate::auth::Principal;
use crate::config::ProjectConfig;
use forward::Forwarding;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;
use substitute::Substitution;
use target::Target;

pub use peer::{load_ca_roots, CaRoots};

/// Bodies up to this size (with a Content-Length) are checked before the target is contacted.
pub const PREFLIGHT_LIMIT: usize = 64 * 1024;

/// The caller's credentials for paycred when `Authorization` is meant for the target.
pub const SVC_AUTHORIZATION: http::HeaderName = http::HeaderName::from_static("svc-authorization");
/// Where the request goes.
pub const SVC_TARGET_URL: http::HeaderName = http::HeaderName::from_static("svc-target-url");

/// Per-request proxy state.
pub struct ProxyCtx {
    pub principal: Arc<Principal>,
    pub project: Arc<ProjectConfig>,
    pub target: Target,
    /// Which of the caller's headers reach the target.
    pub forwarding: Forwarding,
    /// The body is scanned: templates substituted in JSON and forms, any other body checked
    /// for `{{` ([`crate::template::Format`]). Every proxied body is.
    pub substitute: bool,
    /// The whole request for the target (head and substituted body), when the body was read
    /// before the target was contacted: [`direct`] sends it.
    pub request: Option<direct::WireRequest>,
    pub substitution: Substitution,
    /// When the request to the target was about to be sent (the target's latency).
    pub upstream_started: Option<Instant>,
    /// The direct exchange failed (pingora's own failures reach `logging` as its error).
    pub failed: bool,
    /// Card numbers kept out of the target's answer ([`guard`]).
    pub guard: guard::ResponseGuard,
}

impl ProxyCtx {
    /// The response guard's audit entry (`proxy.guard`), when it acted: the target host,
    /// what it did (`mask`, `refuse`, `cut`) and how many numbers it found, never a value.
    pub fn guard_event(&self) -> Option<AuditEvent> {
        let action = self.guard.action?;
        let resource = format!(
            "host={} action={} found={}",
            self.target.url.host,
            action.as_str(),
            self.guard.found
        );
        Some(crate::audit::event(
            &self.principal.project,
            &self.principal.entity,
            "proxy.guard",
            resource,
        ))
    }

    /// The request's audit entry (`proxy.use`), written when it ends whatever its outcome:
    /// the target host, the status, how many templates, and every credential it revealed
    /// (payment methods for `pan`, purchase intents otherwise), never a value.
    pub fn audit_event(&self, status: u16) -> AuditEvent {
        let mut resource = String::with_capacity(96);
        resource.push_str("host=");
        resource.push_str(&self.target.url.host);
        // Writing to a String cannot fail.
        let _ = write!(
            resource,
            " status={status} templates={}",
            self.substitution.templates
        );
        for (i, id) in self.substitution.revealed().into_iter().enumerate() {
            resource.push_str(if i == 0 { " revealed=" } else { "," });
            resource.push_str(id);
        }
        crate::audit::event(
            &self.principal.project,
            &self.principal.entity,
            "proxy.use",
            resource,
        )
    }
}
