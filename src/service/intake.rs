//! Card intake: turning a request's `card`, `encryptedCard` or `tokenId` into the raw card
//! that [`crate::domain::card::validate`] checks. Payment methods and the token vault take
//! cards the same way.

use super::aad;
use crate::app::App;
use crate::auth::{Principal, Role};
use crate::domain::card::CardInput;
use crate::error::{ApiError, ApiResult};
use crate::store::{Scope, TokenTake};
use crate::vault::client_keys::JweError;
use serde_json::{Map, Value};

/// Where a card of a request came from; names the field errors are reported under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Card,
    EncryptedCard,
    TokenId,
}

impl Source {
    /// The request field.
    pub fn field(self) -> &'static str {
        match self {
            Source::Card => "card",
            Source::EncryptedCard => "encryptedCard",
            Source::TokenId => "tokenId",
        }
    }

    fn from_field(name: &str) -> Option<Source> {
        match name {
            "card" => Some(Source::Card),
            "encryptedCard" => Some(Source::EncryptedCard),
            "tokenId" => Some(Source::TokenId),
            _ => None,
        }
    }
}

/// Picks exactly one of `allowed` from the body (400 naming the fields otherwise) and checks
/// the role: a public-role token may not send a raw `card` (403).
pub fn pick_source(
    obj: &Map<String, Value>,
    allowed: &[Source],
    principal: &Principal,
) -> ApiResult<Source> {
    let present: Vec<Source> = obj
        .keys()
        .filter_map(|k| Source::from_field(k))
        .filter(|s| allowed.contains(s))
        .collect();
    let names = allowed
        .iter()
        .map(|s| s.field())
        .collect::<Vec<_>>()
        .join(", ");
    let source = match present.as_slice() {
        [one] => *one,
        [] => {
            let first = allowed.first().map_or("card", |s| s.field());
            return Err(ApiError::invalid_field(
                first,
                &format!("exactly one of {names} is required"),
            ));
        }
        many => {
            let fields = many
                .iter()
                .map(|s| (s.field().to_string(), format!("give only one of {names}")))
                .collect();
            return Err(ApiError::invalid_fields(fields));
        }
    };
    if source == Source::Card && principal.role == Role::Public {
        return Err(ApiError::forbidden(
            "A public-role token may not send a raw card: send encryptedCard or tokenId.",
        ));
    }
    Ok(source)
}

fn bad(source: Source, message: &str) -> ApiError {
    ApiError::invalid_field(source.field(), message)
}

/// A raw card, and when its cvc was first stored (unix seconds) if that was before this
/// request: a token's cvc keeps its retention when it moves into a payment method.
pub struct SourcedCard {
    pub input: CardInput,
    pub cvc_stored_secs: Option<u64>,
}

/// The raw card of the chosen source. `tokenId` consumes the token (one use).
pub async fn card_input(
    app: &App,
    principal: &Principal,
    source: Source,
    value: Value,
) -> ApiResult<SourcedCard> {
    let fresh = |input: CardInput| SourcedCard {
        input,
        cvc_stored_secs: None,
    };
    match source {
        Source::Card => match value {
            Value::Object(_) => serde_json::from_value(value)
                .map(fresh)
                .map_err(|_| bad(source, "must be an object")),
            _ => Err(bad(source, "must be an object")),
        },
        Source::EncryptedCard => {
            let Value::String(compact) = value else {
                return Err(bad(source, "must be a compact JWE string"));
            };
            decrypt_card(app, &principal.project, compact.trim())
                .map(fresh)
                .map_err(|e| bad(source, &e.to_string()))
        }
        Source::TokenId => {
            let Value::String(id) = value else {
                return Err(bad(source, "must be a string"));
            };
            take_token(app, principal, &id).await
        }
    }
}

/// Decrypts an `encryptedCard` into a raw card. The plaintext is never echoed: a JSON
/// error says only that the content is not a card.
fn decrypt_card(app: &App, project: &str, compact: &str) -> Result<CardInput, JweError> {
    let plain = app.vault.open_client_jwe(project, compact)?;
    let value: Value = serde_json::from_slice(&plain).map_err(|_| JweError::NotCard)?;
    match value {
        Value::Object(_) => serde_json::from_value(value).map_err(|_| JweError::NotCard),
        _ => Err(JweError::NotCard),
    }
}

/// Consumes a token of the caller's project and entity; its card comes back unsealed, with
/// the time its cvc was stored.
async fn take_token(app: &App, principal: &Principal, id: &str) -> ApiResult<SourcedCard> {
    let scope = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    let now_micros = i64::try_from(app.clock.now().unix_timestamp_nanos() / 1000).unwrap_or(0);
    let bad = |m| bad(Source::TokenId, m);
    if !crate::config::valid_id(id) {
        return Err(bad("unknown token"));
    }
    let rec = match app.store.take_card_token(scope, id, now_micros).await? {
        TokenTake::Taken(rec) => rec,
        TokenTake::Unknown => return Err(bad("unknown token")),
        TokenTake::Used => return Err(bad("the token was used already")),
        TokenTake::Expired => return Err(bad("the token has expired")),
    };
    let project = principal.project.as_str();
    let number = rec
        .number_sealed
        .as_ref()
        .ok_or_else(|| bad("unknown token"))?;
    let number = app
        .vault
        .open(project, &aad::token_number(project, &rec.id), number)?;
    let number = String::from_utf8(number.to_vec()).map_err(|_| ApiError::internal())?;
    let cvc = rec
        .cvc_sealed
        .as_ref()
        .and_then(|c| {
            app.vault
                .open_cvc(&aad::token_cvc(project, &rec.id), c, app.now_secs())
        })
        // The cvc key is gone (retention passed): the token is no longer usable.
        .ok_or_else(|| bad("the token has expired"))?;
    Ok(SourcedCard {
        input: CardInput {
            number: Some(Value::String(number)),
            expiration_month: Some(Value::String(rec.expiration_month.clone())),
            expiration_year: Some(Value::String(rec.expiration_year.clone())),
            cvc: Some(Value::String(cvc.expose().to_string())),
        },
        cvc_stored_secs: Some(u64::try_from(rec.created_micros / 1_000_000).unwrap_or(0)),
    })
}
