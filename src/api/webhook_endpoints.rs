//! Webhook endpoints (`/projects/:p/webhook-endpoints`): where the project's events are sent.
//! Create, list, get, delete, and rotate the signing secret; private role only.
//!
//! - The URL passes the proxy's target guard (`service::target`) when the endpoint is
//!   created: https, a host of the project's `proxy.allowed_hosts`, and every address it
//!   resolves to public (unless the project allows private networks). Delivery checks it
//!   again, since DNS answers change.
//! - The signing secret is `whsec_` and the base64 of 32 random bytes (the Standard Webhooks
//!   form), shown once, in the answer of the create or the rotation that made it, and stored
//!   sealed by the vault. After a rotation the previous secret keeps signing for
//!   [`ROTATION_OVERLAP`], beside the new one.
//! - `enabledEvents`: the event types sent (`store::events::TYPES`), or `["*"]`, every type
//!   (the default).

use super::json_object;
use crate::app::App;
use crate::auth::Principal;
use crate::clock::{from_micros, iso8601};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::service::{aad, audit_event, target};
use crate::store::events::TYPES;
use crate::store::{WebhookEndpointRecord, WebhookSecret};
use rand::RngCore;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use zeroize::Zeroizing;

/// How long the previous secret keeps signing after a rotation.
pub const ROTATION_OVERLAP: time::Duration = time::Duration::hours(24);

/// Random bytes of a signing secret.
const SECRET_BYTES: usize = 32;

/// A webhook endpoint. `secret` only in the answer of the create or rotation that made it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WebhookEndpoint)]
pub struct EndpointView {
    /// `we_` and 32 hex digits.
    id: String,
    url: String,
    /// Event types sent, or `["*"]`: every type.
    enabled_events: Vec<String>,
    enabled: bool,
    #[schema(format = DateTime)]
    created_at: String,
    /// The signing secret, `whsec_` and base64 (shown once).
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

/// The create body.
#[derive(ToSchema)]
#[schema(as = CreateWebhookEndpoint, rename_all = "camelCase")]
pub struct CreateBody {
    /// An https URL whose host the project's `proxy.allowed_hosts` allows.
    pub url: String,
    /// Event types to send, or `["*"]` (the default): every type.
    pub enabled_events: Option<Vec<String>>,
    /// Default true.
    pub enabled: Option<bool>,
}

fn view(rec: &WebhookEndpointRecord, secret: Option<String>) -> EndpointView {
    EndpointView {
        id: rec.id.clone(),
        url: rec.url.clone(),
        enabled_events: rec.enabled_events.clone(),
        enabled: rec.enabled,
        created_at: iso8601(from_micros(rec.created_micros)),
        secret,
    }
}

/// A new secret for endpoint `id` of `project`, numbered `n`: its `whsec_` form and the
/// stored, sealed one.
fn new_secret(
    app: &App,
    project: &str,
    id: &str,
    n: u32,
) -> ApiResult<(Zeroizing<String>, WebhookSecret)> {
    let mut bytes = Zeroizing::new([0u8; SECRET_BYTES]);
    rand::rngs::OsRng.fill_bytes(bytes.as_mut());
    let sealed = app.vault.seal(
        project,
        &aad::webhook_secret(project, id, n),
        bytes.as_ref(),
    )?;
    let shown = Zeroizing::new(crate::domain::webhook::shown_secret(bytes.as_ref()));
    Ok((
        shown,
        WebhookSecret {
            n,
            sealed,
            expires_micros: None,
        },
    ))
}

/// Checks a webhook URL with the project's target rules: the parse, the allow-list and the
/// addresses it resolves to. An error names the field `url`.
async fn check_url(app: &App, project: &str, url: &str) -> ApiResult<()> {
    let rules = app
        .config
        .project(project)
        .map(|p| p.proxy.clone())
        .ok_or_else(|| ApiError::not_found("Project"))?;
    let checked = match target::parse(url, &rules) {
        Ok(parsed) => target::resolve(parsed, &rules).await.map(|_| ()),
        Err(e) => Err(e),
    };
    checked.map_err(|e| {
        // The guard names the proxy's header; here the field is `url`.
        let detail = e
            .details
            .as_ref()
            .and_then(|d| d["fields"].as_object())
            .and_then(|f| f.values().next())
            .and_then(Value::as_str)
            .map(str::to_string);
        ApiError::invalid_field("url", &detail.unwrap_or(e.message))
    })
}

/// Create a webhook endpoint; the answer shows its signing secret, once.
#[utoipa::path(post, path = "/projects/{projectId}/webhook-endpoints",
    operation_id = "createWebhookEndpoint", request_body = CreateBody,
    responses(
        (status = 201, description = "Created, with its secret", body = EndpointView),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn create(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    principal.require_private()?;
    let obj = json_object(body)?;
    let mut errors: BTreeMap<String, String> = obj
        .keys()
        .filter(|k| !matches!(k.as_str(), "url" | "enabledEvents" | "enabled"))
        .map(|k| (k.clone(), "unknown field".to_string()))
        .collect();
    let url = match obj.get("url") {
        Some(Value::String(u)) if !u.is_empty() && u.len() <= 2048 => Some(u.clone()),
        None | Some(Value::Null) => {
            errors.insert("url".into(), "required".into());
            None
        }
        Some(_) => {
            errors.insert("url".into(), "must be a URL of at most 2048 bytes".into());
            None
        }
    };
    let enabled_events = match obj.get("enabledEvents") {
        None | Some(Value::Null) => vec!["*".to_string()],
        Some(Value::Array(items)) => {
            let types: Vec<String> = items
                .iter()
                .filter_map(|v| v.as_str())
                .filter(|t| *t == "*" || TYPES.contains(t))
                .map(str::to_string)
                .collect();
            let all_alone = !types.contains(&"*".to_string()) || types.len() == 1;
            if types.is_empty() || types.len() != items.len() || !all_alone {
                errors.insert(
                    "enabledEvents".into(),
                    format!("event types ({}), or [\"*\"]", TYPES.join(", ")),
                );
            }
            types
        }
        Some(_) => {
            errors.insert("enabledEvents".into(), "must be an array".into());
            Vec::new()
        }
    };
    let enabled = match obj.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.insert("enabled".into(), "must be a boolean".into());
            true
        }
    };
    let Some(url) = url.filter(|_| errors.is_empty()) else {
        return Err(ApiError::invalid_fields(errors));
    };
    let project = principal.project.as_str();
    check_url(app, project, &url).await?;
    let id = format!("we_{}", uuid::Uuid::new_v4().simple());
    let (shown, secret) = new_secret(app, project, &id, 1)?;
    let rec = WebhookEndpointRecord {
        id: id.clone(),
        project: project.to_string(),
        url,
        enabled_events,
        enabled,
        created_micros: app.now_micros(),
        secrets: vec![secret],
    };
    let audit = audit_event(app, principal, "webhookEndpoint.create", &id);
    if !app.store.put_webhook_endpoint(&rec, false, audit).await? {
        return Err(ApiError::internal());
    }
    Response::json(201, &view(&rec, Some(shown.to_string())))
}

/// List the project's webhook endpoints (newest first).
#[utoipa::path(get, path = "/projects/{projectId}/webhook-endpoints",
    operation_id = "listWebhookEndpoints",
    responses((status = 200, description = "The endpoints", body = [EndpointView])))]
pub async fn list(app: &App, principal: &Principal) -> ApiResult<Response> {
    principal.require_private()?;
    let all = app.store.list_webhook_endpoints(&principal.project).await?;
    let views: Vec<_> = all.iter().map(|r| view(r, None)).collect();
    Response::json(200, &views)
}

async fn find(app: &App, principal: &Principal, id: &str) -> ApiResult<WebhookEndpointRecord> {
    principal.require_private()?;
    app.store
        .get_webhook_endpoint(&principal.project, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Webhook endpoint"))
}

/// Get a webhook endpoint (without its secret).
#[utoipa::path(get, path = "/projects/{projectId}/webhook-endpoints/{id}",
    operation_id = "getWebhookEndpoint",
    responses((status = 200, description = "The endpoint", body = EndpointView)))]
pub async fn get(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    let rec = find(app, principal, id).await?;
    Response::json(200, &view(&rec, None))
}

/// Delete a webhook endpoint: nothing more is sent to it.
#[utoipa::path(delete, path = "/projects/{projectId}/webhook-endpoints/{id}",
    operation_id = "deleteWebhookEndpoint", responses((status = 204, description = "Deleted")))]
pub async fn delete(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    principal.require_private()?;
    let audit = audit_event(app, principal, "webhookEndpoint.delete", id);
    if app
        .store
        .delete_webhook_endpoint(&principal.project, id, audit)
        .await?
    {
        Ok(Response::empty(204))
    } else {
        Err(ApiError::not_found("Webhook endpoint"))
    }
}

/// Rotate the signing secret: the answer shows the new one, once; the previous one keeps
/// signing beside it for 24 hours.
#[utoipa::path(post, path = "/projects/{projectId}/webhook-endpoints/{id}/rotate-secret",
    operation_id = "rotateWebhookEndpointSecret",
    responses(
        (status = 200, description = "The endpoint, with its new secret", body = EndpointView),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn rotate_secret(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    let mut rec = find(app, principal, id).await?;
    let now = app.now_micros();
    let until = now
        .saturating_add(i64::try_from(ROTATION_OVERLAP.whole_microseconds()).unwrap_or(i64::MAX));
    let n = rec.secrets.iter().map(|s| s.n).max().unwrap_or(0) + 1;
    let (shown, secret) = new_secret(app, &rec.project, &rec.id, n)?;
    // The newest keeps signing for the overlap; older ones end as they were due to.
    for old in &mut rec.secrets {
        old.expires_micros = Some(old.expires_micros.unwrap_or(until));
    }
    rec.secrets
        .retain(|s| s.expires_micros.is_some_and(|e| e > now));
    rec.secrets.insert(0, secret);
    let audit = audit_event(app, principal, "webhookEndpoint.rotateSecret", id);
    if !app.store.put_webhook_endpoint(&rec, true, audit).await? {
        return Err(ApiError::not_found("Webhook endpoint"));
    }
    Response::json(200, &view(&rec, Some(shown.to_string())))
}
