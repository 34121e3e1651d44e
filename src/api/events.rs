//! Events (`GET /projects/:p/events`): every change to a payment method or a purchase
//! intent of the project, as the store wrote it in the change's transaction
//! ([`crate::store::events`] lists the types and what writes each). A caller polls this list,
//! or catches up after an outage, newest first, paging with `startingAfter`.
//!
//! An event's `data` is the object as the API answers it (the list shape of a payment method;
//! a purchase intent with the status it had then), never with a card number, cvc or
//! cryptogram. The list holds the events of the whole project (every entity), as a
//! webhook endpoint receives them; it needs a private-role token.

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
