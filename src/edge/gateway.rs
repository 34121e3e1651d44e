//! The pingora glue: `impl ProxyHttp` for paycred, as a phase table. Each phase hands its
//! work to the module that owns it: REST requests to [`super::rest`], the proxy route to
//! [`crate::proxy`]. Only the edge and the proxy touch pingora's `Session`.
//!
//! ```text
//!  request ──▶ request_filter ─┬─ unknown route ─────────────▶ 404 envelope
//!                              ├─ wrong method ──────────────▶ 405 envelope + Allow
//!                              ├─ /health, /ready, /metrics, /openapi.json, /demo ─▶ answered here
//!                              ├─ REST route ─▶ auth (Authorization) ─▶ rate limits
//!                              │              ─▶ rest::answer (body, idempotency, handler)
//!                              │              ─▶ JSON / envelope                  (Ok(true))
//!                              └─ /proxy ─▶ auth (Svc-Authorization | Authorization) ─▶ limits
//!                                        ─▶ proxy::start: target guard; a JSON or form body
//!                                           ≤ 64 KiB with Content-Length read and substituted
//!                                           whole
//!                                           (400 before any connection)
//!                                        ─▶ prepared body: proxy::direct sends head and body
//!                                           in one write and relays the answer  (Ok(true))
//!                                        ─▶ any other body: pingora proxies it  (Ok(false))
//!  upstream_peer ──▶ the checked address, SNI + verification for the host, project timeout
//!  upstream_request_filter ──▶ proxy::forward: URI and Host of the target, the caller's
//!                              headers as the forwarding policy allows, Content-Length
//!                              dropped when the body is substituted as it streams
//!  [request header sent to the target]
//!  request_body_filter ──▶ proxy::body: streaming substitution chunk by chunk
//!                          (an error aborts the upstream request before its end)
//!  [target response passed back unchanged]
//!  fail_to_proxy ──▶ proxy::failure: ApiError carried in the pingora error → envelope;
//!                    connect errors 502, timeouts 504
//!  logging ──▶ metrics (route shape, status, latency), the proxy's audit entry, and one
//!              access-log line
//! ```

use super::idempotency;
use super::ratelimit::Limiter;
use super::rest;
use super::routes::{self, Resource, Route};
use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::http::{write_response, Response};
use crate::proxy::{self, direct::Exchanger, failure, CaRoots, ProxyCtx, SVC_AUTHORIZATION};
use async_trait::async_trait;
use bytes::Bytes;
use http::header;
use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::sync::Arc;
use std::time::Instant;

/// The service.
pub struct Gateway {
    app: Arc<App>,
    ca_roots: CaRoots,
    /// `Idempotency-Key`s whose first request is running.
    idempotency: idempotency::InFlight,
    /// Per-project and per-entity rate limits.
    limits: Limiter,
    /// Connections for prepared bodies, made on first use (its TLS context loads the system
    /// roots).
    exchanger: std::sync::OnceLock<Exchanger>,
}

impl Gateway {
    pub fn new(app: Arc<App>, ca_roots: CaRoots) -> Self {
        Self {
            limits: Limiter::new(&app.config.projects),
            app,
            ca_roots,
            idempotency: Default::default(),
            exchanger: Default::default(),
        }
    }
}

/// Per-request state.
pub struct RequestCtx {
    started: Instant,
    route: &'static str,
    status: u16,
    /// Boxed: pingora moves the request's future around, and this is most of its size.
    proxy: Option<Box<ProxyCtx>>,
}

/// What `request_filter` decided.
enum Answer {
    /// Written by paycred: the REST answer, an error, or the direct exchange's relay.
    Response(Response),
    /// Proxied: the direct exchange if the body is prepared, else pingora.
    Proxy,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    /// No downstream modules: the target's response passes through unchanged, so pingora's
    /// default (a disabled compression module) would only cost a context per request.
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            started: Instant::now(),
            route: "unknown",
            status: 0,
            proxy: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        // Every read of the body, REST or proxied, whoever reads it: a caller that sends
        // nothing for this long is answered 408 (`http::read_body_pieces`,
        // `proxy::failure`).
        session.set_read_timeout(Some(self.app.config.server.body_read_timeout));
        let response = match self.answer(session, ctx).await {
            Ok(Answer::Response(r)) => r,
            Ok(Answer::Proxy) => {
                let Some(p) = ctx.proxy.as_deref_mut() else {
                    return Ok(false);
                };
                if p.request.is_none() {
                    return Ok(false);
                }
                // An error here is a response cut short: pingora then closes the caller's
                // connection instead of ending the response as if it were complete.
                ctx.status = self.relay(session, p).await?;
                return Ok(true);
            }
            Err(e) => Response::error(&e),
        };
        ctx.status = response.status;
        write_response(session, &response).await?;
        Ok(true)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        let Some(p) = ctx.proxy.as_ref() else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no upstream for this route",
            ));
        };
        Ok(Box::new(self.peer(p)))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(p) = ctx.proxy.as_mut() else {
            return Err(Error::explain(ErrorType::InternalError, "no proxy state"));
        };
        let body_changes = p.substitute && p.substitution.may_change_length();
        proxy::forward::upstream_request(upstream, &p.target, &p.forwarding, body_changes)
            .map_err(failure::carry)?;
        if p.substitute {
            // A retry replays the body through the filter: start over.
            p.substitution.reset();
        }
        p.upstream_started.get_or_insert_with(Instant::now);
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        match ctx.proxy.as_mut() {
            Some(p) => proxy::body::filter(&self.app, p, body, end_of_stream).await,
            None => Ok(()),
        }
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, error: &Error) -> bool {
        failure::carried(error).is_some_and(|e| e.status() < 500)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        ctx.status = failure::answer(session, e).await;
        FailToProxy {
            error_code: if ctx.status == 499 { 0 } else { ctx.status },
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        let ended = Instant::now();
        let elapsed = ended.saturating_duration_since(ctx.started);
        if ctx.proxy.is_some() && ctx.status == 0 {
            if let Some(resp) = session.response_written() {
                ctx.status = resp.status.as_u16();
            }
        }
        self.app.metrics.record(ctx.route, ctx.status, elapsed);
        if let Some(p) = &ctx.proxy {
            let upstream = p
                .upstream_started
                .map(|t| ended.saturating_duration_since(t));
            self.app.metrics.record_proxy(
                ctx.status,
                upstream,
                e.is_some() || p.failed,
                p.substitution.templates,
            );
            // One entry per request, including every credential it revealed.
            self.app
                .store
                .append_audit_nowait(p.audit_event(ctx.status));
        }
        let target = ctx
            .proxy
            .as_ref()
            .map(|p| p.target.url.host.as_str())
            .unwrap_or("");
        tracing::info!(
            "{}",
            crate::ops::logging::RequestLine {
                method: session.req_header().method.as_str(),
                route: ctx.route,
                status: ctx.status,
                target,
                micros: elapsed.as_micros() as u64,
            }
        );
    }
}

impl Gateway {
    /// Routes the request: a response to write, or proxying.
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Answer, ApiError> {
        let req = session.req_header();
        if let Some(demo) =
            crate::dev::demo::answer(self.app.config.demo.as_ref(), &req.method, req.uri.path())
        {
            ctx.route = "demo";
            return demo.map(Answer::Response);
        }
        let Some(route) = routes::route(req.uri.path()) else {
            return Err(ApiError::not_found("Route"));
        };
        ctx.route = route.label();
        if !route.allowed().contains(&req.method) {
            return Err(ApiError::method_not_allowed(&route.allow_header()));
        }
        let project = match (&route.resource, route.project.as_deref()) {
            (Resource::Health, _) => {
                return Response::json(200, &serde_json::json!({"status": "ok"}))
                    .map(Answer::Response)
            }
            (Resource::Ready, _) => {
                self.app.store.ready().await?;
                return Response::json(200, &serde_json::json!({"status": "ready"}))
                    .map(Answer::Response);
            }
            (Resource::Metrics, _) => return Ok(Answer::Response(self.metrics())),
            (Resource::OpenApi, _) => {
                return Ok(Answer::Response(Response {
                    status: 200,
                    headers: Vec::new(),
                    body: Some(Bytes::from_static(crate::api::openapi::DOCUMENT.as_bytes())),
                    intent: None,
                }))
            }
            (_, Some(project)) => project,
            (_, None) => return Err(ApiError::not_found("Route")),
        };
        let (principal, drop_authorization) = self.authenticate(session, &route, project)?;
        self.limits.check(&principal.project, &principal.entity)?;
        if route.resource == Resource::Proxy {
            let p = proxy::start::start(&self.app, session, principal, drop_authorization).await?;
            ctx.proxy = Some(Box::new(p));
            return Ok(Answer::Proxy);
        }
        rest::answer(&self.app, &self.idempotency, session, &route, &principal)
            .await
            .map(Answer::Response)
    }

    /// The caller's principal. On the proxy route `Svc-Authorization` carries paycred's
    /// token when the caller's `Authorization` is meant for the target; otherwise
    /// `Authorization` is paycred's (and is not forwarded: the `bool`).
    fn authenticate(
        &self,
        session: &Session,
        route: &Route,
        project: &str,
    ) -> Result<(Arc<Principal>, bool), ApiError> {
        let headers = &session.req_header().headers;
        let (token, drop_authorization) = match headers.get(SVC_AUTHORIZATION) {
            Some(v) if route.resource == Resource::Proxy => (Some(v.as_bytes()), false),
            _ => (
                headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()),
                true,
            ),
        };
        let principal = self
            .app
            .auth
            .authenticate(token, project, self.app.now_secs())
            .inspect_err(|e| self.audit_auth_failure(project, route.label(), e))?;
        Ok((principal, drop_authorization))
    }

    /// The pingora peer of a proxied request.
    fn peer(&self, p: &ProxyCtx) -> HttpPeer {
        proxy::peer::peer(&p.target, &p.project, self.ca_roots.get(&p.project.id))
    }

    /// Sends the prepared request through [`proxy::direct`] and relays the answer; returns
    /// the status to record. On failure before the answer started, answers as
    /// `fail_to_proxy` would (502, 504); after, returns the error so that pingora cuts the
    /// caller's connection.
    async fn relay(&self, session: &mut Session, p: &mut ProxyCtx) -> Result<u16> {
        let Some(request) = p.request.as_ref() else {
            return Ok(0);
        };
        let peer = self.peer(p);
        let replayable = proxy::direct::replayable(session.req_header());
        let exchanger = self.exchanger.get_or_init(|| {
            // As pingora sizes its own pool: the setting per worker thread.
            let server = &self.app.config.server;
            let pool_size = server
                .upstream_keepalive_pool_size
                .saturating_mul(server.threads.max(1));
            Exchanger::new(pool_size)
        });
        let e = match exchanger
            .relay(session, &peer, request, replayable, &mut p.upstream_started)
            .await
        {
            Ok(status) => return Ok(status),
            Err(e) => e,
        };
        if session.response_written().is_some() {
            // Cut short: `fail_to_proxy` records it, and the caller's connection is closed.
            return Err(e);
        }
        p.failed = true;
        session.set_keepalive(None);
        Ok(failure::answer(session, &e).await)
    }

    /// Records an authentication failure for a configured project in the audit log, in the
    /// background: the first of a quiet spell as an entry, repeats counted (anyone can fail
    /// authentication as fast as they can send, and must not fill the disk doing it).
    fn audit_auth_failure(&self, project: &str, route: &str, e: &ApiError) {
        if self.app.config.project(project).is_some() {
            let resource = format!("route={route} status={}", e.status());
            let event = crate::audit::event(project, "", "auth.failure", resource);
            self.app.store.count_audit(event);
        }
    }

    fn metrics(&self) -> Response {
        let stats = self.app.store.stats();
        let (opened, reused) = self
            .exchanger
            .get()
            .map(Exchanger::connections)
            .unwrap_or_default();
        let text = self.app.metrics.render(&[
            (
                "paycred_target_connections_opened_total",
                "Proxy: connections opened to targets (bodies paycred sends itself).",
                opened,
            ),
            (
                "paycred_target_connections_reused_total",
                "Proxy: requests sent on an idle connection to their target (bodies paycred sends itself; one found closed and retried on a new one counts in both).",
                reused,
            ),
            (
                "paycred_store_durable_writes_total",
                "Writes that waited for durability.",
                stats.durable_writes,
            ),
            (
                "paycred_store_flushes_total",
                "Flushes of the store to disk (shared by concurrent writes).",
                stats.flushes,
            ),
        ]);
        Response {
            status: 200,
            headers: vec![("Content-Type", "text/plain; version=0.0.4".to_string())],
            body: Some(bytes::Bytes::from(text)),
            intent: None,
        }
    }
}
