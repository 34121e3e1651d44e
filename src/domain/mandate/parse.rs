//! Parsing: the `mandates` list of a create-purchase-intent body, in either form, checked entry
//! by entry and then across the list (one currency, agreeing duplicates), into [`Mandates`].
//! Every problem is reported at its field path.

use rust_decimal::Decimal;
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Date, OffsetDateTime, PrimitiveDateTime, UtcOffset};

use super::{
    Currency, FieldErrors, Mandates, Mcc, MerchantId, MAX_MANDATES, MAX_USAGE_LIMIT,
    MERCHANT_ID_RULE,
};

const KNOWN_TYPES: &str =
    "maxAmount, currency, merchantMcc, mcc, expirationDate, usageLimit, merchant";

/// One mandate after its own checks, before the list-wide ones.
enum Entry {
    MaxAmount {
        amount: Decimal,
        value_path: String,
        currency: Option<Currency>,
        currency_path: String,
    },
    Currency {
        currency: Currency,
        path: String,
    },
    Mcc(Mcc),
    Expiration {
        at: OffsetDateTime,
        path: String,
    },
    UsageLimit {
        count: u32,
        path: String,
    },
    Merchant {
        id: MerchantId,
        path: String,
    },
}

/// Parses the `mandates` field of a create-purchase-intent body (pass `Value::Null` when the
/// field is absent). `now` decides whether an expiration date is in the past.
///
/// Every problem found is reported, keyed by field path (`mandates`, `mandates[1].type`,
/// `mandates[0].details.date`, ...).
pub fn parse_mandates(v: &Value, now: OffsetDateTime) -> Result<Mandates, FieldErrors> {
    let mut errs = FieldErrors::new();
    let items = match v {
        Value::Array(items) => items,
        Value::Null => return Err(one("mandates", "is required")),
        _ => return Err(one("mandates", "must be an array of mandates")),
    };
    if items.is_empty() {
        return Err(one("mandates", "at least one mandate is required"));
    }
    if items.len() > MAX_MANDATES {
        return Err(one(
            "mandates",
            &format!("at most {MAX_MANDATES} mandates are allowed"),
        ));
    }

    let mut entries = Vec::with_capacity(items.len());
    // A currency mandate that is itself wrong already has its error; do not also call the
    // currency of a maxAmount missing.
    let mut currency_mandate_failed = false;
    for (i, item) in items.iter().enumerate() {
        match parse_entry(&format!("mandates[{i}]"), item, now, &mut errs) {
            Some(e) => entries.push(e),
            None => {
                currency_mandate_failed |=
                    item.get("type").and_then(Value::as_str) == Some("currency")
            }
        }
    }

    let mut out = Mandates::default();

    // Currency: from maxAmount details and currency mandates, first one wins, others must agree.
    let mut currency: Option<(Currency, &str)> = None;
    for e in &entries {
        let (c, path) = match e {
            Entry::MaxAmount {
                currency: Some(c),
                currency_path,
                ..
            } => (*c, currency_path.as_str()),
            Entry::Currency { currency, path } => (*currency, path.as_str()),
            _ => continue,
        };
        agree(&mut currency, c, path, &mut errs, |first, at| {
            format!("conflicts with currency {first} at {at}")
        });
    }
    out.currency = currency.map(|(c, _)| c);

    let mut max: Option<(Decimal, &str)> = None;
    let mut first_amount_currency_path: Option<&str> = None;
    let mut expiry: Option<(OffsetDateTime, &str)> = None;
    let mut usage: Option<(u32, &str)> = None;
    let mut merchant: Option<&str> = None;
    for e in &entries {
        match e {
            Entry::MaxAmount {
                amount,
                value_path,
                currency_path,
                ..
            } => {
                first_amount_currency_path.get_or_insert(currency_path.as_str());
                if let Some(c) = out.currency {
                    if amount.normalize().scale() > u32::from(c.minor_units()) {
                        errs.insert(value_path.clone(), minor_units_message(c));
                        continue;
                    }
                }
                agree(&mut max, *amount, value_path, &mut errs, |first, at| {
                    format!("conflicts with maxAmount {first} at {at}")
                });
            }
            Entry::Currency { .. } => {}
            Entry::Mcc(m) => {
                if !out.mccs.contains(m) {
                    out.mccs.push(*m);
                }
            }
            Entry::Expiration { at, path } => agree(&mut expiry, *at, path, &mut errs, |_, at| {
                format!("conflicts with the expiration date at {at}")
            }),
            Entry::UsageLimit { count, path } => {
                agree(&mut usage, *count, path, &mut errs, |first, at| {
                    format!("conflicts with usage limit {first} at {at}")
                })
            }
            Entry::Merchant { id, path } => match merchant {
                None => {
                    merchant = Some(path);
                    out.merchant = Some(id.clone());
                }
                Some(at) => {
                    errs.insert(
                        path.clone(),
                        format!("only one merchant mandate is allowed (one is at {at})"),
                    );
                }
            },
        }
    }
    if out.currency.is_none() && !currency_mandate_failed {
        if let Some(path) = first_amount_currency_path {
            errs.insert(
                path.to_string(),
                "is required: give details.currency or add a currency mandate".to_string(),
            );
        }
    }
    out.max_amount = max.map(|(a, _)| a);
    out.expires_at = expiry.map(|(at, _)| at);
    out.usage_limit = usage.map(|(n, _)| n);

    if errs.is_empty() {
        Ok(out)
    } else {
        Err(errs)
    }
}

/// One limit given again: the first value and its path are kept in `first`; a later `value`
/// at `path` that differs is an error there, worded by `conflict(first value, first path)`.
fn agree<'a, T: PartialEq + Copy>(
    first: &mut Option<(T, &'a str)>,
    value: T,
    path: &'a str,
    errs: &mut FieldErrors,
    conflict: impl FnOnce(T, &str) -> String,
) {
    match *first {
        None => *first = Some((value, path)),
        Some((kept, at)) if kept != value => {
            errs.insert(path.to_string(), conflict(kept, at));
        }
        Some(_) => {}
    }
}

fn one(path: &str, msg: &str) -> FieldErrors {
    let mut e = FieldErrors::new();
    e.insert(path.to_string(), msg.to_string());
    e
}

fn minor_units_message(c: Currency) -> String {
    match c.minor_units() {
        0 => format!("{c} amounts have no decimal places"),
        1 => format!("{c} amounts have at most 1 decimal place"),
        n => format!("{c} amounts have at most {n} decimal places"),
    }
}

/// Checks one mandate on its own. Errors go into `errs`; `None` when there were any.
fn parse_entry(
    p: &str,
    item: &Value,
    now: OffsetDateTime,
    errs: &mut FieldErrors,
) -> Option<Entry> {
    let Value::Object(obj) = item else {
        errs.insert(p.to_string(), "must be an object".to_string());
        return None;
    };
    let before = errs.len();
    for key in obj.keys() {
        if !matches!(key.as_str(), "type" | "value" | "details") {
            errs.insert(format!("{p}.{key}"), "unknown field".to_string());
        }
    }
    let ty = match obj.get("type") {
        None | Some(Value::Null) => {
            errs.insert(format!("{p}.type"), "is required".to_string());
            return None;
        }
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            errs.insert(format!("{p}.type"), "must be a string".to_string());
            return None;
        }
    };
    let allowed_details: &[&str] = match ty {
        "maxAmount" => &["currency"],
        "currency" | "merchantMcc" | "mcc" | "merchant" => &[],
        "expirationDate" => &["date", "expirationTime"],
        "usageLimit" => &["count"],
        _ => {
            errs.insert(
                format!("{p}.type"),
                format!("unknown mandate type; expected one of {KNOWN_TYPES}"),
            );
            return None;
        }
    };
    let empty = Map::new();
    let details = match obj.get("details") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(d)) => d,
        Some(_) => {
            errs.insert(format!("{p}.details"), "must be an object".to_string());
            return None;
        }
    };
    for key in details.keys() {
        if !allowed_details.contains(&key.as_str()) {
            errs.insert(
                format!("{p}.details.{key}"),
                format!("unknown field for a {ty} mandate"),
            );
        }
    }
    let value = obj.get("value").filter(|v| !v.is_null());
    let value_path = format!("{p}.value");

    let entry = match ty {
        "maxAmount" => {
            let amount = required_text(value, &value_path, errs)
                .and_then(|t| field(parse_amount(&t), &value_path, errs));
            let currency_path = format!("{p}.details.currency");
            let currency = match details.get("currency").filter(|v| !v.is_null()) {
                None => Some(None),
                Some(v) => field(parse_currency(v), &currency_path, errs).map(Some),
            };
            match (amount, currency) {
                (Some(amount), Some(currency)) => Some(Entry::MaxAmount {
                    amount,
                    value_path,
                    currency,
                    currency_path,
                }),
                _ => None,
            }
        }
        "currency" => {
            let c = value.and_then(|v| field(parse_currency(v), &value_path, errs));
            if value.is_none() {
                errs.insert(value_path.clone(), "is required".to_string());
            }
            c.map(|currency| Entry::Currency {
                currency,
                path: value_path,
            })
        }
        "merchantMcc" | "mcc" => required_text(value, &value_path, errs)
            .and_then(|t| {
                field(
                    Mcc::parse(&t).ok_or("must be a 4-digit merchant category code"),
                    &value_path,
                    errs,
                )
            })
            .map(Entry::Mcc),
        "merchant" => match value {
            Some(Value::String(s)) => field(
                MerchantId::parse(s).ok_or(MERCHANT_ID_RULE),
                &value_path,
                errs,
            )
            .map(|id| Entry::Merchant {
                id,
                path: value_path,
            }),
            Some(_) => {
                errs.insert(value_path, "must be a string".to_string());
                None
            }
            None => {
                errs.insert(value_path, "is required".to_string());
                None
            }
        },
        "expirationDate" => parse_expiration(p, details, value, now, errs),
        "usageLimit" => parse_usage(p, details, value, errs),
        _ => None,
    };
    if errs.len() > before {
        None
    } else {
        entry
    }
}

/// Records `r`'s error at `path`.
fn field<T, E: ToString>(r: Result<T, E>, path: &str, errs: &mut FieldErrors) -> Option<T> {
    match r {
        Ok(t) => Some(t),
        Err(e) => {
            errs.insert(path.to_string(), e.to_string());
            None
        }
    }
}

/// A string, or a JSON number read from its text.
fn text(v: &Value) -> Result<String, &'static str> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err("must be a string"),
    }
}

fn required_text(v: Option<&Value>, path: &str, errs: &mut FieldErrors) -> Option<String> {
    match v {
        None => {
            errs.insert(path.to_string(), "is required".to_string());
            None
        }
        Some(v) => field(text(v), path, errs),
    }
}

fn parse_currency(v: &Value) -> Result<Currency, &'static str> {
    let code = match v {
        Value::String(s) => s.clone(),
        // A numeric code given as a JSON number: 840 → "840", 36 → "036".
        Value::Number(n) => match n.as_u64() {
            Some(n) if n <= 999 => format!("{n:03}"),
            _ => return Err("must be an ISO 4217 currency code such as \"840\" or \"USD\""),
        },
        _ => return Err("must be a string"),
    };
    Currency::parse(&code).ok_or("must be an ISO 4217 currency code such as \"840\" or \"USD\"")
}

/// A positive exact decimal: digits, optionally a point and more digits. No sign, exponent,
/// spaces or separators.
fn parse_amount(t: &str) -> Result<Decimal, &'static str> {
    const SHAPE: &str = "must be a positive decimal amount such as \"100.00\"";
    if t.len() > 40 {
        return Err("is too long");
    }
    let (int, frac) = match t.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (t, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !frac.is_none_or(digits) {
        return Err(SHAPE);
    }
    let d = Decimal::from_str_exact(t).map_err(|_| "is out of range")?;
    if d <= Decimal::ZERO {
        return Err("must be greater than zero");
    }
    Ok(d)
}

fn parse_count(v: &Value) -> Result<u32, String> {
    let t = text(v)?;
    if t.is_empty() || t.len() > 12 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err("must be a whole number of uses".to_string());
    }
    let n: u64 = t
        .parse()
        .map_err(|_| "must be a whole number of uses".to_string())?;
    if n < 1 {
        return Err("must be at least 1".to_string());
    }
    u32::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_USAGE_LIMIT)
        .ok_or_else(|| format!("must be at most {MAX_USAGE_LIMIT}"))
}

fn parse_usage(
    p: &str,
    details: &Map<String, Value>,
    value: Option<&Value>,
    errs: &mut FieldErrors,
) -> Option<Entry> {
    let count_path = format!("{p}.details.count");
    let value_path = format!("{p}.value");
    match details.get("count").filter(|v| !v.is_null()) {
        Some(c) => {
            let count = field(parse_count(c), &count_path, errs)?;
            if let Some(Ok(v)) = value.map(parse_count) {
                if v != count {
                    errs.insert(value_path, "does not match details.count".to_string());
                    return None;
                }
            }
            Some(Entry::UsageLimit {
                count,
                path: count_path,
            })
        }
        None => match value {
            None => {
                errs.insert(count_path, "is required".to_string());
                None
            }
            Some(v) => field(parse_count(v), &value_path, errs).map(|count| Entry::UsageLimit {
                count,
                path: value_path,
            }),
        },
    }
}

fn parse_expiration(
    p: &str,
    details: &Map<String, Value>,
    value: Option<&Value>,
    now: OffsetDateTime,
    errs: &mut FieldErrors,
) -> Option<Entry> {
    let mut found: Option<(OffsetDateTime, String)> = None;
    for key in ["date", "expirationTime"] {
        let Some(v) = details.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let path = format!("{p}.details.{key}");
        let at = field(parse_instant(v), &path, errs)?;
        match &found {
            None => found = Some((at, path)),
            Some((first, _)) if *first != at => {
                errs.insert(path, "does not match details.date".to_string());
                return None;
            }
            Some(_) => {}
        }
    }
    let value_path = format!("{p}.value");
    let (at, path) = match (found, value) {
        (Some((at, path)), v) => {
            // `value` may carry anything; when it is a date it must be the same date.
            if let Some(Ok(v)) = v.map(parse_instant) {
                if v != at {
                    let name = path
                        .strip_prefix(p)
                        .unwrap_or(&path)
                        .trim_start_matches('.');
                    errs.insert(value_path, format!("does not match {name}"));
                    return None;
                }
            }
            (at, path)
        }
        (None, Some(v)) => (field(parse_instant(v), &value_path, errs)?, value_path),
        (None, None) => {
            errs.insert(format!("{p}.details.date"), "is required".to_string());
            return None;
        }
    };
    if at <= now {
        errs.insert(path, "is in the past".to_string());
        return None;
    }
    Some(Entry::Expiration { at, path })
}

/// RFC 3339 date-time (any offset; normalised to UTC), a date-time without offset (read as
/// UTC), or a date `YYYY-MM-DD` (midnight UTC at the start of that day).
fn parse_instant(v: &Value) -> Result<OffsetDateTime, &'static str> {
    const SHAPE: &str =
        "must be an ISO 8601 date-time such as \"2026-12-01T00:00:00Z\" or a date such as \"2026-12-01\"";
    let Value::String(s) = v else {
        return Err(SHAPE);
    };
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t.to_offset(UtcOffset::UTC));
    }
    let naive = format_description!(
        version = 2,
        "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
    );
    if let Ok(t) = PrimitiveDateTime::parse(s, &naive) {
        return Ok(t.assume_utc());
    }
    let date_only = format_description!(version = 2, "[year]-[month]-[day]");
    if let Ok(d) = Date::parse(s, &date_only) {
        return Ok(d.midnight().assume_utc());
    }
    Err(SHAPE)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::tests::{
        cur, dec, exp, expiring, m, ma, max, mcc, mccs, merchant, usage, uses, NOW,
    };
    use super::super::Authorization;
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use time::macros::datetime;

    #[test]
    fn parse_accepts() {
        let d1201 = datetime!(2026-12-01 0:00 UTC);
        let twenty = Value::Array((0..20).map(|_| m("mcc", json!("5411"))).collect());
        let everything = json!([
            ma(json!("250.00"), json!("978")),
            {"type": "merchantMcc", "value": "5411"},
            {"type": "expirationDate", "value": "2026-12-01", "details": {"date": "2026-12-01T00:00:00Z"}},
            {"type": "usageLimit", "value": "3", "details": {"count": 3}},
            {"type": "currency", "value": "EUR"}
        ]);
        let all = Mandates {
            max_amount: Some(dec("250")),
            currency: cur("EUR"),
            mccs: vec![mcc("5411")],
            expires_at: Some(d1201),
            usage_limit: Some(3),
            merchant: None,
        };
        #[rustfmt::skip]
        let cases: Vec<(&str, Value, Mandates)> = vec![
            ("reference maxAmount, numeric currency", json!([ma(json!("100.00"), json!("840"))]), max("100.00", "USD")),
            ("reference maxAmount, alphabetic currency", json!([ma(json!("100.00"), json!("USD"))]), max("100", "USD")),
            ("lower-case currency", json!([ma(json!("5"), json!("eur"))]), max("5", "EUR")),
            ("numeric currency as JSON number", json!([ma(json!("5"), json!(978))]), max("5", "EUR")),
            ("numeric currency with leading zero", json!([ma(json!("5"), json!("036"))]), max("5", "AUD")),
            ("amount as JSON float", json!([ma(json!(100.5), json!("USD"))]), max("100.5", "USD")),
            ("amount as JSON integer", json!([ma(json!(100), json!("USD"))]), max("100", "USD")),
            ("trailing zeros beyond minor units", json!([ma(json!("1.100"), json!("USD"))]), max("1.1", "USD")),
            ("JPY whole amount", json!([ma(json!("1000"), json!("JPY"))]), max("1000", "JPY")),
            ("JPY with .0", json!([ma(json!("1000.0"), json!("392"))]), max("1000", "JPY")),
            ("BHD three places", json!([ma(json!("1.234"), json!("BHD"))]), max("1.234", "BHD")),
            ("smallest USD amount", json!([ma(json!("0.01"), json!("USD"))]), max("0.01", "USD")),
            ("guide form", json!([m("maxAmount", json!("100")), m("currency", json!("USD")), m("mcc", json!("5411"))]),
                Mandates { mccs: vec![mcc("5411")], ..max("100", "USD") }),
            ("guide currency before amount", json!([m("currency", json!("EUR")), m("maxAmount", json!("10.5"))]), max("10.5", "EUR")),
            ("840 and USD are the same currency", json!([ma(json!("100"), json!("840")), m("currency", json!("USD"))]), max("100", "USD")),
            ("exact duplicate maxAmount (100 = 100.00)", json!([ma(json!("100"), json!("USD")), ma(json!("100.00"), json!("840"))]), max("100", "USD")),
            ("maxAmount with null details takes a guide currency",
                json!([{"type": "maxAmount", "value": "7", "details": null}, m("currency", json!(840))]), max("7", "USD")),
            ("currency mandate alone", json!([m("currency", json!("gbp"))]), Mandates { currency: cur("GBP"), ..Mandates::default() }),
            ("merchantMcc", json!([m("merchantMcc", json!("5411"))]), mccs(&["5411"])),
            ("MCC with leading zero", json!([m("mcc", json!("0742"))]), mccs(&["0742"])),
            ("MCC as JSON number", json!([m("mcc", json!(5812))]), mccs(&["5812"])),
            ("MCC with empty details", json!([{"type": "mcc", "value": "5812", "details": {}}]), mccs(&["5812"])),
            ("several MCCs form a deduplicated allow-list",
                json!([m("merchantMcc", json!("5411")), m("mcc", json!("5812")), m("merchantMcc", json!("5411"))]), mccs(&["5411", "5812"])),
            ("expirationDate details.date", exp(json!({"date": "2026-12-01T00:00:00Z"})), expiring(d1201)),
            ("expirationTime synonym", exp(json!({"expirationTime": "2026-12-01T00:00:00Z"})), expiring(d1201)),
            ("date and expirationTime agree", exp(json!({"date": "2026-12-01", "expirationTime": "2026-12-01T00:00:00Z"})), expiring(d1201)),
            ("date-only is midnight UTC", exp(json!({"date": "2026-12-01"})), expiring(d1201)),
            ("offset normalised", exp(json!({"date": "2026-12-01T02:00:00+02:00"})), expiring(d1201)),
            ("fractional seconds", exp(json!({"date": "2026-12-01T00:00:00.500Z"})), expiring(datetime!(2026-12-01 0:00:00.5 UTC))),
            ("no offset read as UTC", exp(json!({"date": "2026-12-01T00:00:00"})), expiring(d1201)),
            ("date in value only", json!([m("expirationDate", json!("2026-12-01"))]), expiring(d1201)),
            ("non-date value ignored",
                json!([{"type": "expirationDate", "value": "end of year", "details": {"date": "2026-12-01"}}]), expiring(d1201)),
            ("value equal to details.date",
                json!([{"type": "expirationDate", "value": "2026-12-01T00:00:00Z", "details": {"date": "2026-12-01"}}]), expiring(d1201)),
            ("usageLimit reference form", json!([{"type": "usageLimit", "value": "3", "details": {"count": 3}}]), uses(3)),
            ("usageLimit non-numeric value ignored", json!([{"type": "usageLimit", "value": "x", "details": {"count": "2"}}]), uses(2)),
            ("usageLimit value only", json!([m("usageLimit", json!(5))]), uses(5)),
            ("usageLimit maximum", usage(json!({"count": 1_000_000})), uses(MAX_USAGE_LIMIT)),
            ("usageLimit exact duplicate", json!([m("usageLimit", json!("1")), {"type": "usageLimit", "details": {"count": 1}}]), uses(1)),
            ("twenty mandates", twenty, mccs(&["5411"])),
            ("every type at once", everything, all),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse_mandates(&input, NOW), Ok(want), "{name}");
        }
    }

    #[test]
    fn parse_rejects() {
        let twenty_one = Value::Array((0..21).map(|_| m("mcc", json!("5411"))).collect());
        #[rustfmt::skip]
        let cases: Vec<(&str, Value, &[&str])> = vec![
            ("absent", Value::Null, &["mandates"]),
            ("not an array", json!({"type": "mcc"}), &["mandates"]),
            ("empty", json!([]), &["mandates"]),
            ("21 mandates", twenty_one, &["mandates"]),
            ("entry not an object", json!(["maxAmount"]), &["mandates[0]"]),
            ("missing type", json!([{"value": "1"}]), &["mandates[0].type"]),
            ("type not a string", json!([{"type": 1, "value": "1"}]), &["mandates[0].type"]),
            ("unknown type", json!([m("mcc", json!("5411")), m("minAmount", json!("1"))]), &["mandates[1].type"]),
            ("type is case-sensitive", json!([m("MaxAmount", json!("1"))]), &["mandates[0].type"]),
            ("unknown field", json!([{"type": "mcc", "value": "5411", "limit": 1}]), &["mandates[0].limit"]),
            ("unknown details field", json!([{"type": "maxAmount", "value": "1", "details": {"currency": "USD", "limit": 1}}]), &["mandates[0].details.limit"]),
            ("details on a guide mcc", json!([{"type": "mcc", "value": "5411", "details": {"currency": "USD"}}]), &["mandates[0].details.currency"]),
            ("details not an object", json!([{"type": "maxAmount", "value": "1", "details": "USD"}]), &["mandates[0].details"]),
            ("maxAmount without value", json!([{"type": "maxAmount", "details": {"currency": "USD"}}]), &["mandates[0].value"]),
            ("maxAmount without any currency", json!([m("maxAmount", json!("100"))]), &["mandates[0].details.currency"]),
            ("guide maxAmount without currency", json!([m("mcc", json!("5411")), m("maxAmount", json!("100"))]), &["mandates[1].details.currency"]),
            ("unknown alphabetic currency", json!([ma(json!("1"), json!("XYZ"))]), &["mandates[0].details.currency"]),
            ("unknown numeric currency", json!([ma(json!("1"), json!("999"))]), &["mandates[0].details.currency"]),
            ("two-digit numeric currency", json!([ma(json!("1"), json!("84"))]), &["mandates[0].details.currency"]),
            ("gold is not a card currency", json!([ma(json!("1"), json!("XAU"))]), &["mandates[0].details.currency"]),
            ("currency not a string", json!([ma(json!("1"), json!(["USD"]))]), &["mandates[0].details.currency"]),
            ("negative amount", json!([ma(json!("-5"), json!("USD"))]), &["mandates[0].value"]),
            ("negative JSON amount", json!([ma(json!(-5), json!("USD"))]), &["mandates[0].value"]),
            ("zero amount", json!([ma(json!("0.00"), json!("USD"))]), &["mandates[0].value"]),
            ("exponent", json!([ma(json!("1e3"), json!("USD"))]), &["mandates[0].value"]),
            ("leading space", json!([ma(json!(" 100"), json!("USD"))]), &["mandates[0].value"]),
            ("thousands separator", json!([ma(json!("1,000"), json!("USD"))]), &["mandates[0].value"]),
            ("trailing point", json!([ma(json!("100."), json!("USD"))]), &["mandates[0].value"]),
            ("leading point", json!([ma(json!(".5"), json!("USD"))]), &["mandates[0].value"]),
            ("plus sign", json!([ma(json!("+5"), json!("USD"))]), &["mandates[0].value"]),
            ("amount a bool", json!([ma(json!(true), json!("USD"))]), &["mandates[0].value"]),
            ("amount out of range", json!([ma(json!("99999999999999999999999999999999"), json!("USD"))]), &["mandates[0].value"]),
            ("three places in USD", json!([ma(json!("10.001"), json!("USD"))]), &["mandates[0].value"]),
            ("JSON float with three places", json!([ma(json!(10.005), json!("840"))]), &["mandates[0].value"]),
            ("decimals in JPY", json!([ma(json!("100.5"), json!("JPY"))]), &["mandates[0].value"]),
            ("four places in BHD", json!([ma(json!("1.2345"), json!("BHD"))]), &["mandates[0].value"]),
            ("later guide currency sets the scale", json!([m("maxAmount", json!("1.5")), m("currency", json!("JPY"))]), &["mandates[0].value"]),
            ("conflicting amounts", json!([ma(json!("100"), json!("USD")), ma(json!("200"), json!("USD"))]), &["mandates[1].value"]),
            ("conflicting detail currencies", json!([ma(json!("100"), json!("USD")), ma(json!("100"), json!("EUR"))]), &["mandates[1].details.currency"]),
            ("conflicting guide currency", json!([ma(json!("100"), json!("840")), m("currency", json!("EUR"))]), &["mandates[1].value"]),
            ("bad guide currency is the only error", json!([m("maxAmount", json!("1")), m("currency", json!("EURO"))]), &["mandates[1].value"]),
            ("two guide currencies", json!([m("currency", json!("978")), m("currency", json!("usd"))]), &["mandates[1].value"]),
            ("currency mandate without value", json!([{"type": "currency"}]), &["mandates[0].value"]),
            ("MCC of 3 digits", json!([m("merchantMcc", json!("541"))]), &["mandates[0].value"]),
            ("MCC of 5 digits", json!([m("mcc", json!("54111"))]), &["mandates[0].value"]),
            ("MCC with a letter", json!([m("mcc", json!("54a1"))]), &["mandates[0].value"]),
            ("MCC number that lost its zero", json!([m("mcc", json!(742))]), &["mandates[0].value"]),
            ("MCC missing", json!([{"type": "merchantMcc"}]), &["mandates[0].value"]),
            ("expiration in the past", exp(json!({"date": "2026-01-01T00:00:00Z"})), &["mandates[0].details.date"]),
            ("expiration exactly now", exp(json!({"date": "2026-06-01T12:00:00Z"})), &["mandates[0].details.date"]),
            ("past date in value", json!([m("expirationDate", json!("2020-01-01"))]), &["mandates[0].value"]),
            ("expiration not ISO 8601", exp(json!({"date": "12/2026"})), &["mandates[0].details.date"]),
            ("expiration as epoch number", exp(json!({"date": 1_796_083_200})), &["mandates[0].details.date"]),
            ("expiration impossible day", exp(json!({"date": "2026-02-30"})), &["mandates[0].details.date"]),
            ("expiration missing", json!([{"type": "expirationDate"}]), &["mandates[0].details.date"]),
            ("expirationTime differs from date", exp(json!({"date": "2026-12-01", "expirationTime": "2026-12-02"})), &["mandates[0].details.expirationTime"]),
            ("value date differs from details.date",
                json!([{"type": "expirationDate", "value": "2026-12-02", "details": {"date": "2026-12-01"}}]), &["mandates[0].value"]),
            ("conflicting expiration dates", json!([m("expirationDate", json!("2026-12-01")), m("expirationDate", json!("2026-12-02"))]), &["mandates[1].value"]),
            ("usage count zero", usage(json!({"count": 0})), &["mandates[0].details.count"]),
            ("usage count too big", usage(json!({"count": 1_000_001})), &["mandates[0].details.count"]),
            ("usage count negative", usage(json!({"count": -1})), &["mandates[0].details.count"]),
            ("usage count fractional", usage(json!({"count": 2.5})), &["mandates[0].details.count"]),
            ("usage count huge", usage(json!({"count": "99999999999999999999"})), &["mandates[0].details.count"]),
            ("usage count a bool", usage(json!({"count": true})), &["mandates[0].details.count"]),
            ("usage missing", json!([{"type": "usageLimit"}]), &["mandates[0].details.count"]),
            ("usage value disagrees with count", json!([{"type": "usageLimit", "value": "4", "details": {"count": 3}}]), &["mandates[0].value"]),
            ("usage value not a number", json!([m("usageLimit", json!("three"))]), &["mandates[0].value"]),
            ("conflicting usage limits", json!([m("usageLimit", json!(2)), {"type": "usageLimit", "details": {"count": 3}}]), &["mandates[1].details.count"]),
            ("every bad entry is reported", json!([{"type": "x"}, m("mcc", json!("1")), m("usageLimit", json!(0))]),
                &["mandates[0].type", "mandates[1].value", "mandates[2].value"]),
        ];
        for (name, input, want) in cases {
            let errs = parse_mandates(&input, NOW).expect_err(name);
            let got: Vec<&str> = errs.keys().map(String::as_str).collect();
            assert_eq!(got, want, "{name}: {errs:?}");
            assert!(errs.values().all(|m| !m.is_empty()), "{name}");
        }
    }

    #[test]
    fn merchant_mandate() {
        let bound = |id: &str, rest: Mandates| Mandates {
            merchant: Some(merchant(id)),
            ..rest
        };
        #[rustfmt::skip]
        let accepted: Vec<(&str, Value, Mandates)> = vec![
            ("alone", json!([m("merchant", json!("acme"))]), bound("acme", Mandates::default())),
            ("with null details", json!([{"type": "merchant", "value": "acme", "details": null}]),
                bound("acme", Mandates::default())),
            ("punctuation kept as given", json!([m("merchant", json!("Acme-Corp_1/EU:x"))]),
                bound("Acme-Corp_1/EU:x", Mandates::default())),
            ("with other limits", json!([m("usageLimit", json!(1)), m("merchant", json!("acme"))]),
                bound("acme", uses(1))),
        ];
        for (name, input, want) in accepted {
            assert_eq!(parse_mandates(&input, NOW), Ok(want), "{name}");
        }
        let long = "m".repeat(257);
        #[rustfmt::skip]
        let rejected: Vec<(&str, Value, &str)> = vec![
            ("missing", json!([{"type": "merchant"}]), "mandates[0].value"),
            ("empty", json!([m("merchant", json!(""))]), "mandates[0].value"),
            ("whitespace", json!([m("merchant", json!("ac me"))]), "mandates[0].value"),
            ("not ASCII", json!([m("merchant", json!("caf\u{e9}"))]), "mandates[0].value"),
            ("too long", json!([m("merchant", json!(long))]), "mandates[0].value"),
            ("a number", json!([m("merchant", json!(42))]), "mandates[0].value"),
            ("details", json!([{"type": "merchant", "value": "acme", "details": {"id": "x"}}]),
                "mandates[0].details.id"),
            ("a second, the same", json!([m("merchant", json!("acme")), m("merchant", json!("acme"))]),
                "mandates[1].value"),
            ("a second, another", json!([m("merchant", json!("acme")), m("mcc", json!("5411")),
                m("merchant", json!("globex"))]), "mandates[2].value"),
        ];
        for (name, input, path) in rejected {
            let errs = parse_mandates(&input, NOW).expect_err(name);
            let got: Vec<&str> = errs.keys().map(String::as_str).collect();
            assert_eq!(got, [path], "{name}: {errs:?}");
        }
        let e = parse_mandates(
            &json!([m("merchant", json!("a")), m("merchant", json!("b"))]),
            NOW,
        )
        .unwrap_err();
        assert_eq!(
            e["mandates[1].value"],
            "only one merchant mandate is allowed (one is at mandates[0].value)"
        );
        let e = parse_mandates(&json!([m("merchant", json!("a b"))]), NOW).unwrap_err();
        assert_eq!(e["mandates[0].value"], MERCHANT_ID_RULE);
    }

    #[test]
    fn error_messages_name_the_problem() {
        let e = parse_mandates(&json!([ma(json!("1.5"), json!("JPY"))]), NOW).unwrap_err();
        assert_eq!(e["mandates[0].value"], "JPY amounts have no decimal places");
        let e = parse_mandates(&json!([ma(json!("1.555"), json!("USD"))]), NOW).unwrap_err();
        assert_eq!(
            e["mandates[0].value"],
            "USD amounts have at most 2 decimal places"
        );
        let two = json!([ma(json!("1"), json!("USD")), ma(json!("1"), json!("EUR"))]);
        let e = parse_mandates(&two, NOW).unwrap_err();
        assert_eq!(
            e["mandates[1].details.currency"],
            "conflicts with currency USD at mandates[0].details.currency"
        );
        let e = parse_mandates(&json!([m("nope", json!("1"))]), NOW).unwrap_err();
        assert!(e["mandates[0].type"].contains("maxAmount"));
        let e = parse_mandates(&json!([m("maxAmount", json!("1"))]), NOW).unwrap_err();
        assert!(e["mandates[0].details.currency"].contains("currency mandate"));
    }

    fn leaf() -> impl Strategy<Value = Value> {
        #[rustfmt::skip]
        let interesting = vec![
            "maxAmount", "currency", "mcc", "merchantMcc", "expirationDate", "usageLimit",
            "840", "USD", "usd", "JPY", "BHD", "000", "5411", "0742", "100.00", "0.001",
            "1e5", "-1", "3", "0", "1000001", "2030-01-01", "2030-01-01T00:00:00Z",
            "2020-01-01", "9999-12-31T23:59:59Z", "", ".", "1.", "99999999999999999999999999999",
        ];
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            prop::sample::select(interesting).prop_map(|s| json!(s)),
            ".{0,12}".prop_map(Value::String),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        let known = vec![
            "type",
            "value",
            "details",
            "currency",
            "date",
            "expirationTime",
            "count",
        ];
        prop_oneof![
            prop::sample::select(known).prop_map(String::from),
            "[a-zA-Z.\\[\\]]{0,6}",
        ]
    }

    fn json_ish() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Mandate-shaped entries, so that generated input gets past the first checks.
    fn mandate_ish() -> impl Strategy<Value = Value> {
        let ty = prop::sample::select(vec![
            "maxAmount",
            "currency",
            "mcc",
            "merchantMcc",
            "expirationDate",
            "usageLimit",
            "merchant",
            "other",
        ]);
        let detail_key = prop::sample::select(vec!["currency", "date", "expirationTime", "count"]);
        let details = prop::collection::vec((detail_key, leaf()), 0..3).prop_map(|kv| {
            Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        });
        (ty, leaf(), prop::option::of(details)).prop_map(|(t, v, d)| {
            let mut o = Map::new();
            o.insert("type".into(), json!(t));
            o.insert("value".into(), v);
            if let Some(d) = d {
                o.insert("details".into(), d);
            }
            Value::Object(o)
        })
    }

    fn check_outcome(r: &Result<Mandates, FieldErrors>, amount: u32, code: &str) {
        match r {
            Ok(mandates) => {
                let json = serde_json::to_value(mandates).unwrap();
                let back: Mandates = serde_json::from_value(json).unwrap();
                assert_eq!(&back, mandates);
                assert!(mandates.max_amount.is_none() || mandates.currency.is_some());
                assert!(mandates.expires_at.is_none_or(|at| at > NOW));
                let a = Authorization {
                    amount: Decimal::from(amount),
                    currency: Currency::parse(code).unwrap(),
                    mcc: Mcc::parse("5411"),
                    merchant: MerchantId::parse("acme"),
                };
                let _ = mandates.check(&a, NOW, amount % 5);
            }
            Err(e) => {
                assert!(!e.is_empty());
                assert!(e.keys().all(|k| k.starts_with("mandates")));
            }
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics_on_any_json(v in json_ish(), amount in any::<u32>()) {
            check_outcome(&parse_mandates(&v, NOW), amount, "USD");
        }

        #[test]
        fn parse_never_panics_on_mandate_lists(
            v in prop::collection::vec(mandate_ish(), 0..6),
            amount in any::<u32>(),
        ) {
            check_outcome(&parse_mandates(&Value::Array(v), NOW), amount, "JPY");
        }
    }
}
