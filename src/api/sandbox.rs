//! `POST /projects/:projectId/sandbox/authorizations` (docs/sandbox.md): a merchant charging a
//! sandbox credential. Finds the entity's purchase intent that was issued the credential,
//! checks its status and mandates, and counts an approved use atomically
//! ([`crate::store::IntentStore::record_use`]). A decline is a 200 too: `{approved, declineReason}`.
//!
//! - The credential is looked up among the JWT entity's intents by number and expiry; for
//!   `pan` intents the number is the stored card's, and the newest matching intent that is
//!   `active` is used.
//! - Virtual cards need their `cvc`, network tokens their `cryptogram`. A `pan` needs the cvc
//!   while it is retained; after that a sent cvc cannot be checked and is accepted.
//! - Order of checks: `invalidCard`, `invalidCvc` / `invalidCryptogram`, `notActive`,
//!   `expired`, then the mandates (`usageLimitReached`, `currencyMismatch`,
//!   `amountOverMaximum`, `mccNotAllowed`, `merchantNotAllowed`); the usage count is
//!   re-checked atomically when the use is recorded.
//! - `merchantId` names the merchant charging; a credential bound to a merchant (a
//!   `merchant` mandate) is declined `merchantNotAllowed` when it is another or absent.

use crate::app::App;
use crate::auth::Principal;
use crate::domain::issuer::CredentialType;
use crate::domain::mandate::{
    Authorization, Currency, DeclineReason, Mcc, MerchantId, MERCHANT_ID_RULE,
};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::secret::{constant_time_eq, CardNumber, Cryptogram, Cvc};
use crate::service::intents::reveal;
use crate::store::{IntentStatus, Scope, UseOutcome};
use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::str::FromStr;
use utoipa::ToSchema;

/// The authorization body, read field by field so that every bad field is named. `cvc` for
/// virtual cards and pans, `cryptogram` for network tokens.
#[derive(ToSchema)]
#[schema(as = Authorization, rename_all = "camelCase")]
pub struct AuthorizationBody {
    pub number: String,
    pub expiration_month: String,
    pub expiration_year: String,
    pub cvc: Option<String>,
    pub cryptogram: Option<String>,
    /// A decimal amount, e.g. `"12.50"`.
    pub amount: String,
    /// ISO 4217, numeric (`"840"`) or alphabetic (`"USD"`).
    pub currency: String,
    /// The merchant's category code, 4 digits.
    pub mcc: Option<String>,
    /// The merchant's id: a credential bound to a merchant is declined without its own.
    #[schema(max_length = 256)]
    pub merchant_id: Option<String>,
}

/// The answer: approved, or declined with the reason (a decline is a 200 too).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = AuthorizationResult)]
pub struct Answer {
    pub approved: bool,
    /// e.g. `amountOverMaximum`, `currencyMismatch`, `mccNotAllowed`, `merchantNotAllowed`,
    /// `expired`, `usageLimitReached`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decline_reason: Option<&'static str>,
}

/// One parsed authorization request.
struct AuthRequest {
    number: CardNumber,
    expiration_month: String,
    expiration_year: String,
    cvc: Option<Cvc>,
    cryptogram: Option<Cryptogram>,
    authorization: Authorization,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn parse(obj: &Map<String, Value>) -> Result<AuthRequest, BTreeMap<String, String>> {
    let mut errors = BTreeMap::new();
    for k in obj.keys() {
        if !matches!(
            k.as_str(),
            "number"
                | "expirationMonth"
                | "expirationYear"
                | "cvc"
                | "cryptogram"
                | "amount"
                | "currency"
                | "mcc"
                | "merchantId"
        ) {
            errors.insert(k.clone(), "unknown field".to_string());
        }
    }
    let mut string = |name: &str, required: bool| -> Option<String> {
        match obj.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            None | Some(Value::Null) if !required => None,
            None | Some(Value::Null) => {
                errors.insert(name.to_string(), "required".to_string());
                None
            }
            Some(_) => {
                errors.insert(name.to_string(), "must be a non-empty string".to_string());
                None
            }
        }
    };
    let number = string("number", true).map(CardNumber::new);
    let month = string("expirationMonth", true);
    let year = string("expirationYear", true);
    let cvc = string("cvc", false).map(Cvc::new);
    let cryptogram = string("cryptogram", false).map(Cryptogram::new);
    let currency = string("currency", true);
    let mcc = string("mcc", false);
    let merchant = string("merchantId", false);
    if cvc.is_some() && cryptogram.is_some() {
        errors.insert("cryptogram".into(), "send either cvc or cryptogram".into());
    }
    if cvc.is_none() && cryptogram.is_none() {
        errors.insert("cvc".into(), "cvc or cryptogram is required".into());
    }
    let amount = match obj.get("amount").and_then(text) {
        Some(t) => match Decimal::from_str(&t) {
            Ok(d) if d > Decimal::ZERO && !t.contains(['e', 'E']) => Some(d),
            _ => {
                errors.insert("amount".into(), "must be a decimal amount above 0".into());
                None
            }
        },
        None => {
            errors.insert("amount".into(), "required: a decimal amount".into());
            None
        }
    };
    let currency = currency.and_then(|c| {
        let parsed = Currency::parse(&c);
        if parsed.is_none() {
            errors.insert("currency".into(), "must be an ISO 4217 code".into());
        }
        parsed
    });
    let mcc = match mcc {
        Some(m) => match Mcc::parse(&m) {
            Some(m) => Some(m),
            None => {
                errors.insert("mcc".into(), "must be 4 digits".into());
                None
            }
        },
        None => None,
    };
    let merchant = merchant.and_then(|m| {
        let parsed = MerchantId::parse(&m);
        if parsed.is_none() {
            errors.insert("merchantId".into(), MERCHANT_ID_RULE.into());
        }
        parsed
    });
    match (number, month, year, amount, currency) {
        (
            Some(number),
            Some(expiration_month),
            Some(expiration_year),
            Some(amount),
            Some(currency),
        ) if errors.is_empty() => Ok(AuthRequest {
            number,
            expiration_month,
            expiration_year,
            cvc,
            cryptogram,
            authorization: Authorization {
                amount,
                currency,
                mcc,
                merchant,
            },
        }),
        _ => Err(errors),
    }
}

/// Whether a sent secret is the issued one (constant time).
fn same(sent: &str, issued: &str) -> bool {
    constant_time_eq(sent.as_bytes(), issued.as_bytes())
}

fn decline(reason: DeclineReason) -> ApiResult<Response> {
    Response::json(
        200,
        &Answer {
            approved: false,
            decline_reason: Some(reason.as_str()),
        },
    )
}

/// Sandbox issuer: authorize a charge against a credential, enforcing its mandates.
#[utoipa::path(post, path = "/projects/{projectId}/sandbox/authorizations",
    operation_id = "sandboxAuthorize", request_body = AuthorizationBody,
    responses(
        (status = 200, description = "Approved or declined", body = Answer),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn authorize(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    principal.require_private()?;
    let obj = super::json_object(body)?;
    let req = parse(&obj).map_err(ApiError::invalid_fields)?;
    drop(obj);
    let scope = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    let now = app.clock.now();
    let now_micros = i64::try_from(now.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX);
    let mut intents = app.store.list_intents(scope).await?;
    // Newest first, and among equals the active ones first (pan intents share one number).
    intents.sort_by_key(|r| {
        (
            r.status_at(now_micros) != IntentStatus::Active,
            std::cmp::Reverse(r.created_micros),
        )
    });
    let mut found = None;
    for rec in intents {
        let Some(c) = reveal(app, &rec).await? else {
            continue;
        };
        if same(c.number.expose(), req.number.expose())
            && c.expiration_month == req.expiration_month
            && c.expiration_year == req.expiration_year
        {
            found = Some((rec, c));
            break;
        }
    }
    let Some((rec, credential)) = found else {
        return decline(DeclineReason::InvalidCard);
    };
    let secret_ok = match rec.credential_type {
        CredentialType::NetworkToken => match (&req.cryptogram, &credential.cryptogram) {
            (Some(sent), Some(issued)) => same(sent.expose(), issued.expose()),
            _ => false,
        },
        CredentialType::VirtualCard => match (&req.cvc, &credential.cvc) {
            (Some(sent), Some(issued)) => same(sent.expose(), issued.expose()),
            _ => false,
        },
        CredentialType::Pan => match (&req.cvc, &credential.cvc) {
            (Some(sent), Some(retained)) => same(sent.expose(), retained.expose()),
            (Some(_), None) => true,
            (None, _) => false,
        },
    };
    drop(credential);
    if !secret_ok {
        return decline(match rec.credential_type {
            CredentialType::NetworkToken => DeclineReason::InvalidCryptogram,
            _ => DeclineReason::InvalidCvc,
        });
    }
    match rec.status {
        IntentStatus::Active => {}
        _ => return decline(DeclineReason::NotActive),
    }
    if now_micros >= rec.expires_micros {
        return decline(DeclineReason::Expired);
    }
    if let Err(reason) = rec.mandates.check(&req.authorization, now, rec.uses) {
        return decline(reason);
    }
    match app.store.record_use(scope, &rec.id, now).await? {
        UseOutcome::Recorded(_) => Response::json(
            200,
            &Answer {
                approved: true,
                decline_reason: None,
            },
        ),
        UseOutcome::UsageLimitReached => decline(DeclineReason::UsageLimitReached),
        UseOutcome::Expired => decline(DeclineReason::Expired),
        UseOutcome::NotActive | UseOutcome::NotFound => decline(DeclineReason::NotActive),
    }
}
