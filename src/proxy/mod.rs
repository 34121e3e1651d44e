//! The proxy route: `ANY /projects/:projectId/proxy` forwards the caller's request to
//! `Svc-Target-URL` with credential templates in the body substituted: JSON or form-encoded,
//! chosen by `Content-Type` ([`crate::template::Format`]). Any other body passes as it is,
//! unless it holds `{{` (400: a template there would reach the target unsubstituted).
//!
//! - [`start`]: a request authenticated by the edge becomes a [`ProxyCtx`]: the target
//!   checked ([`target`]), and a small body read and substituted whole before the target is
//!   contacted.
//! - [`forward`]: the one forwarding policy (which headers reach the target, `Host`, URI).
//! - [`direct`]: the exchange with the target outside pingora's proxy pipeline, over
//!   paycred's own idle pool: a prepared request in one write, or a streamed one chunk by
//!   chunk; the answer relayed through the guard.
//! - [`body`]: streaming substitution of larger or chunked bodies, piece by piece as they are
//!   sent.
//! - [`guard`]: card numbers kept out of the target's answer.
//! - [`substitute`] and [`credentials`]: the substitution over body chunks and the values a
//!   template names. [`peer`]: the target as a pingora peer. [`failure`]: what a failure
//!   answers.
//!
//! Bodies up to [`PREFLIGHT_LIMIT`] with a `Content-Length` (and requests without a body)
//! are read and substituted whole before the target is contacted, so a bad template answers
//! 400 and the target sees nothing. Larger or chunked bodies stream; a template error
//! mid-stream drops the upstream request before its end, so the target never receives a
//! complete request. Only `HEAD`, `CONNECT` and upgrades, which carry no body through
//! paycred, are proxied by pingora itself.
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

/// How a proxied request leaves for the target.
pub enum Outgoing {
    /// The whole request (head and substituted body), its body read before the target was
    /// contacted (none, or at most [`PREFLIGHT_LIMIT`] bytes with a `Content-Length`):
    /// [`direct`] sends it in one write.
    Prepared(direct::WireRequest),
    /// A larger or chunked body streams: read, substituted and sent piece by piece behind
    /// this head ([`body::relay`]).
    Streamed(bytes::Bytes),
    /// `HEAD`, `CONNECT` and upgrades, which carry no body through paycred: pingora proxies
    /// them.
    Pingora,
}

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
    /// How the request leaves for the target.
    pub outgoing: Outgoing,
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
