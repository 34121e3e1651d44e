//! Purchase intents (spec §2.2, §3, §4.5, §4.6; DESIGN.md §4–6): create and get on both path
//! forms, verification (`verify` → `active`), and the two functions the proxy resolves
//! templates with ([`active_credential`], [`stored_card_credential`], [`record_proxy_use`]).
//!
//! - The credential comes from `app.issuer` (the sandbox by default) and is stored sealed by
//!   the vault under `pi/{project}/{id}/credential`; `pan` intents store none and read the
//!   payment method's card (cvc while retained) whenever they are revealed.
//! - The credential object (`card`, `token` or `pan`) appears only while the intent is
//!   `active`; every reveal appends an audit event (ids only, never values).
//! - `expired` is computed at read time: past `expiresAt`, or the usage limit used up.
//! - Verification: the sandbox's one step is `otp`. Wrong codes are counted; after
//!   [`MAX_FAILED_VERIFICATIONS`] the intent is locked (it stays `verify`, and every further
//!   attempt answers 409 `conflict`). Two verifications of one intent at once: 409.

use super::payment_methods::{audit_event, cvc_aad, number_aad};
use super::App;
use crate::auth::Principal;
use crate::clock::iso8601;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::http::Response;
use crate::issuer::{CardFacts, Credential, CredentialType, IssueRequest, Issued, IssuerError};
use crate::mandate::{parse_mandates, Mandates};
use crate::store::{
    AuditEvent, IntentRecord, IntentStatus, PaymentMethodRecord, Scope, UseOutcome,
    VerificationAttempt,
};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

/// Lifetime of a credential when no `expirationDate` mandate is sooner.
pub const CREDENTIAL_LIFETIME: Duration = Duration::hours(24);

/// Wrong verification codes after which an intent is locked.
pub const MAX_FAILED_VERIFICATIONS: u32 = 5;

/// Where an intent's credential is sealed (the vault's `aad`).
pub fn credential_aad(project: &str, intent_id: &str) -> String {
    format!("pi/{project}/{intent_id}/credential")
}

/// Intents being verified right now, so that two attempts on one intent cannot interleave.
#[derive(Debug, Default)]
pub struct InFlight(Mutex<HashSet<String>>);

/// Holds an intent's place in [`InFlight`]; released on drop.
struct InFlightGuard<'a> {
    set: &'a InFlight,
    key: String,
}

impl InFlight {
    fn enter(&self, key: String) -> Option<InFlightGuard<'_>> {
        if self.0.lock().insert(key.clone()) {
            Some(InFlightGuard { set: self, key })
        } else {
            None
        }
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.set.0.lock().remove(&self.key);
    }
}

fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn from_micros(m: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(m) * 1000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn scope<'a>(project: &'a str, entity: &'a str) -> Scope<'a> {
    Scope { project, entity }
}

fn audit(app: &App, project: &str, entity: &str, action: &str, resource: &str) -> AuditEvent {
    AuditEvent {
        at_micros: micros(app.clock.now()),
        action: action.to_string(),
        project: project.to_string(),
        entity: entity.to_string(),
        resource: resource.to_string(),
    }
}

/// The purchase intent object of create and get responses.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IntentView<'a> {
    id: &'a str,
    entity_id: &'a str,
    credential_type: CredentialType,
    payment_method_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    card: Option<Credential>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<Credential>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pan: Option<Credential>,
    mandates: &'a Mandates,
    created_at: String,
    expires_at: String,
}

/// Answers an intent, revealing its credential (and auditing that) only while `active`.
async fn respond(app: &App, status_code: u16, rec: &IntentRecord) -> ApiResult<Response> {
    let status = rec.status_at(micros(app.clock.now()));
    let credential = if status == IntentStatus::Active {
        let c = reveal(app, rec).await?;
        if c.is_some() {
            app.store
                .append_audit(audit(
                    app,
                    &rec.project,
                    &rec.entity,
                    "purchaseIntent.reveal",
                    &rec.id,
                ))
                .await?;
        }
        c
    } else {
        None
    };
    let (mut card, mut token, mut pan) = (None, None, None);
    match rec.credential_type {
        CredentialType::VirtualCard => card = credential,
        CredentialType::NetworkToken => token = credential,
        CredentialType::Pan => pan = credential,
    }
    let mut response = Response::json(
        status_code,
        &IntentView {
            id: &rec.id,
            entity_id: &rec.entity,
            credential_type: rec.credential_type,
            payment_method_id: &rec.payment_method_id,
            status: status.as_str(),
            card,
            token,
            pan,
            mandates: &rec.mandates,
            created_at: iso8601(from_micros(rec.created_micros)),
            expires_at: iso8601(from_micros(rec.expires_micros)),
        },
    )?;
    response.intent = Some(rec.id.clone());
    Ok(response)
}

/// The intent's credential in clear (no audit here): sealed with the intent, or for `pan`
/// read from the payment method while the project enables `pan`. `None` when there is none
/// (e.g. the payment method is gone).
async fn reveal(app: &App, rec: &IntentRecord) -> ApiResult<Option<Credential>> {
    match (&rec.credential_sealed, rec.credential_type) {
        (_, CredentialType::Pan) => {
            stored_card_credential(app, &rec.project, &rec.entity, &rec.payment_method_id).await
        }
        (Some(sealed), _) => {
            let plain =
                app.vault
                    .open(&rec.project, &credential_aad(&rec.project, &rec.id), sealed)?;
            let c: Credential = serde_json::from_slice(&plain).map_err(|_| {
                tracing::error!(intent = %rec.id, "sealed credential does not decode");
                ApiError::internal()
            })?;
            Ok(Some(c))
        }
        (None, _) => Ok(None),
    }
}

/// The stored card of a payment method: number, expiry, and the cvc while it is retained.
fn card_of(app: &App, pm: &PaymentMethodRecord) -> ApiResult<Credential> {
    let number = open_number(app, pm)?;
    let cvc = pm.card.cvc_sealed.as_ref().and_then(|sealed| {
        app.vault
            .open_cvc(&cvc_aad(&pm.project, &pm.id), sealed, app.now_secs())
    });
    Ok(Credential {
        number: number.to_string(),
        expiration_month: pm.card.expiration_month.clone(),
        expiration_year: pm.card.expiration_year.clone(),
        cvc: cvc.map(|c| c.to_string()),
        cryptogram: None,
    })
}

fn open_number(app: &App, pm: &PaymentMethodRecord) -> ApiResult<Zeroizing<String>> {
    let plain = app.vault.open(
        &pm.project,
        &number_aad(&pm.project, &pm.id),
        &pm.card.number_sealed,
    )?;
    let number = std::str::from_utf8(&plain).map_err(|_| {
        tracing::error!(payment_method = %pm.id, "stored card number is not text");
        ApiError::internal()
    })?;
    Ok(Zeroizing::new(number.to_string()))
}

fn string_field<'a>(
    obj: &'a Map<String, Value>,
    name: &str,
    errors: &mut BTreeMap<String, String>,
) -> Option<&'a str> {
    match obj.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        None | Some(Value::Null) => {
            errors.insert(name.to_string(), "required".to_string());
            None
        }
        Some(_) => {
            errors.insert(name.to_string(), "must be a non-empty string".to_string());
            None
        }
    }
}

/// `POST /projects/:projectId/purchase-intents` (also `/tenants/:tenantId/purchase-intent[s]`).
pub async fn create(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    principal.require_private()?;
    let obj = super::json_object(body)?;
    super::check_entity(&obj, principal, false)?;
    let mut errors: BTreeMap<String, String> = obj
        .keys()
        .filter(|k| {
            !matches!(
                k.as_str(),
                "entityId" | "credentialType" | "paymentMethodId" | "mandates"
            )
        })
        .map(|k| (k.clone(), "unknown field".to_string()))
        .collect();
    let kind = match obj.get("credentialType") {
        Some(Value::String(s)) => match s.parse::<CredentialType>() {
            Ok(k) => Some(k),
            Err(e) => {
                errors.insert("credentialType".into(), e.to_string());
                None
            }
        },
        None | Some(Value::Null) => {
            errors.insert("credentialType".into(), "required".into());
            None
        }
        Some(_) => {
            errors.insert(
                "credentialType".into(),
                "must be one of virtual-card, network-token, pan".into(),
            );
            None
        }
    };
    let pm_id = string_field(&obj, "paymentMethodId", &mut errors).map(str::to_string);
    let now = app.clock.now();
    let mandates = match parse_mandates(obj.get("mandates").unwrap_or(&Value::Null), now) {
        Ok(m) => Some(m),
        Err(fields) => {
            errors.extend(fields);
            None
        }
    };
    let (Some(kind), Some(pm_id), Some(mandates)) = (kind, pm_id, mandates) else {
        return Err(ApiError::invalid_fields(errors));
    };
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(errors));
    }

    let project = principal.project.as_str();
    let entity = principal.entity.as_str();
    let sc = scope(project, entity);
    let Some(pm) = app.store.get_payment_method(sc, &pm_id).await? else {
        return Err(ApiError::not_found("Payment method"));
    };
    let id = format!("pi_{}", uuid::Uuid::new_v4().simple());
    let expires_at = mandates.credential_expires_at(now, CREDENTIAL_LIFETIME);
    let pan_enabled = app.config.project(project).is_some_and(|p| p.pan_enabled);
    let verified_before = app.store.payment_method_verified(sc, &pm_id).await?;
    let number = open_number(app, &pm)?;
    let issued = app.issuer.issue(IssueRequest {
        intent_id: &id,
        payment_method_id: &pm_id,
        credential_type: kind,
        card: CardFacts {
            brand: &pm.card.brand,
            number: &number,
            expiration_month: &pm.card.expiration_month,
            expiration_year: &pm.card.expiration_year,
        },
        pan_enabled,
        verified_before,
        now,
        expires_at,
    });
    drop(number);
    let issued = issued.map_err(|e| {
        tracing::error!(issuer = app.issuer.name(), error = %e, "issuing a credential");
        match e {
            IssuerError::InvalidCard(_) => ApiError::internal(),
            IssuerError::Upstream(_) => ApiError::new(
                ErrorKind::BadGateway,
                "The issuer could not issue the credential.",
            ),
        }
    })?;
    let status = match &issued {
        Issued::Active(_) => IntentStatus::Active,
        Issued::Verify(_) => IntentStatus::Verify,
        Issued::Unavailable => IntentStatus::Unavailable,
    };
    let credential_sealed = match (kind, issued.credential()) {
        (CredentialType::Pan, _) | (_, None) => None,
        (_, Some(c)) => {
            let plain = Zeroizing::new(serde_json::to_vec(c).map_err(|_| ApiError::internal())?);
            Some(
                app.vault
                    .seal(project, &credential_aad(project, &id), &plain)?,
            )
        }
    };
    drop(issued);
    let rec = IntentRecord {
        id: id.clone(),
        project: project.to_string(),
        entity: entity.to_string(),
        payment_method_id: pm_id,
        credential_type: kind,
        status,
        created_micros: micros(now),
        expires_micros: micros(expires_at),
        mandates,
        credential_sealed,
        uses: 0,
        failed_verifications: 0,
    };
    let event = audit_event(app, principal, "purchaseIntent.create", &id);
    if !app.store.insert_intent(&rec, event).await? {
        // The payment method was deleted meanwhile.
        return Err(ApiError::not_found("Payment method"));
    }
    respond(app, 201, &rec).await
}

/// `GET /projects/:projectId/purchase-intents/:id`
pub async fn get(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    show(app, principal, id, 200).await
}

/// The intent `id` as it is now, answered with `status_code`, its credential only while
/// `active` (each reveal audited). [`get`] answers this, and so does an `Idempotency-Key`
/// replay of a create (with 201), so that a replay never shows a credential GET would not.
pub async fn show(
    app: &App,
    principal: &Principal,
    id: &str,
    status_code: u16,
) -> ApiResult<Response> {
    principal.require_private()?;
    let sc = scope(&principal.project, &principal.entity);
    match app.store.get_intent(sc, id).await? {
        Some(rec) => respond(app, status_code, &rec).await,
        None => Err(ApiError::not_found("Purchase intent")),
    }
}

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
    let sc = scope(project, entity);
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
    let attempt = if crate::issuer::Sandbox::otp_matches(&code) {
        VerificationAttempt::Passed
    } else {
        VerificationAttempt::Failed
    };
    let event = audit(app, project, entity, "purchaseIntent.verify", id);
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
        "length": crate::issuer::sandbox::SANDBOX_OTP.len(),
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

/// For the proxy: the newest `active`, unexpired intent of `kind` for the payment method, and
/// its credential. `Ok(None)` when there is none. The proxy audits the reveal: its
/// `proxy.use` entry lists the intent.
/// (`pan` templates read the stored card: see [`stored_card_credential`].)
pub async fn active_credential(
    app: &App,
    project: &str,
    entity: &str,
    payment_method_id: &str,
    kind: CredentialType,
) -> ApiResult<Option<(String, Credential)>> {
    let sc = scope(project, entity);
    let Some(rec) = app
        .store
        .newest_active_intent(sc, payment_method_id, kind, app.clock.now())
        .await?
    else {
        return Ok(None);
    };
    let Some(credential) = reveal(app, &rec).await? else {
        return Ok(None);
    };
    Ok(Some((rec.id, credential)))
}

/// For the proxy's `pan` templates: the stored card of the payment method (cvc only while it
/// is retained), when the project has `pan: enabled`. The proxy audits the reveal: its
/// `proxy.use` entry lists the payment method.
/// `Ok(None)` when the payment method does not exist in this scope or pan is disabled.
pub async fn stored_card_credential(
    app: &App,
    project: &str,
    entity: &str,
    payment_method_id: &str,
) -> ApiResult<Option<Credential>> {
    if !app.config.project(project).is_some_and(|p| p.pan_enabled) {
        return Ok(None);
    }
    let sc = scope(project, entity);
    let Some(pm) = app.store.get_payment_method(sc, payment_method_id).await? else {
        return Ok(None);
    };
    card_of(app, &pm).map(Some)
}

/// For the proxy: counts one use of the intent whose credential a forwarded request carried.
/// 404 `notFound` for an unknown intent; 409 `conflict` when it can no longer be used
/// (expired, usage limit reached, not active).
pub async fn record_proxy_use(
    app: &App,
    project: &str,
    entity: &str,
    intent_id: &str,
) -> ApiResult<()> {
    let outcome = app
        .store
        .record_use(scope(project, entity), intent_id, app.clock.now())
        .await?;
    let why = match outcome {
        UseOutcome::Recorded(_) => return Ok(()),
        UseOutcome::NotFound => return Err(ApiError::not_found("Purchase intent")),
        UseOutcome::NotActive => "is not active",
        UseOutcome::Expired => "has expired",
        UseOutcome::UsageLimitReached => "has used up its usage limit",
    };
    Err(ApiError::new(
        ErrorKind::Conflict,
        format!("The purchase intent {why}."),
    ))
}

/// Reveals the credential of one intent for the sandbox authorization endpoint (no audit:
/// it is compared, never answered).
pub(crate) async fn credential_for_matching(
    app: &App,
    rec: &IntentRecord,
) -> ApiResult<Option<Credential>> {
    reveal(app, rec).await
}

#[cfg(test)]
#[path = "purchase_intents_tests.rs"]
mod tests;
