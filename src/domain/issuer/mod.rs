//! Issuers: where a purchase intent's credential comes from. The [`Issuer`] trait is what the
//! purchase-intent handler calls; [`sandbox::Sandbox`] is the built-in deterministic issuer
//! (docs/sandbox.md) and real issuer or network adapters plug in the same way.
//!
//! Nothing here does I/O. Card numbers, cvcs and cryptograms never appear in `Debug` output.

pub mod sandbox;

use std::fmt;
use std::str::FromStr;

use crate::secret::{CardNumber, Choice, ConstantTimeEq, Cryptogram, Cvc};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

pub use sandbox::Sandbox;

/// The three credential types of the specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CredentialType {
    /// A one-time virtual card number from the issuer (`virtual-card`).
    VirtualCard,
    /// A network token with a per-intent cryptogram (`network-token`).
    NetworkToken,
    /// The stored card itself (`pan`); only for projects with `pan: enabled`.
    Pan,
}

impl CredentialType {
    /// Every type, in the order the specification lists them.
    pub const ALL: [CredentialType; 3] = [
        CredentialType::VirtualCard,
        CredentialType::NetworkToken,
        CredentialType::Pan,
    ];

    /// The API name: `virtual-card`, `network-token`, `pan`.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialType::VirtualCard => "virtual-card",
            CredentialType::NetworkToken => "network-token",
            CredentialType::Pan => "pan",
        }
    }

    /// The name proxy templates use: `virtualCard`, `networkToken`, `pan`.
    pub fn template_name(self) -> &'static str {
        match self {
            CredentialType::VirtualCard => "virtualCard",
            CredentialType::NetworkToken => "networkToken",
            CredentialType::Pan => "pan",
        }
    }

    /// The inverse of [`CredentialType::template_name`].
    pub fn from_template_name(s: &str) -> Option<CredentialType> {
        CredentialType::ALL
            .into_iter()
            .find(|t| t.template_name() == s)
    }
}

impl fmt::Display for CredentialType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Not one of `virtual-card`, `network-token`, `pan`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be one of virtual-card, network-token, pan")]
pub struct UnknownCredentialType;

impl FromStr for CredentialType {
    type Err = UnknownCredentialType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CredentialType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or(UnknownCredentialType)
    }
}

/// The stored card an intent is issued from.
#[derive(Debug, Clone, Copy)]
pub struct CardFacts<'a> {
    /// Brand as detected at storage time: `visa`, `mastercard`, `amex`, `discover`, ...
    pub brand: &'a str,
    /// The card number.
    pub number: &'a CardNumber,
    /// `MM`.
    pub expiration_month: &'a str,
    /// `YYYY`.
    pub expiration_year: &'a str,
}

/// A credential as the purchase intent exposes it: the Virtual Card, Network Token or PAN
/// object. Serialises with the wire names (`expirationMonth`, ...), leaving out an absent
/// `cvc` / `cryptogram`: this is where card data leaves, in the credential response and
/// sealed with its intent. `Debug` masks the number and hides cvc and cryptogram; `==` is
/// constant time over the card data, field by field without stopping at a difference.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credential {
    /// Card or token number.
    pub number: CardNumber,
    /// `MM`.
    pub expiration_month: String,
    /// `YYYY`.
    pub expiration_year: String,
    /// Virtual card and pan (pan: filled by the caller from the vault while retained).
    #[serde(default)]
    pub cvc: Option<Cvc>,
    /// Network token only.
    #[serde(default)]
    pub cryptogram: Option<Cryptogram>,
}

impl ConstantTimeEq for Credential {
    fn ct_eq(&self, other: &Self) -> Choice {
        let optional = |a: Option<&[u8]>, b: Option<&[u8]>| match (a, b) {
            (Some(a), Some(b)) => a.ct_eq(b),
            (a, b) => Choice::from(u8::from(a.is_none() && b.is_none())),
        };
        self.number.ct_eq(&other.number)
            & self
                .expiration_month
                .as_bytes()
                .ct_eq(other.expiration_month.as_bytes())
            & self
                .expiration_year
                .as_bytes()
                .ct_eq(other.expiration_year.as_bytes())
            & optional(
                self.cvc.as_ref().map(|c| c.expose().as_bytes()),
                other.cvc.as_ref().map(|c| c.expose().as_bytes()),
            )
            & optional(
                self.cryptogram.as_ref().map(|c| c.expose().as_bytes()),
                other.cryptogram.as_ref().map(|c| c.expose().as_bytes()),
            )
    }
}

impl PartialEq for Credential {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other).into()
    }
}

impl Eq for Credential {}

impl Serialize for Credential {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = 3 + usize::from(self.cvc.is_some()) + usize::from(self.cryptogram.is_some());
        let mut map = s.serialize_map(Some(fields))?;
        map.serialize_entry("number", self.number.expose())?;
        map.serialize_entry("expirationMonth", &self.expiration_month)?;
        map.serialize_entry("expirationYear", &self.expiration_year)?;
        if let Some(cvc) = &self.cvc {
            map.serialize_entry("cvc", cvc.expose())?;
        }
        if let Some(cryptogram) = &self.cryptogram {
            map.serialize_entry("cryptogram", cryptogram.expose())?;
        }
        map.end()
    }
}

/// What an issuer answered, mapped onto the purchase intent's `status`.
#[derive(Debug, Clone)]
pub enum Issued {
    /// Ready to use: `active`.
    Active(Credential),
    /// Issued, but the end user must verify first: `verify`. Keep the credential; show it only
    /// once verification succeeded.
    Verify(Credential),
    /// This credential type cannot be issued for this card: `unavailable`.
    Unavailable,
}

impl PartialEq for Issued {
    /// The status, then the credential in constant time ([`Credential`]'s `==`).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Issued::Active(a), Issued::Active(b)) | (Issued::Verify(a), Issued::Verify(b)) => {
                a == b
            }
            (Issued::Unavailable, Issued::Unavailable) => true,
            _ => false,
        }
    }
}

impl Eq for Issued {}

impl Issued {
    /// The purchase intent status: `active`, `verify` or `unavailable`.
    pub fn status(&self) -> &'static str {
        match self {
            Issued::Active(_) => "active",
            Issued::Verify(_) => "verify",
            Issued::Unavailable => "unavailable",
        }
    }

    /// The credential, shown or not.
    pub fn credential(&self) -> Option<&Credential> {
        match self {
            Issued::Active(c) | Issued::Verify(c) => Some(c),
            Issued::Unavailable => None,
        }
    }
}

/// One request to issue a credential for a purchase intent.
#[derive(Debug, Clone, Copy)]
pub struct IssueRequest<'a> {
    /// The purchase intent being created.
    pub intent_id: &'a str,
    /// Its payment method.
    pub payment_method_id: &'a str,
    /// What to issue.
    pub credential_type: CredentialType,
    /// The stored card behind the payment method.
    pub card: CardFacts<'a>,
    /// The project has `pan: enabled` (PCI environment).
    pub pan_enabled: bool,
    /// This payment method already passed network-token verification once.
    pub verified_before: bool,
    /// Creation time of the intent.
    pub now: OffsetDateTime,
    /// The intent's `expiresAt`.
    pub expires_at: OffsetDateTime,
}

/// An issuer could not answer. (`unavailable` is an answer, [`Issued::Unavailable`], not an
/// error.) Messages never carry card data.
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    /// The stored card data cannot be used to issue (e.g. a malformed expiry).
    #[error("stored card data is unusable: {0}")]
    InvalidCard(&'static str),
    /// The issuer or network failed or could not be reached.
    #[error("issuer failed: {0}")]
    Upstream(String),
}

/// A source of credentials: an issuer of virtual cards, a token service, or the sandbox.
pub trait Issuer: Send + Sync {
    /// Issues the credential for one purchase intent.
    fn issue(&self, req: IssueRequest<'_>) -> Result<Issued, IssuerError>;
    /// Short name for logs and metrics, e.g. `sandbox`.
    fn name(&self) -> &'static str;
}

/// The Luhn (mod 10) check: all ASCII digits, at least two of them, checksum 0.
pub fn luhn_valid(s: &str) -> bool {
    s.len() >= 2
        && s.bytes().all(|b| b.is_ascii_digit())
        && luhn_sum(s.bytes(), false).is_multiple_of(10)
}

/// `prefix` with its Luhn check digit appended. Characters other than ASCII digits are
/// dropped first, so `"4000 0099 0000 001"` gives `"4000009900000012"`.
pub fn luhn_complete(prefix: &str) -> String {
    let mut digits: String = prefix.chars().filter(char::is_ascii_digit).collect();
    let sum = luhn_sum(digits.bytes(), true);
    let check = (10 - sum % 10) % 10;
    digits.push(char::from(b'0' + check as u8));
    digits
}

/// Sum of Luhn digits, right to left; `double_first`: the rightmost digit is doubled (true when
/// a check digit is still to be appended).
fn luhn_sum(digits: impl DoubleEndedIterator<Item = u8>, double_first: bool) -> u32 {
    digits
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b.wrapping_sub(b'0'));
            if (i % 2 == 0) == double_first {
                let d2 = d * 2;
                if d2 > 9 {
                    d2 - 9
                } else {
                    d2
                }
            } else {
                d
            }
        })
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn luhn_known_numbers() {
        for ok in [
            "4242424242424242",
            "4111111111111111",
            "378282246310005",
            "79927398713",
        ] {
            assert!(luhn_valid(ok), "{ok}");
        }
        for bad in [
            "4242424242424241",
            "",
            "0",
            "4242 4242 4242 4242",
            "42424242x4242424",
        ] {
            assert!(!luhn_valid(bad), "{bad}");
        }
    }

    #[test]
    fn luhn_complete_appends_check_digit() {
        assert_eq!(luhn_complete("7992739871"), "79927398713");
        assert_eq!(luhn_complete("424242424242424"), "4242424242424242");
        assert_eq!(luhn_complete("4000 0099 0000 001"), "4000009900000012");
        for p in ["1", "49999", "37999100000000", "601199123456789"] {
            assert!(luhn_valid(&luhn_complete(p)), "{p}");
        }
    }

    #[test]
    fn credential_type_names() {
        for t in CredentialType::ALL {
            assert_eq!(t.as_str().parse::<CredentialType>(), Ok(t));
            assert_eq!(
                CredentialType::from_template_name(t.template_name()),
                Some(t)
            );
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<CredentialType>(&json).unwrap(), t);
        }
        assert!("virtualCard".parse::<CredentialType>().is_err());
        assert!("PAN".parse::<CredentialType>().is_err());
    }

    #[test]
    fn debug_never_prints_secrets() {
        let c = Credential {
            number: "4000009900000012".into(),
            expiration_month: "12".into(),
            expiration_year: "2029".into(),
            cvc: Some("987".into()),
            cryptogram: Some("QUJDREVGR0g=".into()),
        };
        let d = format!("{c:?} {:?}", Issued::Verify(c.clone()));
        assert!(!d.contains("4000009900000012") && !d.contains("400000990"));
        assert!(!d.contains("987") && !d.contains("QUJDREVGR0g="));
        assert!(d.contains("****0012"));
        let card = CardFacts {
            brand: "visa",
            number: &CardNumber::new("4000009900000012"),
            expiration_month: "01",
            expiration_year: "2030",
        };
        let d = format!("{card:?}");
        assert!(!d.contains("4000009900000012") && d.contains("****0012"));
    }

    #[test]
    fn credential_json_shape() {
        let c = Credential {
            number: "5299900000000001".into(),
            expiration_month: "03".into(),
            expiration_year: "2030".into(),
            cvc: None,
            cryptogram: Some("abc".into()),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"number": "5299900000000001", "expirationMonth": "03",
                "expirationYear": "2030", "cryptogram": "abc"})
        );
        assert_eq!(serde_json::from_value::<Credential>(v).unwrap(), c);
    }

    #[test]
    fn issued_status() {
        assert_eq!(Issued::Unavailable.status(), "unavailable");
        assert!(Issued::Unavailable.credential().is_none());
    }
}
