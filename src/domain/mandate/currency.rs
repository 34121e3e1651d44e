//! Currencies: the embedded ISO 4217 table and [`Currency`], parsed from an alphabetic or a
//! numeric code and serialised as the alphabetic one.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    fn from_numeric(n: u16) -> Option<Currency> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

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
}
