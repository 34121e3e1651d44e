//! Events (`GET /projects/:p/events`): every change to a payment method or a purchase
//! intent of the project, as the store wrote it in the change's transaction
//! ([`crate::store::events`] lists the types and what writes each). A caller polls this list,
//! or catches up after an outage, newest first, paging with `startingAfter`.
//!
//! An event's `data` is the object as the API answers it (the list shape of a payment method;
//! a purchase intent with the status it had then), never with a card number, cvc or
//! cryptogram. The list holds the events of the whole project (every entity), as a
//! webhook endpoint receives them; it needs a private-role token.
//!
//! `POST …/events/:id/redeliver` queues a fresh delivery of an event to each enabled endpoint
//! that takes its type (or, with `{"endpointId": …}`, to that endpoint alone), whatever
//! became of its earlier deliveries; `GET …/events/:id/deliveries` shows them
//! (`crate::delivery` sends them).

use super::payment_methods::{listed_view, DEFAULT_LIMIT, MAX_LIMIT};
use super::purchase_intents::IntentView;
use super::{list_limit, query_pairs};
use crate::app::App;
use crate::auth::Principal;
use crate::clock::{from_micros, iso8601};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::store::events::{seq_of, EventObject, EventQuery, EventRecord, TYPES};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// An event.
#[derive(serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Event)]
pub struct EventView {
    /// `evt_` and 16 hex digits; a later event has a larger id.
    pub id: String,
    /// `payment_method.created`, `payment_method.deleted`, `purchase_intent.created`,
    /// `purchase_intent.verification_required`, `purchase_intent.unavailable`,
    /// `purchase_intent.activated`, `purchase_intent.used`, `purchase_intent.exhausted`,
    /// `purchase_intent.canceled` or `purchase_intent.expired`.
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// The payment method or purchase intent as the API answers it (a purchase intent with
    /// the status it had then, never with its credential).
    #[schema(value_type = Object)]
    pub data: Value,
}

/// An event as the API shows it.
pub fn view(app: &App, record: &EventRecord) -> ApiResult<EventView> {
    let e = &record.event;
    let data = match &e.object {
        EventObject::PaymentMethod(pm) => serde_json::to_value(listed_view(app, pm)),
        EventObject::PurchaseIntent(pi) => {
            serde_json::to_value(IntentView::at(pi, e.created_micros))
        }
        EventObject::BrowserSession(bs) => {
            serde_json::to_value(super::browser_sessions::event_view(bs))
        }
    }
    .map_err(|_| ApiError::internal())?;
    Ok(EventView {
        id: record.id(),
        kind: e.kind.clone(),
        created_at: iso8601(from_micros(e.created_micros)),
        data,
    })
}

/// List the project's events, newest first.
#[utoipa::path(get, path = "/projects/{projectId}/events",
    operation_id = "listEvents",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Default 50."),
        ("startingAfter" = Option<String>, Query,
            description = "An event id: only events older than it (the next page)."),
        ("type" = Option<String>, Query, description = "Only events of this type."),
    ),
    responses((status = 200, description = "The events, newest first", body = [EventView])))]
pub async fn list(app: &App, principal: &Principal, query: Option<&str>) -> ApiResult<Response> {
    principal.require_private()?;
    let mut limit = DEFAULT_LIMIT;
    let mut before = None;
    let mut kind = None;
    let mut errors = BTreeMap::new();
    for (name, value) in query_pairs(query) {
        match name.as_str() {
            "limit" => limit = list_limit(&value, MAX_LIMIT, &mut errors).unwrap_or(limit),
            "startingAfter" => match seq_of(&value) {
                Some(seq) => before = Some(seq),
                None => {
                    errors.insert(name, "an event id (evt_…)".to_string());
                }
            },
            "type" => match TYPES.iter().find(|t| **t == value) {
                Some(t) => kind = Some(*t),
                None => {
                    errors.insert(name, format!("one of {}", TYPES.join(", ")));
                }
            },
            _ => {}
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(errors));
    }
    let events = app
        .store
        .list_events(EventQuery {
            project: &principal.project,
            before,
            kind,
            limit,
        })
        .await?;
    let items = events
        .iter()
        .map(|e| view(app, e))
        .collect::<ApiResult<Vec<_>>>()?;
    Response::json(200, &items)
}

/// Where one delivery of an event stands.
#[derive(serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = EventDelivery)]
pub struct DeliveryView {
    /// The webhook endpoint.
    pub endpoint_id: String,
    /// `pending`, `delivered` or `failed` (every attempt failed; see `redeliver`).
    pub status: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's outcome: `http_<status>`, or `timeout`, `connect`, `send`,
    /// `refused` (the URL no longer passes the target guard), `endpoint_deleted`,
    /// `endpoint_disabled`, `project_removed` (no longer in the configuration).
    pub last_outcome: Option<String>,
    /// When the next attempt is due (pending deliveries).
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// The redelivery body: every field optional.
#[derive(ToSchema)]
#[schema(as = RedeliverEvent, rename_all = "camelCase")]
pub struct RedeliverBody {
    /// Only to this webhook endpoint (which receives it whatever its `enabledEvents`);
    /// without it, to every enabled endpoint that takes the event's type.
    pub endpoint_id: Option<String>,
}

/// What a redelivery queued.
#[derive(serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Redelivery)]
pub struct RedeliveryView {
    pub event_id: String,
    /// The endpoints a fresh delivery was queued for.
    pub endpoint_ids: Vec<String>,
}

/// The project's event `id`, or 404.
async fn find(app: &App, principal: &Principal, id: &str) -> ApiResult<EventRecord> {
    principal.require_private()?;
    let not_found = || ApiError::not_found("Event");
    let seq = seq_of(id).ok_or_else(not_found)?;
    app.store
        .get_event(&principal.project, seq)
        .await?
        .ok_or_else(not_found)
}

/// Send an event again: a fresh delivery (same `webhook-id`) to each enabled endpoint that
/// takes its type, or to the one endpoint named. The answer does not wait for it.
#[utoipa::path(post, path = "/projects/{projectId}/events/{id}/redeliver",
    operation_id = "redeliverEvent", request_body(content = Option<RedeliverBody>),
    responses(
        (status = 202, description = "Queued", body = RedeliveryView),
        (status = 404, description = "No such event (or endpoint)", body = crate::error::Envelope),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn redeliver(
    app: &App,
    principal: &Principal,
    id: &str,
    body: &[u8],
) -> ApiResult<Response> {
    let event = find(app, principal, id).await?;
    let named = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let obj = super::json_object(body)?;
        let mut errors: BTreeMap<String, String> = obj
            .keys()
            .filter(|k| k.as_str() != "endpointId")
            .map(|k| (k.clone(), "unknown field".to_string()))
            .collect();
        let named = match obj.get("endpointId") {
            None | Some(Value::Null) => None,
            Some(Value::String(e)) => Some(e.clone()),
            Some(_) => {
                errors.insert("endpointId".into(), "must be a webhook endpoint id".into());
                None
            }
        };
        if !errors.is_empty() {
            return Err(ApiError::invalid_fields(errors));
        }
        named
    };
    let project = principal.project.as_str();
    let endpoints: Vec<String> = match named {
        Some(e) => match app.store.get_webhook_endpoint(project, &e).await? {
            Some(rec) => vec![rec.id],
            None => return Err(ApiError::not_found("Webhook endpoint")),
        },
        None => app
            .store
            .list_webhook_endpoints(project)
            .await?
            .into_iter()
            .filter(|e| crate::store::deliveries::sends(e, &event.event.kind))
            .map(|e| e.id)
            .collect(),
    };
    // The event may have been pruned since it was read: then nothing is queued.
    if !app
        .store
        .queue_deliveries(project, event.seq, &endpoints, app.now_micros())
        .await?
    {
        return Err(ApiError::not_found("Event"));
    }
    let audit = crate::service::audit_event(app, principal, "event.redeliver", id);
    app.store.append_audit(audit).await?;
    Response::json(
        202,
        &RedeliveryView {
            event_id: event.id(),
            endpoint_ids: endpoints,
        },
    )
}

/// The deliveries of an event, oldest first.
#[utoipa::path(get, path = "/projects/{projectId}/events/{id}/deliveries",
    operation_id = "listEventDeliveries",
    responses(
        (status = 200, description = "The event's deliveries", body = [DeliveryView]),
        (status = 404, description = "No such event", body = crate::error::Envelope),
    ))]
pub async fn deliveries(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    let event = find(app, principal, id).await?;
    let list = app
        .store
        .list_deliveries(&principal.project, event.seq)
        .await?;
    let views: Vec<DeliveryView> = list
        .iter()
        .map(|d| DeliveryView {
            endpoint_id: d.endpoint_id.clone(),
            status: d.status.as_str().to_string(),
            attempts: d.attempts,
            last_outcome: d.last_outcome.clone(),
            next_attempt_at: (d.status == crate::store::DeliveryStatus::Pending)
                .then(|| iso8601(from_micros(d.next_micros))),
            created_at: iso8601(from_micros(d.created_micros)),
        })
        .collect();
    Response::json(200, &views)
}
