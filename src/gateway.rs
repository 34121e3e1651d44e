//! The pingora glue: `impl ProxyHttp` for paycred. Only this module and `http` touch
//! pingora's `Session`.
//!
//! ```text
//!  request ──▶ request_filter ─┬─ unknown route ─────────────▶ 404 envelope
//!                              ├─ wrong method ──────────────▶ 405 envelope + Allow
//!                              ├─ /health, /metrics ─────────▶ answered here
//!                              └─ REST route ─▶ auth (JWT) ─▶ read bounded JSON body
//!                                             ─▶ api::dispatch ─▶ JSON / envelope
//!                                 (returns Ok(true): the response is written, no upstream)
//!  logging ──▶ metrics (route shape, status, latency) and one access-log line
//! ```
//!
//! The proxy path (`upstream_peer`, `request_body_filter`) joins this chart when the
//! proxy route lands; until then no request ever reaches an upstream.

use crate::api::{self, ApiRequest, App, Resource};
use crate::error::ApiError;
use crate::http::{read_json_body, write_response, Response};
use async_trait::async_trait;
use http::Method;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use std::sync::Arc;
use std::time::Instant;

/// The service.
pub struct Gateway {
    app: Arc<App>,
}

impl Gateway {
    pub fn new(app: Arc<App>) -> Self {
        Self { app }
    }
}

/// Per-request state.
pub struct RequestCtx {
    started: Instant,
    route: &'static str,
    status: u16,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            started: Instant::now(),
            route: "unknown",
            status: 0,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let response = match self.answer(session, ctx).await {
            Ok(r) => r,
            Err(e) => Response::error(&e),
        };
        ctx.status = response.status;
        write_response(session, &response).await?;
        Ok(true)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        Err(Error::explain(
            ErrorType::InternalError,
            "no upstream for this route",
        ))
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let elapsed = ctx.started.elapsed();
        self.app.metrics.record(ctx.route, ctx.status, elapsed);
        tracing::info!(
            method = %session.req_header().method,
            route = ctx.route,
            status = ctx.status,
            micros = elapsed.as_micros() as u64,
            "request"
        );
    }
}

impl Gateway {
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Response, ApiError> {
        let req = session.req_header();
        let Some(route) = api::route(req.uri.path()) else {
            return Err(ApiError::not_found("Route"));
        };
        ctx.route = route.label();
        let method = req.method.clone();
        if !route.allowed().contains(&method) {
            return Err(ApiError::method_not_allowed(&route.allow_header()));
        }
        match route.resource {
            Resource::Health => return Response::json(200, &serde_json::json!({"status": "ok"})),
            Resource::Metrics => return Ok(self.metrics()),
            _ => {}
        }
        let project = route.project.as_deref().unwrap_or_default();
        let authorization = req.headers.get("authorization").map(|v| v.as_bytes());
        let principal = self
            .app
            .auth
            .authenticate(authorization, project, self.app.now_secs())?;
        let query = req.uri.query().map(str::to_string);
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
            body,
        };
        api::dispatch(&self.app, request).await
    }

    fn metrics(&self) -> Response {
        let stats = self.app.store.stats();
        let text = self.app.metrics.render(&[
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
        }
    }
}
