//! Cards: the raw request card, its validation, brand and BIN tables, and the two display
//! objects of a payment method (`display` differs between create and list/get). Pure code,
//! no I/O.
//!
//! - [`validate`] (validate.rs) turns a [`CardInput`] into a [`ValidCard`] or a map of field errors.
//! - [`brand_of`] and [`bin_info`] (ranges.rs) classify a number from embedded tables.
//! - [`Brand`] and [`Funding`] (brand.rs) carry the wire names, display names and colours.
//! - [`display_create`] and [`display_listed`] (display.rs) build the `card.display` objects.
//! - [`standin`]: the look-alike number and CVC a browser checkout session types in place
//!   of the real ones.
//!
//! Secrets: neither type's `Debug` prints a number or cvc, and both zero them on drop
//! (a [`ValidCard`] holds them as [`CardNumber`] and [`Cvc`]).

mod brand;
mod display;
mod ranges;
pub mod standin;
mod validate;

use crate::secret::{CardNumber, Cvc};
use serde::Deserialize;
use serde_json::Value;
use zeroize::Zeroize;

pub use brand::{Brand, Funding};
pub use display::{display_create, display_listed, DisplayCreate, DisplayListed};
pub use ranges::{bin_info, brand_of, BinInfo};
pub use validate::validate;

/// Raw card as received in a request body (`card` object). All fields are optional here so that
/// a missing field gives a field error instead of a serde error, and each is any JSON value so
/// that a wrong type does too (see [`validate`]). Unknown keys are ignored.
///
/// `Debug` only says which fields are present; on drop, string values are zeroed.
#[derive(Deserialize, Default)]
pub struct CardInput {
    /// Card number: a string of digits (spaces and dashes allowed).
    pub number: Option<Value>,
    /// `MM`, `01`–`12`.
    #[serde(rename = "expirationMonth")]
    pub expiration_month: Option<Value>,
    /// `YYYY`.
    #[serde(rename = "expirationYear")]
    pub expiration_year: Option<Value>,
    /// 3 digits, 4 for amex.
    pub cvc: Option<Value>,
}

/// Formats an optional raw field as its presence only.
fn presence(v: &Option<Value>) -> &'static str {
    match v {
        None => "None",
        Some(_) => "Some(<redacted>)",
    }
}

impl std::fmt::Debug for CardInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field is redacted: a client may well put a number in the wrong field.
        f.debug_struct("CardInput")
            .field("number", &format_args!("{}", presence(&self.number)))
            .field(
                "expiration_month",
                &format_args!("{}", presence(&self.expiration_month)),
            )
            .field(
                "expiration_year",
                &format_args!("{}", presence(&self.expiration_year)),
            )
            .field("cvc", &format_args!("{}", presence(&self.cvc)))
            .finish()
    }
}

/// Zeroes the strings inside a JSON value and leaves `Null` behind. Other scalars cannot be
/// wiped reliably; they are dropped.
fn wipe(value: &mut Option<Value>) {
    match value.take() {
        Some(Value::String(mut s)) => s.zeroize(),
        Some(Value::Array(items)) => {
            for item in items {
                wipe(&mut Some(item));
            }
        }
        Some(Value::Object(map)) => {
            for (_, item) in map {
                wipe(&mut Some(item));
            }
        }
        _ => {}
    }
}

impl Drop for CardInput {
    fn drop(&mut self) {
        wipe(&mut self.number);
        wipe(&mut self.expiration_month);
        wipe(&mut self.expiration_year);
        wipe(&mut self.cvc);
    }
}

/// A card that passed [`validate`]. Its number and cvc are secret types: `Debug` masks them
/// and they are zeroed on drop.
#[derive(Clone, Debug)]
pub struct ValidCard {
    /// Digits only, 12–19 long, Luhn-valid.
    pub number: CardNumber,
    /// `MM`, `01`–`12`.
    pub expiration_month: String,
    /// `YYYY`.
    pub expiration_year: String,
    /// Digits: 3, 4 for amex, 3 or 4 for an unknown brand.
    pub cvc: Cvc,
    /// From the IIN range table.
    pub brand: Brand,
    /// From the BIN table; `Credit` when the BIN is not listed.
    pub funding: Funding,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn card(number: &str, cvc: &str) -> ValidCard {
        ValidCard {
            number: CardNumber::new(number),
            expiration_month: "03".to_owned(),
            expiration_year: "2030".to_owned(),
            cvc: Cvc::new(cvc),
            brand: brand_of(number),
            funding: Funding::Credit,
        }
    }

    #[test]
    fn valid_card_debug_hides_number_and_cvc() {
        let c = card("4242424242424242", "987");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("4242424242424242"), "{dbg}");
        assert!(!dbg.contains("987"), "{dbg}");
        assert!(dbg.contains("424242******4242"), "{dbg}");
        assert!(dbg.contains("***"), "{dbg}");
        let pretty = format!("{c:#?}");
        assert!(!pretty.contains("4242424242424242") && !pretty.contains("987"));
    }

    #[test]
    fn valid_card_helpers() {
        let c = card("378282246310005", "1234");
        assert_eq!(c.number.bin(), "378282");
        assert_eq!(c.number.last4(), "0005");
        assert_eq!(c.number.masked(), "378282*****0005");
    }

    #[test]
    fn card_input_debug_hides_every_value() {
        let input: CardInput = serde_json::from_str(
            r#"{"number":"4242424242424242","expirationMonth":"12","cvc":"987"}"#,
        )
        .unwrap();
        let dbg = format!("{input:?}");
        assert!(
            !dbg.contains("4242") && !dbg.contains("987") && !dbg.contains("12"),
            "{dbg}"
        );
        assert!(dbg.contains("expiration_year: None"), "{dbg}");
    }

    #[test]
    fn card_input_accepts_any_json_types_and_unknown_keys() {
        let input: CardInput = serde_json::from_str(
            r#"{"number":4242424242424242,"expirationMonth":null,"cvc":[1],"extra":true}"#,
        )
        .unwrap();
        assert!(input.number.as_ref().is_some_and(Value::is_number));
        assert_eq!(input.expiration_month, None); // null deserializes to None
        assert!(input.expiration_year.is_none());
        assert!(input.cvc.as_ref().is_some_and(Value::is_array));
    }

    #[test]
    fn wipe_leaves_nothing() {
        let mut v = Some(serde_json::json!({"a": ["4242", {"b": "987"}]}));
        wipe(&mut v);
        assert_eq!(v, None);
    }
}
