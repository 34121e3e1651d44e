//! Mandates: the limits a purchase intent's credential is bound by, parsed from either form
//! of the specification into one [`Mandates`] value, and enforced by [`Mandates::check`].
//!
//! Two request forms are accepted (spec §2.3, DESIGN.md §5) and may be mixed in one list:
//!
//! | type             | form      | value                  | details                                   |
//! |------------------|-----------|------------------------|-------------------------------------------|
//! | `maxAmount`      | both      | decimal amount         | `currency` (ISO 4217, `"840"` or `"USD"`) |
//! | `currency`       | guide     | ISO 4217 code          | none                                      |
//! | `merchantMcc`    | reference | 4-digit MCC            | none                                      |
//! | `mcc`            | guide     | 4-digit MCC            | none                                      |
//! | `expirationDate` | reference | (optional, see below)  | `date` (synonym: `expirationTime`)        |
//! | `usageLimit`     | reference | (optional, see below)  | `count`: integer 1..=1 000 000            |
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
//! - Duplicates with the same meaning are fine (`"840"` and `"USD"` are the same currency,
//!   `"100"` and `"100.00"` the same amount); duplicates that disagree are an error at the later
//!   entry.
//! - Unknown keys in a mandate or in its `details` are an error, so that a typo cannot silently
//!   drop a limit.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Date, Duration, OffsetDateTime, PrimitiveDateTime, UtcOffset};

/// Field path (`mandates[1].details.currency`) → message, as rendered in `details.fields`.
pub type FieldErrors = BTreeMap<String, String>;

/// Most mandates one purchase intent may carry.
pub const MAX_MANDATES: usize = 20;

/// Largest accepted `usageLimit` count.
pub const MAX_USAGE_LIMIT: u32 = 1_000_000;

/// The normalised limits of one purchase intent. Stored as JSON with the intent
/// (`{"maxAmount":"100.00","currency":"USD","mccs":["5411"],"expiresAt":"...","usageLimit":3}`;
/// unknown keys are ignored so that a rollback can read what a newer version stored).
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
}

/// One authorization attempt, as the sandbox authorization endpoint receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Amount to authorize, in `currency`.
    pub amount: Decimal,
    /// Currency of `amount`.
    pub currency: Currency,
    /// Merchant category code of the merchant, when known.
    pub mcc: Option<Mcc>,
}

/// Why an authorization was declined. Serialised as the camelCase name (`amountOverMaximum`).
///
/// [`Mandates::check`] gives the first five; the others are for the authorization endpoint
/// (intent not active, wrong cvc or cryptogram, unknown card).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeclineReason {
    /// The amount is above the `maxAmount` mandate.
    AmountOverMaximum,
    /// The currency is not the mandate's currency.
    CurrencyMismatch,
    /// The merchant category is not among the allowed MCCs (or was not given).
    MccNotAllowed,
    /// The credential is past its expiry.
    Expired,
    /// The usage limit is used up.
    UsageLimitReached,
    /// The purchase intent is not `active` (still `verify`, canceled, unavailable).
    NotActive,
    /// The cvc does not match the credential.
    InvalidCvc,
    /// The network-token cryptogram does not match the purchase intent.
    InvalidCryptogram,
    /// Number or expiry match no credential.
    InvalidCard,
}

impl DeclineReason {
    /// Every reason, in declaration order.
    pub const ALL: [DeclineReason; 9] = [
        DeclineReason::AmountOverMaximum,
        DeclineReason::CurrencyMismatch,
        DeclineReason::MccNotAllowed,
        DeclineReason::Expired,
        DeclineReason::UsageLimitReached,
        DeclineReason::NotActive,
        DeclineReason::InvalidCvc,
        DeclineReason::InvalidCryptogram,
        DeclineReason::InvalidCard,
    ];

    /// The wire name, e.g. `amountOverMaximum`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeclineReason::AmountOverMaximum => "amountOverMaximum",
            DeclineReason::CurrencyMismatch => "currencyMismatch",
            DeclineReason::MccNotAllowed => "mccNotAllowed",
            DeclineReason::Expired => "expired",
            DeclineReason::UsageLimitReached => "usageLimitReached",
            DeclineReason::NotActive => "notActive",
            DeclineReason::InvalidCvc => "invalidCvc",
            DeclineReason::InvalidCryptogram => "invalidCryptogram",
            DeclineReason::InvalidCard => "invalidCard",
        }
    }
}

impl fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Mandates {
    /// Checks one authorization against the mandates. `uses_so_far` counts the approved uses
    /// before this one. The first failing rule wins, in this order: expiry, usage limit,
    /// currency, amount, MCC.
    ///
    /// The amount's sign and scale are the caller's to validate; this only compares.
    pub fn check(
        &self,
        a: &Authorization,
        now: OffsetDateTime,
        uses_so_far: u32,
    ) -> Result<(), DeclineReason> {
        if let Some(at) = self.expires_at {
            if now >= at {
                return Err(DeclineReason::Expired);
            }
        }
        if let Some(limit) = self.usage_limit {
            if uses_so_far >= limit {
                return Err(DeclineReason::UsageLimitReached);
            }
        }
        if let Some(currency) = self.currency {
            if a.currency != currency {
                return Err(DeclineReason::CurrencyMismatch);
            }
        }
        if let Some(max) = self.max_amount {
            if a.amount > max {
                return Err(DeclineReason::AmountOverMaximum);
            }
        }
        if !self.mccs.is_empty() {
            match a.mcc {
                Some(mcc) if self.mccs.contains(&mcc) => {}
                _ => return Err(DeclineReason::MccNotAllowed),
            }
        }
        Ok(())
    }

    /// The credential's `expiresAt`: `created_at + default_lifetime` (24 h per DESIGN.md §4),
    /// or the `expirationDate` mandate when that is sooner.
    pub fn credential_expires_at(
        &self,
        created_at: OffsetDateTime,
        default_lifetime: Duration,
    ) -> OffsetDateTime {
        let default = created_at.saturating_add(default_lifetime);
        match self.expires_at {
            Some(at) if at < default => at,
            _ => default,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Currency
// ---------------------------------------------------------------------------------------------

/// One row of the ISO 4217 table.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrencyRow {
    alpha: &'static str,
    numeric: u16,
    minor_units: u8,
}

const fn row(alpha: &'static str, numeric: u16, minor_units: u8) -> CurrencyRow {
    CurrencyRow {
        alpha,
        numeric,
        minor_units,
    }
}

/// Active ISO 4217 currencies (list one), sorted by alphabetic code.
///
/// Left out: units that no card authorization is made in (precious metals XAU XAG XPD XPT,
/// bond-market units XBA–XBD, XDR, XSU, XUA, XAD, test code XTS, no-currency XXX) and
/// ANG, withdrawn in 2025 in favour of XCG, which took its numeric code 532.
const CURRENCIES: &[CurrencyRow] = &[
    row("AED", 784, 2),
    row("AFN", 971, 2),
    row("ALL", 8, 2),
    row("AMD", 51, 2),
    row("AOA", 973, 2),
    row("ARS", 32, 2),
    row("AUD", 36, 2),
    row("AWG", 533, 2),
    row("AZN", 944, 2),
    row("BAM", 977, 2),
    row("BBD", 52, 2),
    row("BDT", 50, 2),
    row("BGN", 975, 2),
    row("BHD", 48, 3),
    row("BIF", 108, 0),
    row("BMD", 60, 2),
    row("BND", 96, 2),
    row("BOB", 68, 2),
    row("BOV", 984, 2),
    row("BRL", 986, 2),
    row("BSD", 44, 2),
    row("BTN", 64, 2),
    row("BWP", 72, 2),
    row("BYN", 933, 2),
    row("BZD", 84, 2),
    row("CAD", 124, 2),
    row("CDF", 976, 2),
    row("CHE", 947, 2),
    row("CHF", 756, 2),
    row("CHW", 948, 2),
    row("CLF", 990, 4),
    row("CLP", 152, 0),
    row("CNY", 156, 2),
    row("COP", 170, 2),
    row("COU", 970, 2),
    row("CRC", 188, 2),
    row("CUC", 931, 2),
    row("CUP", 192, 2),
    row("CVE", 132, 2),
    row("CZK", 203, 2),
    row("DJF", 262, 0),
    row("DKK", 208, 2),
    row("DOP", 214, 2),
    row("DZD", 12, 2),
    row("EGP", 818, 2),
    row("ERN", 232, 2),
    row("ETB", 230, 2),
    row("EUR", 978, 2),
    row("FJD", 242, 2),
    row("FKP", 238, 2),
    row("GBP", 826, 2),
    row("GEL", 981, 2),
    row("GHS", 936, 2),
    row("GIP", 292, 2),
    row("GMD", 270, 2),
    row("GNF", 324, 0),
    row("GTQ", 320, 2),
    row("GYD", 328, 2),
    row("HKD", 344, 2),
    row("HNL", 340, 2),
    row("HTG", 332, 2),
    row("HUF", 348, 2),
    row("IDR", 360, 2),
    row("ILS", 376, 2),
    row("INR", 356, 2),
    row("IQD", 368, 3),
    row("IRR", 364, 2),
    row("ISK", 352, 0),
    row("JMD", 388, 2),
    row("JOD", 400, 3),
    row("JPY", 392, 0),
    row("KES", 404, 2),
    row("KGS", 417, 2),
    row("KHR", 116, 2),
    row("KMF", 174, 0),
    row("KPW", 408, 2),
    row("KRW", 410, 0),
    row("KWD", 414, 3),
    row("KYD", 136, 2),
    row("KZT", 398, 2),
    row("LAK", 418, 2),
    row("LBP", 422, 2),
    row("LKR", 144, 2),
    row("LRD", 430, 2),
    row("LSL", 426, 2),
    row("LYD", 434, 3),
    row("MAD", 504, 2),
    row("MDL", 498, 2),
    row("MGA", 969, 2),
    row("MKD", 807, 2),
    row("MMK", 104, 2),
    row("MNT", 496, 2),
    row("MOP", 446, 2),
    row("MRU", 929, 2),
    row("MUR", 480, 2),
    row("MVR", 462, 2),
    row("MWK", 454, 2),
    row("MXN", 484, 2),
    row("MXV", 979, 2),
    row("MYR", 458, 2),
    row("MZN", 943, 2),
    row("NAD", 516, 2),
    row("NGN", 566, 2),
    row("NIO", 558, 2),
    row("NOK", 578, 2),
    row("NPR", 524, 2),
    row("NZD", 554, 2),
    row("OMR", 512, 3),
    row("PAB", 590, 2),
    row("PEN", 604, 2),
    row("PGK", 598, 2),
    row("PHP", 608, 2),
    row("PKR", 586, 2),
    row("PLN", 985, 2),
    row("PYG", 600, 0),
    row("QAR", 634, 2),
    row("RON", 946, 2),
    row("RSD", 941, 2),
    row("RUB", 643, 2),
    row("RWF", 646, 0),
    row("SAR", 682, 2),
    row("SBD", 90, 2),
    row("SCR", 690, 2),
    row("SDG", 938, 2),
    row("SEK", 752, 2),
    row("SGD", 702, 2),
    row("SHP", 654, 2),
    row("SLE", 925, 2),
    row("SOS", 706, 2),
    row("SRD", 968, 2),
    row("SSP", 728, 2),
    row("STN", 930, 2),
    row("SVC", 222, 2),
    row("SYP", 760, 2),
    row("SZL", 748, 2),
    row("THB", 764, 2),
    row("TJS", 972, 2),
    row("TMT", 934, 2),
    row("TND", 788, 3),
    row("TOP", 776, 2),
    row("TRY", 949, 2),
    row("TTD", 780, 2),
    row("TWD", 901, 2),
    row("TZS", 834, 2),
    row("UAH", 980, 2),
    row("UGX", 800, 0),
    row("USD", 840, 2),
    row("USN", 997, 2),
    row("UYI", 940, 0),
    row("UYU", 858, 2),
    row("UYW", 927, 4),
    row("UZS", 860, 2),
    row("VED", 926, 2),
    row("VES", 928, 2),
    row("VND", 704, 0),
    row("VUV", 548, 0),
    row("WST", 882, 2),
    row("XAF", 950, 0),
    row("XCD", 951, 2),
    row("XCG", 532, 2),
    row("XOF", 952, 0),
    row("XPF", 953, 0),
    row("YER", 886, 2),
    row("ZAR", 710, 2),
    row("ZMW", 967, 2),
    row("ZWG", 924, 2),
    row("ZWL", 932, 2),
];

/// An ISO 4217 currency from the embedded table. Parsed from the alphabetic code (any case)
/// or the 3-digit numeric code; serialised as the alphabetic code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency(&'static CurrencyRow);

impl Currency {
    /// `"USD"`, `"usd"` and `"840"` all give US dollars; anything else not in the table is `None`.
    pub fn parse(code: &str) -> Option<Currency> {
        let b = code.as_bytes();
        if b.len() != 3 {
            return None;
        }
        if b.iter().all(u8::is_ascii_digit) {
            let n: u16 = code.parse().ok()?;
            return Currency::from_numeric(n);
        }
        if b.iter().all(u8::is_ascii_alphabetic) {
            let upper = code.to_ascii_uppercase();
            return CURRENCIES
                .binary_search_by(|r| r.alpha.cmp(upper.as_str()))
                .ok()
                .and_then(|i| CURRENCIES.get(i))
                .map(Currency);
        }
        None
    }

    /// The currency with this ISO 4217 numeric code.
    pub fn from_numeric(n: u16) -> Option<Currency> {
        CURRENCIES.iter().find(|r| r.numeric == n).map(Currency)
    }

    /// Alphabetic code, e.g. `"USD"`.
    pub fn alpha(self) -> &'static str {
        self.0.alpha
    }

    /// Numeric code, e.g. `840`.
    pub fn numeric(self) -> u16 {
        self.0.numeric
    }

    /// Numeric code as the 3-digit string the reference form uses, e.g. `"008"` for ALL.
    pub fn numeric_str(self) -> String {
        format!("{:03}", self.0.numeric)
    }

    /// Digits after the decimal point: 2 for USD, 0 for JPY, 3 for BHD.
    pub fn minor_units(self) -> u8 {
        self.0.minor_units
    }

    /// Every currency of the table.
    pub fn all() -> impl Iterator<Item = Currency> {
        CURRENCIES.iter().map(Currency)
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.0.alpha)
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.alpha)
    }
}

/// A code that is not an active ISO 4217 currency.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown ISO 4217 currency code")]
pub struct UnknownCurrency;

impl FromStr for Currency {
    type Err = UnknownCurrency;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Currency::parse(s).ok_or(UnknownCurrency)
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.alpha)
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Currency::parse(&s).ok_or_else(|| serde::de::Error::custom("unknown ISO 4217 currency"))
    }
}

// ---------------------------------------------------------------------------------------------
// MCC
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

const KNOWN_TYPES: &str = "maxAmount, currency, merchantMcc, mcc, expirationDate, usageLimit";

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
        match currency {
            None => currency = Some((c, path)),
            Some((first, first_path)) if first != c => {
                errs.insert(
                    path.to_string(),
                    format!("conflicts with currency {first} at {first_path}"),
                );
            }
            Some(_) => {}
        }
    }
    out.currency = currency.map(|(c, _)| c);

    let mut max: Option<(Decimal, &str)> = None;
    let mut first_amount_currency_path: Option<&str> = None;
    let mut expiry: Option<(OffsetDateTime, &str)> = None;
    let mut usage: Option<(u32, &str)> = None;
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
                match max {
                    None => max = Some((*amount, value_path)),
                    Some((first, first_path)) if first != *amount => {
                        errs.insert(
                            value_path.clone(),
                            format!("conflicts with maxAmount {first} at {first_path}"),
                        );
                    }
                    Some(_) => {}
                }
            }
            Entry::Currency { .. } => {}
            Entry::Mcc(m) => {
                if !out.mccs.contains(m) {
                    out.mccs.push(*m);
                }
            }
            Entry::Expiration { at, path } => match expiry {
                None => expiry = Some((*at, path)),
                Some((first, first_path)) if first != *at => {
                    errs.insert(
                        path.clone(),
                        format!("conflicts with the expiration date at {first_path}"),
                    );
                }
                Some(_) => {}
            },
            Entry::UsageLimit { count, path } => match usage {
                None => usage = Some((*count, path)),
                Some((first, first_path)) if first != *count => {
                    errs.insert(
                        path.clone(),
                        format!("conflicts with usage limit {first} at {first_path}"),
                    );
                }
                Some(_) => {}
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
        "currency" | "merchantMcc" | "mcc" => &[],
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
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);

    fn dec(s: &str) -> Decimal {
        Decimal::from_str_exact(s).unwrap()
    }
    fn cur(s: &str) -> Option<Currency> {
        Some(Currency::parse(s).unwrap())
    }
    fn mcc(s: &str) -> Mcc {
        Mcc::parse(s).unwrap()
    }
    fn max(amount: &str, currency: &str) -> Mandates {
        Mandates {
            max_amount: Some(dec(amount)),
            currency: cur(currency),
            ..Mandates::default()
        }
    }
    fn mccs(codes: &[&str]) -> Mandates {
        Mandates {
            mccs: codes.iter().map(|c| mcc(c)).collect(),
            ..Mandates::default()
        }
    }
    fn expiring(at: OffsetDateTime) -> Mandates {
        Mandates {
            expires_at: Some(at),
            ..Mandates::default()
        }
    }
    fn uses(n: u32) -> Mandates {
        Mandates {
            usage_limit: Some(n),
            ..Mandates::default()
        }
    }
    /// A reference-form maxAmount.
    fn ma(value: Value, currency: Value) -> Value {
        json!({"type": "maxAmount", "value": value, "details": {"currency": currency}})
    }
    /// A mandate without details.
    fn m(t: &str, v: Value) -> Value {
        json!({"type": t, "value": v})
    }
    /// A reference-form expirationDate.
    fn exp(details: Value) -> Value {
        json!([{"type": "expirationDate", "value": "", "details": details}])
    }
    fn usage(details: Value) -> Value {
        json!([{"type": "usageLimit", "details": details}])
    }

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

    #[test]
    fn check_rules() {
        use DeclineReason::*;
        let full = Mandates {
            max_amount: Some(dec("100.00")),
            currency: cur("USD"),
            mccs: vec![mcc("5411"), mcc("5812")],
            expires_at: Some(datetime!(2026-12-01 0:00 UTC)),
            usage_limit: Some(3),
        };
        let none = Mandates::default();
        let jpy = max("1000", "JPY");
        let mcc_only = mccs(&["4111"]);
        let eur_only = Mandates {
            currency: cur("EUR"),
            ..Mandates::default()
        };
        let once = uses(1);
        let auth = |amount: &str, currency: &str, m: Option<&str>| Authorization {
            amount: dec(amount),
            currency: Currency::parse(currency).unwrap(),
            mcc: m.map(mcc),
        };
        let before = datetime!(2026-11-30 23:59:59 UTC);
        let at = datetime!(2026-12-01 0:00 UTC);
        let after = datetime!(2027-01-01 0:00 UTC);
        type Case<'a> = (
            &'a str,
            &'a Mandates,
            Authorization,
            OffsetDateTime,
            u32,
            Result<(), DeclineReason>,
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("within every limit", &full, auth("50", "USD", Some("5411")), NOW, 0, Ok(())),
            ("exactly the maximum", &full, auth("100", "USD", Some("5411")), NOW, 0, Ok(())),
            ("one cent over", &full, auth("100.01", "USD", Some("5411")), NOW, 0, Err(AmountOverMaximum)),
            ("sub-cent over", &full, auth("100.001", "USD", Some("5411")), NOW, 0, Err(AmountOverMaximum)),
            ("other currency", &full, auth("50", "EUR", Some("5411")), NOW, 0, Err(CurrencyMismatch)),
            ("numeric code of the same currency", &full, auth("50", "840", Some("5411")), NOW, 0, Ok(())),
            ("MCC not listed", &full, auth("50", "USD", Some("7995")), NOW, 0, Err(MccNotAllowed)),
            ("MCC unknown", &full, auth("50", "USD", None), NOW, 0, Err(MccNotAllowed)),
            ("second listed MCC", &full, auth("50", "USD", Some("5812")), NOW, 0, Ok(())),
            ("last use", &full, auth("50", "USD", Some("5411")), NOW, 2, Ok(())),
            ("uses used up", &full, auth("50", "USD", Some("5411")), NOW, 3, Err(UsageLimitReached)),
            ("beyond the limit", &full, auth("50", "USD", Some("5411")), NOW, 9, Err(UsageLimitReached)),
            ("just before expiry", &full, auth("50", "USD", Some("5411")), before, 0, Ok(())),
            ("at expiry", &full, auth("50", "USD", Some("5411")), at, 0, Err(Expired)),
            ("after expiry", &full, auth("50", "USD", Some("5411")), after, 0, Err(Expired)),
            ("expiry wins over everything", &full, auth("500", "EUR", None), after, 5, Err(Expired)),
            ("usage wins over currency", &full, auth("500", "EUR", None), NOW, 3, Err(UsageLimitReached)),
            ("currency wins over amount", &full, auth("500", "EUR", None), NOW, 0, Err(CurrencyMismatch)),
            ("amount wins over MCC", &full, auth("500", "USD", Some("7995")), NOW, 0, Err(AmountOverMaximum)),
            ("no mandates", &none, auth("1000000", "JPY", None), after, 1000, Ok(())),
            ("JPY at maximum", &jpy, auth("1000", "JPY", None), NOW, 0, Ok(())),
            ("JPY over", &jpy, auth("1001", "JPY", None), NOW, 0, Err(AmountOverMaximum)),
            ("MCC only, listed", &mcc_only, auth("1", "GBP", Some("4111")), NOW, 0, Ok(())),
            ("MCC only, other", &mcc_only, auth("1", "GBP", Some("4112")), NOW, 0, Err(MccNotAllowed)),
            ("currency only, same", &eur_only, auth("1000000", "978", None), NOW, 0, Ok(())),
            ("currency only, other", &eur_only, auth("1", "CHF", None), NOW, 0, Err(CurrencyMismatch)),
            ("usage limit 1, first use", &once, auth("1", "USD", None), NOW, 0, Ok(())),
            ("usage limit 1, second use", &once, auth("1", "USD", None), NOW, 1, Err(UsageLimitReached)),
        ];
        for (name, mandates, a, now, used, want) in cases {
            assert_eq!(mandates.check(&a, now, used), want, "{name}");
        }
    }

    #[test]
    fn parsed_mandates_enforce() {
        let list = json!([
            m("maxAmount", json!("20")),
            m("currency", json!("usd")),
            m("mcc", json!("5411")),
            {"type": "usageLimit", "value": "1", "details": {"count": 1}}
        ]);
        let mandates = parse_mandates(&list, NOW).unwrap();
        let a = Authorization {
            amount: dec("19.99"),
            currency: Currency::parse("840").unwrap(),
            mcc: Some(mcc("5411")),
        };
        assert_eq!(mandates.check(&a, NOW, 0), Ok(()));
        assert_eq!(
            mandates.check(&a, NOW, 1),
            Err(DeclineReason::UsageLimitReached)
        );
    }

    #[test]
    fn decline_reason_names() {
        let want = [
            "amountOverMaximum",
            "currencyMismatch",
            "mccNotAllowed",
            "expired",
            "usageLimitReached",
            "notActive",
            "invalidCvc",
            "invalidCryptogram",
            "invalidCard",
        ];
        for (r, name) in DeclineReason::ALL.into_iter().zip(want) {
            assert_eq!(r.as_str(), name);
            assert_eq!(r.to_string(), name);
            assert_eq!(serde_json::to_value(r).unwrap(), json!(name));
            assert_eq!(
                serde_json::from_value::<DeclineReason>(json!(name)).unwrap(),
                r
            );
        }
    }

    #[test]
    fn currency_table() {
        assert_eq!(Currency::parse("840"), Currency::parse("usd"));
        assert_eq!(Currency::parse("USD"), Currency::parse("usd"));
        assert_eq!(Currency::parse("uSd").map(Currency::numeric), Some(840));
        assert_eq!(Currency::parse("036").map(Currency::alpha), Some("AUD"));
        assert_eq!(
            Currency::parse("008").map(Currency::numeric_str).as_deref(),
            Some("008")
        );
        assert_eq!(Currency::parse("532").map(Currency::alpha), Some("XCG"));
        for bad in [
            "36",
            "0840",
            "US",
            "USDD",
            "XAU",
            "XXX",
            "XTS",
            "ANG",
            "",
            "８４０",
            "U$D",
        ] {
            assert_eq!(Currency::parse(bad), None, "{bad}");
        }
        for (code, units) in [
            ("JPY", 0),
            ("USD", 2),
            ("BHD", 3),
            ("CLF", 4),
            ("KWD", 3),
            ("KRW", 0),
        ] {
            assert_eq!(
                Currency::parse(code).unwrap().minor_units(),
                units,
                "{code}"
            );
        }
        let all: Vec<Currency> = Currency::all().collect();
        assert!(all.len() >= 150, "{}", all.len());
        for pair in CURRENCIES.windows(2) {
            assert!(
                pair[0].alpha < pair[1].alpha,
                "not sorted at {}",
                pair[1].alpha
            );
        }
        let mut numerics: Vec<u16> = all.iter().map(|c| c.numeric()).collect();
        numerics.sort_unstable();
        numerics.dedup();
        assert_eq!(numerics.len(), all.len(), "numeric codes are unique");
        for c in all {
            assert_eq!(Currency::parse(c.alpha()), Some(c));
            assert_eq!(Currency::parse(&c.numeric_str()), Some(c));
            assert_eq!(Currency::parse(&c.alpha().to_lowercase()), Some(c));
            assert!(c.minor_units() <= 4);
        }
        assert_eq!(
            "eur".parse::<Currency>().map(|c| c.to_string()),
            Ok("EUR".to_string())
        );
        assert_eq!("nope".parse::<Currency>(), Err(UnknownCurrency));
        assert_eq!(
            format!("{:?}", Currency::parse("978").unwrap()),
            "Currency(EUR)"
        );
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
    fn credential_expiry() {
        let created = datetime!(2026-06-01 12:00 UTC);
        let day = Duration::hours(24);
        assert_eq!(
            Mandates::default().credential_expires_at(created, day),
            created + day
        );
        let soon = expiring(datetime!(2026-06-01 18:00 UTC));
        assert_eq!(
            soon.credential_expires_at(created, day),
            datetime!(2026-06-01 18:00 UTC)
        );
        let late = expiring(datetime!(2026-12-01 0:00 UTC));
        assert_eq!(late.credential_expires_at(created, day), created + day);
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
