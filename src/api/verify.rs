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
use serde_json::{json, Value};
use zeroize::Zeroizing;

/// Wrong verification codes after which an intent is locked.
pub const MAX_FAILED_VERIFICATIONS: u32 = 5;

/// `POST /projects/:projectId/purchase-intents/:id/verify`, public or private role of the
/// intent's entity. Body `{"code": "..."}` (optional; empty body or `{}` asks for the next step).
///
/// Answers 200 `{status, nextAction}`: `nextAction` is `{"type": "otp", ...}` while a code is
/// needed and `null` once the intent is `active`. 409 `conflict`: the intent is locked after
/// five wrong codes, is not waiting for verification (`expired`, `canceled`, `unavailable`), or
/// another verification of it is running.
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

fn otp_step(rec: &IntentRecord, error: Option<&str>) -> Value {
    let mut step = json!({
        "type": "otp",
        "channel": "sms",
        "length": crate::domain::issuer::sandbox::SANDBOX_OTP.len(),
        "attemptsRemaining": MAX_FAILED_VERIFICATIONS.saturating_sub(rec.failed_verifications),
    });
    if let (Some(e), Some(obj)) = (error, step.as_object_mut()) {
        obj.insert("error".into(), Value::String(e.into()));
    }
    step
}

fn verify_answer(status: &str, next: Option<Value>) -> ApiResult<Response> {
    Response::json(
        200,
        &json!({ "status": status, "nextAction": next.unwrap_or(Value::Null) }),
    )
}
