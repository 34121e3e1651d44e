//! `POST /agentic_commerce/delegate_payment`: the Agentic Commerce Protocol's Delegate
//! Payment API (ACP 2026-04-17; the earlier dated versions, whose request and answer are the
//! same, are accepted too: [`VERSIONS`]). docs/agents.md has the whole mapping.
//!
//! - Authenticated like `/mcp`: a private-role project JWT in `Authorization: Bearer`, the
//!   project its issuer, the entity its `sub`.
//! - The card becomes a payment method of the entity (the payment-method handler: its checks,
//!   sealing and audit), and the allowance a `virtual-card` purchase intent of it (the
//!   purchase-intent handler) whose mandates are the allowance: `maxAmount` and its currency
//!   (minor units turned into the currency's decimal amount), `usageLimit` 1, `expirationDate`
//!   = `expires_at`, `merchant` = `merchant_id` (the credential bound to that merchant: the
//!   proxy sends it only to the hosts the project's `merchants` config gives that id). The
//!   answer's vault token `vt_…` is that intent's id under another prefix
//!   (`service::intents::vault_token_of`); proxy templates accept it in place of a payment
//!   method id.
//! - `Idempotency-Key` is required and goes through [`super::idempotency`], the body's
//!   fingerprint taken over its JSON with keys sorted (key order does not make two requests
//!   different).
//! - Every error on this route, the gateway's too (401, 405, 429), is ACP's flat object
//!   `{type, code, message, param?}` ([`AcpError`]), never paycred's envelope.
//! - `Signature` and `Timestamp` are not checked: paycred has no key of the caller to check a
//!   signature with (ACP leaves that key's exchange out of band).

mod request;

use super::idempotency::{self, InFlight};
use crate::api::{payment_methods, purchase_intents};
use crate::app::App;
use crate::auth::Principal;
use crate::clock::{from_micros, iso8601};
use crate::error::{ApiError, ErrorKind};
use crate::http::{read_json_body, Response};
use crate::service::intents::vault_token_of;
use crate::store::IntentStatus;
use bytes::Bytes;
use pingora::proxy::Session;
use rust_decimal::Decimal;
use serde_json::{json, Map, Value};

/// The route's label in metrics and logs; the gateway answers this route's errors in ACP's
/// shape by it.
pub const LABEL: &str = "delegate_payment";

/// `API-Version`s accepted, newest first.
pub const VERSIONS: &[&str] = &[
    "2026-04-17",
    "2026-01-30",
    "2026-01-16",
    "2025-12-12",
    "2025-09-29",
];

/// Seconds a caller is asked to wait (`Retry-After`) when its key's first request still runs.
const RETRY_AFTER_SECS: &str = "1";

/// An error in ACP's flat shape: `{type, code, message, param?}`, with the HTTP status and
/// headers to answer it with.
#[derive(Debug)]
pub struct AcpError {
    pub status: u16,
    /// `invalid_request`, `rate_limit_exceeded`, `processing_error`, `service_unavailable`.
    pub kind: &'static str,
    pub code: &'static str,
    pub message: String,
    /// The JSONPath of the field at fault.
    pub param: Option<String>,
    headers: Vec<(&'static str, String)>,
    /// `supported_versions`, for an `API-Version` paycred does not serve.
    supported_versions: bool,
}

impl AcpError {
    fn new(status: u16, kind: &'static str, code: &'static str, message: &str) -> AcpError {
        AcpError {
            status,
            kind,
            code,
            message: message.to_string(),
            param: None,
            headers: Vec::new(),
            supported_versions: false,
        }
    }

    fn invalid(status: u16, code: &'static str, message: &str) -> AcpError {
        Self::new(status, "invalid_request", code, message)
    }

    /// A field at fault: `invalid_card` under `$.payment_method`, else `missing` (for a
    /// required field left out) or `invalid`.
    fn field(status: u16, param: &str, message: &str) -> AcpError {
        let code = match (param.starts_with("$.payment_method"), message) {
            (true, _) => "invalid_card",
            (false, "is required") => "missing",
            (false, _) => "invalid",
        };
        let message = match param.strip_prefix("$.") {
            Some(name) => format!("{name} {message}"),
            None => message.to_string(),
        };
        let mut e = Self::invalid(status, code, &message);
        e.param = Some(param.to_string());
        e
    }

    /// The answer.
    pub fn response(&self) -> Response {
        let mut body = json!({"type": self.kind, "code": self.code, "message": self.message});
        if let Some(param) = &self.param {
            body["param"] = json!(param);
        }
        if self.supported_versions {
            body["supported_versions"] = json!(VERSIONS);
        }
        Response {
            status: self.status,
            headers: self.headers.clone(),
            body: Some(Bytes::from(body.to_string())),
            intent: None,
        }
    }
}

/// paycred's errors in ACP's shape: the status kept, the kind turned into ACP's type and a
/// code, the message (never card data) kept.
impl From<ApiError> for AcpError {
    fn from(e: ApiError) -> AcpError {
        let (kind, code) = match e.kind {
            ErrorKind::Conflict if idempotency::is_reused(&e) => {
                return Self::invalid(
                    422,
                    "idempotency_conflict",
                    "Idempotency-Key has already been used with a different request body",
                );
            }
            ErrorKind::Conflict if idempotency::is_in_progress(&e) => {
                let mut a = Self::invalid(
                    409,
                    "idempotency_in_flight",
                    "A request with this Idempotency-Key is currently being processed",
                );
                a.headers
                    .push(("Retry-After", RETRY_AFTER_SECS.to_string()));
                return a;
            }
            ErrorKind::RateLimited => ("rate_limit_exceeded", "too_many_requests"),
            ErrorKind::InternalError | ErrorKind::BadGateway => {
                ("processing_error", "processing_error")
            }
            ErrorKind::StoreUnavailable | ErrorKind::GatewayTimeout => {
                ("service_unavailable", "service_unavailable")
            }
            ErrorKind::Unauthorized => ("invalid_request", "unauthorized"),
            ErrorKind::Forbidden => ("invalid_request", "forbidden"),
            ErrorKind::NotFound => ("invalid_request", "not_found"),
            ErrorKind::MethodNotAllowed => ("invalid_request", "method_not_allowed"),
            ErrorKind::RequestTimeout => ("invalid_request", "request_timeout"),
            ErrorKind::Conflict => ("invalid_request", "conflict"),
            ErrorKind::PayloadTooLarge => ("invalid_request", "request_too_large"),
            ErrorKind::UnsupportedMediaType => ("invalid_request", "unsupported_media_type"),
            _ => ("invalid_request", "invalid"),
        };
        let mut a = Self::new(e.status(), kind, code, &e.message);
        a.headers.clone_from(&e.headers);
        if e.kind == ErrorKind::Unauthorized {
            a.headers
                .push(("WWW-Authenticate", "Bearer realm=\"paycred\"".to_string()));
        }
        a
    }
}

/// The answer to an error the gateway met on this route before [`answer`] (authentication,
/// method, rate limits), in ACP's shape.
pub fn error_response(e: &ApiError) -> Response {
    AcpError::from(e.clone()).response()
}

/// Answers one authenticated request: 201 with the vault token, or an ACP error.
pub async fn answer(
    app: &App,
    in_flight: &InFlight,
    session: &mut Session,
    principal: &Principal,
) -> Response {
    match run(app, in_flight, session, principal).await {
        Ok(r) => r,
        Err(e) => e.response(),
    }
}

async fn run(
    app: &App,
    in_flight: &InFlight,
    session: &mut Session,
    principal: &Principal,
) -> Result<Response, AcpError> {
    principal.require_private()?;
    let headers = &session.req_header().headers;
    let version = headers.get("api-version").map(|v| v.as_bytes());
    match version {
        Some(v) if VERSIONS.iter().any(|s| s.as_bytes() == v) => {}
        Some(_) | None => {
            let (code, message) = match version {
                None => ("missing_api_version", "API-Version header is required"),
                Some(_) => (
                    "unsupported_api_version",
                    "This API-Version is not supported",
                ),
            };
            let mut e = AcpError::invalid(400, code, message);
            e.supported_versions = true;
            return Err(e);
        }
    }
    let key = idempotency::key_from(headers)
        .map_err(|_| {
            let mut e = AcpError::invalid(
                400,
                "invalid",
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            );
            e.param = Some("Idempotency-Key".to_string());
            e
        })?
        .ok_or_else(|| {
            AcpError::invalid(
                400,
                "idempotency_key_required",
                "Idempotency-Key header is required",
            )
        })?;
    let path = session.req_header().uri.path().to_string();
    let body = read_json_body(
        session,
        app.config.rest_max_body,
        app.config.server.body_read_timeout,
    )
    .await?;
    let canonical = canonical_body(&body);
    let execute = async {
        // An error is answered (not stored for replays: only 2xx answers are).
        Ok(delegate(app, principal, &body, &key)
            .await
            .unwrap_or_else(|e| e.response()))
    };
    let request = ("POST", path.as_str(), canonical.as_ref());
    Ok(idempotency::run(app, in_flight, principal, request, &key, execute).await?)
}

/// The body as the idempotency fingerprint reads it: its JSON with every object's keys
/// sorted, so that two requests differing only in key order are the same request; a body
/// that is not JSON as it is.
fn canonical_body(body: &[u8]) -> Vec<u8> {
    fn sorted(v: Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(String, Value)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
            other => other,
        }
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => sorted(v).to_string().into_bytes(),
        Err(_) => body.to_vec(),
    }
}

/// The work of a new request: the payment method, the intent, the vault token.
async fn delegate(
    app: &App,
    principal: &Principal,
    body: &[u8],
    key: &str,
) -> Result<Response, AcpError> {
    let now = app.clock.now();
    let req = request::parse(body, now, purchase_intents::CREDENTIAL_LIFETIME)?;
    // A project that lists its merchants binds each token to the allowance's merchant, which
    // must be one of them (checked before anything is stored); one that lists none takes any
    // `merchant_id` and binds nothing (the id is echoed in the metadata).
    let bound = match app.config.project(&principal.project) {
        Some(p) if !p.merchants.is_empty() => {
            if p.merchant(&req.allowance.merchant_id).is_none() {
                return Err(AcpError::field(
                    422,
                    "$.allowance.merchant_id",
                    "is not one of this project's merchants",
                ));
            }
            true
        }
        _ => false,
    };
    let card = json!({
        "entityId": principal.entity,
        "card": {
            "number": req.card.number,
            "expirationMonth": req.card.exp_month,
            "expirationYear": req.card.exp_year,
            "cvc": req.card.cvc,
        },
    });
    let created = payment_methods::create(app, principal, card.to_string().as_bytes())
        .await
        .map_err(|e| field_errors(e, card_param))?;
    let payment_method_id = created
        .body
        .as_deref()
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v["id"].as_str().map(str::to_string))
        .ok_or_else(|| AcpError::from(ApiError::internal()))?;
    let a = &req.allowance;
    let amount = Decimal::new(a.max_amount, u32::from(a.currency.minor_units()));
    let expires_at = iso8601(a.expires_at);
    let mut mandates = vec![
        json!({"type": "maxAmount", "value": amount.to_string(),
               "details": {"currency": a.currency.alpha()}}),
        json!({"type": "usageLimit", "value": "1", "details": {"count": 1}}),
        json!({"type": "expirationDate", "value": expires_at, "details": {"date": expires_at}}),
    ];
    if bound {
        mandates.push(json!({"type": "merchant", "value": a.merchant_id}));
    }
    let intent = json!({
        "credentialType": "virtual-card",
        "paymentMethodId": payment_method_id,
        "mandates": mandates,
    });
    let rec = purchase_intents::issue(app, principal, intent.to_string().as_bytes())
        .await
        .map_err(|e| field_errors(e, allowance_param))?;
    if rec.status != IntentStatus::Active {
        let mut e = AcpError::invalid(
            422,
            "invalid_card",
            "paycred cannot issue a single-use card for this card",
        );
        e.param = Some("$.payment_method.number".to_string());
        return Err(e);
    }
    let mut metadata: Map<String, Value> = req.metadata;
    for (name, value) in [
        ("merchant_id", a.merchant_id.as_str()),
        ("checkout_session_id", a.checkout_session_id.as_str()),
        ("idempotency_key", key),
        ("payment_method_id", payment_method_id.as_str()),
        ("purchase_intent_id", rec.id.as_str()),
    ] {
        metadata.insert(name.to_string(), json!(value));
    }
    Response::json(
        201,
        &json!({
            "id": vault_token_of(&rec.id),
            "created": iso8601(from_micros(rec.created_micros)),
            "metadata": metadata,
        }),
    )
    .map_err(AcpError::from)
}

/// A handler's 400 naming fields, as ACP's error for the first of them (`param` the ACP
/// field's JSONPath, by `param_of`), 422: the request's shape was already checked, so what
/// the handler refuses is a value. Other errors as [`AcpError::from`] gives them.
fn field_errors(e: ApiError, param_of: fn(&str) -> &'static str) -> AcpError {
    let first = e
        .details
        .as_deref()
        .and_then(|d| d["fields"].as_object())
        .and_then(|fields| fields.iter().next())
        .map(|(field, message)| (field.clone(), message.as_str().unwrap_or("is invalid")));
    match (e.kind, first) {
        (ErrorKind::InvalidRequest, Some((field, message))) => {
            AcpError::field(422, param_of(&field), message)
        }
        _ => AcpError::from(e),
    }
}

/// The ACP field of a payment-method field (`card.expirationMonth`).
fn card_param(field: &str) -> &'static str {
    match field.strip_prefix("card.") {
        Some("number") => "$.payment_method.number",
        Some("expirationMonth") => "$.payment_method.exp_month",
        Some("expirationYear") => "$.payment_method.exp_year",
        Some("cvc") => "$.payment_method.cvc",
        _ => "$.payment_method",
    }
}

/// The ACP field of a mandate of [`delegate`]'s intent (`mandates[0].value`).
fn allowance_param(field: &str) -> &'static str {
    match field.get(..11) {
        Some("mandates[0]") => "$.allowance.max_amount",
        Some("mandates[1]") => "$.allowance.reason",
        Some("mandates[2]") => "$.allowance.expires_at",
        Some("mandates[3]") => "$.allowance.merchant_id",
        _ => "$.allowance",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_change_the_fingerprint() {
        let a = canonical_body(br#"{"b": {"y": 1, "x": [2, {"q": 1, "p": 0}]}, "a": "s"}"#);
        let b = canonical_body(br#"{"a":"s","b":{"x":[2,{"p":0,"q":1}],"y":1}}"#);
        assert_eq!(a, b);
        let c = canonical_body(br#"{"a":"s","b":{"x":[{"p":0,"q":1},2],"y":1}}"#);
        assert_ne!(a, c, "arrays keep their order");
        assert_eq!(canonical_body(b"not json"), b"not json");
    }

    #[test]
    fn paycred_errors_take_acps_shape() {
        let v = |e: ApiError| {
            let r = error_response(&e);
            let body: Value =
                serde_json::from_slice(r.body.as_deref().unwrap_or_default()).unwrap_or_default();
            (r.status, body["type"].clone(), body["code"].clone())
        };
        let cases = [
            (
                ApiError::unauthorized("no token"),
                401,
                "invalid_request",
                "unauthorized",
            ),
            (
                ApiError::new(ErrorKind::RateLimited, "slow"),
                429,
                "rate_limit_exceeded",
                "too_many_requests",
            ),
            (
                ApiError::internal(),
                500,
                "processing_error",
                "processing_error",
            ),
            (
                ApiError::new(ErrorKind::StoreUnavailable, "down"),
                503,
                "service_unavailable",
                "service_unavailable",
            ),
        ];
        for (e, status, kind, code) in cases {
            assert_eq!(v(e), (status, json!(kind), json!(code)));
        }
    }

    #[test]
    fn handler_fields_map_to_acp_fields() {
        let e = ApiError::invalid_field("card.number", "fails the Luhn check");
        let a = field_errors(e, card_param);
        assert_eq!((a.status, a.code), (422, "invalid_card"));
        assert_eq!(a.param.as_deref(), Some("$.payment_method.number"));
        assert_eq!(a.message, "payment_method.number fails the Luhn check");
        assert_eq!(
            allowance_param("mandates[2].details.date"),
            "$.allowance.expires_at"
        );
        assert_eq!(
            allowance_param("mandates[3].value"),
            "$.allowance.merchant_id"
        );
    }
}
