//! The proxy route: `ANY /projects/:projectId/proxy` forwards the caller's request to
//! `Svc-Target-URL` with credential templates in the body substituted: JSON, form-encoded or
//! XML, chosen by `Content-Type` ([`crate::template::Format`]). Any other body passes as it
//! is, unless it holds `{{` (400: a template there would reach the target unsubstituted).
//!
//! [`Proxy`] is all the edge's gateway sees of it, with [`ProxyCtx`] (one request's state)
//! and [`failure`]. Built once at start-up and kept across configuration reloads, it owns the
//! direct exchange's connections, chooses how each request leaves for its target
//! ([`Proxy::send`]), and does the proxy's part of each of pingora's phases.
//!
//! - [`start`]: a request authenticated by the edge becomes a [`ProxyCtx`]: the target
//!   checked and resolved by the target guard (in `service`, here as [`target`]), and a
//!   small body read and substituted whole before the target is contacted.
//! - [`forward`]: the one forwarding policy (which headers reach the target, `Host`, URI).
//! - [`direct`]: the exchange with the target outside pingora's proxy pipeline, over
//!   paycred's own idle pool: a prepared request in one write, or a streamed one chunk by
//!   chunk; the answer relayed through the guard.
//! - [`body`]: streaming substitution of larger or chunked bodies, piece by piece as they are
//!   sent over the direct exchange, and of an upgraded connection's bytes in pingora's body
//!   filter.
//! - [`guard`]: card numbers kept out of the target's answer.
//! - [`substitute`] and [`credentials`]: the substitution over body chunks and the values a
//!   template names. [`peer`]: the target as a pingora peer, and the projects' CA roots.
//!   [`failure`]: what a failure answers.
//!
//! How a request leaves ([`Outgoing`]): bodies up to [`PREFLIGHT_LIMIT`] with a
//! `Content-Length` (and requests without a body) are read and substituted whole before the
//! target is contacted, so a bad template answers 400 and the target sees nothing; the
//! request then leaves in one write over the direct exchange. Larger or chunked bodies stream
//! over the same exchange ([`body::relay`]); a template error mid-stream drops the upstream
//! request before its end, so the target never receives a complete request. Only `HEAD`,
//! `CONNECT` and upgrades, which carry no body through paycred, go through pingora's own
//! proxy pipeline.
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

use crate::app::App;
use crate::audit::AuditEvent;
use crate::auth::Principal;
use crate::config::{ProjectConfig, ServerSettings};
use crate::error::ApiError;
use bytes::Bytes;
use direct::{Connections, Exchanger};
use forward::Forwarding;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::Session;
use pingora::Error;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use substitute::Substitution;
use target::Target;

pub use peer::{load_ca_roots, CaRoots};

/// Bodies up to this size (with a Content-Length) are checked before the target is contacted.
pub const PREFLIGHT_LIMIT: usize = 64 * 1024;

/// The proxy, as the gateway's phases use it: one for the server's life (a reload leaves it,
/// and the connections it keeps, as they are).
pub struct Proxy {
    /// The direct exchange's connections, made on first use (its TLS context loads the system
    /// roots).
    exchanger: OnceLock<Exchanger>,
    /// The most idle connections the exchange keeps, all targets together.
    pool_size: usize,
    /// The exchange's counters, also read by `/metrics`.
    stats: ProxyStats,
}

/// The direct exchange's connection counters, for `/metrics`: a handle on the counters
/// alone, not on the connections.
#[derive(Clone, Default)]
pub struct ProxyStats(Arc<Connections>);

impl ProxyStats {
    /// Connections opened to targets, and requests sent on an idle one from the pool, so far
    /// (bodies paycred sends itself).
    pub fn connections(&self) -> (u64, u64) {
        self.0.get()
    }
}

impl Proxy {
    /// The caller's credentials for paycred when `Authorization` is meant for the target.
    pub const SVC_AUTHORIZATION: http::HeaderName =
        http::HeaderName::from_static("svc-authorization");
    /// Where the request goes.
    pub const SVC_TARGET_URL: http::HeaderName = http::HeaderName::from_static("svc-target-url");

    /// The proxy of a server with these settings (which a reload does not change).
    pub fn new(server: &ServerSettings) -> Self {
        Proxy {
            exchanger: OnceLock::new(),
            // As pingora sizes its own pool: the setting per worker thread.
            pool_size: server
                .upstream_keepalive_pool_size
                .saturating_mul(server.threads.max(1)),
            stats: ProxyStats::default(),
        }
    }

    /// The counters `/metrics` shows.
    pub fn stats(&self) -> ProxyStats {
        self.stats.clone()
    }

    /// `request_filter`, once the edge has authenticated the caller: the request's
    /// [`ProxyCtx`] ([`start`]). `drop_authorization` when the token came in `Authorization`.
    pub async fn start(
        &self,
        app: &App,
        session: &mut Session,
        principal: Arc<Principal>,
        drop_authorization: bool,
    ) -> Result<ProxyCtx, ApiError> {
        start::start(app, session, principal, drop_authorization).await
    }

    /// Where a proxied request leaves for its target. A body paycred sends itself goes over
    /// the direct exchange, prepared by [`Proxy::start`] or streamed by [`body::relay`], and
    /// the answer is relayed: returns its status to record. `None`: `HEAD`, `CONNECT` and
    /// upgrades, which pingora proxies with the phases below ([`Proxy::peer`] on).
    ///
    /// On failure before the answer started, answers as `fail_to_proxy` would (502, 504) and
    /// returns that status; after, returns the error so that pingora cuts the caller's
    /// connection.
    pub async fn send(
        &self,
        session: &mut Session,
        app: &App,
        ca_roots: &CaRoots,
        p: &mut ProxyCtx,
    ) -> pingora::Result<Option<u16>> {
        if matches!(p.outgoing, Outgoing::Pingora) {
            return Ok(None);
        }
        let peer = self.peer(ca_roots, p);
        let replayable = direct::replayable(session.req_header());
        let exchanger = self
            .exchanger
            .get_or_init(|| Exchanger::new(self.pool_size, self.stats.0.clone()));
        let relayed = match &p.outgoing {
            Outgoing::Prepared(request) => {
                p.guard
                    .arm(p.substitution.card_numbers(), p.substitution.cvcs());
                exchanger
                    .relay(
                        session,
                        &peer,
                        request,
                        replayable,
                        &mut p.upstream_started,
                        &mut p.guard,
                    )
                    .await
            }
            Outgoing::Streamed(head) => {
                let head = head.clone();
                body::relay(app, session, p, exchanger, &peer, head).await
            }
            Outgoing::Pingora => return Ok(None),
        };
        let e = match relayed {
            Ok(status) => return Ok(Some(status)),
            Err(e) => e,
        };
        if session.response_written().is_some() {
            // Cut short: `fail_to_proxy` records it, and the caller's connection is closed.
            return Err(e);
        }
        // The guard's refusal is an answer, not a target failure.
        p.failed = failure::carried(&e).is_none();
        session.set_keepalive(None);
        Ok(Some(failure::answer(session, &e).await))
    }

    /// `upstream_peer`: the target as pingora connects to it ([`peer::peer`]), with the
    /// project's CA roots of the request's configuration.
    pub fn peer(&self, ca_roots: &CaRoots, p: &ProxyCtx) -> HttpPeer {
        peer::peer(&p.target, &p.project, ca_roots.get(&p.project.id))
    }

    /// `upstream_request_filter`: the target's URI and `Host`, the caller's headers as the
    /// forwarding policy allows ([`forward`]); the body's substitution starts over (a retry
    /// replays the body through the filter), and the target's time starts.
    pub fn upstream_head(
        &self,
        upstream: &mut RequestHeader,
        p: &mut ProxyCtx,
    ) -> pingora::Result<()> {
        let body_changes = p.substitute && p.substitution.may_change_length();
        forward::upstream_request(upstream, &p.target, &p.forwarding, body_changes)
            .map_err(failure::carry)?;
        if p.substitute {
            p.substitution.reset();
        }
        p.upstream_started.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// `request_body_filter`: the bytes of an upgraded connection scanned ([`body::filter`]).
    pub async fn request_body(
        &self,
        app: &App,
        p: &mut ProxyCtx,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
    ) -> pingora::Result<()> {
        body::filter(app, p, body, end_of_stream).await
    }

    /// `response_filter`: a compressed answer or a card number in a header refused (502), or
    /// the header masked ([`guard`]).
    pub fn response_head(
        &self,
        p: &mut ProxyCtx,
        head: &mut ResponseHeader,
    ) -> pingora::Result<()> {
        // The request body has been substituted by now: the numbers it revealed are known.
        p.guard
            .arm(p.substitution.card_numbers(), p.substitution.cvcs());
        p.guard.head(head).map_err(failure::carry)
    }

    /// `response_body_filter`: card numbers masked as the body streams, or the answer cut at
    /// the first one ([`guard`]).
    pub fn response_body(
        &self,
        p: &mut ProxyCtx,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
    ) -> pingora::Result<()> {
        guard::filter(&mut p.guard, body, end_of_stream).map_err(failure::carry)
    }

    /// `fail_to_proxy` of a proxied request: the caller answered as [`failure::answer`] does;
    /// returns the status. When pingora had not sent the target's head yet, the guard's cut
    /// became that answer (a 502).
    pub async fn fail(&self, session: &mut Session, e: &Error, p: &mut ProxyCtx) -> u16 {
        let unanswered = session.response_written().is_none();
        let status = failure::answer(session, e).await;
        if unanswered {
            p.guard.answered_instead();
        }
        status
    }

    /// `logging` of a proxied request that ended at `ended` with `status` (`error`: pingora's
    /// proxying failed): the proxy's metrics, its audit entry with every credential it
    /// revealed, and the guard's entry when it acted.
    pub fn record(&self, app: &App, p: &ProxyCtx, status: u16, error: bool, ended: Instant) {
        let upstream = p
            .upstream_started
            .map(|t| ended.saturating_duration_since(t));
        app.metrics.record_proxy(
            status,
            upstream,
            error || p.failed,
            p.substitution.templates,
        );
        // One entry per request, including every credential it revealed.
        app.store.append_audit_nowait(p.audit_event(status));
        if let Some(event) = p.guard_event() {
            app.metrics
                .record_guard(p.guard.action.map_or("", |a| a.as_str()));
            app.store.append_audit_nowait(event);
        }
    }
}

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
    /// The target's host name.
    pub fn host(&self) -> &str {
        &self.target.url.host
    }

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
