//! One delivery attempt, as the Standard Webhooks specification has it: `POST` of the event's
//! JSON (as `GET /projects/:p/events` shows it) to the endpoint's URL with
//!
//! - `webhook-id`: the event's id, the same on every attempt and every redelivery, so a
//!   receiver dedupes by it;
//! - `webhook-timestamp`: unix seconds when the attempt is sent;
//! - `webhook-signature`: `v1,<base64 HMAC-SHA256>` of `id.timestamp.body` with each live
//!   secret of the endpoint, separated by spaces ([`crate::domain::webhook`]).
//!
//! The URL passes the target guard again at each attempt (https, the project's
//! `allowed_hosts`, public addresses unless the project allows private networks), and the
//! connection goes to the address the guard checked, with TLS verified against the host name
//! and the project's `proxy.ca_file` roots. A 2xx answer delivers; any other status
//! (redirects are not followed: a 3xx is a failure), a timeout or an error is retried.

use crate::app::App;
use crate::service::{aad, target};
use crate::store::events::id_of;
use crate::store::{DeliveryRecord, WebhookEndpointRecord};
use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::tls::x509::X509;
use std::sync::Arc;
use zeroize::Zeroizing;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered 2xx (the status).
    Delivered(u16),
    /// Answered another status.
    Status(u16),
    /// A failure to retry: `timeout`, `connect`, `send`, `refused` (the target guard), …
    Error(&'static str),
    /// Never deliverable again: `endpoint_deleted`, `endpoint_disabled`, `event_missing`.
    Gone(&'static str),
}

impl Outcome {
    /// The stored form: `http_<status>` or the error's kind.
    pub fn name(&self) -> String {
        match self {
            Outcome::Delivered(s) | Outcome::Status(s) => format!("http_{s}"),
            Outcome::Error(kind) | Outcome::Gone(kind) => (*kind).to_string(),
        }
    }
}

/// Sends `d` once (bounded by [`super::ATTEMPT_TIMEOUT`]).
pub async fn attempt(
    app: &App,
    connector: &pingora::connectors::http::Connector,
    ca: Option<&Arc<Box<[X509]>>>,
    d: &DeliveryRecord,
) -> Outcome {
    let endpoint = match app
        .store
        .get_webhook_endpoint(&d.project, &d.endpoint_id)
        .await
    {
        Ok(Some(e)) if e.enabled => e,
        Ok(Some(_)) => return Outcome::Gone("endpoint_disabled"),
        Ok(None) => return Outcome::Gone("endpoint_deleted"),
        Err(_) => return Outcome::Error("store"),
    };
    let event = match app.store.get_event(&d.project, d.event_seq).await {
        Ok(Some(e)) => e,
        Ok(None) => return Outcome::Gone("event_missing"),
        Err(_) => return Outcome::Error("store"),
    };
    let Ok(body) = crate::api::events::view(app, &event)
        .and_then(|v| serde_json::to_vec(&v).map_err(|_| crate::error::ApiError::internal()))
    else {
        return Outcome::Error("render");
    };
    let Some(secrets) = live_secrets(app, &endpoint) else {
        return Outcome::Error("secret");
    };
    let Some(project) = app.config.project(&d.project).cloned() else {
        return Outcome::Gone("project_removed");
    };
    let send = async {
        let checked = match target::parse(&endpoint.url, &project.proxy) {
            Ok(url) => target::resolve(url, &project.proxy).await,
            Err(e) => Err(e),
        };
        let Ok(target) = checked else {
            return Outcome::Error("refused");
        };
        let id = id_of(d.event_seq);
        let timestamp = app.clock.now().unix_timestamp();
        let keys: Vec<&[u8]> = secrets.iter().map(|s| s.as_slice()).collect();
        let signature = crate::domain::webhook::signature_header(&keys, &id, timestamp, &body);
        post(
            connector, &target, &project, ca, &id, timestamp, &signature, body,
        )
        .await
    };
    tokio::time::timeout(super::ATTEMPT_TIMEOUT, send)
        .await
        .unwrap_or(Outcome::Error("timeout"))
}

/// The endpoint's secrets that sign now (the newest, and older ones until they expire),
/// opened; `None` when one does not open.
fn live_secrets(app: &App, endpoint: &WebhookEndpointRecord) -> Option<Vec<Zeroizing<Vec<u8>>>> {
    let now = app.now_micros();
    endpoint
        .secrets
        .iter()
        .filter(|s| s.expires_micros.is_none_or(|e| e > now))
        .map(|s| {
            let aad = aad::webhook_secret(&endpoint.project, &endpoint.id, s.n);
            app.vault.open(&endpoint.project, &aad, &s.sealed).ok()
        })
        .collect()
}

/// The request, sent over a new connection to the checked address; the answer's status.
#[allow(clippy::too_many_arguments)]
async fn post(
    connector: &pingora::connectors::http::Connector,
    target: &target::Target,
    project: &crate::config::ProjectConfig,
    ca: Option<&Arc<Box<[X509]>>>,
    id: &str,
    timestamp: i64,
    signature: &str,
    body: Vec<u8>,
) -> Outcome {
    let mut peer = crate::proxy::peer::peer(target, project, ca);
    let o = &mut peer.options;
    o.connection_timeout = Some(super::ATTEMPT_TIMEOUT);
    o.total_connection_timeout = Some(super::ATTEMPT_TIMEOUT);
    o.read_timeout = Some(super::ATTEMPT_TIMEOUT);
    o.write_timeout = Some(super::ATTEMPT_TIMEOUT);
    let Ok(req) = request(target, id, timestamp, signature, body.len()) else {
        return Outcome::Error("request");
    };
    let Ok((mut session, _)) = connector.get_http_session(&peer).await else {
        return Outcome::Error("connect");
    };
    let sent = async {
        session.write_request_header(Box::new(req)).await?;
        session.write_request_body(Bytes::from(body), true).await?;
        session.finish_request_body().await?;
        session.read_response_header().await
    }
    .await;
    let status = session.response_header().map(|h| h.status.as_u16());
    session.shutdown().await;
    match (sent, status) {
        (Ok(()), Some(s)) if (200..300).contains(&s) => Outcome::Delivered(s),
        (Ok(()), Some(s)) => Outcome::Status(s),
        _ => Outcome::Error("send"),
    }
}

fn request(
    target: &target::Target,
    id: &str,
    timestamp: i64,
    signature: &str,
    len: usize,
) -> pingora::Result<RequestHeader> {
    let mut req = RequestHeader::build("POST", target.url.path_and_query.as_bytes(), None)?;
    req.insert_header("host", crate::proxy::forward::host_header(target))?;
    req.insert_header("content-type", "application/json")?;
    req.insert_header("content-length", len.to_string())?;
    req.insert_header("user-agent", concat!("paycred/", env!("CARGO_PKG_VERSION")))?;
    req.insert_header("webhook-id", id)?;
    req.insert_header("webhook-timestamp", timestamp.to_string())?;
    req.insert_header("webhook-signature", signature)?;
    Ok(req)
}
