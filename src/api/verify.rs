//! `POST /projects/:projectId/purchase-intents/:id/verify`: the HTTP calls behind the
//! browser SDK's `verifyPurchaseIntent` (`verify` → `active`).
//!
//! The sandbox's one step is `otp`. Wrong codes are counted; after
//! [`MAX_FAILED_VERIFICATIONS`] the intent is locked (it stays `verify`, and every further
//! attempt answers 409 `conflict`). Two verifications of one intent at once: 409.

use crate::app::App;
use crate::audit::AuditEvent;
use crate::auth::Principal;
use crate::clock::micros;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::http::Response;
use crate::store::{IntentRecord, IntentStatus, Scope, VerificationAttempt};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use zeroize::Zeroizing;

/// Wrong verification codes after which an intent is locked.
pub const MAX_FAILED_VERIFICATIONS: u32 = 5;

/// The verify body (optional: an empty body or `{}` asks for the next step).
#[derive(ToSchema)]
#[schema(as = Verify)]
pub struct VerifyBody {
    /// The one-time code the end user received.
    pub code: Option<String>,
}

/// The verification state: `status` is the intent's (`verify` or `active`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerifyResult)]
pub struct VerifyAnswer {
    pub status: &'static str,
    /// The step to take, `null` once the intent is `active`.
    pub next_action: Option<OtpStep>,
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

/// Verification step of a purchase intent in status verify.
///
/// Public or private role of the intent's entity. Body `{"code": "..."}` (optional; an empty
/// body or `{}` asks for the next step).
///
/// Answers 200 `{status, nextAction}`: `nextAction` is `{"type": "otp", ...}` while a code is
/// needed and `null` once the intent is `active`. 409 `conflict`: the intent is locked after
/// five wrong codes, is not waiting for verification (`expired`, `canceled`, `unavailable`), or
/// another verification of it is running.
#[utoipa::path(post, path = "/projects/{projectId}/purchase-intents/{id}/verify",
    operation_id = "verifyPurchaseIntent", request_body = VerifyBody,
    responses(
        (status = 200, description = "The verification state", body = VerifyAnswer),
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
    let code = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let obj = super::json_object(body)?;
        if let Some(k) = obj.keys().find(|k| k.as_str() != "code") {
            return Err(ApiError::invalid_field(k, "unknown field"));
        }
        match obj.get("code") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(Zeroizing::new(c.clone())),
            Some(_) => return Err(ApiError::invalid_field("code", "must be a string")),
        }
    };
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
        IntentStatus::Active => return verify_answer("active", None),
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
    let Some(code) = code else {
        return verify_answer("verify", Some(otp_step(&rec, None)));
    };
    let attempt = if crate::domain::issuer::Sandbox::otp_matches(&code) {
        VerificationAttempt::Passed
    } else {
        VerificationAttempt::Failed
    };
    let event = AuditEvent {
        at_micros: app.now_micros(),
        action: "purchaseIntent.verify".to_string(),
        project: project.to_string(),
        entity: entity.to_string(),
        resource: id.to_string(),
    };
    let Some(rec) = app
        .store
        .record_verification(sc, id, attempt, event)
        .await?
    else {
        return Err(ApiError::not_found("Purchase intent"));
    };
    match (attempt, rec.status) {
        (VerificationAttempt::Passed, IntentStatus::Active) => verify_answer("active", None),
        (VerificationAttempt::Failed, _)
            if rec.failed_verifications >= MAX_FAILED_VERIFICATIONS =>
        {
            Err(locked())
        }
        _ => verify_answer("verify", Some(otp_step(&rec, Some("invalidCode")))),
    }
}

fn locked() -> ApiError {
    ApiError::new(
        ErrorKind::Conflict,
        format!(
            "Verification is locked after {MAX_FAILED_VERIFICATIONS} wrong codes; create a new purchase intent."
        ),
    )
}

fn otp_step(rec: &IntentRecord, error: Option<&'static str>) -> OtpStep {
    OtpStep {
        kind: "otp",
        channel: "sms",
        length: crate::domain::issuer::sandbox::SANDBOX_OTP.len(),
        attempts_remaining: MAX_FAILED_VERIFICATIONS.saturating_sub(rec.failed_verifications),
        error,
    }
}

fn verify_answer(status: &'static str, next_action: Option<OtpStep>) -> ApiResult<Response> {
    Response::json(
        200,
        &VerifyAnswer {
            status,
            next_action,
        },
    )
}
