//! Secret newtypes: card numbers, CVCs and other values that must never reach a log.
//!
//! Each type keeps its value in a [`Zeroizing`] buffer (wiped on drop) and implements
//! `Debug`/`Display` with a mask, so `tracing::info!(?value)` or a stray `format!` cannot
//! leak it. Read the value with `expose()` where it is really needed.

use std::fmt;
use zeroize::Zeroizing;

macro_rules! secret_type {
    ($(#[$doc:meta])* $name:ident, |$v:ident| $mask:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq)]
        pub struct $name(Zeroizing<String>);

        impl $name {
            /// Wraps a value.
            pub fn new(value: impl Into<String>) -> Self {
                Self(Zeroizing::new(value.into()))
            }

            /// The value itself. Call only where the value is really needed.
            pub fn expose(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let $v: &str = &self.0;
                write!(f, "{}({})", stringify!($name), $mask)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}

secret_type!(
    /// A primary account number (card number), digits only.
    Pan,
    |v| mask_pan(v)
);
secret_type!(
    /// A card verification code.
    Cvc,
    |_v| "***"
);
secret_type!(
    /// A network-token cryptogram.
    Cryptogram,
    |_v| "****"
);
secret_type!(
    /// A bearer token (JWT) as received.
    BearerToken,
    |_v| "****"
);

/// `424242******4242`: the first six and last four digits, the rest masked.
/// Shorter values are masked whole.
pub fn mask_pan(pan: &str) -> String {
    let n = pan.len();
    if n < 12 || !pan.is_ascii() {
        return "*".repeat(n.min(19));
    }
    format!("{}{}{}", &pan[..6], "*".repeat(n - 10), &pan[n - 4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_mask_the_value() {
        let pan = Pan::new("4242424242424242");
        assert_eq!(format!("{pan:?}"), "Pan(424242******4242)");
        assert_eq!(format!("{pan}"), "Pan(424242******4242)");
        let cvc = Cvc::new("123");
        assert!(!format!("{cvc:?}").contains("123"));
        assert!(!format!("{:?}", BearerToken::new("eyJabc")).contains("eyJ"));
    }

    #[test]
    fn mask_handles_short_and_odd_values() {
        assert_eq!(mask_pan("123"), "***");
        assert_eq!(mask_pan("378282246310005"), "378282*****0005");
    }
}
