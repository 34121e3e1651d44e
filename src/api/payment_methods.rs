//! Payment methods: create (from `card`, `encryptedCard` or `tokenId`, see
//! [`super::client_encryption`]), list, get, delete.
//!
//! The card number and cvc are sealed by the vault before anything is stored; responses
//! carry only bin, last4, expiry, brand and display data.

use super::{list_limit, query_pairs};
use crate::app::App;
use crate::auth::Principal;
use crate::clock::iso8601;
use crate::domain::card::{self, Brand, DisplayCreate, DisplayListed, Funding};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::service::intake::{card_input, pick_source, Source};
use crate::service::{aad, audit_event};
use crate::store::{Inserted, PaymentMethodRecord, Scope, StoredCard, TokenRecord};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Default and largest `limit` of a list.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 100;
const MAX_OFFSET: usize = 1_000_000;

/// The payment method object. Its `card.display` has one shape in list and get responses
/// (`DisplayListed`) and another in the create response (`DisplayCreate`): the type parameter.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentMethodView<D: Serialize> {
    id: String,
    #[serde(rename = "type")]
    #[schema(inline)]
    kind: PaymentMethodType,
    entity_id: String,
    card: CardView<D>,
    #[schema(value_type = Vec<crate::domain::issuer::CredentialType>)]
    credential_types: Vec<&'static str>,
    #[schema(format = DateTime)]
    created_at: String,
    /// Only in the create response, and only when the project has its own vault key.
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<TokenView>,
}

/// `card`, the only payment method type.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
enum PaymentMethodType {
    Card,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CardView<D: Serialize> {
    /// `debit` or `credit`.
    #[serde(rename = "type")]
    funding: String,
    brand: String,
    details: CardDetails,
    display: D,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CardDetails {
    bin: String,
    last4: String,
    expiration_month: String,
    expiration_year: String,
}

/// The Token object of the create response.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = TokenObject)]
pub struct TokenView {
    id: String,
    fingerprint: String,
    created_at: String,
    masked_data: String,
}

fn micros_to_iso(micros: i64) -> String {
    iso8601(crate::clock::from_micros(micros))
}

/// Credential types a card can produce: network tokens and virtual cards for the brands
/// the sandbox issuer serves, `pan` only where the project enables it.
pub fn credential_types(brand: Brand, pan_enabled: bool) -> Vec<&'static str> {
    let mut types = Vec::with_capacity(3);
    if matches!(
        brand,
        Brand::Visa | Brand::Mastercard | Brand::Amex | Brand::Discover
    ) {
        types.push("network-token");
    }
    if brand != Brand::Unknown {
        types.push("virtual-card");
    }
    if pan_enabled {
        types.push("pan");
    }
    types
}

fn view<D: Serialize>(
    app: &App,
    rec: &PaymentMethodRecord,
    display: D,
    with_token: bool,
) -> PaymentMethodView<D> {
    let brand = Brand::from_str(&rec.card.brand).unwrap_or(Brand::Unknown);
    let pan_enabled = app
        .config
        .project(&rec.project)
        .is_some_and(|p| p.pan_enabled);
    PaymentMethodView {
        id: rec.id.clone(),
        kind: PaymentMethodType::Card,
        entity_id: rec.entity.clone(),
        card: CardView {
            funding: rec.card.funding.clone(),
            brand: rec.card.brand.clone(),
            details: CardDetails {
                bin: rec.card.bin.clone(),
                last4: rec.card.last4.clone(),
                expiration_month: rec.card.expiration_month.clone(),
                expiration_year: rec.card.expiration_year.clone(),
            },
            display,
        },
        credential_types: credential_types(brand, pan_enabled),
        created_at: micros_to_iso(rec.created_micros),
        token: rec
            .token
            .as_ref()
            .filter(|_| with_token)
            .map(|t| TokenView {
                id: t.id.clone(),
                fingerprint: t.fingerprint.clone(),
                created_at: micros_to_iso(t.created_micros),
                masked_data: t.masked_data.clone(),
            }),
    }
}

/// The list/get shape.
/// The list and get shape (also the `data` of payment-method events).
pub fn listed_view(app: &App, rec: &PaymentMethodRecord) -> PaymentMethodView<DisplayListed> {
    let brand = Brand::from_str(&rec.card.brand).unwrap_or(Brand::Unknown);
    let funding = if rec.card.funding == "debit" {
        Funding::Debit
    } else {
        Funding::Credit
    };
    let display = card::display_listed(brand, funding, &rec.card.last4, &rec.card.bin);
    view(app, rec, display, false)
}

/// The create shape (display `name`/`color`, `token` when the project has a vault key).
fn created_view(app: &App, rec: &PaymentMethodRecord) -> PaymentMethodView<DisplayCreate> {
    let brand = Brand::from_str(&rec.card.brand).unwrap_or(Brand::Unknown);
    view(app, rec, card::display_create(brand), true)
}

/// The create body, read field by field so that every bad field is named: exactly one of
/// `card`, `encryptedCard` or `tokenId`.
#[derive(ToSchema)]
#[schema(as = CreatePaymentMethod, rename_all = "camelCase")]
pub struct CreateBody {
    /// Must be the token's `sub`.
    pub entity_id: String,
    pub card: Option<super::CardBody>,
    /// A compact JWE (ECDH-ES, A256GCM) of the card JSON, to the project's client encryption
    /// key.
    pub encrypted_card: Option<String>,
    /// A token of the token vault, used once.
    pub token_id: Option<String>,
}

/// Create a payment method from exactly one of card, encryptedCard or tokenId.
#[utoipa::path(post, path = "/projects/{projectId}/payment-methods",
    operation_id = "createPaymentMethod", request_body = CreateBody,
    responses(
        (status = 201, description = "Created", body = PaymentMethodView<DisplayCreate>),
        (status = 200, description = "The entity already had this card, which takes this \
            request's expiry and cvc", body = PaymentMethodView<DisplayCreate>),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn create(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    let mut obj = super::json_object(body)?;
    super::check_entity(&obj, principal, true)?;
    let unknown: BTreeMap<String, String> = obj
        .keys()
        .filter(|k| {
            !matches!(
                k.as_str(),
                "entityId" | "tokenId" | "card" | "encryptedCard"
            )
        })
        .map(|k| (k.clone(), "unknown field".to_string()))
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::invalid_fields(unknown));
    }
    let source = pick_source(
        &obj,
        &[Source::Card, Source::EncryptedCard, Source::TokenId],
        principal,
    )?;
    let raw = obj.remove(source.field()).unwrap_or(Value::Null);
    let card = card_input(app, principal, source, raw).await?;
    let input = card.input;
    let now = app.clock.now();
    let valid =
        card::validate(&input, source.field(), now.date()).map_err(ApiError::invalid_fields)?;
    drop(input);

    let project = principal.project.as_str();
    let id = format!("pm_{}", uuid::Uuid::new_v4().simple());
    let now_micros = crate::clock::micros(now);
    let fingerprint = app.vault.fingerprint(project, &valid.number)?;
    let number_sealed = app.vault.seal(
        project,
        &aad::pm_number(project, &id),
        valid.number.expose().as_bytes(),
    )?;
    // A token's cvc keeps the retention it started with when the token was stored.
    let cvc_stored_secs = card.cvc_stored_secs.unwrap_or_else(|| app.now_secs());
    let cvc_sealed = app
        .vault
        .seal_cvc(&aad::pm_cvc(project, &id), &valid.cvc, cvc_stored_secs);
    let token_vault = app
        .config
        .project(project)
        .is_some_and(|p| p.token_vault_key);
    let rec = PaymentMethodRecord {
        id: id.clone(),
        project: project.to_string(),
        entity: principal.entity.clone(),
        created_micros: now_micros,
        card: StoredCard {
            brand: valid.brand.as_str().to_string(),
            funding: match valid.funding {
                Funding::Debit => "debit".into(),
                Funding::Credit => "credit".into(),
            },
            bin: valid.number.bin().to_string(),
            last4: valid.number.last4().to_string(),
            expiration_month: valid.expiration_month.clone(),
            expiration_year: valid.expiration_year.clone(),
            number_sealed,
            cvc_sealed,
        },
        fingerprint: fingerprint.clone(),
        token: token_vault.then(|| TokenRecord {
            id: format!("tok_{}", uuid::Uuid::new_v4().simple()),
            fingerprint,
            created_micros: now_micros,
            masked_data: valid.number.masked(),
        }),
    };
    // The entity already has this card: it keeps its id, and takes this request's expiry
    // (a reissued card) and cvc (the way to give a card its cvc again once it is erased).
    // Only the cvc is kept for that, to seal for the stored id; the number goes now.
    let cvc = valid.cvc.clone();
    drop(valid);
    let refresh = |existing: &PaymentMethodRecord| {
        let mut refreshed = existing.clone();
        refreshed
            .card
            .expiration_month
            .clone_from(&rec.card.expiration_month);
        refreshed
            .card
            .expiration_year
            .clone_from(&rec.card.expiration_year);
        refreshed.card.cvc_sealed =
            app.vault
                .seal_cvc(&aad::pm_cvc(project, &existing.id), &cvc, cvc_stored_secs);
        let audit = audit_event(app, principal, "paymentMethod.update", &existing.id);
        (refreshed, audit)
    };
    let audit = audit_event(app, principal, "paymentMethod.create", &id);
    let inserted = app.store.insert_payment_method(&rec, audit, &refresh).await;
    drop(cvc);
    match inserted? {
        Inserted::Created => Response::json(201, &created_view(app, &rec)),
        Inserted::Existing(existing) => Response::json(200, &created_view(app, &existing)),
    }
}

fn scope(principal: &Principal) -> Scope<'_> {
    Scope {
        project: &principal.project,
        entity: &principal.entity,
    }
}

/// List the entity's payment methods (newest first).
#[utoipa::path(get, path = "/projects/{projectId}/payment-methods",
    operation_id = "listPaymentMethods",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Default 50."),
        ("offset" = Option<u32>, Query, minimum = 0, maximum = 1000000, description = "Default 0."),
        ("type" = Option<String>, Query, description = "Only this type (`card`)."),
    ),
    responses((status = 200, description = "The payment methods",
        body = [PaymentMethodView<DisplayListed>],
        headers(("X-Total-Count" = String, description = "How many there are in all.")))))]
pub async fn list(app: &App, principal: &Principal, query: Option<&str>) -> ApiResult<Response> {
    let mut limit = DEFAULT_LIMIT;
    let mut offset = 0;
    let mut kind: Option<String> = None;
    let mut errors = BTreeMap::new();
    for (name, value) in query_pairs(query) {
        match name.as_str() {
            "limit" => limit = list_limit(&value, MAX_LIMIT, &mut errors).unwrap_or(limit),
            "offset" => match value.parse::<usize>() {
                Ok(n) if n <= MAX_OFFSET => offset = n,
                _ => {
                    errors.insert(
                        "offset".to_string(),
                        format!("an integer from 0 to {MAX_OFFSET}"),
                    );
                }
            },
            "type" => kind = Some(value),
            _ => {}
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(errors));
    }
    if kind.as_deref().is_some_and(|k| k != "card") {
        return Ok(
            Response::json(200, &Vec::<Value>::new())?.with_header("X-Total-Count", "0".into())
        );
    }
    let page = app
        .store
        .list_payment_methods(scope(principal), offset, limit)
        .await?;
    let items: Vec<_> = page.items.iter().map(|r| listed_view(app, r)).collect();
    Ok(Response::json(200, &items)?.with_header("X-Total-Count", page.total.to_string()))
}

/// Get a payment method.
#[utoipa::path(get, path = "/projects/{projectId}/payment-methods/{id}",
    operation_id = "getPaymentMethod",
    responses((status = 200, description = "The payment method",
        body = PaymentMethodView<DisplayListed>)))]
pub async fn get(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    match app.store.get_payment_method(scope(principal), id).await? {
        Some(rec) => Response::json(200, &listed_view(app, &rec)),
        None => Err(ApiError::not_found("Payment method")),
    }
}

/// Delete a payment method; its purchase intents are canceled.
#[utoipa::path(delete, path = "/projects/{projectId}/payment-methods/{id}",
    operation_id = "deletePaymentMethod", responses((status = 204, description = "Deleted")))]
pub async fn delete(app: &App, principal: &Principal, id: &str) -> ApiResult<Response> {
    principal.require_private()?;
    let audit = audit_event(app, principal, "paymentMethod.delete", id);
    if app
        .store
        .delete_payment_method(scope(principal), id, audit)
        .await?
    {
        Ok(Response::empty(204))
    } else {
        Err(ApiError::not_found("Payment method"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_types_follow_brand_and_config() {
        assert_eq!(
            credential_types(Brand::Visa, false),
            vec!["network-token", "virtual-card"]
        );
        assert_eq!(
            credential_types(Brand::Visa, true),
            vec!["network-token", "virtual-card", "pan"]
        );
        assert_eq!(credential_types(Brand::Jcb, false), vec!["virtual-card"]);
        assert_eq!(credential_types(Brand::Unknown, false), Vec::<&str>::new());
    }
}
