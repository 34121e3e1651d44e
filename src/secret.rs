//! Card data and keys, by type: [`CardNumber`], [`Cvc`], [`Cryptogram`], [`KeyMaterial`],
//! [`BearerToken`] and [`ProxyPassword`], and [`Revealed`], a credential field a proxy template writes into a body. A value of one of these types is card data or a key, and the compiler
//! says where it flows:
//!
//! - the value lives in a [`Zeroizing`] buffer, wiped when it is dropped;
//! - `Debug` masks it (a card number shows its first 6 and last 4 digits, [`mask`]; the
//!   others show nothing), so `tracing::info!(?value)` or a stray `{:?}` cannot leak it;
//! - there is no `Display` and no `Serialize`: a value leaves only through
//!   [`expose`](CardNumber::expose), where a caller must really send it (the credential
//!   response, a substituted body, a comparison, the vault).
//!
//! `Deserialize` is there: reading a value into its type is how it becomes safe to hold.
//!
//! Equality is constant time: `==` on these types compares with `subtle` (its time depends on
//! the lengths only), and so does [`constant_time_eq`], the one comparison of raw secret bytes
//! (a bearer token, a code, a MAC). No secret type derives `PartialEq`: a type that holds one
//! compares field by field with [`ConstantTimeEq`] and without stopping at the first
//! difference ([`Credential`](crate::domain::issuer::Credential) is written so).
//!
//! A leaf: imports nothing of paycred.

use serde::{Deserialize, Deserializer};
use std::fmt;
pub use subtle::{Choice, ConstantTimeEq};
use zeroize::Zeroizing;

macro_rules! secret_text {
    ($(#[$doc:meta])* $name:ident, |$v:ident| $shown:expr) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(Zeroizing<String>);

        impl ConstantTimeEq for $name {
            fn ct_eq(&self, other: &Self) -> Choice {
                self.0.as_bytes().ct_eq(other.0.as_bytes())
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.ct_eq(other).into()
            }
        }

        impl Eq for $name {}

        impl $name {
            /// Takes a value.
            pub fn new(value: impl Into<String>) -> Self {
                Self(Zeroizing::new(value.into()))
            }

            /// The value itself, for where it must really go.
            pub fn expose(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self::new(value)
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self::new(value)
            }
        }

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.0.as_str().hash(state);
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let $v: &str = &self.0;
                write!(f, "{}({})", stringify!($name), $shown)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d).map(Self::new)
            }
        }
    };
}

secret_text!(
    /// A card number (a stored card's, a virtual card's or a network token's), digits only.
    CardNumber,
    |v| mask(v)
);
secret_text!(
    /// A card verification code.
    Cvc,
    |_v| "***"
);
secret_text!(
    /// A network token's cryptogram.
    Cryptogram,
    |_v| "****"
);
secret_text!(
    /// A bearer token (JWT) as a caller sent it.
    BearerToken,
    |_v| "****"
);
secret_text!(
    /// A browser session's proxy password as the browser sent it (`Proxy-Authorization`).
    ProxyPassword,
    |_v| "****"
);

impl CardNumber {
    /// The masked number ([`mask`]).
    pub fn masked(&self) -> String {
        mask(&self.0)
    }

    /// The 6-digit BIN.
    pub fn bin(&self) -> &str {
        self.0.get(..6).unwrap_or_default()
    }

    /// The last 4 digits.
    pub fn last4(&self) -> &str {
        self.0
            .get(self.0.len().saturating_sub(4)..)
            .unwrap_or_default()
    }
}

/// One field of a credential as a proxy template reveals it into a body: the scanner's
/// output. Card data keeps its type; an expiry month or year is not secret.
#[derive(Debug, Clone)]
pub enum Revealed {
    Number(CardNumber),
    Cvc(Cvc),
    Cryptogram(Cryptogram),
    Expiry(String),
}

impl PartialEq for Revealed {
    /// Constant time over the value; which kind of field each side is, is not secret.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Revealed::Number(a), Revealed::Number(b)) => a == b,
            (Revealed::Cvc(a), Revealed::Cvc(b)) => a == b,
            (Revealed::Cryptogram(a), Revealed::Cryptogram(b)) => a == b,
            (Revealed::Expiry(a), Revealed::Expiry(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Revealed {}

impl Revealed {
    /// The value itself, to be written into the body.
    pub fn expose(&self) -> &str {
        match self {
            Revealed::Number(v) => v.expose(),
            Revealed::Cvc(v) => v.expose(),
            Revealed::Cryptogram(v) => v.expose(),
            Revealed::Expiry(v) => v,
        }
    }
}

/// 32 bytes of key material (a master key, a data key, a derived secret).
#[derive(Clone)]
pub struct KeyMaterial(Zeroizing<[u8; 32]>);

impl ConstantTimeEq for KeyMaterial {
    fn ct_eq(&self, other: &Self) -> Choice {
        self.0.as_slice().ct_eq(other.0.as_slice())
    }
}

impl PartialEq for KeyMaterial {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other).into()
    }
}

impl Eq for KeyMaterial {}

impl KeyMaterial {
    /// Takes the bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// Fresh random bytes from the operating system.
    pub fn random() -> Self {
        use rand::RngCore;
        let mut key = Zeroizing::new([0u8; 32]);
        rand::rngs::OsRng.fill_bytes(key.as_mut_slice());
        Self(key)
    }

    /// The bytes, for where they must really go (a cipher, a MAC).
    pub fn expose(&self) -> &[u8; 32] {
        &self.0
    }
}

impl From<Zeroizing<[u8; 32]>> for KeyMaterial {
    fn from(bytes: Zeroizing<[u8; 32]>) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyMaterial(..)")
    }
}

/// Whether two secrets are equal, in time that depends on their lengths only (`subtle`).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// The one mask of a card number: the first 6 and last 4 characters, a `*` for each one
/// between: `4242424242424242` → `424242******4242`. Anything shorter than the 12 digits of
/// the shortest valid number is masked whole, so a mask never shows more than 10 of 12.
pub fn mask(number: &str) -> String {
    let len = number.chars().count();
    if len < 12 {
        return "*".repeat(len);
    }
    number
        .chars()
        .enumerate()
        .map(|(i, c)| if i < 6 || i >= len - 4 { c } else { '*' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_masks_the_value() {
        let number = CardNumber::new("4242424242424242");
        assert_eq!(format!("{number:?}"), "CardNumber(424242******4242)");
        assert!(!format!("{:?}", Cvc::new("123")).contains("123"));
        assert!(!format!("{:?}", Cryptogram::new("AbCdEf")).contains("AbC"));
        assert!(!format!("{:?}", BearerToken::new("eyJabc")).contains("eyJ"));
        assert_eq!(
            format!("{:?}", KeyMaterial::new([7; 32])),
            "KeyMaterial(..)"
        );
        assert_eq!((number.bin(), number.last4()), ("424242", "4242"));
    }

    #[test]
    fn equality_compares_values() {
        assert_eq!(
            CardNumber::new("4242424242424242"),
            CardNumber::from("4242424242424242")
        );
        assert_ne!(
            CardNumber::new("4242424242424242"),
            CardNumber::new("4242424242424241")
        );
        assert_ne!(Cvc::new("123"), Cvc::new("1234"));
        assert_eq!(KeyMaterial::new([1; 32]), KeyMaterial::new([1; 32]));
        assert_ne!(KeyMaterial::new([1; 32]), KeyMaterial::new([2; 32]));
        let cvc = Revealed::Cvc(Cvc::new("123"));
        assert_eq!(cvc, Revealed::Cvc(Cvc::new("123")));
        assert_ne!(cvc, Revealed::Expiry("123".into()));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn a_value_is_read_into_its_type() {
        let cvc: Cvc = serde_json::from_str("\"123\"").unwrap_or_else(|_| Cvc::new(""));
        assert_eq!(cvc.expose(), "123");
    }

    #[test]
    fn mask_cases() {
        assert_eq!(mask("4242424242424242"), "424242******4242");
        assert_eq!(mask("378282246310005"), "378282*****0005");
        assert_eq!(mask("123456789012"), "123456**9012");
        assert_eq!(mask("12345678901"), "***********");
        assert_eq!(mask("123"), "***");
        assert_eq!(mask(""), "");
        // Non-ASCII never splits a character.
        assert_eq!(mask("ab€defghijklm"), "ab€def***jklm");
    }
}
