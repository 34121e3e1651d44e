//! [`Sealed`]: a value the vault sealed, held parsed.
//!
//! Stored, a sealed value is one string, `<key id>.<base64(nonce || ciphertext)>` (a cvc's key
//! id is `cvc1.<epoch>.<bucket>`; base64 has no `.`, so the key id is everything before the
//! last one). Records hold it already split and decoded: the payment-method cache then keeps
//! the bytes, and opening a stored card decodes nothing. On the proxy's path that was two
//! base64 decodes and their string splits for every request (1.7k instructions of the
//! 1 KiB request's 83k; docs/performance.md, session 14).

use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A sealed value: the id of the key that opens it and the sealed bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Parsed {
        key_id: String,
        bytes: Vec<u8>,
    },
    /// A stored string that does not parse: kept as it was (written back unchanged), and
    /// never opens.
    Unreadable(String),
}

impl Sealed {
    /// What the vault made with the key `key_id`.
    pub(super) fn new(key_id: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self(Repr::Parsed {
            key_id: key_id.into(),
            bytes,
        })
    }

    /// The value stored as `stored`.
    pub fn from_stored(stored: &str) -> Self {
        let parsed = stored
            .rsplit_once('.')
            .filter(|(key_id, _)| !key_id.is_empty())
            .and_then(|(key_id, body)| Some((key_id, B64.decode(body).ok()?)));
        Self(match parsed {
            Some((key_id, bytes)) => Repr::Parsed {
                key_id: key_id.to_string(),
                bytes,
            },
            None => Repr::Unreadable(stored.to_string()),
        })
    }

    /// The key id and the sealed bytes; `None` for a stored string that did not parse.
    pub(super) fn parts(&self) -> Option<(&str, &[u8])> {
        match &self.0 {
            Repr::Parsed { key_id, bytes } => Some((key_id, bytes)),
            Repr::Unreadable(_) => None,
        }
    }

    /// The stored form.
    pub fn to_stored(&self) -> String {
        match &self.0 {
            Repr::Parsed { key_id, bytes } => format!("{key_id}.{}", B64.encode(bytes)),
            Repr::Unreadable(stored) => stored.clone(),
        }
    }
}

/// The key id only: the bytes are ciphertext, but nothing reads them from a log line.
impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Parsed { key_id, bytes } => write!(f, "Sealed({key_id}, {} bytes)", bytes.len()),
            Repr::Unreadable(_) => f.write_str("Sealed(unreadable)"),
        }
    }
}

impl Serialize for Sealed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_stored())
    }
}

impl<'de> Deserialize<'de> for Sealed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(Self::from_stored(&stored))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_stored_form_round_trips_and_splits_at_the_last_dot() {
        for stored in ["dk0a1b2c3d.AAECAwQ", "cvc1.0123456789ab.42.AAECAwQ"] {
            let sealed = Sealed::from_stored(stored);
            let (key_id, bytes) = sealed.parts().unwrap();
            assert_eq!(format!("{key_id}.{}", B64.encode(bytes)), stored);
            assert_eq!(bytes, [0, 1, 2, 3, 4]);
            assert_eq!(sealed.to_stored(), stored);
            let json = serde_json::to_string(&sealed).unwrap();
            assert_eq!(json, format!("\"{stored}\""));
            assert_eq!(serde_json::from_str::<Sealed>(&json).unwrap(), sealed);
        }
    }

    #[test]
    fn a_string_that_does_not_parse_is_kept_as_it_was_and_never_opens() {
        for stored in ["", "no-dot", ".AAECAwQ", "dk1.not base64!", "dk1.AAECAwQ="] {
            let sealed = Sealed::from_stored(stored);
            assert_eq!(sealed.parts(), None, "{stored:?}");
            assert_eq!(sealed.to_stored(), stored);
            assert_eq!(format!("{sealed:?}"), "Sealed(unreadable)");
        }
    }
}
