//! Card data protection: envelope encryption at rest, fingerprints and CVC erasure.
//!
//! - [`master::MasterKey`] wraps every other key and never encrypts data itself.
//! - Each project has a keyring (stored wrapped): data-encryption keys with ids (the current
//!   one seals new values; older ones still open old values) and a fingerprint key.
//! - Values are AES-256-GCM sealed with an `aad` that names their place (project, record,
//!   field), so a ciphertext moved elsewhere does not open.
//! - CVCs use [`cvc::CvcKeyring`]: short-lived in-memory keys destroyed after retention.
//! - [`client_keys::ClientKeys`]: the EC keys browsers encrypt `encryptedCard` to (JWE).

pub mod client_keys;
pub mod cvc;
pub mod master;

use crate::store::Store;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use master::{MasterKey, SealKey};
use parking_lot::RwLock;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use zeroize::Zeroizing;

/// A vault failure. Never carries key material or plaintext.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("master key: {0}")]
    MasterKey(String),
    #[error("corrupt {0}")]
    Corrupt(&'static str),
    #[error("decryption failed")]
    Crypto,
    #[error("unknown data key {0}")]
    UnknownKey(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

#[derive(Serialize, Deserialize)]
struct KeyringFile {
    /// Wrapped fingerprint key; never rotates (fingerprints must stay comparable).
    fingerprint_key: String,
    /// Wrapped data keys by id.
    data_keys: Vec<(String, String)>,
    /// Id of the key that seals new values.
    current: String,
}

struct Keyring {
    fingerprint_key: Zeroizing<[u8; 32]>,
    /// Data keys by id, expanded once.
    data_keys: HashMap<String, SealKey>,
    current: String,
}

/// Seals and opens card data for all projects.
pub struct Vault {
    master: MasterKey,
    store: Arc<dyn Store>,
    keyrings: RwLock<HashMap<String, Arc<Keyring>>>,
    cvc: cvc::CvcKeyring,
    client: client_keys::ClientKeys,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vault({:?})", self.master)
    }
}

impl Vault {
    pub fn new(master: MasterKey, store: Arc<dyn Store>, cvc_retention: Duration) -> Self {
        Self {
            master,
            client: client_keys::ClientKeys::new(store.clone()),
            store,
            keyrings: RwLock::new(HashMap::new()),
            cvc: cvc::CvcKeyring::new(cvc_retention),
        }
    }

    fn keyring(&self, project: &str) -> Result<Arc<Keyring>, VaultError> {
        if let Some(k) = self.keyrings.read().get(project) {
            return Ok(k.clone());
        }
        let bytes = match self.store.load_keyring(project)? {
            Some(b) => b,
            None => self
                .store
                .create_keyring(project, &self.new_keyring_file(project)?)?,
        };
        let file: KeyringFile =
            serde_json::from_slice(&bytes).map_err(|_| VaultError::Corrupt("keyring"))?;
        let fingerprint_key = self.master.unwrap_key(
            &format!("paycred/{project}/fingerprint"),
            &file.fingerprint_key,
        )?;
        let mut data_keys = HashMap::new();
        for (id, wrapped) in &file.data_keys {
            let key = self
                .master
                .unwrap_key(&format!("paycred/{project}/data/{id}"), wrapped)?;
            data_keys.insert(id.clone(), SealKey::new(&key));
        }
        if !data_keys.contains_key(&file.current) {
            return Err(VaultError::Corrupt("keyring current key"));
        }
        let ring = Arc::new(Keyring {
            fingerprint_key,
            data_keys,
            current: file.current,
        });
        self.keyrings
            .write()
            .insert(project.to_string(), ring.clone());
        Ok(ring)
    }

    fn new_keyring_file(&self, project: &str) -> Result<Vec<u8>, VaultError> {
        let mut fp = Zeroizing::new([0u8; 32]);
        let mut dk = Zeroizing::new([0u8; 32]);
        rand::rngs::OsRng.fill_bytes(fp.as_mut_slice());
        rand::rngs::OsRng.fill_bytes(dk.as_mut_slice());
        let dk_id = format!("dk{}", hex::encode(&uuid::Uuid::new_v4().as_bytes()[..4]));
        let file = KeyringFile {
            fingerprint_key: self
                .master
                .wrap(&format!("paycred/{project}/fingerprint"), &fp)?,
            data_keys: vec![(
                dk_id.clone(),
                self.master
                    .wrap(&format!("paycred/{project}/data/{dk_id}"), &dk)?,
            )],
            current: dk_id,
        };
        serde_json::to_vec(&file).map_err(|_| VaultError::Corrupt("keyring"))
    }

    /// Seals `plaintext` for `project`, bound to `aad`: `key_id.base64(nonce||ct)`.
    pub fn seal(&self, project: &str, aad: &str, plaintext: &[u8]) -> Result<String, VaultError> {
        let ring = self.keyring(project)?;
        let key = ring
            .data_keys
            .get(&ring.current)
            .ok_or(VaultError::Corrupt("keyring"))?;
        let sealed = key.seal(aad.as_bytes(), plaintext)?;
        Ok(format!("{}.{}", ring.current, B64.encode(sealed)))
    }

    /// Opens what [`Self::seal`] produced with the same project and `aad`.
    pub fn open(
        &self,
        project: &str,
        aad: &str,
        sealed: &str,
    ) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let ring = self.keyring(project)?;
        let (id, body) = sealed
            .split_once('.')
            .ok_or(VaultError::Corrupt("sealed value"))?;
        let key = ring
            .data_keys
            .get(id)
            .ok_or_else(|| VaultError::UnknownKey(id.to_string()))?;
        let bytes = B64
            .decode(body)
            .map_err(|_| VaultError::Corrupt("sealed value"))?;
        key.open(aad.as_bytes(), &bytes)
    }

    /// A stable secret derived from the master key for `context` (see [`MasterKey::derive`]).
    pub fn derive_secret(&self, context: &str) -> Zeroizing<[u8; 32]> {
        self.master.derive(context)
    }

    /// Keyed HMAC-SHA256 of a card number, per project (128 bits, hex).
    pub fn fingerprint(&self, project: &str, pan: &str) -> Result<String, VaultError> {
        let ring = self.keyring(project)?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(ring.fingerprint_key.as_slice())
            .map_err(|_| VaultError::Crypto)?;
        mac.update(pan.as_bytes());
        Ok(hex::encode(&mac.finalize().into_bytes()[..16]))
    }

    /// Seals a CVC stored at `now_secs` under the short-lived key of that time's bucket (the
    /// time a token first stored it, when a payment method takes a token's cvc).
    pub fn seal_cvc(&self, aad: &str, cvc: &str, now_secs: u64) -> Option<String> {
        self.cvc.seal(aad, cvc, now_secs)
    }

    /// The CVC while it is retained.
    pub fn open_cvc(&self, aad: &str, sealed: &str, now_secs: u64) -> Option<Zeroizing<String>> {
        self.cvc.open(aad, sealed, now_secs)
    }

    /// Destroys expired CVC keys.
    pub fn sweep_cvc_keys(&self, now_secs: u64) {
        self.cvc.sweep(now_secs);
    }

    /// The project's current client-encryption public key (JWK with `kid`).
    pub fn client_public_key(&self, project: &str) -> Result<serde_json::Value, VaultError> {
        self.client.current_public(&self.master, project)
    }

    /// Decrypts an `encryptedCard` JWE made with one of the project's unretired keys.
    pub fn open_client_jwe(
        &self,
        project: &str,
        compact: &str,
    ) -> Result<Zeroizing<Vec<u8>>, client_keys::JweError> {
        self.client.decrypt(&self.master, project, compact)
    }

    /// Adds a client-encryption key and makes it current; returns its kid.
    pub fn rotate_client_key(&self, project: &str) -> Result<String, VaultError> {
        self.client.rotate(&self.master, project)
    }

    /// Retires a client-encryption key; `Ok(false)` when the kid is unknown.
    pub fn retire_client_key(
        &self,
        project: &str,
        kid: &str,
    ) -> Result<bool, client_keys::RetireError> {
        self.client.retire(project, kid)
    }

    /// The project's client-encryption keys.
    pub fn client_keys(&self, project: &str) -> Result<Vec<client_keys::KeyInfo>, VaultError> {
        self.client.list(project)
    }
}
