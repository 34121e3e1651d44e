//! Browser sessions (`/projects/:p/purchase-intents/:id/browser-sessions[/:sid]`): what an
//! agent's browser needs to pay with an intent's card through the browser proxy without
//! ever holding the real values. Create, list, get, delete (end); private role only.
//!
//! - Only for an `active` intent of a card credential (`virtual-card`, `pan`); a
//!   `network-token` intent is refused (400 naming `credentialType`): a token and its
//!   cryptogram cannot be typed into a card form.
//! - `allowedHosts`: host names (or `*.` patterns) each allowed by the project's
//!   `browser_checkout.allowed_hosts`; a host outside it is refused, named in the error. For
//!   an intent bound to a merchant (a `merchant` mandate), each must also be a host of that
//!   merchant in the project's `merchants` (400 naming the host and the merchant).
//!   `ttl`: seconds, at most the project's `browser_checkout.max_ttl` (its default); the
//!   session ends at its intent's `expiresAt` if that comes first.
//! - The answer's `card` holds stand-ins ([`crate::domain::card::standin`]), safe to show a
//!   model; `proxy.password` is shown once, in the create's answer, and stored as a hash.
//! - A session ends when it is deleted, when it expires, and when its intent ends (an
//!   expiry by the finalizer, any end at the next read or proxied request), each once, with
//!   its `browser_session.ended` event.

use super::json_object;
use crate::app::App;
use crate::auth::Principal;
use crate::clock::{from_micros, iso8601};
use crate::config::browser::BrowserCheckout;
use crate::domain::card::standin::StandIns;
use crate::domain::issuer::CredentialType;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::http::Response;
use crate::service::browser_sessions::{self as sessions, StoredStandIns};
use crate::service::target::merchant_refusal;
use crate::service::{audit_event, intents, passkeys::new_id};
use crate::store::{BrowserSessionRecord, BrowserSessionStatus, IntentStatus, Scope};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Most hosts one session asks for.
pub const MAX_HOSTS: usize = 20;

/// Draws of a stand-in number held by another live session before giving up (each draw is
/// one in 10⁹ or fewer to collide).
const INSERT_TRIES: usize = 4;

/// A browser session. `proxy.password` only in the create's answer.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = BrowserSession)]
pub struct SessionView {
    /// `bs_` and 32 hex digits; also the proxy's user name.
    id: String,
    purchase_intent_id: String,
    status: BrowserSessionStatus,
    /// Hosts whose requests get the real card values.
    allowed_hosts: Vec<String>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    expires_at: String,
    /// When it ended (deleted, or its own or its intent's end seen).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    ended_at: Option<String>,
    /// Requests that carried the real values.
    uses: u32,
    /// The stand-ins to type (absent once ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    card: Option<CardView>,
    /// The browser proxy to use (absent once ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy: Option<ProxyView>,
    /// The PEM certificate of the CA the browser must trust (absent once ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_certificate: Option<String>,
}

/// A session's stand-in card: look-alike values that only the proxy turns into the real ones.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = BrowserSessionCard)]
pub struct CardView {
    /// Luhn-valid, the real number's brand and length, never the real number.
    number: String,
    expiration_month: String,
    expiration_year: String,
    /// Absent when the credential has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    cvc: Option<String>,
}

/// How a browser reaches the proxy: `http://` URL, Basic credentials.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = BrowserSessionProxy)]
pub struct ProxyView {
    url: String,
    /// The session's id.
    username: String,
    /// Shown once.
    #[serde(skip_serializing_if = "Option::is_none")]
    password: Option<String>,
}

/// The create body.
#[derive(ToSchema)]
#[schema(as = CreateBrowserSession, rename_all = "camelCase")]
pub struct CreateBody {
    /// Hosts (names, or `*.` one-label patterns of the project's) whose requests get the
    /// real values; each must be allowed by the project's `browser_checkout.allowed_hosts`.
    pub allowed_hosts: Vec<String>,
    /// Seconds; at most (and by default) the project's `browser_checkout.max_ttl`.
    pub ttl: Option<u64>,
}

/// The session as the API shows it; the card, proxy and CA only while it is active.
pub fn view(app: &App, rec: &BrowserSessionRecord, password: Option<String>) -> SessionView {
    let active = rec.status == BrowserSessionStatus::Active;
    let card = active
        .then(|| sessions::open_stand_ins(app, rec).ok())
        .flatten()
        .map(|s| CardView {
            number: s.number,
            expiration_month: s.expiration_month,
            expiration_year: s.expiration_year,
            cvc: s.cvc,
        });
    let proxy = app.config.browser_proxy.as_ref().filter(|_| active);
    SessionView {
        card,
        proxy: proxy.map(|p| ProxyView {
            url: format!("http://{}", p.listen),
            username: rec.id.clone(),
            password,
        }),
        ca_certificate: proxy.and_then(|p| std::fs::read_to_string(&p.ca_cert_file).ok()),
        ..event_view(rec)
    }
}

/// An event's session: as [`view`] shows an ended one (no card, proxy or CA).
pub fn event_view(rec: &BrowserSessionRecord) -> SessionView {
    SessionView {
        id: rec.id.clone(),
        purchase_intent_id: rec.intent_id.clone(),
        status: rec.status,
        allowed_hosts: rec.allowed_hosts.clone(),
        created_at: iso8601(from_micros(rec.created_micros)),
        expires_at: iso8601(from_micros(rec.expires_micros)),
        ended_at: rec.ended_micros.map(|at| iso8601(from_micros(at))),
        uses: rec.uses,
        card: None,
        proxy: None,
        ca_certificate: None,
    }
}

/// The project's `browser_checkout`, with the proxy configured; 400 otherwise.
fn checkout(app: &App, project: &str) -> ApiResult<BrowserCheckout> {
    let checkout = app
        .config
        .project(project)
        .and_then(|p| p.browser_checkout.clone());
    match (checkout, &app.config.browser_proxy) {
        (Some(c), Some(_)) => Ok(c),
        _ => Err(ApiError::invalid_request(
            "Browser checkout is not enabled: the project has no browser_checkout, or the \
             server no browser_proxy.",
        )),
    }
}

/// The body's hosts and ttl, checked against the project's ceiling.
fn parse_body(
    body: &[u8],
    checkout: &BrowserCheckout,
) -> ApiResult<(Vec<String>, std::time::Duration)> {
    let obj = json_object(body)?;
    let mut errors: BTreeMap<String, String> = obj
        .keys()
        .filter(|k| !["allowedHosts", "ttl"].contains(&k.as_str()))
        .map(|k| (k.clone(), "unknown field".to_string()))
        .collect();
    let mut hosts = Vec::new();
    match obj.get("allowedHosts") {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_HOSTS => {
            for (i, item) in items.iter().enumerate() {
                let field = format!("allowedHosts[{i}]");
                let Some(host) = item.as_str().map(str::to_ascii_lowercase) else {
                    errors.insert(field, "must be a string".into());
                    continue;
                };
                if crate::config::browser::covers(&checkout.allowed_hosts, &host) {
                    if !hosts.contains(&host) {
                        hosts.push(host);
                    }
                } else {
                    errors.insert(
                        field,
                        format!(
                            "{host} is not allowed by the project's browser_checkout.allowed_hosts"
                        ),
                    );
                }
            }
        }
        _ => {
            errors.insert(
                "allowedHosts".into(),
                format!("required: an array of 1 to {MAX_HOSTS} host names"),
            );
        }
    }
    let max = checkout.max_ttl;
    let ttl = match obj.get("ttl") {
        None | Some(Value::Null) => max,
        Some(v) => match v.as_u64() {
            Some(secs) if secs >= 1 && u128::from(secs) <= max.as_millis() / 1000 => {
                std::time::Duration::from_secs(secs)
            }
            _ => {
                errors.insert(
                    "ttl".into(),
                    format!(
                        "seconds, from 1 to {} (the project's browser_checkout.max_ttl)",
                        max.as_secs()
                    ),
                );
                max
            }
        },
    };
    if errors.is_empty() {
        Ok((hosts, ttl))
    } else {
        Err(ApiError::invalid_fields(errors))
    }
}

/// Create a browser session for an active card intent; the answer shows the proxy
/// password, once.
#[utoipa::path(post, path = "/projects/{projectId}/purchase-intents/{id}/browser-sessions",
    operation_id = "createBrowserSession", request_body = CreateBody,
    responses(
        (status = 201, description = "Created, with its proxy password", body = SessionView),
        (status = 400, description = "Bad body, a host or ttl over the project's ceiling, \
            or a network-token intent (`credentialType`)", body = crate::error::Envelope),
        (status = 409, description = "The intent is not active", body = crate::error::Envelope),
    ))]
pub async fn create(
    app: &App,
    principal: &Principal,
    intent_id: &str,
    body: &[u8],
) -> ApiResult<Response> {
    principal.require_private()?;
    let checkout = checkout(app, &principal.project)?;
    let (allowed_hosts, ttl) = parse_body(body, &checkout)?;
    let scope = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    let intent = app
        .store
        .get_intent(scope, intent_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Purchase intent"))?;
    if intent.credential_type == CredentialType::NetworkToken {
        return Err(ApiError::invalid_field(
            "credentialType",
            "a network-token intent cannot be used in a browser: its token and cryptogram \
             cannot be typed into a card form (use virtual-card or pan)",
        ));
    }
    if let Some(merchant) = &intent.mandates.merchant {
        let project = app
            .config
            .project(&principal.project)
            .ok_or_else(ApiError::internal)?;
        let refused: Vec<String> = allowed_hosts
            .iter()
            .filter_map(|host| merchant_refusal(project, merchant.as_str(), host))
            .collect();
        if !refused.is_empty() {
            return Err(ApiError::invalid_field("allowedHosts", &refused.join(" ")));
        }
    }
    let now = app.now_micros();
    if intent.status_at(now) != IntentStatus::Active {
        return Err(ApiError::new(
            ErrorKind::Conflict,
            "The purchase intent is not active.",
        ));
    }
    let credential = intents::reveal(app, &intent).await?.ok_or_else(|| {
        ApiError::new(
            ErrorKind::Conflict,
            "The purchase intent has no credential.",
        )
    })?;
    let ttl_micros = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
    let expires_micros = now.saturating_add(ttl_micros).min(intent.expires_micros);
    for _ in 0..INSERT_TRIES {
        let card = StandIns::new(credential.number.clone(), credential.cvc.clone(), |_| false)
            .map_err(|e| {
                tracing::error!(intent = %intent.id, error = %e, "no stand-ins for the credential");
                ApiError::invalid_request(
                    "The intent's credential has no card number to stand in for.",
                )
            })?;
        let id = new_id("bs_");
        let stored = StoredStandIns {
            number: card.number().to_string(),
            cvc: card.cvc().map(str::to_string),
            expiration_month: credential.expiration_month.clone(),
            expiration_year: credential.expiration_year.clone(),
        };
        let (password, password_hash) = sessions::new_password();
        let record = BrowserSessionRecord {
            stand_ins_sealed: sessions::seal_stand_ins(app, &principal.project, &id, &stored)?,
            stand_in_key: sessions::stand_in_key(app, card.number())?,
            id: id.clone(),
            project: principal.project.clone(),
            entity: principal.entity.clone(),
            intent_id: intent.id.clone(),
            status: BrowserSessionStatus::Active,
            allowed_hosts: allowed_hosts.clone(),
            created_micros: now,
            expires_micros,
            ended_micros: None,
            uses: 0,
            password_hash,
        };
        let audit = audit_event(app, principal, "browserSession.create", &id);
        if app.store.insert_browser_session(&record, audit).await? {
            return Response::json(201, &view(app, &record, Some(password.to_string())));
        }
    }
    Err(ApiError::new(
        ErrorKind::Conflict,
        "No free stand-in card number: try again.",
    ))
}

/// List an intent's browser sessions, oldest first.
#[utoipa::path(get, path = "/projects/{projectId}/purchase-intents/{id}/browser-sessions",
    operation_id = "listBrowserSessions",
    responses((status = 200, description = "The sessions, oldest first", body = [SessionView])))]
pub async fn list(app: &App, principal: &Principal, intent_id: &str) -> ApiResult<Response> {
    principal.require_private()?;
    let scope = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    if app.store.get_intent(scope, intent_id).await?.is_none() {
        return Err(ApiError::not_found("Purchase intent"));
    }
    let mut views = Vec::new();
    for rec in app.store.list_browser_sessions(scope, intent_id).await? {
        let rec = sessions::settled(app, rec).await?;
        views.push(view(app, &rec, None));
    }
    Response::json(200, &views)
}

/// Get a browser session (its stand-ins and proxy while active; never the password).
#[utoipa::path(get, path = "/projects/{projectId}/purchase-intents/{id}/browser-sessions/{sessionId}",
    operation_id = "getBrowserSession",
    responses((status = 200, description = "The session", body = SessionView)))]
pub async fn get(
    app: &App,
    principal: &Principal,
    intent_id: &str,
    id: &str,
) -> ApiResult<Response> {
    let rec = sessions::find(app, principal, intent_id, id).await?;
    Response::json(200, &view(app, &rec, None))
}

/// End a browser session: the proxy refuses it from now on. Ending an ended one is a no-op.
#[utoipa::path(delete, path = "/projects/{projectId}/purchase-intents/{id}/browser-sessions/{sessionId}",
    operation_id = "deleteBrowserSession",
    responses((status = 200, description = "The ended session", body = SessionView)))]
pub async fn delete(
    app: &App,
    principal: &Principal,
    intent_id: &str,
    id: &str,
) -> ApiResult<Response> {
    let rec = sessions::find(app, principal, intent_id, id).await?;
    let audit = audit_event(app, principal, "browserSession.end", id);
    let ended = sessions::end(app, &rec, Some(audit)).await?;
    Response::json(200, &view(app, &ended, None))
}
