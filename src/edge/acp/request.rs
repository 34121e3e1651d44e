//! The Delegate Payment request body, read field by field against the ACP schema: every
//! object refuses fields it does not define, `null` stands for an absent optional field,
//! and the first problem found is the answer, its `param` the JSONPath of the field
//! (`$.payment_method.exp_month`).
//!
//! Shape problems (a required field missing, a wrong type, a value outside the schema's enum,
//! length or pattern) are 400; values of the right shape that paycred refuses (an unknown
//! currency, an `expires_at` in the past or beyond an intent's lifetime) are 422. Problems in
//! `payment_method` carry the code `invalid_card`; elsewhere `missing` or `invalid`.
//! What paycred checks of the card itself (Luhn, expiry, CVC length) the payment-method
//! handler checks afterwards.

use super::AcpError;
use crate::domain::mandate::Currency;
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// What paycred keeps of a valid request (the rest is checked, and not stored).
pub struct DelegateRequest {
    pub card: Card,
    pub allowance: Allowance,
    /// The request's `metadata`, echoed in the answer.
    pub metadata: Map<String, Value>,
}

/// The card fields paycred stores (the number and CVC are handed straight to the
/// payment-method handler, which seals them).
pub struct Card {
    pub number: String,
    pub exp_month: Option<String>,
    pub exp_year: Option<String>,
    pub cvc: Option<String>,
}

/// The allowance, checked: `reason` is `one_time`.
pub struct Allowance {
    pub max_amount: i64,
    pub currency: Currency,
    pub checkout_session_id: String,
    pub merchant_id: String,
    pub expires_at: OffsetDateTime,
}

const TOP: &[&str] = &[
    "payment_method",
    "allowance",
    "billing_address",
    "risk_signals",
    "metadata",
];
const CARD: &[&str] = &[
    "type",
    "card_number_type",
    "number",
    "exp_month",
    "exp_year",
    "name",
    "cvc",
    "cryptogram",
    "eci_value",
    "checks_performed",
    "iin",
    "display_card_funding_type",
    "display_wallet_type",
    "display_brand",
    "display_last4",
    "metadata",
    "virtual",
];
const ALLOWANCE: &[&str] = &[
    "reason",
    "max_amount",
    "currency",
    "checkout_session_id",
    "merchant_id",
    "expires_at",
];
const ADDRESS: &[&str] = &[
    "name",
    "line_one",
    "line_two",
    "city",
    "state",
    "country",
    "postal_code",
];
const RISK_SIGNAL: &[&str] = &["type", "score", "action"];

/// One object of the body at `path`.
struct Object<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Object<'a> {
    /// The object, after refusing fields outside `allowed`.
    fn new(value: &'a Value, path: String, allowed: &[&str]) -> Result<Self, AcpError> {
        let Value::Object(map) = value else {
            return Err(shape(&path, "must be an object"));
        };
        if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            let at = format!("{path}.{unknown}");
            return Err(shape(&at, "is not a field of this object"));
        }
        Ok(Object { map, path })
    }

    fn at(&self, name: &str) -> String {
        format!("{}.{name}", self.path)
    }

    /// The field, `None` when absent or `null`; refused when `required`.
    fn get(&self, name: &str, required: bool) -> Result<Option<&'a Value>, AcpError> {
        match self.map.get(name) {
            None | Some(Value::Null) if required => Err(missing(&self.at(name))),
            None | Some(Value::Null) => Ok(None),
            Some(v) => Ok(Some(v)),
        }
    }

    /// A string field of at most `max` characters.
    fn string(
        &self,
        name: &str,
        required: bool,
        max: Option<usize>,
    ) -> Result<Option<&'a str>, AcpError> {
        let Some(v) = self.get(name, required)? else {
            return Ok(None);
        };
        let Value::String(s) = v else {
            return Err(shape(&self.at(name), "must be a string"));
        };
        match max {
            Some(max) if s.chars().count() > max => Err(shape(
                &self.at(name),
                &format!("must be at most {max} characters"),
            )),
            _ => Ok(Some(s)),
        }
    }

    /// A required string field.
    fn required(&self, name: &str, max: Option<usize>) -> Result<&'a str, AcpError> {
        self.string(name, true, max)?
            .ok_or_else(|| missing(&self.at(name)))
    }

    /// A string field that must be one of `options`.
    fn one_of(&self, name: &str, required: bool, options: &[&str]) -> Result<(), AcpError> {
        match self.string(name, required, None)? {
            Some(s) if !options.contains(&s) => Err(shape(
                &self.at(name),
                &format!("must be one of {}", options.join(", ")),
            )),
            _ => Ok(()),
        }
    }

    /// An object of strings.
    fn string_map(&self, name: &str, required: bool) -> Result<Map<String, Value>, AcpError> {
        let Some(v) = self.get(name, required)? else {
            return Ok(Map::new());
        };
        let Value::Object(map) = v else {
            return Err(shape(&self.at(name), "must be an object of strings"));
        };
        if let Some(key) = map.iter().find(|(_, v)| !v.is_string()).map(|(k, _)| k) {
            return Err(shape(
                &format!("{}.{key}", self.at(name)),
                "must be a string",
            ));
        }
        Ok(map.clone())
    }

    fn integer(&self, name: &str, required: bool) -> Result<Option<i64>, AcpError> {
        match self.get(name, required)? {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| shape(&self.at(name), "must be an integer")),
        }
    }
}

/// A field of the right shape that paycred refuses: 422.
fn refused(param: &str, message: &str) -> AcpError {
    AcpError::field(422, param, message)
}

/// A field of the wrong shape: 400.
fn shape(param: &str, message: &str) -> AcpError {
    AcpError::field(400, param, message)
}

fn missing(param: &str) -> AcpError {
    AcpError::field(400, param, "is required")
}

/// Reads and checks the body; `now` decides whether `expires_at` is in the past, and
/// `lifetime` (a purchase intent's longest) how far ahead it may be.
pub fn parse(
    body: &[u8],
    now: OffsetDateTime,
    lifetime: Duration,
) -> Result<DelegateRequest, AcpError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| shape("$", "The body is not valid JSON."))?;
    let top = Object::new(&value, "$".to_string(), TOP)?;
    let card = card(&top)?;
    let allowance = allowance(&top, now, lifetime)?;
    if let Some(address) = top.get("billing_address", false)? {
        billing_address(address, top.at("billing_address"))?;
    }
    risk_signals(&top)?;
    let metadata = top.string_map("metadata", true)?;
    Ok(DelegateRequest {
        card,
        allowance,
        metadata,
    })
}

fn card(top: &Object<'_>) -> Result<Card, AcpError> {
    let value = top.get("payment_method", true)?.unwrap_or(&Value::Null);
    let pm = Object::new(value, top.at("payment_method"), CARD)?;
    pm.one_of("type", true, &["card"])?;
    pm.one_of("card_number_type", true, &["fpan", "network_token"])?;
    let number = pm.required("number", None)?.to_string();
    let exp_month = pm.string("exp_month", false, Some(2))?.map(str::to_string);
    let exp_year = pm.string("exp_year", false, Some(4))?.map(str::to_string);
    let cvc = pm.string("cvc", false, Some(4))?.map(str::to_string);
    pm.string("name", false, None)?;
    pm.string("cryptogram", false, None)?;
    pm.string("eci_value", false, Some(2))?;
    pm.string("iin", false, Some(8))?;
    pm.one_of(
        "display_card_funding_type",
        true,
        &["credit", "debit", "prepaid"],
    )?;
    pm.string("display_wallet_type", false, None)?;
    pm.string("display_brand", false, None)?;
    if let Some(last4) = pm.string("display_last4", false, None)? {
        if last4.len() != 4 || !last4.bytes().all(|b| b.is_ascii_digit()) {
            return Err(shape(&pm.at("display_last4"), "must be 4 digits"));
        }
    }
    if let Some(checks) = pm.get("checks_performed", false)? {
        let known = ["avs", "cvv", "ani", "auth0"];
        let ok = checks.as_array().is_some_and(|a| {
            a.iter()
                .all(|c| c.as_str().is_some_and(|c| known.contains(&c)))
        });
        if !ok {
            return Err(shape(
                &pm.at("checks_performed"),
                "must be an array of avs, cvv, ani, auth0",
            ));
        }
    }
    if pm.get("virtual", false)?.is_some_and(|v| !v.is_boolean()) {
        return Err(shape(&pm.at("virtual"), "must be a boolean"));
    }
    pm.string_map("metadata", true)?;
    Ok(Card {
        number,
        exp_month,
        exp_year,
        cvc,
    })
}

fn allowance(
    top: &Object<'_>,
    now: OffsetDateTime,
    lifetime: Duration,
) -> Result<Allowance, AcpError> {
    let value = top.get("allowance", true)?.unwrap_or(&Value::Null);
    let a = Object::new(value, top.at("allowance"), ALLOWANCE)?;
    a.one_of("reason", true, &["one_time"])?;
    let max_amount = a.integer("max_amount", true)?.unwrap_or_default();
    if max_amount <= 0 {
        return Err(shape(
            &a.at("max_amount"),
            "must be a positive integer (minor units)",
        ));
    }
    let code = a.required("currency", None)?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(shape(
            &a.at("currency"),
            "must be a lowercase ISO 4217 code (usd)",
        ));
    }
    let Some(currency) = Currency::parse(code) else {
        return Err(refused(&a.at("currency"), "is not an ISO 4217 currency"));
    };
    let checkout_session_id = a.required("checkout_session_id", None)?.to_string();
    let merchant_id = a.required("merchant_id", Some(256))?.to_string();
    let expires = a.required("expires_at", None)?;
    let Ok(expires_at) = OffsetDateTime::parse(expires, &Rfc3339) else {
        return Err(shape(&a.at("expires_at"), "must be an RFC 3339 date-time"));
    };
    if expires_at <= now {
        return Err(refused(&a.at("expires_at"), "is in the past"));
    }
    if expires_at > now + lifetime {
        return Err(refused(
            &a.at("expires_at"),
            &format!(
                "is more than {} hours ahead, the longest a purchase intent lives",
                lifetime.whole_hours()
            ),
        ));
    }
    Ok(Allowance {
        max_amount,
        currency,
        checkout_session_id,
        merchant_id,
        expires_at,
    })
}

fn billing_address(value: &Value, path: String) -> Result<(), AcpError> {
    let a = Object::new(value, path, ADDRESS)?;
    a.required("name", Some(256))?;
    a.required("line_one", Some(60))?;
    a.string("line_two", false, Some(60))?;
    a.required("city", Some(60))?;
    a.required("state", None)?;
    if a.required("country", Some(2))?.chars().count() != 2 {
        return Err(shape(
            &a.at("country"),
            "must be an ISO 3166-1 alpha-2 code",
        ));
    }
    a.required("postal_code", Some(20))?;
    Ok(())
}

fn risk_signals(top: &Object<'_>) -> Result<(), AcpError> {
    let path = top.at("risk_signals");
    let Some(Value::Array(signals)) = top.get("risk_signals", true)? else {
        return Err(shape(&path, "must be an array"));
    };
    if signals.is_empty() {
        return Err(shape(&path, "must hold at least one risk signal"));
    }
    for (i, signal) in signals.iter().enumerate() {
        let s = Object::new(signal, format!("{path}[{i}]"), RISK_SIGNAL)?;
        s.one_of("type", true, &["card_testing"])?;
        s.integer("score", true)?;
        s.one_of("action", true, &["blocked", "manual_review", "authorized"])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);

    fn body() -> Value {
        json!({
            "payment_method": {
                "type": "card", "card_number_type": "fpan", "number": "4242424242424242",
                "exp_month": "11", "exp_year": "2030", "cvc": "223",
                "display_card_funding_type": "credit", "display_last4": "4242",
                "checks_performed": ["avs"], "metadata": {}, "name": null
            },
            "allowance": {
                "reason": "one_time", "max_amount": 2000, "currency": "usd",
                "checkout_session_id": "cs_1", "merchant_id": "acme",
                "expires_at": "2026-06-01T18:00:00.5Z"
            },
            "risk_signals": [{"type": "card_testing", "score": 10, "action": "authorized"}],
            "metadata": {"campaign": "q4"}
        })
    }

    fn parsed(v: &Value) -> Result<DelegateRequest, (u16, String, String)> {
        parse(v.to_string().as_bytes(), NOW, Duration::hours(24)).map_err(|e| {
            (
                e.status,
                e.code.to_string(),
                e.param.clone().unwrap_or_default(),
            )
        })
    }

    #[test]
    fn a_valid_request_is_read() {
        let r = parsed(&body()).unwrap_or_else(|e| unreachable!("{e:?}"));
        assert_eq!(r.card.number, "4242424242424242");
        assert_eq!(r.allowance.max_amount, 2000);
        assert_eq!(r.allowance.currency.alpha(), "USD");
        assert_eq!(r.metadata["campaign"], "q4");
    }

    #[test]
    fn a_body_that_is_not_json_is_named_as_the_whole() {
        let e = parse(b"nope", NOW, Duration::hours(24)).err();
        let e = e.map(|e| (e.status, e.code, e.message, e.param));
        assert_eq!(
            e,
            Some((
                400,
                "invalid",
                "The body is not valid JSON.".into(),
                Some("$".into())
            ))
        );
    }

    #[test]
    fn each_problem_names_its_field() {
        #[rustfmt::skip]
        let cases: Vec<(&str, Value, u16, &str, &str)> = vec![
            ("extra field", json!({"extra": 1}), 400, "invalid", "$.extra"),
            ("card type", json!({"payment_method": {"type": "bank"}}), 400, "invalid_card", "$.payment_method.type"),
            ("no number", json!({"payment_method": {"number": null}}), 400, "invalid_card", "$.payment_method.number"),
            ("long month", json!({"payment_method": {"exp_month": "123"}}), 400, "invalid_card", "$.payment_method.exp_month"),
            ("last4", json!({"payment_method": {"display_last4": "42a2"}}), 400, "invalid_card", "$.payment_method.display_last4"),
            ("reason", json!({"allowance": {"reason": "recurring"}}), 400, "invalid", "$.allowance.reason"),
            ("amount", json!({"allowance": {"max_amount": 0}}), 400, "invalid", "$.allowance.max_amount"),
            ("float amount", json!({"allowance": {"max_amount": 20.5}}), 400, "invalid", "$.allowance.max_amount"),
            ("upper currency", json!({"allowance": {"currency": "USD"}}), 400, "invalid", "$.allowance.currency"),
            ("unknown currency", json!({"allowance": {"currency": "zzz"}}), 422, "invalid", "$.allowance.currency"),
            ("past", json!({"allowance": {"expires_at": "2026-06-01T11:59:59Z"}}), 422, "invalid", "$.allowance.expires_at"),
            ("too far", json!({"allowance": {"expires_at": "2026-06-02T12:00:01Z"}}), 422, "invalid", "$.allowance.expires_at"),
            ("not a date", json!({"allowance": {"expires_at": "tomorrow"}}), 400, "invalid", "$.allowance.expires_at"),
            ("no merchant", json!({"allowance": {"merchant_id": null}}), 400, "missing", "$.allowance.merchant_id"),
            ("no signals", json!({"risk_signals": []}), 400, "invalid", "$.risk_signals"),
            ("signal", json!({"risk_signals": [{"type": "card_testing", "score": 1, "action": "x"}]}), 400, "invalid", "$.risk_signals[0].action"),
            ("metadata", json!({"metadata": {"n": 1}}), 400, "invalid", "$.metadata.n"),
            ("address", json!({"billing_address": {"name": "A"}}), 400, "missing", "$.billing_address.line_one"),
        ];
        for (name, patch, status, code, param) in cases {
            let mut v = body();
            for (k, p) in patch.as_object().into_iter().flatten() {
                match (v.get_mut(k), p) {
                    (Some(Value::Object(o)), Value::Object(p)) => {
                        o.extend(p.clone());
                    }
                    _ => v[k] = p.clone(),
                }
            }
            let got = parsed(&v).err();
            assert_eq!(
                got,
                Some((status, code.to_string(), param.to_string())),
                "{name}"
            );
        }
    }
}
