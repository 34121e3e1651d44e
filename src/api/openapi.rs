//! `GET /openapi.json`: the API as built, in OpenAPI 3.1, derived by utoipa from each
//! handler's `#[utoipa::path]` (route, body, success answers) and the types beside it
//! (`ToSchema`: what it answers, and the bodies it reads field by field). What the edge gives
//! every route is added here once ([`Edge`]): the `/tenants/{projectId}/…` forms (and the
//! singular `purchase-intent`), path parameters, `Idempotency-Key` on each POST, the error
//! answers of every authenticated route (the envelope, [`crate::error::Envelope`]), bearer
//! JWT security (`/mcp` too), and none on the service routes. ACP's Delegate Payment route
//! ([`delegate_payment`]) has the token's project, its own headers and ACP's error object.
//!
//! Checked by CI: `scripts/schemathesis` runs schemathesis against a live server with this
//! document (no 5xx, every answer's status, headers and body as documented, nothing accepted
//! without a token).

use super::{
    browser_sessions, client_encryption, delegate_payment, events, passkeys, payment_methods,
    purchase_intents, sandbox, tokens, verify, webhook_endpoints,
};
use once_cell::sync::Lazy;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, OperationBuilder, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required};
use utoipa::{Modify, OpenApi, ToSchema};

/// The document, built once.
pub static DOCUMENT: Lazy<String> = Lazy::new(|| document().to_json().unwrap_or_default());

/// Ids in paths: `projectId`, `id` and `sessionId`.
const ID_PATTERN: &str = "^[A-Za-z0-9_.-]{1,128}$";

/// The errors every authenticated route may answer, with their descriptions.
const ERRORS: [(u16, &str); 10] = [
    (
        400,
        "invalidRequest (details.fields names each bad field), invalidTemplate, or \
         invalidPasskey (details.reason names the failed check)",
    ),
    (401, "unauthorized: token missing or invalid"),
    (
        403,
        "forbidden: another project's token, entityId is not the token's sub, or the public role",
    ),
    (404, "notFound: no such id for this project and entity"),
    (405, "methodNotAllowed"),
    (413, "payloadTooLarge"),
    (415, "unsupportedMediaType"),
    (429, "rateLimited"),
    (500, "internalError"),
    (
        503,
        "storeUnavailable: the store (disk or database) does not answer now; retry later",
    ),
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paycred",
        description = "Payment credential service: payment methods, purchase intents, the \
            credential proxy. Every error has the envelope {error: {status, type, title, \
            message, details?}}."
    ),
    servers((url = "/")),
    paths(
        payment_methods::list,
        payment_methods::create,
        payment_methods::get,
        payment_methods::delete,
        purchase_intents::create,
        purchase_intents::get,
        verify::verify,
        sandbox::authorize,
        tokens::create,
        client_encryption::get_key,
        proxy,
        mcp,
        health,
        ready,
        metrics,
        openapi,
        events::list,
        webhook_endpoints::create,
        webhook_endpoints::list,
        webhook_endpoints::get,
        webhook_endpoints::delete,
        webhook_endpoints::rotate_secret,
        browser_sessions::create,
        browser_sessions::list,
        browser_sessions::get,
        browser_sessions::delete,
        events::redeliver,
        events::deliveries,
        passkeys::registration_options,
        passkeys::create,
        passkeys::list,
        passkeys::delete,
        delegate_payment::delegate_payment,
    ),
    security(("bearer" = [])),
    modifiers(&Edge)
)]
struct Api;

/// The whole document.
pub fn document() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

/// Forward the request to Svc-Target-URL with the templates in its body substituted.
///
/// Any method; the body's format follows its Content-Type: templates are substituted in JSON
/// (`application/json`, `application/*+json`), form-encoded
/// (`application/x-www-form-urlencoded`) and XML (`text/xml`, `application/xml`,
/// `application/*+xml`, SOAP) bodies; any other body passes as it is, unless it holds `{{`
/// (400 invalidTemplate). Card numbers in the target's answer are masked, or the
/// answer refused, as the project's `proxy.response_guard` says (docs/proxy.md).
#[utoipa::path(post, path = "/projects/{projectId}/proxy", operation_id = "proxy",
    params(("Svc-Target-URL" = String, Header, format = "uri",
        description = "The target: an https URL whose host the project allows.")),
    request_body(content = Option<serde_json::Value>, content_type = "application/json"),
    responses(
        (status = 400, description = "invalidTemplate: a template that cannot be substituted, \
            or one where none may be (a JSON or form key, between JSON tokens, a brace written \
            \\u007b, an XML name, comment or declaration, a body of another format), or a \
            body that ends unfinished after a substitution; an XML body with a DOCTYPE. \
            `details` names the field. The target never receives a complete request.", body = crate::error::Envelope),
        (status = 408, description = "requestTimeout: the body stopped arriving for longer \
            than the server's body_read_timeout", body = crate::error::Envelope),
        (status = 502, description = "badGateway: the target could not be reached; or the \
            response guard refused its answer: a card number in a header or in the first \
            64 KiB of the body under `proxy.response_guard: refuse` (one further in cuts the \
            answer at the number instead), or a compressed answer, which cannot be scanned",
            body = crate::error::Envelope),
        (status = 504, description = "gatewayTimeout: the target did not answer in time",
            body = crate::error::Envelope),
        (status = "default", description = "The target's answer, passed through; card \
            numbers in its headers and body masked (`424242******4242`, the same length) \
            under `proxy.response_guard: mask`, the default"),
    ))]
#[allow(
    dead_code,
    reason = "documents the proxy route, which the gateway serves"
)]
fn proxy() {}

/// The MCP server (docs/agents.md): one JSON-RPC 2.0 message per POST, over MCP's
/// Streamable HTTP transport, answered `application/json`; no session (`Mcp-Session-Id` is
/// never issued). The 2025-11-25 `initialize` handshake (also 2025-06-18, 2025-03-26,
/// 2024-11-05), and the stateless requests of 2026-07-28 (`server/discover`; `params._meta`
/// carrying the revision, with the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
/// headers). Methods: `initialize`, `server/discover`, `ping`, `tools/list`, `tools/call`.
/// A private-role token; the public role is 403. Also at `/mcp`, the project being the
/// token's.
#[utoipa::path(post, path = "/projects/{projectId}/mcp", operation_id = "mcp",
    request_body(content = JsonRpcMessage, content_type = "application/json"),
    responses(
        (status = 200, description = "The JSON-RPC response: a result, or a JSON-RPC error", body = Object),
        (status = 202, description = "A notification or a response, accepted: no body"),
        (status = 400, description = "A JSON-RPC error (not one JSON-RPC message, params not an \
            object; in the stateless era a missing `_meta`, a routing header that disagrees \
            with the body, an unsupported revision), or the error envelope (invalidRequest)",
            body = Object),
        (status = 404, description = "A method the stateless era does not know (a JSON-RPC \
            error), or the error envelope (notFound)", body = Object),
    ))]
#[allow(
    dead_code,
    reason = "documents the MCP route, which the gateway serves"
)]
fn mcp() {}

/// One JSON-RPC 2.0 message: a request (`id` and `method`), a notification (`method`), or a
/// response to the server.
#[derive(ToSchema)]
#[allow(dead_code, reason = "documentation only")]
struct JsonRpcMessage {
    /// `2.0`.
    jsonrpc: String,
    /// A string or a number; none for a notification.
    #[schema(value_type = Option<Object>)]
    id: Option<serde_json::Value>,
    /// e.g. `tools/call`.
    method: Option<String>,
    #[schema(value_type = Option<Object>)]
    params: Option<serde_json::Value>,
}

/// `{"status": "ok"}` (liveness) or `{"status": "ready"}` (readiness).
#[derive(ToSchema)]
struct Health {
    #[allow(dead_code, reason = "documentation only")]
    status: String,
}

/// Liveness.
#[utoipa::path(get, path = "/health", operation_id = "health",
    responses((status = 200, description = "OK", body = Health)))]
#[allow(dead_code, reason = "documents a route the gateway serves")]
fn health() {}

/// Readiness: the store answers, and the master key opened the store's keys at start (a
/// server whose master key does not open them does not start).
#[utoipa::path(get, path = "/ready", operation_id = "ready",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "The store does not answer", body = crate::error::Envelope),
    ))]
#[allow(dead_code, reason = "documents a route the gateway serves")]
fn ready() {}

/// Prometheus metrics, on this listener only when `metrics.bearer_token_file` is configured,
/// for `Authorization: Bearer <that token>` (not a JWT). `metrics.listen` serves them on a
/// listener of their own instead.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics",
    responses(
        (status = 200, description = "OK", body = String, content_type = "text/plain"),
        (status = 401, description = "Without the metrics bearer token", body = crate::error::Envelope),
        (status = 404, description = "Not served on this listener", body = crate::error::Envelope),
    ))]
#[allow(dead_code, reason = "documents a route the gateway serves")]
fn metrics() {}

/// This document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi",
    responses((status = 200, description = "OK", body = Object)))]
#[allow(dead_code, reason = "documents a route the gateway serves")]
fn openapi() {}

/// What the edge gives every route (see the module's documentation).
struct Edge;

/// Where a path of the `/projects/{projectId}` form is served too: (prefix, singular
/// `purchase-intent`, operation id suffix).
const FORMS: [(&str, bool, &str); 3] = [
    ("/projects/{projectId}", false, ""),
    ("/tenants/{projectId}", false, "Tenant"),
    ("/tenants/{projectId}", true, "TenantSingular"),
];

impl Modify for Edge {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = doc.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("JWT")
                        .build(),
                ),
            );
        }
        let declared = std::mem::take(&mut doc.paths.paths);
        for (path, item) in declared {
            let Some(rest) = path.strip_prefix("/projects/{projectId}") else {
                // A service route: no token, except ACP's (the project is the token's; its
                // headers and errors are its own).
                let mut item = item;
                if !path.starts_with("/agentic_commerce/") {
                    for (_, op) in operations(&mut item) {
                        op.security = Some(Vec::new());
                    }
                }
                doc.paths.paths.insert(path, item);
                continue;
            };
            if rest == "/mcp" {
                // Also `/mcp`, the project being the token's: authenticated all the same.
                let mut item = item.clone();
                for (method, op) in operations(&mut item) {
                    if let Some(id) = op.operation_id.as_mut() {
                        id.push_str("TokenProject");
                    }
                    edge_rules(rest, method, op);
                }
                doc.paths.paths.insert(rest.to_string(), item);
            }
            let browser = BROWSER_ROUTES
                .iter()
                .find(|(tail, _)| *tail == rest)
                .map(|(_, methods)| *methods);
            for (prefix, singular, suffix) in FORMS {
                let rest = match (singular, rest.strip_prefix("/purchase-intents")) {
                    (false, _) => rest.to_string(),
                    (true, Some(tail)) => format!("/purchase-intent{tail}"),
                    (true, None) => continue,
                };
                let path = format!("{prefix}{rest}");
                let mut item = item.clone();
                for (method, op) in operations(&mut item) {
                    if let Some(id) = op.operation_id.as_mut() {
                        id.push_str(suffix);
                    }
                    edge_rules(&path, method, op);
                }
                if let Some(methods) = browser {
                    item.options = Some(preflight(&path, methods, suffix));
                }
                doc.paths.paths.insert(path, item);
            }
        }
    }
}

/// The routes a browser page of another origin may call with a public-role token, as the path
/// after `/projects/{projectId}` and the methods: the CORS preflight (`OPTIONS`) of each is
/// described. The edge's CORS answers exactly these (a test there holds the two together).
pub const BROWSER_ROUTES: [(&str, &str); 8] = [
    ("/payment-methods", "GET, POST"),
    ("/payment-methods/{id}", "GET"),
    ("/tokens", "POST"),
    ("/client-encryption-key", "GET"),
    ("/purchase-intents/{id}/verify", "POST"),
    ("/passkeys", "GET, POST"),
    ("/passkeys/registration-options", "POST"),
    ("/passkeys/{id}", "DELETE"),
];

/// The CORS preflight of a browser route that allows `methods`: answered before
/// authentication (no token), 204 for an origin of the project's `cors.allowed_origins`
/// asking for one of `methods`, else 403 with no CORS header.
fn preflight(path: &str, methods: &str, suffix: &str) -> Operation {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    let header = |name: &str, example: &str, description: &str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::True)
            .description(Some(description))
            .schema(Some(string().examples([example])))
            .build()
    };
    let answer_header = |schema: ObjectBuilder, description: &str| {
        HeaderBuilder::new()
            .schema(Some(schema))
            .description(Some(description))
            .build()
    };
    let first = methods.split(", ").next().unwrap_or(methods);
    let ok = ResponseBuilder::new()
        .description("Allowed: the browser may send the request")
        .header(
            "Access-Control-Allow-Origin",
            answer_header(string(), "The request's Origin."),
        )
        .header(
            "Access-Control-Allow-Methods",
            answer_header(
                string().enum_values(Some([methods])),
                "The route's browser methods.",
            ),
        )
        .header(
            "Access-Control-Allow-Headers",
            answer_header(string(), "Authorization, Content-Type, Idempotency-Key"),
        )
        .header(
            "Access-Control-Max-Age",
            answer_header(string(), "Seconds the browser may keep this answer."),
        )
        .header(
            "Vary",
            answer_header(string(), "Origin, Access-Control-Request-Method"),
        );
    let envelope = |description: &str| {
        ResponseBuilder::new().description(description).content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Error")))
                .build(),
        )
    };
    let mut params: Vec<_> = ["projectId", "id"]
        .into_iter()
        .filter(|name| path.contains(&format!("{{{name}}}")))
        .map(|name| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(string().pattern(Some(ID_PATTERN))))
                .build()
        })
        .collect();
    params.push(header(
        "Origin",
        "http://localhost:5173",
        "The page's origin; allowed when listed in the project's cors.allowed_origins.",
    ));
    params.push(header(
        "Access-Control-Request-Method",
        first,
        "The method the page wants to send.",
    ));
    let id = path
        .trim_start_matches("/projects/{projectId}/")
        .trim_start_matches("/tenants/{projectId}/")
        .replace(['{', '}'], "")
        .replace(['/', '-'], "_");
    OperationBuilder::new()
        .operation_id(Some(format!("corsPreflight_{id}{suffix}")))
        .description(Some(
            "CORS preflight of a browser page of another origin, answered before \
             authentication. An origin not listed, a method the route does not open to \
             browsers: 403 without any CORS header.",
        ))
        .parameters(Some(params))
        .securities(Some(Vec::new()))
        .response("204", ok)
        .response("403", envelope("forbidden: origin or method not allowed"))
        .response(
            "404",
            envelope("notFound: no such route (an id that is not one)"),
        )
        .response(
            "405",
            envelope(
                "methodNotAllowed: not a preflight (no Origin or Access-Control-Request-Method)",
            ),
        )
        .build()
}

/// The operations of a path item, with their methods.
fn operations(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("get", item.get.as_mut()),
        ("post", item.post.as_mut()),
        ("put", item.put.as_mut()),
        ("patch", item.patch.as_mut()),
        ("delete", item.delete.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.map(|op| (method, op)))
}

/// Path parameters, `Idempotency-Key` on a POST (not the proxy's: it goes to the target; not
/// the MCP server's), and the common error answers.
fn edge_rules(path: &str, method: &str, op: &mut Operation) {
    let mut params = Vec::new();
    for name in ["projectId", "id", "sessionId"] {
        if path.contains(&format!("{{{name}}}")) {
            let schema = ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(ID_PATTERN));
            params.push(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Path)
                    .required(Required::True)
                    .schema(Some(schema))
                    .build(),
            );
        }
    }
    // The proxy's goes to the target; the MCP server has none.
    let no_key = path.ends_with("/proxy") || path.ends_with("/mcp");
    if method == "post" && !no_key {
        let schema = ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(255))
            .pattern(Some("^[!-~]+$"));
        params.push(
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Same key and request (and token role) within 24 h: the first response \
                     again (Idempotent-Replayed: true); a purchase intent as it is then, its \
                     credential only while active. Another request with the key: 409.",
                ))
                .schema(Some(schema))
                .build(),
        );
    }
    params.extend(
        op.parameters
            .take()
            .into_iter()
            .flatten()
            .filter_map(|p| match p {
                RefOr::T(p) => Some(p),
                RefOr::Ref(_) => None,
            }),
    );
    op.parameters = Some(params.into_iter().map(RefOr::T).collect());
    for (status, description) in ERRORS {
        let mut response = ResponseBuilder::new().description(description).content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Error")))
                .build(),
        );
        let header = match status {
            429 => Some(("Retry-After", "Seconds until a request is allowed again.")),
            405 => Some(("Allow", "The methods this route answers.")),
            _ => None,
        };
        if let Some((name, description)) = header {
            response = response.header(
                name,
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .description(Some(description))
                    .build(),
            );
        }
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::T(response.build()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Authenticated operations carry every error answer and the path parameters; service
    /// routes need no token.
    #[test]
    fn the_edge_rules_apply_to_every_form() {
        let doc: Value = serde_json::from_str(&DOCUMENT).unwrap_or_default();
        let op = &doc["paths"]["/tenants/{projectId}/purchase-intent/{id}"]["get"];
        assert_eq!(op["operationId"], "getPurchaseIntentTenantSingular");
        for (status, _) in ERRORS {
            assert!(op["responses"][status.to_string()].is_object(), "{status}");
        }
        assert!(op["responses"]["200"].is_object());
        let names: Vec<&str> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names, ["projectId", "id"]);
        let post = &doc["paths"]["/projects/{projectId}/payment-methods"]["post"];
        assert!(post["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "Idempotency-Key"));
        assert_eq!(
            doc["paths"]["/health"]["get"]["security"],
            serde_json::json!([])
        );
        assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
    }
}
