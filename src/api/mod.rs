//! The REST API's handlers, one module per resource, as plain async functions of an
//! authenticated [`Principal`] and a body already read: they answer a
//! [`Response`](crate::http::Response) or an [`ApiError`]. Nothing here touches pingora
//! (`edge::rest` reads the request, dispatches and writes the answer), and no handler calls
//! another: what two of them share lives in `service/`.
//!
//! May import: `service`, `domain`, `app`, `auth`, `store`, `vault`, `audit`, `http`,
//! `config`, `clock`, `error`, `secret`.

pub mod browser_sessions;
pub mod client_encryption;
pub mod delegate_payment;
pub mod events;
pub mod openapi;
pub mod passkeys;
pub mod payment_methods;
pub mod purchase_intents;
pub mod sandbox;
pub mod tokens;
pub mod verify;
pub mod webhook_endpoints;

#[cfg(test)]
pub(crate) mod intents_tests;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use utoipa::ToSchema;

/// The 409 of a POST, as the API description gives it: `Idempotency-Key` reused.
pub const CONFLICT: &str =
    "conflict: Idempotency-Key reused with another request, or its first request still running";

/// The raw `card` of a create body (payment method or token).
#[derive(ToSchema)]
#[schema(as = CardInput, rename_all = "camelCase")]
pub struct CardBody {
    /// Digits only, 12 to 19, Luhn-valid.
    pub number: String,
    /// `MM`.
    pub expiration_month: String,
    /// `YYYY`.
    pub expiration_year: String,
    /// 3 digits (4 for amex).
    pub cvc: String,
}

/// A request body that must be a JSON object.
pub fn json_object(body: &[u8]) -> ApiResult<serde_json::Map<String, serde_json::Value>> {
    match crate::http::parse_json(body)? {
        serde_json::Value::Object(obj) => Ok(obj),
        _ => Err(ApiError::invalid_request("The body must be a JSON object.")),
    }
}

/// Checks a body's `entityId` against the token's subject: a different entity is 403; a
/// missing one is 400 where `required`, else the subject is meant.
pub fn check_entity(
    obj: &serde_json::Map<String, serde_json::Value>,
    principal: &Principal,
    required: bool,
) -> ApiResult<()> {
    use serde_json::Value;
    match obj.get("entityId") {
        None | Some(Value::Null) if required => {
            Err(ApiError::invalid_field("entityId", "required"))
        }
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(e)) if *e == principal.entity => Ok(()),
        Some(Value::String(_)) => Err(ApiError::forbidden(
            "entityId does not match the token's subject.",
        )),
        Some(_) => Err(ApiError::invalid_field("entityId", "must be a string")),
    }
}

/// A list's `limit` query parameter: an integer from 1 to `max`; otherwise `None`, with the
/// error recorded under `limit`.
pub fn list_limit(
    value: &str,
    max: usize,
    errors: &mut std::collections::BTreeMap<String, String>,
) -> Option<usize> {
    match value.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Some(n),
        _ => {
            errors.insert("limit".into(), format!("an integer from 1 to {max}"));
            None
        }
    }
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Query parameters as (name, value) pairs, percent-decoding `%XX` and `+`.
pub fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    let decode = |s: &str| -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match (hex_val(bytes[i + 1]), hex_val(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push(h * 16 + l);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        assert_eq!(
            query_pairs(Some("limit=5&type=card&x=a%20b+c&flag&bad=%zz&end=%4")),
            vec![
                ("limit".into(), "5".into()),
                ("type".into(), "card".into()),
                ("x".into(), "a b c".into()),
                ("flag".into(), "".into()),
                ("bad".into(), "%zz".into()),
                ("end".into(), "%4".into()),
            ]
        );
    }
}
