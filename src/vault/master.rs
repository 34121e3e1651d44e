//! The master key: 32 bytes from a file or `PAYCRED_MASTER_KEY` (64 hex characters), or a
//! root key that an HSM or KMS opened at start ([`super::provider`]). It only wraps other
//! keys; its id (a hash prefix, never the key) is stored with everything it wraps, so a
//! rotated-out key is recognised instead of silently failing.
//!
//! During a rotation ([`super::rotate`]) the key before it can be held too
//! ([`MasterKey::with_previous`], `previous_master_key`): what it wrapped still unwraps,
//! chosen by the id stored with it; everything new is wrapped by the current key.

use super::VaultError;
use crate::secret::KeyMaterial;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::path::Path;
use zeroize::Zeroizing;

/// Environment variable that overrides the file of `master_key_file` (or of `master_key` with
/// `provider: file`).
pub const MASTER_KEY_ENV: &str = "PAYCRED_MASTER_KEY";

/// The key-encryption key.
#[derive(Clone)]
pub struct MasterKey {
    id: String,
    key: KeyMaterial,
    /// Keys a rotation moves away from, by id: they only unwrap.
    previous: Vec<(String, KeyMaterial)>,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({})", self.id)
    }
}

impl MasterKey {
    /// From 64 hex characters (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<Self, VaultError> {
        let text = Zeroizing::new(text.trim().to_string());
        let mut bytes = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text.as_bytes(), bytes.as_mut_slice())
            .map_err(|_| VaultError::MasterKey("must be 64 hex characters (32 bytes)".into()))?;
        Ok(Self::from_key(KeyMaterial::from(bytes)))
    }

    /// From the key's 32 bytes (a root key a provider opened).
    pub fn from_key(key: KeyMaterial) -> Self {
        let id = hex::encode(
            &Sha256::digest(
                [
                    b"paycred-master-key-id:".as_slice(),
                    key.expose().as_slice(),
                ]
                .concat(),
            )[..6],
        );
        Self {
            id,
            key,
            previous: Vec::new(),
        }
    }

    /// This key, also unwrapping what `previous` (and the keys it holds) wrapped.
    pub fn with_previous(mut self, previous: MasterKey) -> Self {
        for (id, key) in std::iter::once((previous.id, previous.key)).chain(previous.previous) {
            if id != self.id && !self.previous.iter().any(|(p, _)| *p == id) {
                self.previous.push((id, key));
            }
        }
        self
    }

    /// The ids of the keys held only to unwrap.
    pub fn previous_ids(&self) -> impl Iterator<Item = &str> {
        self.previous.iter().map(|(id, _)| id.as_str())
    }

    /// The id of the master key that wrapped `wrapped` (what [`Self::wrap`] wrote).
    pub fn wrapped_by(wrapped: &str) -> Option<&str> {
        wrapped.split_once(':').map(|(id, _)| id)
    }

    /// From the environment variable if set, else from the file.
    pub fn load(file: &Path) -> Result<Self, VaultError> {
        if let Ok(v) = std::env::var(MASTER_KEY_ENV) {
            return Self::from_hex(&v)
                .map_err(|e| VaultError::MasterKey(format!("{MASTER_KEY_ENV}: {e}")));
        }
        Self::from_file(file)
    }

    /// From the file alone.
    pub fn from_file(file: &Path) -> Result<Self, VaultError> {
        let text = Zeroizing::new(std::fs::read_to_string(file).map_err(|e| {
            VaultError::MasterKey(format!(
                "cannot read {}: {e}; create one with `paycred master-key --out {}` or set {MASTER_KEY_ENV}",
                file.display(),
                file.display()
            ))
        })?);
        Self::from_hex(&text).map_err(|e| VaultError::MasterKey(format!("{}: {e}", file.display())))
    }

    /// A fresh random key, as hex.
    pub fn generate_hex() -> Zeroizing<String> {
        Zeroizing::new(hex::encode(KeyMaterial::random().expose()))
    }

    /// Key id stored beside what this key wraps.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A stable 32-byte secret for `context`: HMAC-SHA256(master key, context). The same
    /// master key gives the same secret after a restart (e.g. the sandbox issuer's secret).
    pub fn derive(&self, context: &str) -> KeyMaterial {
        derive(&self.key, context)
    }

    /// [`Self::derive`] with the oldest key held (the first previous key given, else this
    /// one): a secret that was derived before a rotation began.
    pub fn derive_oldest(&self, context: &str) -> KeyMaterial {
        let key = self.previous.last().map_or(&self.key, |(_, key)| key);
        derive(key, context)
    }

    /// The audit head's MAC keys ([`crate::audit::head_mac`]): this key's first, then the
    /// previous keys', each under its master key's id.
    pub fn head_keys(&self) -> crate::audit::head_mac::HeadKeys {
        use crate::audit::head_mac::{HeadKeys, LABEL};
        HeadKeys::new(
            std::iter::once((&self.id, &self.key))
                .chain(self.previous.iter().map(|(id, key)| (id, key)))
                .map(|(id, key)| (id.clone(), derive(key, LABEL)))
                .collect(),
        )
    }

    /// Wraps a 32-byte key: `mk_id:base64(nonce || ciphertext)`, bound to `context`.
    pub fn wrap(&self, context: &str, key: &KeyMaterial) -> Result<String, VaultError> {
        let sealed = SealKey::new(&self.key).seal(context.as_bytes(), key.expose())?;
        Ok(format!("{}:{}", self.id, B64.encode(sealed)))
    }

    /// Unwraps what [`Self::wrap`] produced with the same `context`.
    pub fn unwrap_key(&self, context: &str, wrapped: &str) -> Result<KeyMaterial, VaultError> {
        let (id, body) = wrapped
            .split_once(':')
            .ok_or(VaultError::Corrupt("wrapped key"))?;
        let key = if id == self.id {
            &self.key
        } else {
            match self.previous.iter().find(|(p, _)| p == id) {
                Some((_, key)) => key,
                None => return Err(self.missing(id)),
            }
        };
        let bytes = B64
            .decode(body)
            .map_err(|_| VaultError::Corrupt("wrapped key"))?;
        let plain = SealKey::new(key).open(context.as_bytes(), &bytes)?;
        let mut key = Zeroizing::new([0u8; 32]);
        if plain.len() != 32 {
            return Err(VaultError::Corrupt("wrapped key length"));
        }
        key.copy_from_slice(&plain);
        Ok(KeyMaterial::from(key))
    }

    /// What a key wrapped by master key `id`, which this one does not hold, needs.
    fn missing(&self, id: &str) -> VaultError {
        let also: Vec<&str> = self.previous_ids().collect();
        let also = if also.is_empty() {
            String::new()
        } else {
            format!(" (previous: {})", also.join(", "))
        };
        VaultError::MasterKey(format!(
            "data is wrapped by master key {id}, but the configured master key is {}{also}: \
             if a rotation from or to {id} was begun, give both keys (master_key and \
             previous_master_key) and finish it with `paycred master-key rotate` \
             (docs/operations.md)",
            self.id
        ))
    }

    /// `wrapped` wrapped by this key instead: `None` when it is already; else it is unwrapped
    /// (by a previous key) and wrapped again under the same `context`.
    pub fn rewrap(&self, context: &str, wrapped: &str) -> Result<Option<String>, VaultError> {
        if Self::wrapped_by(wrapped) == Some(self.id.as_str()) {
            return Ok(None);
        }
        let key = self.unwrap_key(context, wrapped)?;
        self.wrap(context, &key).map(Some)
    }
}

/// HMAC-SHA256(`key`, `context`).
pub(super) fn derive(key: &KeyMaterial, context: &str) -> KeyMaterial {
    use hmac::{Hmac, Mac};
    // A 32-byte key is zero-padded to SHA-256's block by HMAC's definition; padding it
    // here avoids the fallible `new_from_slice`.
    let mut padded = Zeroizing::new([0u8; 64]);
    padded[..32].copy_from_slice(key.expose());
    let mut mac = <Hmac<Sha256> as Mac>::new(&(*padded).into());
    mac.update(context.as_bytes());
    KeyMaterial::new(mac.finalize().into_bytes().into())
}

/// An AES-256-GCM key with its key schedule expanded once: sealing and opening with a kept
/// `SealKey` skips the expansion that building a cipher per call costs. The expanded keys are
/// zeroed on drop (the `zeroize` features of `aes`, `ghash` and `polyval`).
pub struct SealKey(Aes256Gcm);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    pub fn new(key: &KeyMaterial) -> Self {
        SealKey(Aes256Gcm::new(key.expose().into()))
    }

    /// `nonce(12) || ciphertext+tag`, with `aad` and a random nonce.
    pub fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, VaultError> {
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let ct = self
            .0
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .map_err(|_| VaultError::Crypto)?;
        let mut out = Vec::with_capacity(12 + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Opens what [`SealKey::seal`] produced with the same key and `aad`.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        if sealed.len() < 12 + 16 {
            return Err(VaultError::Corrupt("ciphertext too short"));
        }
        let (nonce, ct) = sealed.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| VaultError::Corrupt("nonce"))?;
        self.0
            .decrypt(&Nonce::from(nonce), Payload { msg: ct, aad })
            .map(Zeroizing::new)
            .map_err(|_| VaultError::Crypto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_round_trips_and_binds_the_context() {
        let mk = MasterKey::from_hex(&"11".repeat(32)).unwrap_or_else(|e| unreachable!("{e}"));
        let w = mk
            .wrap("ctx-a", &KeyMaterial::new([7u8; 32]))
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            *mk.unwrap_key("ctx-a", &w)
                .unwrap_or_else(|e| unreachable!("{e}"))
                .expose(),
            [7u8; 32]
        );
        assert!(mk.unwrap_key("ctx-b", &w).is_err());
        let other = MasterKey::from_hex(&"22".repeat(32)).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(matches!(
            other.unwrap_key("ctx-a", &w),
            Err(VaultError::MasterKey(_))
        ));
    }

    #[test]
    fn derive_is_stable_and_separates_contexts_and_keys() {
        let mk = MasterKey::from_hex(&"11".repeat(32)).unwrap_or_else(|e| unreachable!("{e}"));
        let again = MasterKey::from_hex(&"11".repeat(32)).unwrap_or_else(|e| unreachable!("{e}"));
        let other = MasterKey::from_hex(&"22".repeat(32)).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(mk.derive("a"), again.derive("a"));
        assert_ne!(mk.derive("a"), mk.derive("b"));
        assert_ne!(mk.derive("a"), other.derive("a"));
    }

    #[test]
    fn bad_master_keys_are_refused() {
        assert!(MasterKey::from_hex("abc").is_err());
        assert!(MasterKey::from_hex(&"zz".repeat(32)).is_err());
        assert!(MasterKey::from_hex(&format!(" {}\n", "ab".repeat(32))).is_ok());
    }
}
