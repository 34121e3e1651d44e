//! The development demo at `/demo`: a page that collects a card (encrypted in the page by the
//! JS SDK before it leaves), creates the payment method, has a network-token purchase intent
//! made that needs verification, runs `verifyPurchaseIntent` in the browser, and shows the
//! active credential's last 4.
//!
//! Served only when the config has a `demo:` section (`paycred serve --dev` writes one). The
//! page needs a private-role call (creating the purchase intent, reading the credential), which
//! a real deployment makes from its own backend; here `GET /demo/session` stands in for that
//! backend and mints both a public and a private token for a fresh entity with the dev
//! project's private key. Development only: never configure `demo:` in production. A config
//! with `demo:` and a `listen` address that is not loopback is refused.
//!
//! The static files are embedded with `include_str!`, the SDK straight from `sdk/js/src`.

use crate::config::DemoConfig;
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use bytes::Bytes;
use std::time::Duration;

const INDEX_HTML: &str = include_str!("index.html");
const DEMO_JS: &str = include_str!("demo.js");
const SDK_JS: &str = include_str!("../../../sdk/js/src/paycred.js");

/// Lifetime of the tokens the demo session hands out.
const SESSION_TTL: Duration = Duration::from_secs(15 * 60);

fn asset(content_type: &'static str, body: &'static str) -> Response {
    Response {
        status: 200,
        headers: vec![("Content-Type", content_type.to_string())],
        body: Some(Bytes::from_static(body.as_bytes())),
        intent: None,
    }
}

/// Answers `/demo` paths when the demo is enabled; `None` otherwise (the caller then answers
/// 404 as for any unknown route).
pub fn answer(
    demo: Option<&DemoConfig>,
    method: &http::Method,
    path: &str,
) -> Option<ApiResult<Response>> {
    let demo = demo?;
    let response = match path {
        "/demo" | "/demo/" => asset("text/html; charset=utf-8", INDEX_HTML),
        "/demo/demo.js" => asset("text/javascript; charset=utf-8", DEMO_JS),
        "/demo/paycred.js" => asset("text/javascript; charset=utf-8", SDK_JS),
        "/demo/session" => return Some(session(demo)),
        _ => return None,
    };
    if method != http::Method::GET && method != http::Method::HEAD {
        return Some(Err(ApiError::method_not_allowed("GET")));
    }
    Some(Ok(response))
}

/// `GET /demo/session`: a fresh entity with a public and a private token.
fn session(demo: &DemoConfig) -> ApiResult<Response> {
    let pem = zeroize::Zeroizing::new(std::fs::read(&demo.private_key_file).map_err(|e| {
        tracing::error!(error = %e, "demo: reading the private key file");
        ApiError::internal()
    })?);
    let entity = format!("demo_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let now = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap_or(0);
    let mint = |role: &str| {
        crate::auth::mint::mint(
            &pem,
            Some(&demo.kid),
            &demo.project,
            &entity,
            role,
            SESSION_TTL,
            now,
        )
        .map_err(|e| {
            tracing::error!(error = %e, "demo: minting a token");
            ApiError::internal()
        })
    };
    Response::json(
        200,
        &serde_json::json!({
            "projectId": demo.project,
            "entityId": entity,
            "publicToken": mint("public")?,
            "privateToken": mint("private")?,
        }),
    )
}
