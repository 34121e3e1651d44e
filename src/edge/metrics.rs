//! `/metrics`: the page, and where it is served. Counters say how much traffic each project's
//! routes carry, which is not for whoever can reach the edge, so the public `/metrics` is
//! 404 unless the config says otherwise:
//!
//! - `metrics.listen`: a listener of its own (plain HTTP) that answers `GET /metrics` and
//!   nothing else, for a scraper on a private network or the loopback;
//! - `metrics.bearer_token_file`: the public `/metrics` answers a caller whose
//!   `Authorization` is `Bearer <token>` (compared in constant time), 401 to anyone else.

use crate::config::MetricsConfig;
use crate::error::ApiError;
use crate::http::Response;
use crate::ops::metrics::Metrics;
use crate::proxy::ProxyStats;
use crate::secret::constant_time_eq;
use crate::store::Store;
use async_trait::async_trait;
use http::header;
use pingora::apps::http_app::ServeHttp;
use pingora::http::RequestHeader;
use pingora::protocols::http::ServerSession;
use std::sync::Arc;

/// What `/metrics` shows: the request metrics, the store's and the direct exchange's counters.
#[derive(Clone)]
pub struct MetricsPage {
    pub metrics: Arc<Metrics>,
    pub store: Arc<dyn Store>,
    /// The direct exchange's connection counters ([`crate::proxy::Proxy::stats`]).
    pub proxy: ProxyStats,
}

impl MetricsPage {
    /// The page in Prometheus text format.
    pub fn render(&self) -> Response {
        let stats = self.store.stats();
        let (opened, reused) = self.proxy.connections();
        let text = self.metrics.render(&[
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
            (
                "paycred_store_cache_hits_total",
                "Reads the store answered from its cache of records (payment methods; intents on PostgreSQL).",
                stats.cache_hits,
            ),
            (
                "paycred_store_changes_heard_total",
                "Changes announced by any instance that this one's cache listener applied (PostgreSQL).",
                stats.changes_heard,
            ),
        ]);
        Response {
            status: 200,
            headers: vec![("Content-Type", "text/plain; version=0.0.4".to_string())],
            body: Some(bytes::Bytes::from(text)),
            intent: None,
        }
    }

    /// The answer of the public listener's `/metrics`: 404 without a token configured, 401
    /// without the right bearer token.
    pub fn public(
        &self,
        config: &MetricsConfig,
        req: &RequestHeader,
    ) -> Result<Response, ApiError> {
        let Some(token) = &config.bearer_token else {
            return Err(ApiError::not_found("Route"));
        };
        let sent = req
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        match sent {
            Some(sent) if constant_time_eq(sent, token.expose().as_bytes()) => Ok(self.render()),
            _ => Err(ApiError::unauthorized(
                "/metrics needs the metrics bearer token.",
            )),
        }
    }
}

/// The `metrics.listen` listener: `GET /metrics`, and 404 for anything else.
#[async_trait]
impl ServeHttp for MetricsPage {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let req = session.req_header();
        let answer = match (req.method == http::Method::GET, req.uri.path()) {
            (true, "/metrics") => self.render(),
            (false, "/metrics") => Response::error(&ApiError::method_not_allowed("GET")),
            _ => Response::error(&ApiError::not_found("Route")),
        };
        let mut out = http::Response::builder().status(answer.status);
        let body = answer.body.map(|b| b.to_vec()).unwrap_or_default();
        let has_type = answer.headers.iter().any(|(n, _)| *n == "Content-Type");
        for (name, value) in answer.headers {
            out = out.header(name, value);
        }
        if !has_type {
            out = out.header(header::CONTENT_TYPE, "application/json");
        }
        out.header(header::CONTENT_LENGTH, body.len())
            .header(header::CACHE_CONTROL, "no-store")
            .body(body)
            .unwrap_or_default()
    }
}
