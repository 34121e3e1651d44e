//! The `pay` tool: the agent's request sent to paycred's own proxy route
//! (`/projects/:projectId/proxy` on this listener, over loopback) with the caller's token in
//! `Svc-Authorization`, so that it takes the proxy's one path: the target guard, template
//! substitution, the forwarding policy, the response guard, the use counted, the audit.
//!
//! The proxy route's own refusals (an error envelope of paycred: `invalidTemplate`, a target
//! not allowed, 502/504) become tool errors; any other answer is the target's, returned as
//! status, headers and body (JSON when it parses, else text, at most [`MAX_BODY`] bytes).
//!
//! What reaches the model is guarded twice: the proxy route's response guard masks (or
//! refuses) the card values this request's templates substituted, so `pay` needs the
//! project's `proxy.response_guard` on (with `off` it is refused); then the answer passes the
//! same guard again in `mask` mode with `response_guard_any_card`, so any card number in it,
//! substituted or not, is masked.

use crate::app::App;
use crate::auth::Principal;
use crate::config::{ProxyConfig, ResponseGuardMode};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::proxy::guard::ResponseGuard;
use serde_json::{json, Map, Value};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The most of the target's body returned.
pub const MAX_BODY: u64 = 1024 * 1024;

/// The whole exchange, the target's time included.
const TIMEOUT: Duration = Duration::from_secs(90);

/// Headers the agent may not set: paycred's own, and the framing (written for the body).
fn reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("svc-")
        || matches!(
            lower.as_str(),
            "host" | "content-length" | "transfer-encoding" | "connection" | "upgrade" | "te"
        )
}

/// The agent's request, and its answer.
struct Outgoing {
    url: String,
    method: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    tls: bool,
    /// The second guard's settings: the project's, in `mask` mode, any card sought.
    guard: ProxyConfig,
}

/// Runs `pay` with `args` (`method`, `url`, `headers`, `body`).
pub async fn pay(
    app: &App,
    principal: &Principal,
    bearer: &str,
    args: &Map<String, Value>,
) -> ApiResult<Value> {
    let Some(project) = app.config.project(&principal.project) else {
        return Err(ApiError::not_found("Project"));
    };
    if project.proxy.response_guard == ResponseGuardMode::Off {
        return Err(ApiError::forbidden(
            "pay needs the project's proxy.response_guard on (mask or refuse).",
        ));
    }
    let guard = ProxyConfig {
        response_guard: ResponseGuardMode::Mask,
        response_guard_any_card: true,
        ..project.proxy.clone()
    };
    let method = match args.get("method").and_then(Value::as_str) {
        Some(m) if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&m) => m.to_string(),
        _ => {
            return Err(ApiError::invalid_field(
                "method",
                "one of GET, POST, PUT, PATCH, DELETE",
            ))
        }
    };
    let Some(target) = args.get("url").and_then(Value::as_str) else {
        return Err(ApiError::invalid_field("url", "required"));
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    match args.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(h)) => {
            for (name, value) in h {
                let Some(value) = value.as_str() else {
                    return Err(ApiError::invalid_field(
                        &format!("headers.{name}"),
                        "must be a string",
                    ));
                };
                if reserved(name) {
                    return Err(ApiError::invalid_field(
                        &format!("headers.{name}"),
                        "set by paycred",
                    ));
                }
                headers.push((name.clone(), value.to_string()));
            }
        }
        Some(_) => return Err(ApiError::invalid_field("headers", "must be an object")),
    }
    let has_type = headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    let body = match args.get("body") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone().into_bytes()),
        Some(json) => {
            if !has_type {
                headers.push(("Content-Type".into(), "application/json".into()));
            }
            Some(json.to_string().into_bytes())
        }
    };
    headers.push(("Svc-Target-URL".into(), target.to_string()));
    headers.push(("Svc-Authorization".into(), bearer.to_string()));
    let listen = app.config.listen;
    let tls = app.config.tls.is_some();
    let scheme = if tls { "https" } else { "http" };
    let url = format!(
        "{scheme}://{}/projects/{}/proxy",
        loopback(listen),
        principal.project
    );
    let outgoing = Outgoing {
        url,
        method,
        headers,
        body,
        tls,
        guard,
    };
    tokio::task::spawn_blocking(move || send(outgoing))
        .await
        .map_err(|_| ApiError::internal())?
}

/// This listener as reached from this host.
fn loopback(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), listen.port())
        }
        _ => listen,
    }
}

fn unreachable_proxy() -> ApiError {
    ApiError::new(
        ErrorKind::BadGateway,
        "paycred's proxy route could not be reached.",
    )
}

/// The exchange with the proxy route (blocking).
fn send(out: Outgoing) -> ApiResult<Value> {
    let mut agent = ureq::AgentBuilder::new().redirects(0).timeout(TIMEOUT);
    if out.tls {
        // The listener's own certificate names its public host, not the loopback address
        // this connection goes to: it is paycred talking to its own socket.
        let connector = native_tls::TlsConnector::builder()
            .danger_accept_invalid_certs(true)
            .danger_accept_invalid_hostnames(true)
            .build()
            .map_err(|_| ApiError::internal())?;
        agent = agent.tls_connector(Arc::new(connector));
    }
    let agent = agent.build();
    let mut request = agent.request(&out.method, &out.url);
    for (name, value) in &out.headers {
        request = request.set(name, value);
    }
    let answered = match &out.body {
        Some(body) => request.send_bytes(body),
        None => request.call(),
    };
    let response = match answered {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(_)) => return Err(unreachable_proxy()),
    };
    let status = response.status();
    let mut headers = Map::new();
    for name in response.headers_names() {
        let values = response.all(&name).join(", ");
        let masked = masked(&out.guard, values.as_bytes())?;
        headers.insert(
            name,
            Value::String(String::from_utf8_lossy(&masked).into_owned()),
        );
    }
    let json_type = response.content_type().contains("json");
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    response
        .into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut bytes)
        .map_err(|_| unreachable_proxy())?;
    let bytes = masked(&out.guard, &bytes)?;
    let body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(json) if json_type => json,
        _ => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
    };
    if let Some(e) = own_error(status, &body) {
        return Err(e);
    }
    Ok(json!({ "status": status, "headers": headers, "body": body }))
}

/// `bytes` with every card number masked (the response guard, `mask`, any card).
fn masked(guard: &ProxyConfig, bytes: &[u8]) -> ApiResult<Vec<u8>> {
    let mut guard = ResponseGuard::new(guard);
    Ok(guard.whole(bytes)?.map(|b| b.to_vec()).unwrap_or_default())
}

/// paycred's own error envelope (not the target's answer), as an [`ApiError`].
fn own_error(status: u16, body: &Value) -> Option<ApiError> {
    let error = body.get("error")?;
    if error.get("status")?.as_u64()? != u64::from(status) {
        return None;
    }
    error.get("title")?.as_str()?;
    let kind: ErrorKind = serde_json::from_value(error.get("type")?.clone()).ok()?;
    let message = error.get("message")?.as_str()?;
    let mut e = ApiError::new(kind, message);
    if let Some(details) = error.get("details").filter(|d| !d.is_null()) {
        e = e.with_details(details.clone());
    }
    Some(e)
}
