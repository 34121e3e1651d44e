//! `POST /projects/:projectId/purchase-intents/:id/verify`: the HTTP calls behind a browser's
//! `verifyPurchaseIntent` (`verify` → `active`), in two dialects on the same route:
//!
//! - paycred's own (`sdk/js`): `{}` asks for the next step, `{"code": "..."}` sends the code,
//!   `{"assertion": ...}` a passkey's (`service::passkeys`, docs/passkeys.md); answers
//!   `{status, nextAction}`.
//! - the reference client's (`@basis-theory-ai/react`): a body with `action`. `START` →
//!   `OTP_REQUIRED` with the methods (`data.methods[]`: `identifier`, `method` `OTPSMS` /
//!   `OTPEMAIL`, `value`); `SELECT_OTP` with `payload.methodId` → `OTP_PENDING`;
//!   `VALIDATE_OTP` with `payload.otpCode` → `VERIFIED`, or `ERROR` with `error.message` for a
//!   wrong code. `VALIDATE_OTP` before `SELECT_OTP` is 400; `START` clears the choice. The
//!   choice lives in the intent record, so any instance can serve the next call.
//!
//! The same rules behind both: the sandbox's one step is `otp` (`passkey` for an entity with a
//! passkey, in paycred's dialect). Wrong codes and refused assertions are counted; after
//! [`MAX_FAILED_VERIFICATIONS`] the intent is locked (it stays `verify`, and every further
//! attempt answers 409 `conflict`). Not in `verify`: 409 (an `active` one answers its success).
//! Two verifications of one intent at once: 409.

use crate::app::App;
use crate::audit::AuditEvent;
use crate::auth::Principal;
use crate::clock::micros;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::http::Response;
use crate::service::passkeys;
use crate::store::{IntentRecord, IntentStatus, OtpMethod, Scope, VerificationAttempt};
use serde::Serialize;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;
use zeroize::Zeroizing;

/// Wrong verification codes after which an intent is locked.
pub const MAX_FAILED_VERIFICATIONS: u32 = 5;

/// The verify body (optional: an empty body or `{}` asks for the next step). Either `code`
/// (paycred's dialect) or `action` with its `payload` (the reference client's).
#[derive(ToSchema)]
#[schema(as = Verify)]
pub struct VerifyBody {
    /// The one-time code the end user received.
    pub code: Option<String>,
    /// The passkey assertion: the `PublicKeyCredential` `navigator.credentials.get` made with
    /// the options of `nextAction`, as JSON (binary members base64url).
    #[schema(value_type = Option<Object>)]
    pub assertion: Option<Value>,
    /// The reference client's step.
    #[schema(inline)]
    pub action: Option<ReferenceAction>,
    /// `SELECT_OTP`: `{"methodId": "sms" | "email"}`; `VALIDATE_OTP`: `{"otpCode": "..."}`.
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Value>,
    /// Sent by the reference client with `START` when a card network's script ran; ignored.
    #[schema(value_type = Option<Object>, rename = "iframeData")]
    pub iframe_data: Option<Value>,
}

/// The reference client's steps.
#[derive(ToSchema)]
#[allow(clippy::upper_case_acronyms, non_camel_case_types)]
pub enum ReferenceAction {
    START,
    SELECT_OTP,
    VALIDATE_OTP,
}

/// The verification state: `status` is the intent's (`verify` or `active`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerifyResult)]
pub struct VerifyAnswer {
    pub status: &'static str,
    /// The step to take, `null` once the intent is `active`.
    pub next_action: Option<NextAction>,
}

/// The step a purchase intent in `verify` waits for.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum NextAction {
    Otp(OtpStep),
    Passkey(PasskeyStep),
}

/// A passkey assertion (the entity has a passkey and the project `verification.passkeys`):
/// pass `options` to `navigator.credentials.get({publicKey})` and post the credential as
/// `{"assertion": ...}`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasskeyStep {
    /// `passkey`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `PublicKeyCredentialRequestOptions` (JSON, binary members base64url): a fresh
    /// challenge, single-use, valid 5 minutes (at most until the intent expires), user
    /// verification required.
    #[schema(value_type = Object)]
    pub options: Value,
    pub attempts_remaining: u32,
}

/// The answer of the reference client's dialect.
#[derive(Serialize, ToSchema)]
#[schema(as = ReferenceVerifyResult)]
pub struct ReferenceAnswer {
    /// `OTP_REQUIRED`, `OTP_PENDING`, `VERIFIED` or `ERROR`.
    pub status: &'static str,
    /// `OTP_REQUIRED`: `{"methods": [{identifier, method, value}]}`; `OTP_PENDING`:
    /// `{"method": {...}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub data: Option<Value>,
    /// `ERROR`: `{"message": "..."}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
}

/// What verify answers, by dialect.
#[derive(ToSchema)]
#[allow(dead_code)]
pub enum VerifyAnswers {
    Own(VerifyAnswer),
    Reference(ReferenceAnswer),
}

/// The sandbox's one step: a one-time code sent by text message.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OtpStep {
    /// `otp`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `sms`.
    pub channel: &'static str,
    /// Digits in the code.
    pub length: usize,
    pub attempts_remaining: u32,
    /// `invalidCode` after a wrong code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
}

/// A request, by dialect.
enum Request {
    /// paycred's: the code, if any.
    Own(Option<Zeroizing<String>>),
    /// paycred's: a passkey assertion.
    Assertion(Value),
    Start,
    SelectOtp(OtpMethod),
    ValidateOtp(Zeroizing<String>),
}

/// Verification step of a purchase intent in status verify.
///
/// Public or private role of the intent's entity. paycred's dialect: body `{"code": "..."}`
/// or `{"assertion": {...}}` (optional; an empty body or `{}` asks for the next step);
/// answers 200 `{status, nextAction}`: `nextAction` is `{"type": "otp", ...}` while a code is
/// needed, `{"type": "passkey", "options": {...}}` for an entity with a passkey (in a project
/// with passkeys), and `null` once the intent is `active`. A refused assertion: 400
/// `invalidPasskey` with `details.reason` and `details.attemptsRemaining`. The reference client's dialect: `{"action": "START" | "SELECT_OTP"
/// | "VALIDATE_OTP", "payload": {...}}`; answers 200 `{status, data?, error?}` (`OTP_REQUIRED`,
/// `OTP_PENDING`, `VERIFIED`, `ERROR` for a wrong code); an unknown action, or `VALIDATE_OTP`
/// before `SELECT_OTP`: 400 naming the field. 409 `conflict`: the intent is locked after five
/// wrong codes, is not waiting for verification (`expired`, `canceled`, `unavailable`), or
/// another verification of it is running.
#[utoipa::path(post, path = "/projects/{projectId}/purchase-intents/{id}/verify",
    operation_id = "verifyPurchaseIntent", request_body = VerifyBody,
    responses(
        (status = 200, description = "The verification state", body = VerifyAnswers),
        (status = 409, description = "conflict: locked after five wrong codes, nothing to \
            verify, another verification running, or Idempotency-Key reused",
            body = crate::error::Envelope),
    ))]
pub async fn verify(
    app: &App,
    principal: &Principal,
    id: &str,
    body: &[u8],
) -> ApiResult<Response> {
    let request = parse(body)?;
    let project = principal.project.as_str();
    let entity = principal.entity.as_str();
    let sc = Scope { project, entity };
    let Some(_guard) = app.verifying.enter(format!("{project}\0{entity}\0{id}")) else {
        return Err(ApiError::new(
            ErrorKind::Conflict,
            "Another verification of this purchase intent is in progress.",
        ));
    };
    let Some(rec) = app.store.get_intent(sc, id).await? else {
        return Err(ApiError::not_found("Purchase intent"));
    };
    match rec.status_at(micros(app.clock.now())) {
        IntentStatus::Active => {
            return match request {
                Request::Own(_) | Request::Assertion(_) => verify_answer("active", None),
                _ => reference_answer("VERIFIED", None, None),
            }
        }
        IntentStatus::Verify => {}
        other => {
            return Err(ApiError::new(
                ErrorKind::Conflict,
                format!(
                    "The purchase intent is {}; there is nothing to verify.",
                    other.as_str()
                ),
            ))
        }
    }
    if rec.failed_verifications >= MAX_FAILED_VERIFICATIONS {
        return Err(locked());
    }
    let event = || AuditEvent {
        at_micros: app.now_micros(),
        action: "purchaseIntent.verify".to_string(),
        project: project.to_string(),
        entity: entity.to_string(),
        resource: id.to_string(),
    };
    let record = |attempt: VerificationAttempt| async move {
        app.store
            .record_verification(sc, id, attempt, event())
            .await?
            .ok_or_else(|| ApiError::not_found("Purchase intent"))
    };
    // A code is never taken in place of an entity's passkey, in either dialect.
    let code_field = match request {
        Request::Own(Some(_)) => Some("code"),
        Request::Start | Request::SelectOtp(_) | Request::ValidateOtp(_) => Some("action"),
        Request::Own(None) | Request::Assertion(_) => None,
    };
    if let Some(field) = code_field {
        if passkeys::uses_passkeys(app, sc).await? {
            return Err(ApiError::invalid_field(
                field,
                "this entity verifies with a passkey, not a one-time code: send `{}` for the \
                 passkey options, then `{\"assertion\": ...}`",
            ));
        }
    }
    match request {
        Request::Own(None) => match passkeys::start_assertion(app, sc, &rec).await? {
            Some(options) => verify_answer(
                "verify",
                Some(NextAction::Passkey(PasskeyStep {
                    kind: "passkey",
                    options,
                    attempts_remaining: attempts_left(&rec),
                })),
            ),
            None => verify_answer("verify", Some(otp_step(&rec, None))),
        },
        Request::Assertion(assertion) => {
            let Err(mut refused) = passkeys::finish_assertion(app, sc, id, assertion).await else {
                record(VerificationAttempt::Passed).await?;
                return verify_answer("active", None);
            };
            if refused.kind != ErrorKind::InvalidPasskey {
                return Err(refused);
            }
            let rec = record(VerificationAttempt::Failed).await?;
            if rec.failed_verifications >= MAX_FAILED_VERIFICATIONS {
                return Err(locked());
            }
            if let Some(details) = refused.details.as_mut().and_then(|d| d.as_object_mut()) {
                details.insert("attemptsRemaining".into(), json!(attempts_left(&rec)));
            }
            Err(refused)
        }
        Request::Own(Some(code)) => match record(attempt(&code)).await? {
            rec if rec.status == IntentStatus::Active => verify_answer("active", None),
            rec if rec.failed_verifications >= MAX_FAILED_VERIFICATIONS => Err(locked()),
            rec => verify_answer("verify", Some(otp_step(&rec, Some("invalidCode")))),
        },
        Request::Start => {
            if rec.otp_method.is_some() {
                record(VerificationAttempt::OtpMethod(None)).await?;
            }
            let methods: Vec<Value> = [OtpMethod::Sms, OtpMethod::Email]
                .into_iter()
                .map(method_view)
                .collect();
            reference_answer("OTP_REQUIRED", Some(json!({ "methods": methods })), None)
        }
        Request::SelectOtp(method) => {
            record(VerificationAttempt::OtpMethod(Some(method))).await?;
            reference_answer(
                "OTP_PENDING",
                Some(json!({ "method": method_view(method) })),
                None,
            )
        }
        Request::ValidateOtp(code) => {
            if rec.otp_method.is_none() {
                return Err(ApiError::invalid_field(
                    "action",
                    "VALIDATE_OTP needs SELECT_OTP first (after START)",
                ));
            }
            match record(attempt(&code)).await? {
                rec if rec.status == IntentStatus::Active => {
                    reference_answer("VERIFIED", None, None)
                }
                rec if rec.failed_verifications >= MAX_FAILED_VERIFICATIONS => Err(locked()),
                rec => {
                    let left = MAX_FAILED_VERIFICATIONS.saturating_sub(rec.failed_verifications);
                    let message = format!("Invalid code; {left} attempts remaining.");
                    reference_answer(
                        "ERROR",
                        None,
                        Some(json!({ "code": "invalidCode", "message": message })),
                    )
                }
            }
        }
    }
}

/// The request's dialect and fields; 400 naming the field that is wrong.
fn parse(body: &[u8]) -> ApiResult<Request> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Request::Own(None));
    }
    let obj = super::json_object(body)?;
    let Some(action) = obj.get("action") else {
        if let Some(k) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "code" | "assertion"))
        {
            return Err(ApiError::invalid_field(k, "unknown field"));
        }
        match obj.get("assertion") {
            None | Some(Value::Null) => {}
            Some(_) if obj.get("code").is_some_and(|c| !c.is_null()) => {
                return Err(ApiError::invalid_field(
                    "assertion",
                    "send either code or assertion",
                ))
            }
            Some(a @ Value::Object(_)) => return Ok(Request::Assertion(a.clone())),
            Some(_) => return Err(ApiError::invalid_field("assertion", "must be an object")),
        }
        return match obj.get("code") {
            None | Some(Value::Null) => Ok(Request::Own(None)),
            Some(Value::String(c)) => Ok(Request::Own(Some(Zeroizing::new(c.clone())))),
            Some(_) => Err(ApiError::invalid_field("code", "must be a string")),
        };
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "action" | "payload" | "iframeData"))
    {
        return Err(ApiError::invalid_field(k, "unknown field"));
    }
    let empty = Map::new();
    let payload = match obj.get("payload") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(ApiError::invalid_field("payload", "must be an object")),
    };
    let field = |name: &str| -> ApiResult<&str> {
        match payload.get(name) {
            Some(Value::String(v)) => Ok(v),
            None | Some(Value::Null) => Err(ApiError::invalid_field(
                &format!("payload.{name}"),
                "required",
            )),
            Some(_) => Err(ApiError::invalid_field(
                &format!("payload.{name}"),
                "must be a string",
            )),
        }
    };
    match action.as_str() {
        Some("START") => Ok(Request::Start),
        Some("SELECT_OTP") => match field("methodId")? {
            "sms" => Ok(Request::SelectOtp(OtpMethod::Sms)),
            "email" => Ok(Request::SelectOtp(OtpMethod::Email)),
            _ => Err(ApiError::invalid_field(
                "payload.methodId",
                "must be the identifier of a method START listed (sms, email)",
            )),
        },
        Some("VALIDATE_OTP") => Ok(Request::ValidateOtp(Zeroizing::new(
            field("otpCode")?.to_string(),
        ))),
        _ => Err(ApiError::invalid_field(
            "action",
            "must be START, SELECT_OTP or VALIDATE_OTP",
        )),
    }
}

fn attempt(code: &str) -> VerificationAttempt {
    if crate::domain::issuer::Sandbox::otp_matches(code) {
        VerificationAttempt::Passed
    } else {
        VerificationAttempt::Failed
    }
}

/// A method as the reference client lists it.
fn method_view(method: OtpMethod) -> Value {
    match method {
        OtpMethod::Sms => {
            json!({"identifier": "sms", "method": "OTPSMS", "value": "Sandbox phone"})
        }
        OtpMethod::Email => {
            json!({"identifier": "email", "method": "OTPEMAIL", "value": "Sandbox email"})
        }
    }
}

fn reference_answer(
    status: &'static str,
    data: Option<Value>,
    error: Option<Value>,
) -> ApiResult<Response> {
    Response::json(
        200,
        &ReferenceAnswer {
            status,
            data,
            error,
        },
    )
}

fn locked() -> ApiError {
    ApiError::new(
        ErrorKind::Conflict,
        format!(
            "Verification is locked after {MAX_FAILED_VERIFICATIONS} wrong codes; create a new purchase intent."
        ),
    )
}

fn attempts_left(rec: &IntentRecord) -> u32 {
    MAX_FAILED_VERIFICATIONS.saturating_sub(rec.failed_verifications)
}

fn otp_step(rec: &IntentRecord, error: Option<&'static str>) -> NextAction {
    NextAction::Otp(OtpStep {
        kind: "otp",
        channel: "sms",
        length: crate::domain::issuer::sandbox::SANDBOX_OTP.len(),
        attempts_remaining: attempts_left(rec),
        error,
    })
}

fn verify_answer(status: &'static str, next_action: Option<NextAction>) -> ApiResult<Response> {
    Response::json(
        200,
        &VerifyAnswer {
            status,
            next_action,
        },
    )
}
