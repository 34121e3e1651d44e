//! The pingora glue: `impl ProxyHttp` for paycred. Only this module and `http` touch
//! pingora's `Session`.
//!
//! ```text
//!  request ──▶ request_filter ─┬─ unknown route ─────────────▶ 404 envelope
//!                              ├─ wrong method ──────────────▶ 405 envelope + Allow
//!                              ├─ /health, /metrics ─────────▶ answered here
//!                              ├─ REST route ─▶ auth (JWT) ─▶ read bounded JSON body
//!                              │              ─▶ rest::dispatch ─▶ JSON / envelope   (Ok(true))
//!                              └─ /proxy ─▶ auth (Svc-Authorization | Authorization), private role
//!                                        ─▶ target guard (URL, allow-list, resolve, address ranges)
//!                                        ─▶ JSON body ≤ 64 KiB with Content-Length: read whole,
//!                                           substitute every template (400 before any connection)
//!                                        ─▶ prepared body: proxy::exchange sends header and body
//!                                           in one write and relays the answer        (Ok(true))
//!                                        ─▶ any other body: pingora proxies it        (Ok(false))
//!  upstream_peer ──▶ the checked address, SNI + verification for the host, project timeout
//!  upstream_request_filter ──▶ path+query from the URL, Host, drop Svc-* and hop-by-hop headers,
//!                              Content-Length fixed or dropped when the body changes
//!  [request header sent to the target]
//!  request_body_filter ──▶ the prepared body, or streaming substitution chunk by chunk
//!                          (an error aborts the upstream request before its end)
//!  [target response passed back unchanged]
//!  fail_to_proxy ──▶ ApiError carried in the pingora error → envelope; connect errors 502,
//!                    timeouts 504
//!  logging ──▶ metrics (route shape, status, latency) and one access-log line
//! ```

use crate::app::App;
use crate::edge::rest::{self, ApiRequest};
use crate::edge::routes::{self, Resource};
use crate::error::{ApiError, ErrorKind};
use crate::http::{
    is_json_content_type, read_body_pieces, read_json_body, write_response, Response,
};
use crate::proxy::{
    self, substitute::Substitution, CaRoots, ProxyCtx, PREFLIGHT_LIMIT, SVC_AUTHORIZATION,
    SVC_TARGET_URL,
};
use async_trait::async_trait;
use bytes::Bytes;
use http::{header, Method};
use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

/// The service.
pub struct Gateway {
    app: Arc<App>,
    ca_roots: CaRoots,
    /// `Idempotency-Key`s whose first request is running.
    idempotency: crate::edge::idempotency::InFlight,
    /// Per-project and per-entity rate limits.
    limits: crate::edge::ratelimit::Limiter,
    /// Connections for prepared bodies, made on first use (its TLS context loads the system
    /// roots).
    exchanger: std::sync::OnceLock<proxy::exchange::Exchanger>,
}

impl Gateway {
    pub fn new(app: Arc<App>, ca_roots: CaRoots) -> Self {
        Self {
            limits: crate::edge::ratelimit::Limiter::new(&app.config.projects),
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
    /// The prepared body was handed to pingora already.
    prepared_sent: bool,
    /// When the request to the target was about to be sent (target latency).
    upstream_started: Option<Instant>,
    /// The direct exchange failed (pingora's own failures come to `logging` as its error).
    failed: bool,
}

/// Carries an `ApiError` through pingora's error type, marked as the downstream's fault so
/// pingora stops waiting for the target (PINGORA.md: HTTP/2 stall otherwise).
fn carry(e: ApiError) -> Box<Error> {
    Error::because(ErrorType::HTTPStatus(e.status()), "paycred", e).into_down()
}

fn carried(e: &Error) -> Option<&ApiError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = e.cause.as_deref().map(|c| c as _);
    while let Some(c) = cause {
        if let Some(api) = c.downcast_ref::<ApiError>() {
            return Some(api);
        }
        // pingora boxes causes either as `Error` or as `Box<Error>`.
        if let Some(inner) = c.downcast_ref::<Error>() {
            cause = inner.cause.as_deref().map(|c| c as _);
        } else if let Some(inner) = c.downcast_ref::<Box<Error>>() {
            cause = inner.cause.as_deref().map(|c| c as _);
        } else {
            cause = c.source();
        }
    }
    None
}

/// What to answer the caller when proxying failed; `None` when the caller went away or sent
/// a broken request (nothing to answer).
fn proxy_failure(e: &Error) -> Option<ApiError> {
    if let Some(a) = carried(e) {
        return Some(a.clone());
    }
    let unreachable = || ApiError::new(ErrorKind::BadGateway, "The target could not be reached.");
    if matches!(e.esource(), ErrorSource::Downstream) {
        // Reading from or writing to the caller failed, timeouts included: not the target's.
        return None;
    }
    Some(match e.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            ApiError::new(
                ErrorKind::GatewayTimeout,
                "The target did not answer in time.",
            )
        }
        _ if matches!(e.esource(), ErrorSource::Upstream) => unreachable(),
        ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::TLSHandshakeFailure
        | ErrorType::ConnectError
        | ErrorType::ConnectionClosed
        | ErrorType::InvalidCert
        | ErrorType::HandshakeError => unreachable(),
        _ => {
            tracing::error!(error_type = e.etype().as_str(), "proxy failure");
            ApiError::internal()
        }
    })
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
            prepared_sent: false,
            upstream_started: None,
            failed: false,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let response = match self.answer(session, ctx).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                let direct = ctx.proxy.as_deref().is_some_and(proxy::exchange::applies);
                if !direct {
                    return Ok(false);
                }
                // An error here is a response cut short: pingora then closes the caller's
                // connection instead of ending the response as if it were complete.
                self.exchange(session, ctx).await?;
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
        Ok(Box::new(proxy::peer(p, self.ca_roots.get(&p.project.id))))
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
        upstream.set_uri(proxy::target_uri(&p.target).map_err(carry)?);
        upstream.insert_header(http::header::HOST, proxy::host_header(&p.target))?;
        let dropped: Vec<http::HeaderName> = upstream
            .headers
            .keys()
            .filter(|n| proxy::is_dropped_header(n))
            .cloned()
            .collect();
        for name in dropped {
            upstream.remove_header(&name);
        }
        if p.drop_authorization {
            upstream.remove_header(&http::header::AUTHORIZATION);
        }
        match (&p.prepared, p.substitute) {
            (Some(body), _) => {
                upstream.remove_header(&http::header::TRANSFER_ENCODING);
                upstream.insert_header(http::header::CONTENT_LENGTH, body.len())?;
            }
            (None, true) => {
                // Streaming substitution changes the length: pingora sends it chunked.
                upstream.remove_header(&http::header::CONTENT_LENGTH);
                // A retry replays the body through the filter: start over.
                p.substitution.reset();
            }
            (None, false) => {}
        }
        ctx.prepared_sent = false;
        ctx.upstream_started.get_or_insert_with(Instant::now);
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(p) = ctx.proxy.as_mut() else {
            return Ok(());
        };
        if let Some(prepared) = &p.prepared {
            if !ctx.prepared_sent {
                ctx.prepared_sent = true;
                *body = Some(prepared.clone());
            } else {
                *body = if end_of_stream {
                    None
                } else {
                    Some(Bytes::new())
                };
            }
            return Ok(());
        }
        if !p.substitute {
            return Ok(());
        }
        let chunk = body.take();
        if !end_of_stream {
            // Before the end, `Some(empty)` holds back; `None` would end the body.
            *body = Some(match chunk {
                Some(chunk) => p
                    .substitution
                    .feed(&self.app, &p.principal, chunk)
                    .await
                    .map_err(carry)?,
                None => Bytes::new(),
            });
            return Ok(());
        }
        let out = match chunk {
            Some(chunk) => p
                .substitution
                .feed_last(&self.app, &p.principal, &chunk)
                .await
                .map_err(carry)?,
            None => p.substitution.finish().map_err(carry)?,
        };
        record_uses(&self.app, p).await.map_err(carry)?;
        // At the end, nothing left is `None`: an empty write would be a second terminator
        // (pingora issue #935).
        *body = (!out.is_empty()).then(|| Bytes::from(out));
        Ok(())
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, error: &Error) -> bool {
        carried(error).is_some_and(|e| e.status() < 500)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let Some(api_error) = proxy_failure(e) else {
            // The caller went away or sent a broken request: nothing to answer.
            ctx.status = 499;
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        };
        ctx.status = api_error.status();
        if session.response_written().is_none() {
            if let Err(write_error) = write_response(session, &Response::error(&api_error)).await {
                tracing::debug!(error = %write_error, "writing the error response");
            }
        }
        FailToProxy {
            error_code: api_error.status(),
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let ended = Instant::now();
        let elapsed = ended.saturating_duration_since(ctx.started);
        if ctx.proxy.is_some() {
            if let Some(resp) = session.response_written() {
                if ctx.status == 0 {
                    ctx.status = resp.status.as_u16();
                }
            }
        }
        self.app.metrics.record(ctx.route, ctx.status, elapsed);
        if let Some(p) = &ctx.proxy {
            let upstream = ctx
                .upstream_started
                .map(|t| ended.saturating_duration_since(t));
            self.app.metrics.record_proxy(
                ctx.status,
                upstream,
                _e.is_some() || ctx.failed,
                p.substitution.templates,
            );
            // One entry per request, including every credential it revealed.
            let mut resource = String::with_capacity(96);
            resource.push_str("host=");
            resource.push_str(&p.target.url.host);
            // Writing to a String cannot fail.
            let _ = write!(
                resource,
                " status={} templates={}",
                ctx.status, p.substitution.templates
            );
            for (i, id) in p.substitution.revealed().into_iter().enumerate() {
                resource.push_str(if i == 0 { " revealed=" } else { "," });
                resource.push_str(id);
            }
            let event = crate::audit::event(
                &p.principal.project,
                &p.principal.entity,
                "proxy.use",
                resource,
            );
            self.app.store.append_audit_nowait(event);
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

/// Counts one use of every purchase intent the request's templates used.
async fn record_uses(app: &App, p: &ProxyCtx) -> Result<(), ApiError> {
    for intent in p.substitution.intents_used() {
        crate::service::intents::record_proxy_use(
            app,
            &p.principal.project,
            &p.principal.entity,
            &intent,
        )
        .await?;
    }
    Ok(())
}

impl Gateway {
    /// `Ok(Some)`: answer here; `Ok(None)`: proxy to the target.
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Response>, ApiError> {
        let req = session.req_header();
        if let Some(demo) =
            crate::dev::demo::answer(self.app.config.demo.as_ref(), &req.method, req.uri.path())
        {
            ctx.route = "demo";
            return demo.map(Some);
        }
        let Some(route) = routes::route(req.uri.path()) else {
            return Err(ApiError::not_found("Route"));
        };
        ctx.route = route.label();
        let method = req.method.clone();
        if !route.allowed().contains(&method) {
            return Err(ApiError::method_not_allowed(&route.allow_header()));
        }
        match route.resource {
            Resource::Health => {
                return Response::json(200, &serde_json::json!({"status": "ok"})).map(Some)
            }
            Resource::Metrics => return Ok(Some(self.metrics())),
            Resource::OpenApi => {
                return Ok(Some(Response {
                    status: 200,
                    headers: Vec::new(),
                    body: Some(Bytes::from_static(crate::api::openapi::DOCUMENT.as_bytes())),
                    intent: None,
                }))
            }
            Resource::Proxy => {
                let project = route.project.as_deref().unwrap_or_default();
                ctx.proxy = Some(Box::new(self.start_proxy(session, project).await?));
                return Ok(None);
            }
            _ => {}
        }
        let project = route.project.as_deref().unwrap_or_default();
        let authorization = req.headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
        let principal = self
            .app
            .auth
            .authenticate(authorization, project, self.app.now_secs())
            .inspect_err(|e| self.audit_auth_failure(project, ctx.route, e))?;
        self.limits.check(&principal.project, &principal.entity)?;
        let query = req.uri.query().map(str::to_string);
        let idempotency_key = match method == Method::POST {
            true => crate::edge::idempotency::key_from(&req.headers)?,
            false => None,
        };
        let path = req.uri.path().to_string();
        let body = if method == Method::POST {
            Some(read_json_body(session, self.app.config.rest_max_body).await?)
        } else {
            None
        };
        let request = ApiRequest {
            method: &method,
            route: &route,
            principal: &principal,
            query: query.as_deref(),
            body: body.clone(),
        };
        let Some(key) = idempotency_key else {
            return rest::dispatch(&self.app, request).await.map(Some);
        };
        let body = body.unwrap_or_default();
        crate::edge::idempotency::run(
            &self.app,
            &self.idempotency,
            &principal,
            (method.as_str(), &path, &body),
            &key,
            rest::dispatch(&self.app, request),
        )
        .await
        .map(Some)
    }

    /// Authenticates, checks the target and, for small JSON bodies, substitutes up front.
    async fn start_proxy(
        &self,
        session: &mut Session,
        project: &str,
    ) -> Result<ProxyCtx, ApiError> {
        let headers = &session.req_header().headers;
        let (auth_header, drop_authorization) = match headers.get(SVC_AUTHORIZATION) {
            Some(v) => (Some(v.as_bytes()), false),
            None => (
                headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()),
                true,
            ),
        };
        let principal = self
            .app
            .auth
            .authenticate(auth_header, project, self.app.now_secs())
            .inspect_err(|e| self.audit_auth_failure(project, "proxy", e))?;
        self.limits.check(&principal.project, &principal.entity)?;
        principal.require_private()?;
        let project = self
            .app
            .config
            .project(project)
            .cloned()
            .ok_or_else(ApiError::internal)?;
        let raw_target = headers
            .get(SVC_TARGET_URL)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                ApiError::invalid_field("Svc-Target-URL", "required: the URL to forward to")
            })?;
        let url = proxy::target::parse(raw_target, &project.proxy)?;
        let substitute = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| is_json_content_type(v.as_bytes()));
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        let chunked = headers.get(header::TRANSFER_ENCODING).is_some();
        let target = proxy::target::resolve(url, &project.proxy).await?;
        let mut ctx = ProxyCtx {
            principal,
            project,
            target,
            drop_authorization,
            substitute,
            prepared: None,
            request: None,
            substitution: Substitution::default(),
            body_changed: false,
        };
        if substitute && !chunked && declared.is_some_and(|n| n > 0 && n <= PREFLIGHT_LIMIT) {
            let pieces = read_preflight_body(session).await?;
            let req = session.req_header();
            if !proxy::exchange::suits(req) {
                let body = crate::http::join(pieces);
                // pingora proxies it (its retry buffer replays the body).
                if crate::template::Scanner::has_templates(&body) {
                    let out = ctx
                        .substitution
                        .feed_last(&self.app, &ctx.principal, &body)
                        .await?;
                    ctx.body_changed = ctx.substitution.templates > 0;
                    ctx.prepared = Some(if ctx.body_changed {
                        Bytes::from(out)
                    } else {
                        body
                    });
                } else {
                    ctx.prepared = Some(body);
                }
            } else {
                // The whole request, built in one buffer: the body is substituted (or
                // copied) once, in place, behind room for the head.
                let uri = proxy::target_uri(&ctx.target)?;
                let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
                // Room for the first piece: the pieces after the last one a template reaches
                // are not copied into the buffer, and it grows when more are.
                let first = pieces.first().map_or(0, Bytes::len);
                let mut request = proxy::exchange::RequestBuf::new(
                    req,
                    &ctx.target,
                    ctx.drop_authorization,
                    path,
                    first + first / 8,
                );
                // The body is copied once, from the pieces it arrived in, up to the last
                // piece a template reaches; the pieces after it are sent as they were read.
                let used = ctx
                    .substitution
                    .feed_pieces_into(&self.app, &ctx.principal, &pieces, request.body())
                    .await?;
                ctx.body_changed = ctx.substitution.templates > 0;
                ctx.request = Some(request.finish(pieces.get(used..).unwrap_or_default()));
            }
            record_uses(&self.app, &ctx).await?;
        }
        Ok(ctx)
    }

    /// Sends the prepared body through [`proxy::exchange`] and relays the answer; on failure
    /// answers as `fail_to_proxy` would (502, 504), or cuts the caller's connection when the
    /// response had already started.
    async fn exchange(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
        let Some(p) = ctx.proxy.as_deref() else {
            return Ok(());
        };
        let Some(request) = p.request.as_ref() else {
            return Ok(());
        };
        let peer = proxy::peer(p, self.ca_roots.get(&p.project.id));
        let replayable = proxy::exchange::replayable(session.req_header());
        let exchanger = self.exchanger.get_or_init(|| {
            // As pingora sizes its own pool: the setting per worker thread.
            let server = &self.app.config.server;
            let pool_size = server
                .upstream_keepalive_pool_size
                .saturating_mul(server.threads.max(1));
            proxy::exchange::Exchanger::new(pool_size)
        });
        let e = match exchanger
            .relay(
                session,
                &peer,
                request,
                replayable,
                &mut ctx.upstream_started,
            )
            .await
        {
            Ok(status) => {
                ctx.status = status;
                return Ok(());
            }
            Err(e) => e,
        };
        if session.response_written().is_some() {
            // Cut short: `fail_to_proxy` records it, and the caller's connection is closed.
            return Err(e);
        }
        ctx.failed = true;
        session.set_keepalive(None);
        match proxy_failure(&e) {
            Some(api_error) => {
                ctx.status = api_error.status();
                if let Err(write_error) =
                    write_response(session, &Response::error(&api_error)).await
                {
                    tracing::debug!(error = %write_error, "writing the error response");
                }
            }
            None => ctx.status = 499,
        }
        Ok(())
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
            .map(proxy::exchange::Exchanger::connections)
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

/// Reads a body of at most [`PREFLIGHT_LIMIT`] bytes, as the pieces it arrived in. When pingora will proxy the request
/// (not [`proxy::exchange`]), its retry buffer keeps the body, so that it replays it to the
/// target after `request_filter`.
async fn read_preflight_body(session: &mut Session) -> Result<Vec<Bytes>, ApiError> {
    if !proxy::exchange::suits(session.req_header()) {
        session.enable_retry_buffering();
    }
    read_body_pieces(session, PREFLIGHT_LIMIT).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carried_api_error_is_found_through_wrapping() {
        let e = carry(ApiError::invalid_template("a", "{{x}}", "bad"));
        assert!(carried(&e).is_some());
        let wrapped = Error::because(ErrorType::HTTPStatus(400), "wrap", e).more_context("Peer");
        assert_eq!(carried(&wrapped).map(|a| a.status()), Some(400));
    }
}
