//! The MCP server: `POST /mcp` (the project is the token's) and `POST
//! /projects/:projectId/mcp`, over the Streamable HTTP transport, authenticated with a
//! private-role project JWT (`Authorization: Bearer`; the entity is its `sub`).
//!
//! - Both eras of the protocol: the `initialize` handshake of 2025-11-25 (and 2025-06-18,
//!   2025-03-26, 2024-11-05), and the stateless requests of 2026-07-28 (`server/discover`,
//!   every request carrying its version in `params._meta`, checked against the
//!   `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers). A request whose
//!   `MCP-Protocol-Version` names no handshake revision is of the stateless era, as the
//!   official SDKs route them.
//! - Stateless in both: no `Mcp-Session-Id` is issued (the transport lets a server go
//!   without), each POST carries one JSON-RPC message and is answered `application/json`
//!   (no SSE stream); a notification or a client's response is answered 202. `GET` and
//!   `DELETE` answer 405 (no stream to open, no session to end).
//! - [`tools`]: what the tools show (never a card number, CVC or cryptogram), each calling the
//!   handler its REST route calls; [`pay`]: the `pay` tool's request through the proxy route.
//!
//! A refused token is answered before any JSON-RPC: 401 with `WWW-Authenticate: Bearer`, a
//! public-role token 403, and so is a request whose `Origin` is not one of the project's
//! `cors.allowed_origins` (the transport asks servers to check it). Tool failures are tool results with `isError` carrying the API's
//! error object; protocol failures are JSON-RPC errors.

pub mod pay;
pub mod tools;

use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::{read_json_body, Response};
use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::{json, Map, Value};

/// Revisions of the `initialize` handshake, newest first: the first is the counter-offer to
/// a client whose revision is not here.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Revisions of stateless requests (no handshake), newest first.
pub const STATELESS_VERSIONS: &[&str] = &["2026-07-28"];

/// `_meta` keys of a stateless request.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const HEADER_MISMATCH: i64 = -32020;
const UNSUPPORTED_VERSION: i64 = -32022;

/// The server's description to hosts (`instructions`).
const INSTRUCTIONS: &str = "paycred holds the user's cards. Pay without ever seeing a card \
    value: list_payment_methods, create_purchase_intent (mandates bound what it may pay), then \
    pay (a request whose body names the card with {{ paymentMethod: … }} templates, filled in \
    by paycred on the way to the merchant) or create_browser_session (stand-in card values a \
    browser types, swapped by paycred's browser proxy). No tool ever shows a card number, \
    CVC or cryptogram.";

/// A refused authentication, as an MCP client expects it: 401 names the scheme.
pub fn refusal(mut e: ApiError) -> ApiError {
    if e.status() == 401 {
        e.headers
            .push(("WWW-Authenticate", "Bearer realm=\"paycred\"".to_string()));
    }
    e
}

/// Answers one authenticated POST to the MCP endpoint.
pub async fn answer(
    app: &App,
    session: &mut Session,
    principal: &Principal,
) -> ApiResult<Response> {
    principal.require_private()?;
    let headers = &session.req_header().headers;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    // The transport's guard against DNS rebinding: a page's request carries its origin,
    // which must be one of the project's `cors.allowed_origins`.
    if let Some(origin) = header("origin") {
        let allowed = app
            .config
            .project(&principal.project)
            .is_some_and(|p| p.cors_allowed_origins.contains(&origin));
        if !allowed {
            return Err(ApiError::forbidden(
                "This Origin is not one of the project's cors.allowed_origins.",
            ));
        }
    }
    let version = header("mcp-protocol-version");
    let method_header = header("mcp-method");
    let name_header = header("mcp-name");
    let bearer = header("authorization").unwrap_or_default();
    let body = read_json_body(
        session,
        app.config.rest_max_body,
        app.config.server.body_read_timeout,
    )
    .await?;
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return Ok(rpc_error(
            400,
            Value::Null,
            PARSE_ERROR,
            "Parse error",
            None,
        ));
    };
    let Value::Object(message) = message else {
        return Ok(rpc_error(
            400,
            Value::Null,
            INVALID_REQUEST,
            "One JSON-RPC message per POST (no batches).",
            None,
        ));
    };
    let id = match message.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.clone()),
        Some(_) => {
            return Ok(rpc_error(
                400,
                Value::Null,
                INVALID_REQUEST,
                "The id must be a string or a number.",
                None,
            ))
        }
    };
    let method = message.get("method").and_then(Value::as_str);
    let (Some(id), Some(method)) = (id.clone(), method) else {
        // A notification, or the client's answer to a request: nothing to answer.
        return Ok(match (id, method, message.get("jsonrpc")) {
            (_, _, Some(Value::String(v))) if v == "2.0" => accepted(),
            _ => rpc_error(400, Value::Null, INVALID_REQUEST, "Not JSON-RPC 2.0.", None),
        });
    };
    let empty = Map::new();
    let params = match message.get("params") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Ok(rpc_error(
                400,
                id,
                INVALID_PARAMS,
                "params must be an object.",
                None,
            ))
        }
    };
    let call = Call {
        app,
        principal,
        bearer: &bearer,
        id,
        method,
        params,
    };
    let stateless = version
        .as_deref()
        .is_some_and(|v| !HANDSHAKE_VERSIONS.contains(&v));
    if stateless {
        let checked = check_stateless(
            &call,
            version.as_deref(),
            method_header.as_deref(),
            name_header.as_deref(),
        );
        if let Err((code, message, data)) = checked {
            return Ok(rpc_error(400, call.id, code, &message, data));
        }
    }
    Ok(call.run(stateless).await)
}

/// One JSON-RPC request.
struct Call<'a> {
    app: &'a App,
    principal: &'a Principal,
    /// The caller's `Authorization` value, which the `pay` tool presents to the proxy route.
    bearer: &'a str,
    id: Value,
    method: &'a str,
    params: &'a Map<String, Value>,
}

type Refused = (i64, String, Option<Value>);

/// The checks of a stateless (2026-07-28) request, in the order the official SDKs run them:
/// the `_meta` envelope, the routing headers against the body, the revision.
fn check_stateless(
    call: &Call<'_>,
    version: Option<&str>,
    method_header: Option<&str>,
    name_header: Option<&str>,
) -> Result<(), Refused> {
    let meta = call.params.get("_meta").and_then(Value::as_object);
    let Some(meta) = meta else {
        return Err((
            INVALID_PARAMS,
            format!("params._meta must carry {META_VERSION} and {META_CAPABILITIES}."),
            None,
        ));
    };
    let (Some(requested), Some(_)) = (meta.get(META_VERSION), meta.get(META_CAPABILITIES)) else {
        return Err((
            INVALID_PARAMS,
            format!("params._meta must carry {META_VERSION} and {META_CAPABILITIES}."),
            None,
        ));
    };
    if version != requested.as_str() {
        return Err((
            HEADER_MISMATCH,
            "MCP-Protocol-Version does not match params._meta.".to_string(),
            None,
        ));
    }
    if method_header != Some(call.method) {
        return Err((
            HEADER_MISMATCH,
            "Mcp-Method does not match the request's method.".to_string(),
            None,
        ));
    }
    if call.method == "tools/call" {
        let name = call.params.get("name").and_then(Value::as_str);
        if name.is_some() && name != name_header {
            return Err((
                HEADER_MISMATCH,
                "Mcp-Name does not match the tool's name.".to_string(),
                None,
            ));
        }
    }
    match requested.as_str() {
        Some(v) if STATELESS_VERSIONS.contains(&v) => Ok(()),
        _ => Err((
            UNSUPPORTED_VERSION,
            "Unsupported protocol version.".to_string(),
            Some(json!({"supported": STATELESS_VERSIONS, "requested": requested})),
        )),
    }
}

impl Call<'_> {
    /// The request's answer: a result, or a JSON-RPC error (HTTP 404 for an unknown method
    /// of the stateless era, as its transport asks; 200 in the handshake era).
    async fn run(self, stateless: bool) -> Response {
        let result = match (self.method, stateless) {
            ("initialize", false) => Ok(self.initialize()),
            ("server/discover", true) => Ok(json!({
                "supportedVersions": STATELESS_VERSIONS,
                "capabilities": capabilities(),
                "serverInfo": server_info(),
                "instructions": INSTRUCTIONS,
                "ttlMs": 0,
                "cacheScope": "private",
            })),
            ("ping", _) => Ok(json!({})),
            ("tools/list", _) => {
                let mut list = json!({ "tools": tools::list() });
                if stateless {
                    list["ttlMs"] = json!(0);
                    list["cacheScope"] = json!("private");
                }
                Ok(list)
            }
            ("tools/call", _) => self.call_tool().await,
            _ => Err((
                METHOD_NOT_FOUND,
                format!("Method not found: {}", self.method),
                None,
            )),
        };
        match result {
            Ok(mut result) => {
                if stateless {
                    result["resultType"] = json!("complete");
                }
                json_response(
                    200,
                    &json!({"jsonrpc": "2.0", "id": self.id, "result": result}),
                )
            }
            Err((code, message, data)) => {
                let status = match (stateless, code) {
                    (true, METHOD_NOT_FOUND) => 404,
                    (true, _) => 400,
                    (false, _) => 200,
                };
                rpc_error(status, self.id, code, &message, data)
            }
        }
    }

    /// The handshake: the client's revision when it is one of [`HANDSHAKE_VERSIONS`], else
    /// the newest of them.
    fn initialize(&self) -> Value {
        let asked = self.params.get("protocolVersion").and_then(Value::as_str);
        let version = asked
            .filter(|v| HANDSHAKE_VERSIONS.contains(v))
            .unwrap_or(HANDSHAKE_VERSIONS[0]);
        json!({
            "protocolVersion": version,
            "capabilities": capabilities(),
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        })
    }

    async fn call_tool(&self) -> Result<Value, Refused> {
        let Some(name) = self.params.get("name").and_then(Value::as_str) else {
            return Err((INVALID_PARAMS, "params.name is required.".to_string(), None));
        };
        let empty = Map::new();
        let arguments = match self.params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(a)) => a,
            Some(_) => {
                return Err((
                    INVALID_PARAMS,
                    "params.arguments must be an object.".to_string(),
                    None,
                ))
            }
        };
        let Some(tool) = tools::Tool::named(name) else {
            return Err((INVALID_PARAMS, format!("Unknown tool: {name}"), None));
        };
        let caller = tools::Caller {
            app: self.app,
            principal: self.principal,
            bearer: self.bearer,
        };
        Ok(tool.call(&caller, arguments).await)
    }
}

fn capabilities() -> Value {
    json!({ "tools": { "listChanged": false } })
}

fn server_info() -> Value {
    json!({
        "name": "paycred",
        "title": "paycred payment credentials",
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// 202, no body: a notification or a response was received.
fn accepted() -> Response {
    Response {
        status: 202,
        headers: Vec::new(),
        body: None,
        intent: None,
    }
}

fn json_response(status: u16, value: &Value) -> Response {
    Response {
        status,
        headers: Vec::new(),
        body: Some(Bytes::from(value.to_string())),
        intent: None,
    }
}

fn rpc_error(status: u16, id: Value, code: i64, message: &str, data: Option<Value>) -> Response {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json_response(status, &json!({"jsonrpc": "2.0", "id": id, "error": error}))
}
