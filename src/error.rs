//! `ApiError`: every error a caller can see, and the one mapping to the envelope of the
//! specification's section 7 (`{"error": {status, type, title, message, details?}}`).
//!
//! Errors from the store and the vault convert into it (each module says how); a 5xx
//! never carries the underlying detail (that goes to the log, without secrets).
//!
//! A leaf: imports nothing of paycred.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The error kinds of the envelope's `type` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    InvalidRequest,
    InvalidTemplate,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    RateLimited,
    InternalError,
    BadGateway,
    StoreUnavailable,
    GatewayTimeout,
    /// A passkey assertion or registration that does not verify.
    InvalidPasskey,
    /// The browser proxy asks for credentials (`Proxy-Authenticate`).
    ProxyAuthenticationRequired,
    /// A request head larger than the browser proxy reads.
    RequestHeaderFieldsTooLarge,
}

impl ErrorKind {
    /// HTTP status of this kind.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::InvalidTemplate => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::Conflict => 409,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::UnsupportedMediaType => 415,
            ErrorKind::RateLimited => 429,
            ErrorKind::InternalError => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::StoreUnavailable => 503,
            ErrorKind::GatewayTimeout => 504,
            ErrorKind::InvalidPasskey => 400,
            ErrorKind::ProxyAuthenticationRequired => 407,
            ErrorKind::RequestHeaderFieldsTooLarge => 431,
        }
    }

    /// The envelope's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalidRequest",
            ErrorKind::InvalidTemplate => "invalidTemplate",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::NotFound => "notFound",
            ErrorKind::MethodNotAllowed => "methodNotAllowed",
            ErrorKind::RequestTimeout => "requestTimeout",
            ErrorKind::Conflict => "conflict",
            ErrorKind::PayloadTooLarge => "payloadTooLarge",
            ErrorKind::UnsupportedMediaType => "unsupportedMediaType",
            ErrorKind::RateLimited => "rateLimited",
            ErrorKind::InternalError => "internalError",
            ErrorKind::BadGateway => "badGateway",
            ErrorKind::StoreUnavailable => "storeUnavailable",
            ErrorKind::GatewayTimeout => "gatewayTimeout",
            ErrorKind::InvalidPasskey => "invalidPasskey",
            ErrorKind::ProxyAuthenticationRequired => "proxyAuthenticationRequired",
            ErrorKind::RequestHeaderFieldsTooLarge => "requestHeaderFieldsTooLarge",
        }
    }

    /// The envelope's short `title`.
    pub fn title(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "Invalid request",
            ErrorKind::InvalidTemplate => "Invalid template",
            ErrorKind::Unauthorized => "Unauthorized",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::NotFound => "Not found",
            ErrorKind::MethodNotAllowed => "Method not allowed",
            ErrorKind::RequestTimeout => "Request timeout",
            ErrorKind::Conflict => "Conflict",
            ErrorKind::PayloadTooLarge => "Payload too large",
            ErrorKind::UnsupportedMediaType => "Unsupported media type",
            ErrorKind::RateLimited => "Too many requests",
            ErrorKind::InternalError => "Internal error",
            ErrorKind::BadGateway => "Bad gateway",
            ErrorKind::StoreUnavailable => "Store unavailable",
            ErrorKind::GatewayTimeout => "Gateway timeout",
            ErrorKind::InvalidPasskey => "Invalid passkey",
            ErrorKind::ProxyAuthenticationRequired => "Proxy authentication required",
            ErrorKind::RequestHeaderFieldsTooLarge => "Request header fields too large",
        }
    }
}

/// The error envelope: what every error answers.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub struct Envelope<'a> {
    pub error: EnvelopeError<'a>,
}

/// The envelope's `error` object.
#[derive(Serialize, ToSchema)]
pub struct EnvelopeError<'a> {
    /// The HTTP status.
    pub status: u16,
    #[serde(rename = "type")]
    pub kind: ErrorKind,
    pub title: &'a str,
    pub message: &'a str,
    /// `fields` (field path → message) for `invalidRequest`; `field` and `template` for
    /// `invalidTemplate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<&'a Value>,
}

/// An error answered to the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    pub details: Option<Box<Value>>,
    /// Extra response headers (`Allow` on 405, `Retry-After` on 429).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            details: None,
            headers: Vec::new(),
        }
    }

    /// 400 `invalidRequest` with `details.fields` (field path → message).
    pub fn invalid_fields(fields: BTreeMap<String, String>) -> Self {
        let message = match fields.len() {
            1 => "A request field is invalid.".to_string(),
            n => format!("{n} request fields are invalid."),
        };
        let map: Map<String, Value> = fields
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        Self::new(ErrorKind::InvalidRequest, message).with_details(json!({ "fields": map }))
    }

    /// 400 `invalidRequest` naming one field.
    pub fn invalid_field(field: &str, message: &str) -> Self {
        Self::invalid_fields(BTreeMap::from([(field.to_string(), message.to_string())]))
    }

    /// 400 `invalidRequest` without a field (malformed JSON, bad query).
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    /// 400 `invalidTemplate` with the body field path and the template text.
    pub fn invalid_template(field: &str, template: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidTemplate, message)
            .with_details(json!({ "field": field, "template": template }))
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthorized, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorKind::NotFound, format!("{what} not found."))
    }

    pub fn method_not_allowed(allow: &str) -> Self {
        let mut e = Self::new(
            ErrorKind::MethodNotAllowed,
            "This method is not allowed on this route.",
        );
        e.headers.push(("Allow", allow.to_string()));
        e
    }

    /// 500 with nothing of the cause; the caller logs the cause before.
    pub fn internal() -> Self {
        Self::new(ErrorKind::InternalError, "internal error")
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    /// The envelope of the specification's section 7.
    pub fn envelope(&self) -> Envelope<'_> {
        Envelope {
            error: EnvelopeError {
                status: self.status(),
                kind: self.kind,
                title: self.kind.title(),
                message: &self.message,
                details: self.details.as_deref(),
            },
        }
    }

    /// [`envelope`](Self::envelope) as JSON.
    pub fn to_envelope(&self) -> Value {
        // Numbers, strings and a JSON value: serialising cannot fail.
        serde_json::to_value(self.envelope()).unwrap_or(Value::Null)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status(),
            self.kind.as_str(),
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

/// Handlers answer `Result<T, ApiError>`.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_has_every_field_of_section_7() {
        let e = ApiError::invalid_field("card.number", "fails the Luhn check");
        let v = e.to_envelope();
        assert_eq!(v["error"]["status"], 400);
        assert_eq!(v["error"]["type"], "invalidRequest");
        assert_eq!(v["error"]["title"], "Invalid request");
        assert!(v["error"]["message"].is_string());
        assert_eq!(
            v["error"]["details"]["fields"]["card.number"],
            "fails the Luhn check"
        );
    }

    #[test]
    fn internal_error_says_nothing_more() {
        let v = ApiError::internal().to_envelope();
        assert_eq!(v["error"]["message"], "internal error");
        assert!(v["error"].get("details").is_none());
    }

    #[test]
    fn every_kind_maps_to_a_distinct_type() {
        use ErrorKind::*;
        let kinds = [
            InvalidRequest,
            InvalidTemplate,
            Unauthorized,
            Forbidden,
            NotFound,
            MethodNotAllowed,
            RequestTimeout,
            Conflict,
            PayloadTooLarge,
            UnsupportedMediaType,
            RateLimited,
            InternalError,
            BadGateway,
            StoreUnavailable,
            GatewayTimeout,
            InvalidPasskey,
            ProxyAuthenticationRequired,
            RequestHeaderFieldsTooLarge,
        ];
        let names: std::collections::HashSet<_> = kinds.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), kinds.len());
        for k in kinds {
            assert_eq!(serde_json::to_value(k).ok(), Some(json!(k.as_str())));
        }
        assert_eq!(GatewayTimeout.status(), 504);
        assert_eq!(ProxyAuthenticationRequired.status(), 407);
        assert_eq!(RequestHeaderFieldsTooLarge.status(), 431);
    }
}
