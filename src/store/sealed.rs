//! [`Sealed`]: a value the vault sealed, held parsed.
//!
//! Stored, a sealed value is one string: `<data key id>.<base64(nonce || ciphertext)>` under
//! a project's data key, `cvc1.<epoch>.<bucket>.<base64(…)>` under a short-lived cvc key
//! (`vault::cvc`). Records hold it already split and decoded: the payment-method cache then
//! keeps the bytes, and opening a stored card decodes nothing on the proxy's path
//! (docs/performance.md).

use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A sealed value: which key opens it, and the sealed bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// Under the project's data key `key_id`.
    Data { key_id: String, bytes: Vec<u8> },
    /// Under the cvc key of `bucket` in the process run `epoch`.
    Cvc {
        epoch: String,
        bucket: u64,
        bytes: Vec<u8>,
    },
    /// A stored string that does not parse: kept as it was (written back unchanged), and
    /// never opens.
    Unreadable(String),
}

/// The first part of a value sealed under a cvc key.
const CVC: &str = "cvc1.";

impl Sealed {
    /// What the vault sealed with the data key `key_id`.
    pub(crate) fn data(key_id: &str, bytes: Vec<u8>) -> Self {
        Self(Repr::Data {
            key_id: key_id.to_string(),
            bytes,
        })
    }

    /// What the cvc keyring sealed with the key of `bucket` in the run `epoch`.
    pub(crate) fn cvc(epoch: &str, bucket: u64, bytes: Vec<u8>) -> Self {
        Self(Repr::Cvc {
            epoch: epoch.to_string(),
            bucket,
            bytes,
        })
    }

    /// The value stored as `stored`. Only the exact stored form parses (a bucket number
    /// without leading zeros, base64 without padding), so [`Self::to_stored`] gives back the
    /// same string.
    pub fn from_stored(stored: &str) -> Self {
        let parsed = match stored.strip_prefix(CVC) {
            Some(rest) => Self::parse_cvc(rest),
            None => Self::parse_data(stored),
        };
        parsed.unwrap_or_else(|| Self(Repr::Unreadable(stored.to_string())))
    }

    /// `<key id>.<base64>`.
    fn parse_data(stored: &str) -> Option<Self> {
        let (key_id, body) = stored.split_once('.')?;
        if key_id.is_empty() {
            return None;
        }
        Some(Self::data(key_id, B64.decode(body).ok()?))
    }

    /// `<epoch>.<bucket>.<base64>`, after the [`CVC`] prefix.
    fn parse_cvc(rest: &str) -> Option<Self> {
        let mut parts = rest.splitn(3, '.');
        let (epoch, bucket_text, body) = (parts.next()?, parts.next()?, parts.next()?);
        let bucket: u64 = bucket_text.parse().ok()?;
        if epoch.is_empty() || bucket.to_string() != bucket_text {
            return None;
        }
        Some(Self::cvc(epoch, bucket, B64.decode(body).ok()?))
    }

    /// The data key id and the sealed bytes; `None` unless sealed under a data key.
    pub(crate) fn under_data_key(&self) -> Option<(&str, &[u8])> {
        match &self.0 {
            Repr::Data { key_id, bytes } => Some((key_id, bytes)),
            _ => None,
        }
    }

    /// The run, the bucket and the sealed bytes; `None` unless sealed under a cvc key.
    pub(crate) fn under_cvc_key(&self) -> Option<(&str, u64, &[u8])> {
        match &self.0 {
            Repr::Cvc {
                epoch,
                bucket,
                bytes,
            } => Some((epoch, *bucket, bytes)),
            _ => None,
        }
    }

    /// The stored form.
    pub fn to_stored(&self) -> String {
        match &self.0 {
            Repr::Data { key_id, bytes } => format!("{key_id}.{}", B64.encode(bytes)),
            Repr::Cvc {
                epoch,
                bucket,
                bytes,
            } => format!("{CVC}{epoch}.{bucket}.{}", B64.encode(bytes)),
            Repr::Unreadable(stored) => stored.clone(),
        }
    }
}

/// Which key, and how many bytes: never the bytes (ciphertext, but nothing needs it in a log
/// line).
impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Data { key_id, bytes } => write!(f, "Sealed({key_id}, {} bytes)", bytes.len()),
            Repr::Cvc { bucket, bytes, .. } => {
                write!(f, "Sealed(cvc bucket {bucket}, {} bytes)", bytes.len())
            }
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
        struct Stored;
        impl serde::de::Visitor<'_> for Stored {
            type Value = Sealed;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sealed value")
            }
            // Parsed straight from the input: no copy of the string first.
            fn visit_str<E: serde::de::Error>(self, stored: &str) -> Result<Sealed, E> {
                Ok(Sealed::from_stored(stored))
            }
        }
        deserializer.deserialize_str(Stored)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_stored_forms_parse_and_round_trip() {
        let data = Sealed::from_stored("dk0a1b2c3d.AAECAwQ");
        assert_eq!(
            data.under_data_key(),
            Some(("dk0a1b2c3d", &[0, 1, 2, 3, 4][..]))
        );
        assert_eq!(data.under_cvc_key(), None);
        let cvc = Sealed::from_stored("cvc1.0123456789ab.42.AAECAwQ");
        assert_eq!(
            cvc.under_cvc_key(),
            Some(("0123456789ab", 42, &[0, 1, 2, 3, 4][..]))
        );
        assert_eq!(cvc.under_data_key(), None);
        for (sealed, stored) in [
            (data, "dk0a1b2c3d.AAECAwQ"),
            (cvc, "cvc1.0123456789ab.42.AAECAwQ"),
        ] {
            assert_eq!(sealed.to_stored(), stored);
            let json = serde_json::to_string(&sealed).unwrap();
            assert_eq!(json, format!("\"{stored}\""));
            assert_eq!(serde_json::from_str::<Sealed>(&json).unwrap(), sealed);
            // An escaped string (serde cannot lend it) parses the same.
            let escaped = json.replacen('A', "\\u0041", 1);
            assert_eq!(serde_json::from_str::<Sealed>(&escaped).unwrap(), sealed);
        }
    }

    #[test]
    fn anything_else_is_kept_as_it_was_and_opens_under_no_key() {
        for stored in [
            "",
            "no-dot",
            ".AAECAwQ",
            "dk1.not base64!",
            "dk1.AAECAwQ=",
            "dk1.abc.def",
            "cvc1.e.AAECAwQ",
            "cvc1.e.042.AAECAwQ",
            "cvc1..42.AAECAwQ",
            "cvc1.e.x.AAECAwQ",
        ] {
            let sealed = Sealed::from_stored(stored);
            assert_eq!(sealed.under_data_key(), None, "{stored:?}");
            assert_eq!(sealed.under_cvc_key(), None, "{stored:?}");
            assert_eq!(sealed.to_stored(), stored);
            assert_eq!(format!("{sealed:?}"), "Sealed(unreadable)");
        }
    }

    #[test]
    fn debug_names_the_key_but_never_the_bytes() {
        for stored in ["dk0a1b2c3d.AAECAwQ", "cvc1.0123456789ab.42.AAECAwQ"] {
            let shown = format!("{:?}", Sealed::from_stored(stored));
            assert!(
                shown.contains("5 bytes") && !shown.contains("AAECAwQ"),
                "{shown}"
            );
        }
    }
}
