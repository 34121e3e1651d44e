//! Credential values for proxy templates, fetched once per (payment method, type) and
//! request, and kept zeroed-on-drop.
//!
//! - `pan`: the stored card (number opened by the vault; cvc while retained), only where
//!   the project enables `pan`.
//! - `virtualCard` / `networkToken`: the credential of the entity's newest `active` purchase
//!   intent of that type for the payment method; or, where the template names a vault token
//!   (`vt_…`, answered by the Delegate Payment route) instead of a payment method, of that
//!   token's own intent while it is `active`.
//! - A purchase intent bound to a merchant (a `merchant` mandate) gives its credential only
//!   toward a host of that merchant in the project's `merchants`; otherwise the request is
//!   refused (403 `forbidden`, naming the merchant and the host) before anything is sent.

use crate::app::App;
use crate::auth::Principal;
use crate::domain::issuer::{Credential, CredentialType};
use crate::error::ApiError;
use crate::secret::{CardNumber, Cvc, Revealed};
use crate::service::intents;
use crate::service::target::merchant_refusal;
use crate::template::{CredentialField, CredentialKind, TemplateRef};
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};

/// One credential, as templates address it with JSONPath over the object
/// `{number, expirationMonth, expirationYear, cvc?, cryptogram?, card: {…}, token: {…}}`
/// (`token` only for network tokens). Its secrets are zeroed on drop (their types do it).
pub struct CredentialValues {
    credential: Credential,
    /// What was revealed, for the request's audit entry: the purchase intent the credential
    /// came from, or for `pan` the payment method.
    pub revealed: String,
    /// The purchase intent it came from (`None` for `pan`): counted as one use per request.
    pub intent_id: Option<String>,
    /// A template selected its cvc: the response guard looks for it in the answer.
    cvc_selected: AtomicBool,
}

impl CredentialValues {
    pub(super) fn new(credential: Credential, revealed: String, intent_id: Option<String>) -> Self {
        Self {
            credential,
            revealed,
            intent_id,
            cvc_selected: AtomicBool::new(false),
        }
    }

    /// The credential's card number (a stored card's, a virtual card's or a network token's).
    pub fn number(&self) -> &CardNumber {
        &self.credential.number
    }

    /// The credential's cvc, if a template of the request selected it.
    pub fn cvc_selected(&self) -> Option<&Cvc> {
        if self.cvc_selected.load(Ordering::Relaxed) {
            self.credential.cvc.as_ref()
        } else {
            None
        }
    }

    /// The value the template's JSONPath selects, or why there is none (a message without
    /// card data).
    pub fn select(&self, t: &TemplateRef) -> Result<Revealed, String> {
        let field = selected_field(t.kind, &t.path)?;
        let c = &self.credential;
        let value = match field {
            CredentialField::Number => Some(Revealed::Number(c.number.clone())),
            CredentialField::ExpirationMonth => Some(Revealed::Expiry(c.expiration_month.clone())),
            CredentialField::ExpirationYear => Some(Revealed::Expiry(c.expiration_year.clone())),
            CredentialField::Cvc => {
                self.cvc_selected.store(true, Ordering::Relaxed);
                c.cvc.clone().map(Revealed::Cvc)
            }
            CredentialField::Cryptogram => c.cryptogram.clone().map(Revealed::Cryptogram),
        };
        match value {
            Some(v) => Ok(v),
            None if field == CredentialField::Cvc => {
                Err("the cvc is no longer retained for this credential".to_string())
            }
            None => Err(format!("this credential has no {}", field.as_str())),
        }
    }
}

/// Which field a JSONPath selects depends on the path and the credential type only, never on
/// the values. So jsonpath-rust evaluates each (type, path) once, over a credential object of
/// that type whose values are their own field names, and the answer is cached: a request then
/// reads the field straight from its credential instead of building a JSON object and
/// running the query for every template.
fn selected_field(kind: CredentialKind, path: &str) -> Result<CredentialField, String> {
    if let Some(found) = SELECTED.get(&KeyRef(kind, path)) {
        return found;
    }
    let found = evaluate(kind, path);
    SELECTED.insert((kind, path.to_string()), found.clone());
    found
}

/// A `(type, path)` key of [`SELECTED`] by reference: it hashes as the owned key does, so a
/// lookup allocates nothing (four lookups a request at 1 KiB).
#[derive(Hash)]
struct KeyRef<'a>(CredentialKind, &'a str);

impl quick_cache::Equivalent<(CredentialKind, String)> for KeyRef<'_> {
    fn equivalent(&self, key: &(CredentialKind, String)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

/// Selections by (type, path), shared by all requests (the parser only lets through paths that
/// name a credential field, so the set is small; the cache is bounded anyway).
type Selection = Result<CredentialField, String>;
static SELECTED: once_cell::sync::Lazy<
    quick_cache::sync::Cache<(CredentialKind, String), Selection>,
> = once_cell::sync::Lazy::new(|| quick_cache::sync::Cache::new(1024));

fn evaluate(kind: CredentialKind, path: &str) -> Selection {
    let query = parse_json_path(path).map_err(|_| "the json path does not parse".to_string())?;
    let shape = shape(kind);
    let found =
        js_path_process(&query, &shape).map_err(|_| "the json path does not parse".to_string())?;
    let values: Vec<&Value> = found.into_iter().map(|r| r.val).collect();
    match values.as_slice() {
        [Value::String(name)] => FIELDS
            .iter()
            .copied()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| "the json path must select a credential field".to_string()),
        [] => Err("the json path selects nothing in this credential".to_string()),
        _ => Err("the json path must select exactly one field".to_string()),
    }
}

const FIELDS: [CredentialField; 5] = [
    CredentialField::Number,
    CredentialField::ExpirationMonth,
    CredentialField::ExpirationYear,
    CredentialField::Cvc,
    CredentialField::Cryptogram,
];

/// The credential object of `kind` with every field present and named by its value.
fn shape(kind: CredentialKind) -> Value {
    let flat: Map<String, Value> = FIELDS
        .iter()
        .map(|f| (f.as_str().to_string(), json!(f.as_str())))
        .collect();
    let mut object = flat.clone();
    object.insert("card".into(), Value::Object(flat.clone()));
    if kind == CredentialKind::NetworkToken {
        object.insert("token".into(), Value::Object(flat));
    }
    Value::Object(object)
}

/// Outcome of a lookup: the values, or the client-facing reason there are none.
pub type Lookup = Result<CredentialValues, String>;

/// Fetches the credential a template names, for this principal only, for a request to
/// `host` (the target's): a credential bound to a merchant that `host` is not one of is
/// refused, an error of the whole request.
pub async fn fetch(
    app: &App,
    principal: &Principal,
    host: &str,
    payment_method: &str,
    kind: CredentialKind,
) -> Result<Lookup, ApiError> {
    match kind {
        CredentialKind::Pan => stored_card(app, principal, payment_method).await,
        CredentialKind::VirtualCard | CredentialKind::NetworkToken => {
            let ty = if kind == CredentialKind::VirtualCard {
                CredentialType::VirtualCard
            } else {
                CredentialType::NetworkToken
            };
            let (project, entity) = (&principal.project, &principal.entity);
            let vault_token = intents::intent_of_vault_token(payment_method);
            let (found, named) = match vault_token {
                // A vault token names its own intent.
                Some(intent_id) => (
                    intents::intent_credential(app, project, entity, &intent_id, ty).await?,
                    "vault token",
                ),
                None => (
                    intents::active_intent(app, project, entity, payment_method, ty).await?,
                    "payment method",
                ),
            };
            Ok(match found {
                Some((rec, c)) => {
                    if let Some(merchant) = &rec.mandates.merchant {
                        let config = app.config.project(project).ok_or_else(ApiError::internal)?;
                        if let Some(why) = merchant_refusal(config, merchant.as_str(), host) {
                            return Err(ApiError::forbidden(why));
                        }
                    }
                    Ok(CredentialValues::new(c, rec.id.clone(), Some(rec.id)))
                }
                None => Err(format!(
                    "no active {} purchase intent for this {named}",
                    ty.as_str()
                )),
            })
        }
    }
}

async fn stored_card(
    app: &App,
    principal: &Principal,
    payment_method: &str,
) -> Result<Lookup, ApiError> {
    if !app
        .config
        .project(&principal.project)
        .is_some_and(|p| p.pan_enabled)
    {
        return Ok(Err(
            "pan credentials are not enabled for this project".into()
        ));
    }
    let found =
        intents::stored_card_credential(app, &principal.project, &principal.entity, payment_method)
            .await?;
    Ok(match found {
        Some(c) => Ok(CredentialValues::new(c, payment_method.to_string(), None)),
        None => Err("unknown payment method".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_selection_is_found_by_reference() {
        // A spelling no other test uses, so that only this test caches it.
        let path = "$.card['expirationYear']";
        let kind = CredentialKind::Pan;
        assert_eq!(
            selected_field(kind, path),
            Ok(CredentialField::ExpirationYear)
        );
        assert_eq!(
            SELECTED.get(&KeyRef(kind, path)),
            Some(Ok(CredentialField::ExpirationYear))
        );
        assert_eq!(
            SELECTED.get(&KeyRef(CredentialKind::NetworkToken, path)),
            None
        );
    }
}
