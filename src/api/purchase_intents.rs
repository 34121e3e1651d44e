//! Purchase intents: create (`POST .../purchase-intents`, also `/tenants/:t/purchase-intent`)
//! and get, on both path forms; [`cancel`], which the MCP tool `cancel_purchase_intent` calls
//! (no REST route). Verification is in [`super::verify`]; what the proxy and
//! the sandbox reach of an intent's credential is in `service::intents`.
//!
//! - The credential comes from `app.issuer` (the sandbox by default) and is stored sealed by
//!   the vault under `pi/{project}/{id}/credential`; `pan` intents store none and read the
//!   payment method's card (cvc while retained) whenever they are revealed.
//! - The credential object (`card`, `token` or `pan`) appears only while the intent is
//!   `active`; every reveal appends an audit event (ids only, never values).
//! - `expired` is computed at read time: past `expiresAt`, or the usage limit used up.

use crate::app::App;
use crate::audit::AuditEvent;
use crate::auth::Principal;
use crate::clock::iso8601;
use crate::clock::{from_micros, micros};
use crate::domain::issuer::{
    CardFacts, Credential, CredentialType, IssueRequest, Issued, IssuerError,
};
use crate::domain::mandate::{parse_mandates, Mandates};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::http::Response;
use crate::service::audit_event;
use crate::service::intents::{open_number, reveal, seal_credential};
use crate::store::{IntentEnd, IntentRecord, IntentStatus, Scope};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use time::Duration;
use utoipa::ToSchema;

/// Lifetime of a credential when no `expirationDate` mandate is sooner.
pub const CREDENTIAL_LIFETIME: Duration = Duration::hours(24);

/// The purchase intent object of create and get responses. The credential object (`card`,
/// `token` or `pan`, after `credentialType`) is there only while the intent is `active`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PurchaseIntent)]
pub struct IntentView<'a> {
    id: &'a str,
    entity_id: &'a str,
    credential_type: CredentialType,
    payment_method_id: &'a str,
    status: IntentStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<CredentialObject>)]
    card: Option<Credential>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<CredentialObject>)]
    token: Option<Credential>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<CredentialObject>)]
    pan: Option<Credential>,
    /// The mandates, normalised.
    #[schema(value_type = Object)]
    mandates: &'a Mandates,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    expires_at: String,
}

/// The Virtual Card, Network Token or PAN object (as a `Credential` serialises): `cvc` for
/// virtual cards and pans (while retained), `cryptogram` for network tokens.
#[derive(ToSchema)]
#[schema(as = Credential, rename_all = "camelCase")]
pub struct CredentialObject {
    pub number: String,
    pub expiration_month: String,
    pub expiration_year: String,
    pub cvc: Option<String>,
    pub cryptogram: Option<String>,
}

/// One mandate: the reference form (`maxAmount`, `merchantMcc`, `expirationDate`,
/// `usageLimit`, with `details`) or the guide form (`maxAmount`, `currency`, `mcc`); and
/// `merchant` (a merchant id: the one merchant the credential may be used at), in both.
#[derive(ToSchema)]
#[schema(as = Mandate)]
pub struct MandateBody {
    #[schema(rename = "type", inline)]
    pub kind: MandateType,
    pub value: String,
    /// `currency` (maxAmount), `date` (expirationDate), `count` (usageLimit).
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub enum MandateType {
    MaxAmount,
    MerchantMcc,
    ExpirationDate,
    UsageLimit,
    Currency,
    Mcc,
    Merchant,
}

/// The create body, read field by field so that every bad field is named.
#[derive(ToSchema)]
#[schema(as = CreatePurchaseIntent, rename_all = "camelCase")]
pub struct CreateBody {
    /// Must be the token's `sub`; may be left out (the token's `sub` is meant).
    pub entity_id: Option<String>,
    pub credential_type: CredentialType,
    pub payment_method_id: String,
    #[schema(min_items = 1)]
    pub mandates: Vec<MandateBody>,
}

/// Answers an intent, revealing its credential (and auditing that) only while `active`.
async fn respond(app: &App, status_code: u16, rec: &IntentRecord) -> ApiResult<Response> {
    let status = rec.status_at(micros(app.clock.now()));
    let credential = if status == IntentStatus::Active {
        let c = reveal(app, rec).await?;
        if c.is_some() {
            app.store
                .append_audit(AuditEvent {
                    at_micros: app.now_micros(),
                    action: "purchaseIntent.reveal".to_string(),
                    project: rec.project.clone(),
                    entity: rec.entity.clone(),
                    resource: rec.id.clone(),
                })
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
    let view = IntentView {
        card,
        token,
        pan,
        ..IntentView::without_credential(rec, status)
    };
    let mut response = Response::json(status_code, &view)?;
    response.intent = Some(rec.id.clone());
    Ok(response)
}

impl<'a> IntentView<'a> {
    /// The intent with `status` and no credential object.
    fn without_credential(rec: &'a IntentRecord, status: IntentStatus) -> Self {
        IntentView {
            id: &rec.id,
            entity_id: &rec.entity,
            credential_type: rec.credential_type,
            payment_method_id: &rec.payment_method_id,
            status,
            card: None,
            token: None,
            pan: None,
            mandates: &rec.mandates,
            created_at: iso8601(from_micros(rec.created_micros)),
            expires_at: iso8601(from_micros(rec.expires_micros)),
        }
    }

    /// The intent as it was at `at_micros`, never with a credential (the `data` of
    /// purchase-intent events).
    pub fn at(rec: &'a IntentRecord, at_micros: i64) -> Self {
        Self::without_credential(rec, rec.status_at(at_micros))
    }
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

/// Create a purchase intent (a mandate-bounded credential).
#[utoipa::path(post, path = "/projects/{projectId}/purchase-intents",
    operation_id = "createPurchaseIntent", request_body = CreateBody,
    responses(
        (status = 201, description = "Created", body = IntentView),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn create(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    let rec = issue(app, principal, body).await?;
    respond(app, 201, &rec).await
}

/// [`create`] without the answer: the intent stored (and audited), its credential not
/// revealed. The Delegate Payment route (`edge::acp`) answers a vault token instead.
pub async fn issue(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<IntentRecord> {
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
    if kind == CredentialType::Pan && mandates.merchant.is_some() {
        // A pan credential is the stored card itself, which `pan` templates also send: a
        // binding to one merchant could not hold for it.
        errors.insert(
            "credentialType".into(),
            "a merchant mandate needs a virtual-card or network-token credential".into(),
        );
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(errors));
    }

    let project = principal.project.as_str();
    let entity = principal.entity.as_str();
    let sc = Scope { project, entity };
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
    let (credential_sealed, credential_key) = match (kind, issued.credential()) {
        (CredentialType::Pan, _) | (_, None) => (None, None),
        (_, Some(c)) => {
            let (sealed, key) = seal_credential(app, project, &id, c)?;
            (Some(sealed), Some(key))
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
        otp_method: None,
        credential_key,
        key_slot: None,
        ended_micros: None,
        ahead: Default::default(),
    };
    let event = audit_event(app, principal, "purchaseIntent.create", &id);
    if !app.store.insert_intent(&rec, event).await? {
        // The payment method was deleted meanwhile.
        return Err(ApiError::not_found("Payment method"));
    }
    Ok(rec)
}

/// Get a purchase intent; the credential while active.
#[utoipa::path(get, path = "/projects/{projectId}/purchase-intents/{id}",
    operation_id = "getPurchaseIntent",
    responses((status = 200, description = "The purchase intent", body = IntentView)))]
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
    let sc = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    match app.store.get_intent(sc, id).await? {
        Some(rec) => respond(app, status_code, &rec).await,
        None => Err(ApiError::not_found("Purchase intent")),
    }
}

/// Cancels a purchase intent: it ends for good (`canceled`, its credential made impossible to
/// open, the `purchase_intent.canceled` event), as the delete of its payment method ends it.
/// Canceling a canceled intent answers it again; one that ended otherwise is 409.
pub async fn cancel(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    principal.require_private()?;
    let sc = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    let now = app.now_micros();
    let Some(rec) = app.store.get_intent(sc, id).await? else {
        return Err(ApiError::not_found("Purchase intent"));
    };
    match rec.status_at(now) {
        IntentStatus::Canceled => return respond(app, 200, &rec).await,
        IntentStatus::Active | IntentStatus::Verify => {}
        _ => {
            return Err(ApiError::new(
                ErrorKind::Conflict,
                "The purchase intent has already ended.",
            ))
        }
    }
    match app
        .store
        .end_intent(sc, id, IntentEnd::Canceled, now)
        .await?
    {
        Some(ended) => {
            let event = audit_event(app, principal, "purchaseIntent.cancel", id);
            app.store.append_audit(event).await?;
            respond(app, 200, &ended).await
        }
        // Ended meanwhile (by its time, its last use or another cancel): as it is now.
        None => show(app, principal, id, 200).await,
    }
}
