//! The Delegate Payment route (the Agentic Commerce Protocol's, ACP 2026-04-17) as
//! `/openapi.json` describes it: its request, answer and flat error object. Documentation
//! only: `edge::acp` serves the route, and reads and writes these shapes itself.

#![allow(dead_code, reason = "documentation only")]

use std::collections::HashMap;
use utoipa::ToSchema;

/// The request: a card and the allowance it may be used within.
#[derive(ToSchema)]
pub struct DelegatePaymentRequest {
    payment_method: AcpCard,
    allowance: AcpAllowance,
    billing_address: Option<AcpAddress>,
    #[schema(min_items = 1)]
    risk_signals: Vec<AcpRiskSignal>,
    /// Echoed in the answer's `metadata`.
    metadata: HashMap<String, String>,
}

/// The card: stored as a payment method of the token's entity (number, expiry and cvc; the
/// other fields are checked, not stored). paycred needs `exp_month`, `exp_year` and `cvc`.
#[derive(ToSchema)]
pub struct AcpCard {
    #[schema(rename = "type", inline)]
    kind: AcpCardType,
    #[schema(inline)]
    card_number_type: AcpCardNumberType,
    /// Digits, Luhn-valid (a network token's DPAN too).
    number: String,
    #[schema(max_length = 2)]
    exp_month: Option<String>,
    #[schema(max_length = 4)]
    exp_year: Option<String>,
    name: Option<String>,
    #[schema(max_length = 4)]
    cvc: Option<String>,
    /// Not stored.
    cryptogram: Option<String>,
    #[schema(max_length = 2)]
    eci_value: Option<String>,
    #[schema(inline)]
    checks_performed: Option<Vec<AcpCheck>>,
    #[schema(max_length = 8)]
    iin: Option<String>,
    #[schema(inline)]
    display_card_funding_type: AcpFunding,
    display_wallet_type: Option<String>,
    display_brand: Option<String>,
    #[schema(pattern = "^[0-9]{4}$")]
    display_last4: Option<String>,
    metadata: HashMap<String, String>,
    #[schema(rename = "virtual")]
    is_virtual: Option<bool>,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpCardType {
    Card,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpCardNumberType {
    Fpan,
    NetworkToken,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpCheck {
    Avs,
    Cvv,
    Ani,
    Auth0,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpFunding {
    Credit,
    Debit,
    Prepaid,
}

/// The allowance: the mandates of the purchase intent behind the vault token.
#[derive(ToSchema)]
pub struct AcpAllowance {
    #[schema(inline)]
    reason: AcpReason,
    /// Minor units (2000 is USD 20.00): the `maxAmount` mandate.
    #[schema(minimum = 1)]
    max_amount: i64,
    /// Lowercase ISO 4217.
    #[schema(pattern = "^[a-z]{3}$")]
    currency: String,
    checkout_session_id: String,
    /// The `merchant` mandate: the card is bound to this merchant, sent by the proxy only to
    /// the hosts the project's `merchants` gives it. Printable ASCII, no whitespace.
    #[schema(max_length = 256)]
    merchant_id: String,
    /// RFC 3339; in the future, at most 24 hours ahead.
    #[schema(format = DateTime)]
    expires_at: String,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpReason {
    OneTime,
}

/// Checked, not stored.
#[derive(ToSchema)]
pub struct AcpAddress {
    #[schema(max_length = 256)]
    name: String,
    #[schema(max_length = 60)]
    line_one: String,
    #[schema(max_length = 60)]
    line_two: Option<String>,
    #[schema(max_length = 60)]
    city: String,
    state: String,
    #[schema(min_length = 2, max_length = 2)]
    country: String,
    #[schema(max_length = 20)]
    postal_code: String,
}

/// Checked, not stored.
#[derive(ToSchema)]
pub struct AcpRiskSignal {
    #[schema(rename = "type", inline)]
    kind: AcpRiskType,
    score: i64,
    #[schema(inline)]
    action: AcpRiskAction,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpRiskType {
    CardTesting,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpRiskAction {
    Blocked,
    ManualReview,
    Authorized,
}

/// The vault token.
#[derive(ToSchema)]
pub struct DelegatePaymentResponse {
    /// `vt_…`: usable in proxy templates in place of a payment method id, with
    /// `type: 'virtual-card'`, once.
    id: String,
    #[schema(format = DateTime)]
    created: String,
    /// The request's metadata, and `merchant_id`, `checkout_session_id`, `idempotency_key`,
    /// `payment_method_id`, `purchase_intent_id`.
    metadata: HashMap<String, String>,
}

/// ACP's flat error object (never paycred's envelope on this route).
#[derive(ToSchema)]
pub struct AcpError {
    #[schema(rename = "type", inline)]
    kind: AcpErrorType,
    /// `invalid_card` (a `payment_method` field), `missing`, `invalid`,
    /// `idempotency_key_required`, `idempotency_conflict`, `idempotency_in_flight`,
    /// `missing_api_version`, `unsupported_api_version`, `unauthorized`, `forbidden`,
    /// `method_not_allowed`, `request_timeout`, `request_too_large`,
    /// `unsupported_media_type`, `too_many_requests`, `processing_error`,
    /// `service_unavailable`.
    code: String,
    message: String,
    /// JSONPath of the field at fault (`$.payment_method.number`).
    param: Option<String>,
    /// With `unsupported_api_version` and `missing_api_version`.
    supported_versions: Option<Vec<String>>,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum AcpErrorType {
    InvalidRequest,
    RateLimitExceeded,
    ProcessingError,
    ServiceUnavailable,
}

/// The Agentic Commerce Protocol's Delegate Payment API (docs/agents.md): stores the card as a
/// payment method of the token's entity and answers a single-use vault token bounded by the
/// allowance. A private-role token, its project the token's.
#[utoipa::path(post, path = "/agentic_commerce/delegate_payment", operation_id = "delegatePayment",
    params(
        ("Idempotency-Key" = String, Header, min_length = 1, max_length = 255,
            pattern = "^[!-~]+$",
            description = "Required. The same key and body within 24 h: the first answer \
                again (Idempotent-Replayed: true); another body: 422 idempotency_conflict."),
        ("API-Version" = String, Header,
            description = "Required: 2026-04-17, 2026-01-30, 2026-01-16, 2025-12-12 or \
                2025-09-29."),
        ("Signature" = Option<String>, Header, description = "Accepted, not checked."),
        ("Timestamp" = Option<String>, Header, description = "Accepted, not checked."),
    ),
    request_body(content = DelegatePaymentRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The vault token", body = DelegatePaymentResponse,
            headers(("Idempotent-Replayed" = String,
                description = "true on a replay of the key's first answer"))),
        (status = 400, description = "invalid_request: a field missing or of the wrong shape \
            (param names it), Idempotency-Key or API-Version missing or not served",
            body = AcpError),
        (status = 401, description = "unauthorized: token missing or invalid", body = AcpError),
        (status = 403, description = "forbidden: a public-role token", body = AcpError),
        (status = 408, description = "request_timeout: the body stopped arriving",
            body = AcpError),
        (status = 409, description = "idempotency_in_flight: the key's first request still \
            runs (Retry-After)", body = AcpError,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 413, description = "request_too_large", body = AcpError),
        (status = 415, description = "unsupported_media_type: not application/json",
            body = AcpError),
        (status = 422, description = "invalid_card (the card refused: Luhn, expiry, cvc), \
            invalid (an unknown currency, expires_at in the past or over 24 h ahead), or \
            idempotency_conflict (the key used with another body)", body = AcpError),
        (status = 429, description = "rate_limit_exceeded", body = AcpError,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 500, description = "processing_error", body = AcpError),
        (status = 502, description = "processing_error: the issuer did not issue the card",
            body = AcpError),
        (status = 503, description = "service_unavailable: the store does not answer",
            body = AcpError),
    ))]
pub fn delegate_payment() {}
