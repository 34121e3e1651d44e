//! Card brands (networks) and funding types, with their wire names, display names and colours.

use serde::{Deserialize, Serialize};

/// A card network, as found from the number's IIN range (see [`super::brand_of`]).
///
/// On the wire (the spec's `Card.brand`) a brand is its lowercase [`Brand::as_str`] name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Brand {
    /// Visa: `visa`.
    Visa,
    /// Mastercard: `mastercard`.
    Mastercard,
    /// American Express: `amex`.
    Amex,
    /// Discover: `discover`.
    Discover,
    /// JCB: `jcb`.
    Jcb,
    /// Diners Club: `diners`.
    #[serde(rename = "diners")]
    DinersClub,
    /// UnionPay: `unionpay`.
    UnionPay,
    /// Maestro: `maestro`.
    Maestro,
    /// A number outside every known range: `unknown`. Such a card is still accepted.
    Unknown,
}

impl Brand {
    /// Every brand, `Unknown` last.
    pub const ALL: [Brand; 9] = [
        Brand::Visa,
        Brand::Mastercard,
        Brand::Amex,
        Brand::Discover,
        Brand::Jcb,
        Brand::DinersClub,
        Brand::UnionPay,
        Brand::Maestro,
        Brand::Unknown,
    ];

    /// The wire name, the same as serde's: `visa`, `mastercard`, `amex`, `discover`, `jcb`,
    /// `diners`, `unionpay`, `maestro`, `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Brand::Visa => "visa",
            Brand::Mastercard => "mastercard",
            Brand::Amex => "amex",
            Brand::Discover => "discover",
            Brand::Jcb => "jcb",
            Brand::DinersClub => "diners",
            Brand::UnionPay => "unionpay",
            Brand::Maestro => "maestro",
            Brand::Unknown => "unknown",
        }
    }

    /// Parses a wire name ([`Brand::as_str`]), ignoring ASCII case. `None` for anything else.
    #[allow(
        clippy::should_implement_trait,
        reason = "an Option is what callers (query filters, config) want; there is no error to carry"
    )]
    pub fn from_str(s: &str) -> Option<Brand> {
        Brand::ALL
            .into_iter()
            .find(|b| b.as_str().eq_ignore_ascii_case(s))
    }

    /// The human-readable name, as in the create response's `display.name`.
    /// `Unknown` reads "Card", so that a description never says "Unknown •••• 1234".
    pub fn display_name(&self) -> &'static str {
        match self {
            Brand::Visa => "Visa",
            Brand::Mastercard => "Mastercard",
            Brand::Amex => "American Express",
            Brand::Discover => "Discover",
            Brand::Jcb => "JCB",
            Brand::DinersClub => "Diners Club",
            Brand::UnionPay => "UnionPay",
            Brand::Maestro => "Maestro",
            Brand::Unknown => "Card",
        }
    }

    /// The brand's colour as `#RRGGBB` (the create response's `display.color`, and the default
    /// card background in list responses).
    pub fn color(&self) -> &'static str {
        match self {
            Brand::Visa => "#1A1F71",
            Brand::Mastercard => "#EB001B",
            Brand::Amex => "#006FCF",
            Brand::Discover => "#FF6000",
            Brand::Jcb => "#0B4EA2",
            Brand::DinersClub => "#0079BE",
            Brand::UnionPay => "#E21836",
            Brand::Maestro => "#0099DF",
            Brand::Unknown => "#4B5563",
        }
    }

    /// The text colour that reads on [`Brand::color`]: white for every brand colour above.
    pub fn foreground_color(&self) -> &'static str {
        "#FFFFFF"
    }

    /// The cvc length the brand prints: 4 for American Express, 3 for every other brand.
    /// For `Unknown` this is the usual 3, but validation accepts 3 or 4 digits there
    /// (see [`super::validate`]), since the network is not known.
    pub fn cvc_len(&self) -> usize {
        match self {
            Brand::Amex => 4,
            _ => 3,
        }
    }
}

impl std::fmt::Display for Brand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a card draws on credit or on the holder's own funds: the spec's `Card.type`.
/// Prepaid cards are reported as `debit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Funding {
    /// `credit`.
    Credit,
    /// `debit` (prepaid included).
    Debit,
}

impl Funding {
    /// The wire name: `credit` or `debit`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Funding::Credit => "credit",
            Funding::Debit => "debit",
        }
    }

    /// The human-readable name used in descriptions: "Credit" or "Debit".
    pub fn display_name(&self) -> &'static str {
        match self {
            Funding::Credit => "Credit",
            Funding::Debit => "Debit",
        }
    }
}

impl std::fmt::Display for Funding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn wire_names_match_serde_and_parse_back() {
        for b in Brand::ALL {
            let json = serde_json::to_string(&b).unwrap();
            assert_eq!(json, format!("\"{}\"", b.as_str()));
            assert_eq!(serde_json::from_str::<Brand>(&json).unwrap(), b);
            assert_eq!(Brand::from_str(b.as_str()), Some(b));
            assert_eq!(Brand::from_str(&b.as_str().to_uppercase()), Some(b));
        }
        assert_eq!(Brand::DinersClub.as_str(), "diners");
        assert_eq!(Brand::from_str("dinersclub"), None);
        assert_eq!(Brand::from_str(""), None);
    }

    #[test]
    fn colours_are_hex() {
        for b in Brand::ALL {
            for c in [b.color(), b.foreground_color()] {
                assert_eq!(c.len(), 7, "{b}");
                assert!(c.starts_with('#'), "{b}");
                assert!(c[1..].bytes().all(|x| x.is_ascii_hexdigit()), "{b}");
            }
        }
        assert_eq!(Brand::Visa.color(), "#1A1F71");
        assert_eq!(Brand::Amex.display_name(), "American Express");
    }

    #[test]
    fn cvc_len() {
        assert_eq!(Brand::Amex.cvc_len(), 4);
        assert_eq!(Brand::Visa.cvc_len(), 3);
        assert_eq!(Brand::Unknown.cvc_len(), 3);
    }

    #[test]
    fn funding_wire_names() {
        assert_eq!(
            serde_json::to_string(&Funding::Credit).unwrap(),
            "\"credit\""
        );
        assert_eq!(serde_json::to_string(&Funding::Debit).unwrap(), "\"debit\"");
        assert_eq!(Funding::Debit.display_name(), "Debit");
    }
}
