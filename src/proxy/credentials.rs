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
use crate::template::{CredentialField, CredentialKind};
use zeroize::Zeroizing;

/// The fields of one credential.
pub struct CredentialValues {
    pub number: Zeroizing<String>,
    pub expiration_month: String,
    pub expiration_year: String,
    pub cvc: Option<Zeroizing<String>>,
    pub cryptogram: Option<Zeroizing<String>>,
    /// The purchase intent it came from (`None` for `pan`): counted as one use per request.
    pub intent_id: Option<String>,
}

impl CredentialValues {
    /// One field, or why it is not there (a message without card data).
    pub fn field(&self, field: CredentialField) -> Result<String, String> {
        match field {
            CredentialField::Number => Ok(self.number.to_string()),
            CredentialField::ExpirationMonth => Ok(self.expiration_month.clone()),
            CredentialField::ExpirationYear => Ok(self.expiration_year.clone()),
            CredentialField::Cvc => self
                .cvc
                .as_ref()
                .map(|c| c.to_string())
                .ok_or_else(|| "the cvc is no longer retained for this credential".to_string()),
            CredentialField::Cryptogram => self
                .cryptogram
                .as_ref()
                .map(|c| c.to_string())
                .ok_or_else(|| "this credential has no cryptogram".to_string()),
        }
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
                Some((intent_id, c)) => Ok(values(c, Some(intent_id))),
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
        Some(c) => Ok(values(c, None)),
        None => Err("unknown payment method".into()),
    })
}

fn values(c: Credential, intent_id: Option<String>) -> CredentialValues {
    CredentialValues {
        number: Zeroizing::new(c.number.clone()),
        expiration_month: c.expiration_month.clone(),
        expiration_year: c.expiration_year.clone(),
        cvc: c.cvc.as_ref().map(|v| Zeroizing::new(v.clone())),
        cryptogram: c.cryptogram.as_ref().map(|v| Zeroizing::new(v.clone())),
        intent_id,
    }
}
