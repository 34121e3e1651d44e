//! Mandates: the limits a purchase intent's credential is bound by, parsed from either form
//! of the specification into one [`Mandates`] value, and enforced by [`Mandates::check`].
//!
//! Two request forms are accepted, the endpoint reference's and the checkout guides', and may be
//! mixed in one list (docs/sandbox.md, "Mandates", shows both):
//!
//! | type             | form      | value                  | details                                   |
//! |------------------|-----------|------------------------|-------------------------------------------|
//! | `maxAmount`      | both      | decimal amount         | `currency` (ISO 4217, `"840"` or `"USD"`) |
//! | `currency`       | guide     | ISO 4217 code          | none                                      |
//! | `merchantMcc`    | reference | 4-digit MCC            | none                                      |
//! | `mcc`            | guide     | 4-digit MCC            | none                                      |
//! | `expirationDate` | reference | (optional, see below)  | `date` (synonym: `expirationTime`)        |
//! | `usageLimit`     | reference | (optional, see below)  | `count`: integer 1..=1 000 000            |
//! | `merchant`       | both      | merchant id            | none                                      |
//!
//! Decisions where the specification is silent:
//!
//! - Amounts are exact decimals. A JSON number is read from its text (`100.5` is `100.5`),
//!   never through a float computation. An amount must be > 0 and must fit the currency's
//!   ISO 4217 minor units once trailing zeros are dropped (`"100.10"` is fine for USD,
//!   `"100.001"` is not; `"1000"` and `"1000.0"` are fine for JPY, `"1000.5"` is not).
//! - `maxAmount` needs a currency: `details.currency`, or a `currency` mandate in the same list.
//! - Several `merchantMcc` / `mcc` mandates form an allow-list: the credential may be used at
//!   any of the listed categories.
//! - A date-only `expirationDate` (`"2026-12-01"`) means midnight UTC at the *start* of that day,
//!   the same instant as `"2026-12-01T00:00:00Z"`. A date-time without an offset is read as UTC.
//!   If `details.date` / `details.expirationTime` are absent, `value` is read as the date; when
//!   both are present and `value` is a date, they must agree.
//! - `usageLimit` reads `details.count`; when it is absent, a whole-number `value` is accepted.
//!   When both are present and `value` is a whole number, they must agree.
//! - `merchant` binds the credential to one merchant: its id (1 to 256 printable ASCII
//!   characters, no whitespace, compared exactly), which a project's `merchants` config maps
//!   to the hosts the proxy may send the credential to. At most one per intent; a second is
//!   an error even when it names the same merchant.
//! - Duplicates with the same meaning are fine (`"840"` and `"USD"` are the same currency,
//!   `"100"` and `"100.00"` the same amount); duplicates that disagree are an error at the later
//!   entry.
//! - Unknown keys in a mandate or in its `details` are an error, so that a typo cannot silently
//!   drop a limit.
//!
//! The module's parts: parsing both forms into [`Mandates`] (`parse`), the ISO 4217 table
//! behind [`Currency`] (`currency`), and enforcement: [`Mandates::check`] of an
//! [`Authorization`], the [`DeclineReason`]s and the credential's expiry (`enforce`).

mod currency;
mod enforce;
mod parse;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;

pub use currency::{Currency, UnknownCurrency};
pub use enforce::{Authorization, DeclineReason};
pub use parse::parse_mandates;

/// Field path (`mandates[1].details.currency`) → message, as rendered in `details.fields`.
pub type FieldErrors = BTreeMap<String, String>;

/// Most mandates one purchase intent may carry.
pub const MAX_MANDATES: usize = 20;

/// Largest accepted `usageLimit` count.
pub const MAX_USAGE_LIMIT: u32 = 1_000_000;

/// The normalised limits of one purchase intent. Stored as JSON with the intent
/// (`{"maxAmount":"100.00","currency":"USD","mccs":["5411"],"expiresAt":"...","usageLimit":3,
/// "merchant":"acme"}`, `merchant` only when bound; unknown keys are ignored so that a
/// rollback can read what a newer version stored).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mandates {
    /// Largest amount of one authorization, in `currency`.
    #[serde(default)]
    pub max_amount: Option<Decimal>,
    /// The only currency an authorization may use.
    #[serde(default)]
    pub currency: Option<Currency>,
    /// Allowed merchant category codes; empty means any.
    #[serde(default)]
    pub mccs: Vec<Mcc>,
    /// Instant after which the credential is no longer usable.
    #[serde(default, with = "rfc3339_opt")]
    pub expires_at: Option<OffsetDateTime>,
    /// Number of approved uses allowed.
    #[serde(default)]
    pub usage_limit: Option<u32>,
    /// The one merchant the credential may be used at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merchant: Option<MerchantId>,
}

/// A merchant id of a `merchant` mandate: 1 to [`MerchantId::MAX_LEN`] printable ASCII
/// characters, no whitespace. Serialised as the string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MerchantId(String);

impl MerchantId {
    /// Longest merchant id (ACP's `allowance.merchant_id` is at most as long).
    pub const MAX_LEN: usize = 256;

    /// `"acme"` → `Some`; empty, too long, whitespace or anything but printable ASCII → `None`.
    pub fn parse(s: &str) -> Option<MerchantId> {
        let ok = (1..=Self::MAX_LEN).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| MerchantId(s.to_string()))
    }

    /// The id as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MerchantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for MerchantId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MerchantId::parse(&s).ok_or_else(|| serde::de::Error::custom(MERCHANT_ID_RULE))
    }
}

/// What a merchant id must be, as errors say it.
pub const MERCHANT_ID_RULE: &str =
    "must be a merchant id: 1 to 256 printable ASCII characters, no whitespace";

/// A merchant category code (ISO 18245): exactly four digits. Serialised as the 4-digit string.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mcc(u16);

impl Mcc {
    /// `"5411"` → `Some`; anything but exactly four ASCII digits → `None`.
    pub fn parse(s: &str) -> Option<Mcc> {
        if s.len() == 4 && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse().ok().map(Mcc)
        } else {
            None
        }
    }

    /// The code as a number (`742` for `"0742"`).
    pub fn code(self) -> u16 {
        self.0
    }
}

impl fmt::Debug for Mcc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mcc({:04})", self.0)
    }
}

impl fmt::Display for Mcc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}", self.0)
    }
}

/// Not a 4-digit merchant category code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a merchant category code is exactly 4 digits")]
pub struct InvalidMcc;

impl FromStr for Mcc {
    type Err = InvalidMcc;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mcc::parse(s).ok_or(InvalidMcc)
    }
}

impl Serialize for Mcc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mcc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Mcc::parse(&s).ok_or_else(|| serde::de::Error::custom("an MCC is exactly 4 digits"))
    }
}

mod rfc3339_opt {
    //! `Option<OffsetDateTime>` as an RFC 3339 string (time's own serde feature is not enabled).
    use serde::{Deserialize, Deserializer, Serializer};
    use time::format_description::well_known::Rfc3339;
    use time::OffsetDateTime;

    pub fn serialize<S: Serializer>(v: &Option<OffsetDateTime>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(t) => {
                let text = t.format(&Rfc3339).map_err(serde::ser::Error::custom)?;
                s.serialize_some(&text)
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<OffsetDateTime>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| OffsetDateTime::parse(&t, &Rfc3339).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    //! Fixtures the tests of every part share, and the tests of the types here.

    use super::*;
    use serde_json::{json, Value};
    use time::macros::datetime;

    pub(super) const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);

    pub(super) fn dec(s: &str) -> Decimal {
        Decimal::from_str_exact(s).unwrap()
    }
    pub(super) fn cur(s: &str) -> Option<Currency> {
        Some(Currency::parse(s).unwrap())
    }
    pub(super) fn mcc(s: &str) -> Mcc {
        Mcc::parse(s).unwrap()
    }
    pub(super) fn max(amount: &str, currency: &str) -> Mandates {
        Mandates {
            max_amount: Some(dec(amount)),
            currency: cur(currency),
            ..Mandates::default()
        }
    }
    pub(super) fn mccs(codes: &[&str]) -> Mandates {
        Mandates {
            mccs: codes.iter().map(|c| mcc(c)).collect(),
            ..Mandates::default()
        }
    }
    pub(super) fn expiring(at: OffsetDateTime) -> Mandates {
        Mandates {
            expires_at: Some(at),
            ..Mandates::default()
        }
    }
    pub(super) fn merchant(id: &str) -> MerchantId {
        MerchantId::parse(id).unwrap()
    }
    pub(super) fn uses(n: u32) -> Mandates {
        Mandates {
            usage_limit: Some(n),
            ..Mandates::default()
        }
    }
    /// A reference-form maxAmount.
    pub(super) fn ma(value: Value, currency: Value) -> Value {
        json!({"type": "maxAmount", "value": value, "details": {"currency": currency}})
    }
    /// A mandate without details.
    pub(super) fn m(t: &str, v: Value) -> Value {
        json!({"type": t, "value": v})
    }
    /// A reference-form expirationDate.
    pub(super) fn exp(details: Value) -> Value {
        json!([{"type": "expirationDate", "value": "", "details": details}])
    }
    pub(super) fn usage(details: Value) -> Value {
        json!([{"type": "usageLimit", "details": details}])
    }

    #[test]
    fn mcc_parse() {
        assert_eq!(mcc("0742").to_string(), "0742");
        assert_eq!(mcc("0742").code(), 742);
        for bad in ["742", "07421", "", "54 1", "-541", "+541", "٥٤١١"] {
            assert_eq!(Mcc::parse(bad), None, "{bad}");
        }
        assert_eq!("5411".parse::<Mcc>(), Ok(mcc("5411")));
    }

    #[test]
    fn mandates_json_round_trip() {
        let full = Mandates {
            max_amount: Some(dec("100.00")),
            currency: cur("840"),
            mccs: vec![mcc("0742")],
            expires_at: Some(datetime!(2026-12-01 0:00 UTC)),
            usage_limit: Some(3),
            merchant: None,
        };
        let v = serde_json::to_value(&full).unwrap();
        assert_eq!(
            v,
            json!({"maxAmount": "100.00", "currency": "USD", "mccs": ["0742"],
                "expiresAt": "2026-12-01T00:00:00Z", "usageLimit": 3})
        );
        assert_eq!(serde_json::from_value::<Mandates>(v).unwrap(), full);
        let empty = serde_json::to_value(Mandates::default()).unwrap();
        assert_eq!(
            serde_json::from_value::<Mandates>(empty).unwrap(),
            Mandates::default()
        );
        assert_eq!(
            serde_json::from_value::<Mandates>(json!({})).unwrap(),
            Mandates::default()
        );
        assert!(serde_json::from_value::<Mandates>(json!({"currency": "ZZZ"})).is_err());
        assert!(serde_json::from_value::<Mandates>(json!({"mccs": ["541"]})).is_err());
    }

    #[test]
    fn merchant_id_parse() {
        assert_eq!(merchant("acme").as_str(), "acme");
        assert!(MerchantId::parse(&"m".repeat(256)).is_some());
        for bad in [
            "",
            " acme",
            "ac me",
            "acme\n",
            "acme\t",
            "caf\u{e9}",
            "\u{7f}",
        ] {
            assert_eq!(MerchantId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(MerchantId::parse(&"m".repeat(257)), None);
    }

    #[test]
    fn a_merchant_is_stored_and_read_back() {
        let bound = Mandates {
            usage_limit: Some(1),
            merchant: Some(merchant("acme")),
            ..Mandates::default()
        };
        let v = serde_json::to_value(&bound).unwrap();
        assert_eq!(v["merchant"], "acme");
        assert_eq!(serde_json::from_value::<Mandates>(v).unwrap(), bound);
        // Unbound: no key at all, and a record without it reads as unbound.
        let v = serde_json::to_value(Mandates::default()).unwrap();
        assert!(v.get("merchant").is_none(), "{v}");
        let old = json!({"maxAmount": "1", "currency": "USD", "usageLimit": 1});
        assert_eq!(
            serde_json::from_value::<Mandates>(old).unwrap().merchant,
            None
        );
        assert!(serde_json::from_value::<Mandates>(json!({"merchant": "a b"})).is_err());
    }
}
