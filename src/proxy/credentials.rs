//! Credential values for proxy templates, fetched once per (payment method, type) and
//! request, and kept zeroed-on-drop.
//!
//! - `pan`: the stored card (number opened by the vault; cvc while retained), only where
//!   the project enables `pan`.
//! - `virtualCard` / `networkToken`: the credential of the entity's newest `active` purchase
//!   intent of that type for the payment method.

use crate::api::{purchase_intents, App};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::issuer::{Credential, CredentialType};
use crate::template::{CredentialField, CredentialKind, TemplateRef};
use jsonpath_rust::parser::model::JpQuery;
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use serde_json::{Map, Value};
use std::sync::Arc;
use zeroize::Zeroize;

/// One credential as the JSON object templates address with JSONPath:
/// `{number, expirationMonth, expirationYear, cvc?, cryptogram?, card: {…}, token: {…}}`
/// (`token` only for network tokens). Every string in it is zeroed on drop.
pub struct CredentialValues {
    object: Value,
    /// The purchase intent it came from (`None` for `pan`): counted as one use per request.
    pub intent_id: Option<String>,
}

impl CredentialValues {
    fn new(c: &Credential, kind: CredentialKind, intent_id: Option<String>) -> Self {
        let mut flat = Map::new();
        flat.insert("number".into(), Value::String(c.number.clone()));
        flat.insert(
            "expirationMonth".into(),
            Value::String(c.expiration_month.clone()),
        );
        flat.insert(
            "expirationYear".into(),
            Value::String(c.expiration_year.clone()),
        );
        if let Some(cvc) = &c.cvc {
            flat.insert("cvc".into(), Value::String(cvc.clone()));
        }
        if let Some(cryptogram) = &c.cryptogram {
            flat.insert("cryptogram".into(), Value::String(cryptogram.clone()));
        }
        let mut object = flat.clone();
        object.insert("card".into(), Value::Object(flat.clone()));
        if kind == CredentialKind::NetworkToken {
            object.insert("token".into(), Value::Object(flat));
        }
        Self {
            object: Value::Object(object),
            intent_id,
        }
    }

    /// The value the template's JSONPath selects (jsonpath-rust over the credential object),
    /// or why there is none (a message without card data).
    pub fn select(&self, t: &TemplateRef) -> Result<String, String> {
        let query = compiled(&t.path).ok_or_else(|| "the json path does not parse".to_string())?;
        let found = js_path_process(&query, &self.object)
            .map_err(|_| "the json path does not parse".to_string())?;
        let values: Vec<&Value> = found.into_iter().map(|r| r.val).collect();
        match values.as_slice() {
            [Value::String(v)] => Ok(v.clone()),
            [] if t.field == CredentialField::Cvc => {
                Err("the cvc is no longer retained for this credential".to_string())
            }
            [] => Err(format!("this credential has no {}", t.field.as_str())),
            _ => Err("the json path must select exactly one field".to_string()),
        }
    }
}

/// Compiled JSONPath queries by their text, shared by all requests (the parser only lets
/// through paths that name a credential field, so the set is small; the cache is bounded).
static COMPILED: once_cell::sync::Lazy<quick_cache::sync::Cache<String, Arc<JpQuery>>> =
    once_cell::sync::Lazy::new(|| quick_cache::sync::Cache::new(1024));

fn compiled(path: &str) -> Option<Arc<JpQuery>> {
    if let Some(q) = COMPILED.get(path) {
        return Some(q);
    }
    let q = Arc::new(parse_json_path(path).ok()?);
    COMPILED.insert(path.to_string(), q.clone());
    Some(q)
}

fn zero_strings(v: &mut Value) {
    match v {
        Value::String(s) => s.zeroize(),
        Value::Array(items) => items.iter_mut().for_each(zero_strings),
        Value::Object(map) => map.values_mut().for_each(zero_strings),
        _ => {}
    }
}

impl Drop for CredentialValues {
    fn drop(&mut self) {
        zero_strings(&mut self.object);
    }
}

/// Outcome of a lookup: the values, or the client-facing reason there are none.
pub type Lookup = Result<CredentialValues, String>;

/// Fetches the credential a template names, for this principal only.
pub async fn fetch(
    app: &App,
    principal: &Principal,
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
            let found = purchase_intents::active_credential(
                app,
                &principal.project,
                &principal.entity,
                payment_method,
                ty,
            )
            .await?;
            Ok(match found {
                Some((intent_id, c)) => Ok(CredentialValues::new(&c, kind, Some(intent_id))),
                None => Err(format!(
                    "no active {} purchase intent for this payment method",
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
    let found = purchase_intents::stored_card_credential(
        app,
        &principal.project,
        &principal.entity,
        payment_method,
    )
    .await?;
    Ok(match found {
        Some(c) => Ok(CredentialValues::new(&c, CredentialKind::Pan, None)),
        None => Err("unknown payment method".into()),
    })
}
