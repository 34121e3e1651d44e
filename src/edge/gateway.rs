//! The pingora glue: `impl ProxyHttp` for paycred, as a phase table. Each phase hands its
//! work to the module that owns it: REST requests to [`super::rest`], the proxy route to
//! [`Proxy`] (one for the server's life). Only the edge and the proxy touch pingora's
//! `Session`.
//!
//! ```text
//!  request ──▶ request_filter ─┬─ unknown route ─────────────▶ 404 envelope
//!                              ├─ CORS preflight (project routes) ─▶ cors: 204, or 403 with
//!                              │    no CORS header (before auth; never forwarded)
//!                              ├─ wrong method ──────────────▶ 405 envelope + Allow
//!                              ├─ /health, /ready, /metrics, /openapi.json, /demo ─▶ answered here
//!                              ├─ /mcp ─▶ auth (Authorization; 401 with WWW-Authenticate)
//!                              │        ─▶ rate limits ─▶ mcp::answer (JSON-RPC, the tools)
//!                              ├─ /agentic_commerce/delegate_payment ─▶ auth ─▶ rate limits
//!                              │        ─▶ acp::answer; every error in ACP's shape
//!                              ├─ REST route ─▶ auth (Authorization) ─▶ rate limits
//!                              │              ─▶ rest::answer (body, idempotency, handler)
//!                              │              ─▶ JSON / envelope, + cors headers  (Ok(true))
//!                              └─ /proxy ─▶ auth (Svc-Authorization | Authorization) ─▶ limits
//!                                        ─▶ Proxy::start: target guard; no body, or one
//!                                           ≤ 64 KiB with Content-Length, read and
//!                                           substituted whole (400 before any connection)
//!                                        ─▶ Proxy::send, over paycred's direct exchange:
//!                                           prepared: head and body in one write, the
//!                                           answer relayed through the response guard
//!                                           (Ok(true));
//!                                           larger or chunked: read, substituted and sent
//!                                           piece by piece, then the answer relayed (an
//!                                           error leaves the target's copy unended)
//!                                           (Ok(true));
//!                                           HEAD, CONNECT, upgrades: left to pingora
//!                                           (Ok(false)), with the phases below
//!  upstream_peer ──▶ Proxy::peer: the checked address, SNI + verification for the host,
//!                    project timeout
//!  upstream_request_filter ──▶ Proxy::upstream_head: URI and Host of the target, the
//!                              caller's headers as the forwarding policy allows
//!  [request header sent to the target]
//!  request_body_filter ──▶ Proxy::request_body: an upgraded connection's bytes scanned
//!  response_filter ──▶ Proxy::response_head: a compressed answer or a card number in a
//!                      header refused (502), or the header masked
//!  response_body_filter ──▶ Proxy::response_body: card numbers masked as the body
//!                           streams, or the answer cut at the first one (`refuse`)
//!  fail_to_proxy ──▶ failure::answer (Proxy::fail when proxied): ApiError carried in the
//!                    pingora error → envelope; connect errors 502, timeouts 504
//!  logging ──▶ metrics (route shape, status, latency), Proxy::record (the proxy's metrics
//!              and audit entries), and one access-log line
//! ```

use super::acp;
use super::cors;
use super::idempotency;
use super::live::Live;
use super::mcp;
use super::metrics::MetricsPage;
use super::rest;
use super::routes::{self, Resource, Route};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::http::{write_response, Response};
use crate::proxy::{failure, Proxy, ProxyCtx};
use arc_swap::ArcSwap;
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
    /// The current configuration's state; a reload swaps it.
    live: Arc<ArcSwap<Live>>,
    /// `Idempotency-Key`s whose first request is running.
    idempotency: idempotency::InFlight,
    /// The proxy route, and the connections it keeps to targets (a reload keeps them).
    proxy: Proxy,
    metrics: Arc<MetricsPage>,
}

impl Gateway {
    pub fn new(live: Arc<ArcSwap<Live>>, metrics: Arc<MetricsPage>, proxy: Proxy) -> Self {
        Self {
            live,
            idempotency: Default::default(),
            proxy,
            metrics,
        }
    }
}

/// Per-request state.
pub struct RequestCtx {
    /// The configuration this request runs under, from its start to its end.
    live: Arc<Live>,
    started: Instant,
    route: &'static str,
    status: u16,
    /// Boxed: pingora moves the request's future around, and this is most of its size.
    proxy: Option<Box<ProxyCtx>>,
    /// CORS headers of the answer ([`cors::headers`]).
    cors: Vec<(&'static str, String)>,
}

/// What `request_filter` decided.
enum Answer {
    /// Written by paycred: the REST answer, an error, or the direct exchange's relay.
    Response(Response),
    /// Proxied ([`Proxy::send`]).
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
            live: self.live.load_full(),
            started: Instant::now(),
            route: "unknown",
            status: 0,
            proxy: None,
            cors: Vec::new(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        // Every read of the body, REST or proxied, whoever reads it: a caller that sends
        // nothing for this long is answered 408 (`http::read_body_pieces`, `failure`).
        // pingora ignores it on HTTP/2 streams: paycred's own reads bound their wait
        // themselves, and a body pingora streams to the target is ended by the project's
        // proxy timeout.
        session.set_read_timeout(Some(ctx.live.app.config.server.body_read_timeout));
        let mut response = match self.answer(session, ctx).await {
            Ok(Answer::Response(r)) => r,
            Ok(Answer::Proxy) => {
                let Some(p) = ctx.proxy.as_deref_mut() else {
                    return Ok(false);
                };
                let live = &ctx.live;
                // An error here is a response cut short: pingora then closes the caller's
                // connection instead of ending the response as if it were complete.
                let sent = self
                    .proxy
                    .send(session, &live.app, &live.ca_roots, p)
                    .await?;
                let Some(status) = sent else {
                    // HEAD, CONNECT, upgrades: pingora proxies them.
                    return Ok(false);
                };
                ctx.status = status;
                return Ok(true);
            }
            Err(e) if ctx.route == acp::LABEL => acp::error_response(&e),
            Err(e) => Response::error(&e),
        };
        response.headers.append(&mut ctx.cors);
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
        Ok(Box::new(self.proxy.peer(&ctx.live.ca_roots, p)))
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
        self.proxy.upstream_head(upstream, p)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        match ctx.proxy.as_mut() {
            Some(p) => {
                self.proxy
                    .request_body(&ctx.live.app, p, body, end_of_stream)
                    .await
            }
            None => Ok(()),
        }
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut pingora::http::ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(p) = ctx.proxy.as_deref_mut() else {
            return Ok(());
        };
        self.proxy.response_head(p, upstream_response)
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<std::time::Duration>> {
        if let Some(p) = ctx.proxy.as_deref_mut() {
            self.proxy.response_body(p, body, end_of_stream)?;
        }
        Ok(None)
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
        ctx.status = match ctx.proxy.as_deref_mut() {
            Some(p) => self.proxy.fail(session, e, p).await,
            None => failure::answer(session, e).await,
        };
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
        let app = &ctx.live.app;
        app.metrics.record(ctx.route, ctx.status, elapsed);
        if let Some(p) = &ctx.proxy {
            self.proxy.record(app, p, ctx.status, e.is_some(), ended);
        }
        let target = ctx.proxy.as_deref().map_or("", ProxyCtx::host);
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
        let live = ctx.live.clone();
        let app = &live.app;
        let req = session.req_header();
        if let Some(demo) =
            crate::dev::demo::answer(app.config.demo.as_ref(), &req.method, req.uri.path())
        {
            ctx.route = "demo";
            return demo.map(Answer::Response);
        }
        let Some(route) = routes::route(req.uri.path()) else {
            return Err(ApiError::not_found("Route"));
        };
        ctx.route = route.label();
        if let Some(project) = route.project.as_deref() {
            let origins = app
                .config
                .project(project)
                .map(|p| p.cors_allowed_origins.as_slice())
                .unwrap_or_default();
            // A preflight carries no token: answered before authentication, and on the proxy
            // route never forwarded as the caller's OPTIONS.
            if cors::is_preflight(&req.method, &req.headers) {
                return Ok(Answer::Response(cors::preflight(
                    origins,
                    &route,
                    &req.headers,
                )));
            }
            ctx.cors = cors::headers(origins, &route, &req.method, &req.headers);
        }
        if !route.allowed().contains(&req.method) {
            return Err(ApiError::method_not_allowed(&route.allow_header()));
        }
        let project = match (&route.resource, route.project.as_deref()) {
            (Resource::Health, _) => {
                return Response::json(200, &serde_json::json!({"status": "ok"}))
                    .map(Answer::Response)
            }
            (Resource::Ready, _) => {
                app.store.ready().await?;
                return Response::json(200, &serde_json::json!({"status": "ready"}))
                    .map(Answer::Response);
            }
            (Resource::Metrics, _) => {
                return self
                    .metrics
                    .public(&app.config.metrics, req)
                    .map(Answer::Response)
            }
            (Resource::OpenApi, _) => {
                return Ok(Answer::Response(Response {
                    status: 200,
                    headers: Vec::new(),
                    body: Some(Bytes::from_static(crate::api::openapi::DOCUMENT.as_bytes())),
                    intent: None,
                }))
            }
            (Resource::Mcp, project) => project,
            (Resource::DelegatePayment, _) => None,
            (_, Some(project)) => Some(project),
            (_, None) => return Err(ApiError::not_found("Route")),
        };
        let authenticated = Self::authenticate(&live, session, &route, project);
        if route.resource == Resource::Mcp {
            let principal = authenticated.map_err(mcp::refusal)?.0;
            live.limits
                .admit(&principal.project, &principal.entity)
                .await?;
            return mcp::answer(app, session, &principal)
                .await
                .map(Answer::Response);
        }
        if route.resource == Resource::DelegatePayment {
            let principal = authenticated?.0;
            live.limits
                .admit(&principal.project, &principal.entity)
                .await?;
            let answer = acp::answer(app, &self.idempotency, session, &principal).await;
            return Ok(Answer::Response(answer));
        }
        let (principal, drop_authorization) = authenticated?;
        live.limits
            .admit(&principal.project, &principal.entity)
            .await?;
        if route.resource == Resource::Proxy {
            let p = self
                .proxy
                .start(app, session, principal, drop_authorization)
                .await?;
            ctx.proxy = Some(Box::new(p));
            return Ok(Answer::Proxy);
        }
        rest::answer(app, &self.idempotency, session, &route, &principal)
            .await
            .map(Answer::Response)
    }

    /// The caller's principal. On the proxy route `Svc-Authorization` carries paycred's
    /// token when the caller's `Authorization` is meant for the target; otherwise
    /// `Authorization` is paycred's (and is not forwarded: the `bool`).
    fn authenticate(
        live: &Live,
        session: &Session,
        route: &Route,
        project: Option<&str>,
    ) -> Result<(Arc<Principal>, bool), ApiError> {
        let headers = &session.req_header().headers;
        let (token, drop_authorization) = match headers.get(Proxy::SVC_AUTHORIZATION) {
            Some(v) if route.resource == Resource::Proxy => (Some(v.as_bytes()), false),
            _ => (
                headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()),
                true,
            ),
        };
        let principal = live
            .app
            .auth
            .authenticate(token, project, live.app.now_secs())
            .inspect_err(|e| {
                if let Some(project) = project {
                    Self::audit_auth_failure(live, project, route.label(), e)
                }
            })?;
        Ok((principal, drop_authorization))
    }

    /// Records an authentication failure for a configured project in the audit log, in the
    /// background: the first of a quiet spell as an entry, repeats counted (anyone can fail
    /// authentication as fast as they can send, and must not fill the disk doing it).
    fn audit_auth_failure(live: &Live, project: &str, route: &str, e: &ApiError) {
        if live.app.config.project(project).is_some() {
            let resource = format!("route={route} status={}", e.status());
            let event = crate::audit::event(project, "", "auth.failure", resource);
            live.app.store.count_audit(event);
        }
    }
}
