//! Passkeys of an entity (`/projects/:projectId/passkeys`): register one from the browser
//! (registration options → `navigator.credentials.create` → finish), list them, delete one.
//! Public role (the token's own entity, from the browser) or private role; always the
//! token's entity (`sub`): another entity's passkeys are not found. Only in projects with
//! `verification.passkeys` (404 otherwise). A purchase intent of an entity with a passkey is
//! verified with it (`api::verify`).

use super::{check_entity, json_object};
use crate::app::App;
use crate::auth::Principal;
use crate::clock::{from_micros, iso8601};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::service::{audit_event, passkeys};
use crate::store::{PasskeyRecord, Scope};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Longest passkey name.
const MAX_NAME: usize = 100;

/// A registered passkey (never its key).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Passkey)]
pub struct PasskeyView {
    /// `pk_` and 32 hex digits.
    id: String,
    #[schema(format = DateTime)]
    created_at: String,
    /// The last verification it passed; `null` before the first.
    #[schema(format = DateTime)]
    last_used_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

/// The registration options: pass `options` to `navigator.credentials.create({publicKey})`
/// (base64url members as ArrayBuffers), then post the credential with `registrationId`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PasskeyRegistrationOptions)]
pub struct OptionsView {
    /// `pkr_` and 32 hex digits; usable once, for 5 minutes.
    registration_id: String,
    /// `PublicKeyCredentialCreationOptions` (JSON, binary members base64url): user
    /// verification required, a resident key preferred.
    #[schema(value_type = Object)]
    options: Value,
}

/// The registration-options body (optional).
#[derive(ToSchema)]
#[schema(as = PasskeyRegistrationStart, rename_all = "camelCase")]
pub struct OptionsBody {
    /// The token's subject (another entity: 403).
    pub entity_id: Option<String>,
}

/// The finish body.
#[derive(ToSchema)]
#[schema(as = CreatePasskey, rename_all = "camelCase")]
pub struct CreateBody {
    pub registration_id: String,
    /// The `PublicKeyCredential` `navigator.credentials.create` made, as JSON (binary members
    /// base64url).
    #[schema(value_type = Object)]
    pub credential: Value,
    /// Up to 100 characters, shown in lists.
    pub name: Option<String>,
}

fn view(rec: &PasskeyRecord) -> PasskeyView {
    PasskeyView {
        id: rec.id.clone(),
        created_at: iso8601(from_micros(rec.created_micros)),
        last_used_at: rec.last_used_micros.map(|m| iso8601(from_micros(m))),
        name: rec.name.clone(),
    }
}

fn scope(principal: &Principal) -> Scope<'_> {
    Scope {
        project: &principal.project,
        entity: &principal.entity,
    }
}

/// Start a passkey registration.
///
/// Public or private role; the token's entity. 404 when the project has no passkeys.
#[utoipa::path(post, path = "/projects/{projectId}/passkeys/registration-options",
    operation_id = "startPasskeyRegistration", request_body = OptionsBody,
    responses(
        (status = 200, description = "The creation options", body = OptionsView),
        (status = 404, description = "notFound: passkeys are not enabled for the project",
            body = crate::error::Envelope),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn registration_options(
    app: &App,
    principal: &Principal,
    body: &[u8],
) -> ApiResult<Response> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        let obj = json_object(body)?;
        if let Some(k) = obj.keys().find(|k| k.as_str() != "entityId") {
            return Err(ApiError::invalid_field(k, "unknown field"));
        }
        check_entity(&obj, principal, false)?;
    }
    let settings = passkeys::required(app, &principal.project)?;
    let (registration_id, options) =
        passkeys::start_registration(app, &settings, scope(principal)).await?;
    Response::json(
        200,
        &OptionsView {
            registration_id,
            options,
        },
    )
}

/// Finish a passkey registration.
///
/// Public or private role; the token's entity. 400 naming `registrationId` when it is
/// unknown, used or expired; 400 `invalidPasskey` when the credential does not verify
/// (`details.reason`).
#[utoipa::path(post, path = "/projects/{projectId}/passkeys",
    operation_id = "createPasskey", request_body = CreateBody,
    responses(
        (status = 201, description = "The passkey", body = PasskeyView),
        (status = 404, description = "notFound: passkeys are not enabled for the project",
            body = crate::error::Envelope),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn create(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    let mut obj = json_object(body)?;
    if let Some(k) = obj.keys().find(|k| {
        !matches!(
            k.as_str(),
            "registrationId" | "credential" | "name" | "entityId"
        )
    }) {
        return Err(ApiError::invalid_field(k, "unknown field"));
    }
    check_entity(&obj, principal, false)?;
    let registration_id = match obj.get("registrationId") {
        Some(Value::String(id)) => id.clone(),
        None | Some(Value::Null) => {
            return Err(ApiError::invalid_field("registrationId", "required"))
        }
        Some(_) => {
            return Err(ApiError::invalid_field(
                "registrationId",
                "must be a string",
            ))
        }
    };
    let name = match obj.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) if !n.trim().is_empty() && n.chars().count() <= MAX_NAME => {
            Some(n.clone())
        }
        Some(_) => {
            return Err(ApiError::invalid_field(
                "name",
                "must be a string of 1 to 100 characters",
            ))
        }
    };
    let credential = match obj.remove("credential") {
        Some(c @ Value::Object(_)) => c,
        None | Some(Value::Null) => return Err(ApiError::invalid_field("credential", "required")),
        Some(_) => return Err(ApiError::invalid_field("credential", "must be an object")),
    };
    let settings = passkeys::required(app, &principal.project)?;
    let sc = scope(principal);
    let key =
        passkeys::finish_registration(app, &settings, sc, &registration_id, credential).await?;
    let record = PasskeyRecord {
        id: passkeys::new_id("pk_"),
        project: principal.project.clone(),
        entity: principal.entity.clone(),
        created_micros: app.now_micros(),
        last_used_micros: None,
        name,
        credential: serde_json::to_value(&key).map_err(|_| ApiError::internal())?,
    };
    let audit = audit_event(app, principal, "passkey.create", &record.id);
    if !app.store.put_passkey(&record, Some(audit)).await? {
        return Err(ApiError::internal());
    }
    Response::json(201, &view(&record))
}

/// List the entity's passkeys, oldest first.
#[utoipa::path(get, path = "/projects/{projectId}/passkeys", operation_id = "listPasskeys",
    responses((status = 200, description = "The passkeys", body = Vec<PasskeyView>)))]
pub async fn list(app: &App, principal: &Principal) -> ApiResult<Response> {
    passkeys::required(app, &principal.project)?;
    let all = app.store.list_passkeys(scope(principal)).await?;
    let views: Vec<_> = all.iter().map(view).collect();
    Response::json(200, &views)
}

/// Delete a passkey: unusable at once (a challenge already given for it is refused).
#[utoipa::path(delete, path = "/projects/{projectId}/passkeys/{id}",
    operation_id = "deletePasskey",
    responses((status = 204, description = "Deleted")))]
pub async fn delete(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    passkeys::required(app, &principal.project)?;
    let audit = audit_event(app, principal, "passkey.delete", id);
    if app
        .store
        .delete_passkey(scope(principal), id, audit)
        .await?
    {
        Ok(Response::empty(204))
    } else {
        Err(ApiError::not_found("Passkey"))
    }
}
