//! The audit chain's hash: `hash = H(prev_hash || event JSON)`, H being SHA-256 or BLAKE3.
//! Each entry's `hash` names its function: `blake3:` and 64 hex digits, or 64 hex digits
//! alone for SHA-256. So a log verifies whichever function wrote each entry, and may hold
//! both; a tool that knows only SHA-256 reads only SHA-256 entries (`audit_hash: sha256`
//! pins it).
//!
//! The writer uses the function the configuration names (`audit_hash`), by default the
//! faster of the two on the CPU it runs on ([`HashFunction::fastest`]), as TLS prefers
//! AES-GCM where the CPU has AES instructions and ChaCha20 where it has none: SHA-256 where
//! the CPU has SHA instructions (x86's SHA extensions, Armv8's SHA2), BLAKE3 elsewhere. One
//! proxy entry (`cargo bench --bench audit_chain`, 232 bytes) on this repo's bench machine:
//! SHA-256 204 ns with the SHA extensions and 592 ns without them, BLAKE3 263 ns
//! (docs/performance.md). Both are collision resistant; the chain is unkeyed
//! either way: what a rewrite cannot recompute without the master key is the recorded head's
//! MAC ([`super::head_mac`]).

use super::{AuditEntry, AuditEvent};

/// What a BLAKE3 hash starts with.
const BLAKE3_PREFIX: &str = "blake3:";

/// A hash function the chain may use (`audit_hash` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashFunction {
    /// Hex digits alone.
    Sha256,
    /// `blake3:` and hex digits.
    Blake3,
}

/// The faster of the two on this CPU (`audit_hash: auto`).
impl Default for HashFunction {
    fn default() -> Self {
        HashFunction::fastest()
    }
}

impl HashFunction {
    /// The faster of the two on this CPU (see the module's doc).
    pub fn fastest() -> Self {
        if has_sha_instructions() {
            HashFunction::Sha256
        } else {
            HashFunction::Blake3
        }
    }

    /// `audit_hash` as configured: `auto` (the default), `sha256` or `blake3`.
    pub fn configured(name: &str) -> Option<Self> {
        match name {
            "auto" => Some(HashFunction::default()),
            "sha256" => Some(HashFunction::Sha256),
            "blake3" => Some(HashFunction::Blake3),
            _ => None,
        }
    }

    /// The function an entry's stored `hash` names; `None` for a form neither writes.
    pub fn named_by(hash: &str) -> Option<Self> {
        let (function, digits) = match hash.strip_prefix(BLAKE3_PREFIX) {
            Some(digits) => (HashFunction::Blake3, digits),
            None => (HashFunction::Sha256, hash),
        };
        let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        (digits.len() == 64 && digits.bytes().all(lower_hex)).then_some(function)
    }

    /// `H(prev_hash || event_json)` in its stored form.
    pub fn hash(self, prev_hash: &str, event_json: &[u8]) -> String {
        let (prefix, digest) = match self {
            // OpenSSL's (linked already, for TLS): it uses the CPU's SHA extensions.
            HashFunction::Sha256 => {
                let mut h = openssl::sha::Sha256::new();
                h.update(prev_hash.as_bytes());
                h.update(event_json);
                ("", h.finish())
            }
            HashFunction::Blake3 => {
                let mut h = blake3::Hasher::new();
                h.update(prev_hash.as_bytes());
                h.update(event_json);
                (BLAKE3_PREFIX, *h.finalize().as_bytes())
            }
        };
        // `hex::encode` goes char by char through an iterator (about 2k instructions a
        // hash); its slice form is a table lookup a byte. 32 bytes always fit in 64 digits.
        let mut digits = [0u8; 64];
        match hex::encode_to_slice(digest, &mut digits) {
            Ok(()) => {
                let mut stored = String::with_capacity(prefix.len() + digits.len());
                stored.push_str(prefix);
                stored.push_str(std::str::from_utf8(&digits).unwrap_or_default());
                stored
            }
            Err(_) => String::new(),
        }
    }

    /// The hash of an entry with `prev_hash` and `event`: [`Self::hash`] of the event's
    /// JSON as serde writes it (and the writer, `file::push_event`, byte for byte).
    pub fn hash_event(self, prev_hash: &str, event: &AuditEvent) -> Option<String> {
        let event_json = serde_json::to_vec(event).ok()?;
        Some(self.hash(prev_hash, &event_json))
    }
}

/// Whether `entry.hash` is what the function it names makes of its `prev_hash` and event.
pub fn hash_holds(entry: &AuditEntry) -> bool {
    HashFunction::named_by(&entry.hash)
        .and_then(|function| function.hash_event(&entry.prev_hash, &entry.event))
        .is_some_and(|expected| expected == entry.hash)
}

/// Whether the CPU has instructions for SHA-256.
fn has_sha_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sha")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("sha2")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn each_function_hashes_the_previous_hash_then_the_event() {
        // sha256("abc") and blake3("abc") (the BLAKE3 team's b3sum agrees), cut between the
        // previous hash and the event at every place.
        let sha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let blake3 = "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85";
        for cut in 0..=3 {
            let (prev, event) = "abc".split_at(cut);
            assert_eq!(HashFunction::Sha256.hash(prev, event.as_bytes()), sha256);
            assert_eq!(
                HashFunction::Blake3.hash(prev, event.as_bytes()),
                format!("blake3:{blake3}")
            );
        }
    }

    #[test]
    fn a_hash_names_its_function() {
        for function in [HashFunction::Sha256, HashFunction::Blake3] {
            assert_eq!(
                HashFunction::named_by(&function.hash("", b"{}")),
                Some(function)
            );
        }
        let digits = "a".repeat(64);
        for not_a_hash in [
            String::new(),
            "blake3:".into(),
            "a".repeat(63),
            "a".repeat(65),
            "A".repeat(64),
            format!("blake3:{}", "g".repeat(64)),
            format!("sha256:{digits}"),
            format!("blake3:{digits} "),
            format!("blake3:blake3:{}", "a".repeat(57)),
        ] {
            assert_eq!(HashFunction::named_by(&not_a_hash), None, "{not_a_hash:?}");
        }
    }

    #[test]
    fn a_hash_holds_only_for_its_own_function_and_content() {
        let event = AuditEvent {
            at_micros: 1,
            action: "proxy.use".into(),
            project: "p".into(),
            entity: "e".into(),
            resource: "host=example.com status=200 templates=1".into(),
        };
        for function in [HashFunction::Sha256, HashFunction::Blake3] {
            let prev = function.hash("", b"{}");
            let mut entry = AuditEntry {
                seq: 2,
                hash: function.hash_event(&prev, &event).unwrap(),
                prev_hash: prev,
                event: event.clone(),
            };
            assert!(hash_holds(&entry));
            entry.event.entity = "mallory".into();
            assert!(!hash_holds(&entry));
        }
        // The digits of one function under the other's name.
        let sha = HashFunction::Sha256.hash_event("", &event).unwrap();
        let entry = AuditEntry {
            seq: 1,
            event,
            prev_hash: String::new(),
            hash: format!("blake3:{sha}"),
        };
        assert!(!hash_holds(&entry));
    }
}
