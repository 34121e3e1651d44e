//! Card data protection: envelope encryption at rest, fingerprints and CVC erasure.
//!
//! - [`master::MasterKey`] wraps every other key and never encrypts data itself. It comes
//!   from a file, or is a root key that an HSM (PKCS#11) or AWS KMS opens once at start
//!   ([`provider`]): with those, the key that opens the root key never leaves the HSM or KMS,
//!   the host keeps the root key only wrapped by it, and no request calls the HSM or KMS.
//! - Each project has a keyring (stored wrapped): data-encryption keys with ids (the current
//!   one seals new values; older ones still open old values) and a fingerprint key, which
//!   keys card numbers' fingerprints and, through a key derived from it, the fingerprints
//!   idempotency records keep of their requests ([`Vault::request_fingerprint`]).
//! - Values are AES-256-GCM sealed with an `aad` that names their place (project, record,
//!   field), so a ciphertext moved elsewhere does not open.
//! - CVCs use [`cvc::CvcKeyring`]: short-lived keys from a ratchet kept in the store, destroyed
//!   after retention.
//! - [`client_keys::ClientKeys`]: the EC keys browsers encrypt `encryptedCard` to (JWE).
//!
//! May import: `store` (keyrings and client keys are stored wrapped), `audit` (the head's MAC
//! keys come from the master key), `config` (the master key's provider), `secret`, `clock`,
//! `error`.

pub mod client_keys;
pub mod cvc;
pub mod master;
pub mod provider;
pub mod rotate;

pub use crate::store::Sealed;

use crate::secret::{CardNumber, Cvc, KeyMaterial};
use crate::store::Store;
use hmac::{Hmac, Mac};
use master::{MasterKey, SealKey};
use parking_lot::RwLock;
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
    #[error("the project has no keys in this store yet (they are made on first use)")]
    NoKeyring,
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// The key id of a value sealed under a key of its own ([`Vault::seal_under_own_key`]): no
/// data key has it, so such a value never opens without its own key.
const OWN_KEY: &str = "own";

/// A stored keyring's JSON.
fn parse_keyring(bytes: &[u8]) -> Result<KeyringFile, VaultError> {
    serde_json::from_slice(bytes).map_err(|_| VaultError::Corrupt("keyring"))
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
    fingerprint_key: KeyMaterial,
    /// Derived from the fingerprint key ([`REQUEST_FINGERPRINT_CONTEXT`]).
    request_key: KeyMaterial,
    /// Data keys by id, expanded once.
    data_keys: HashMap<String, SealKey>,
    current: String,
}

/// What the key of [`Vault::request_fingerprint`] is derived under from the project's
/// fingerprint key; its `v1` is the `k1:` its fingerprints begin with.
const REQUEST_FINGERPRINT_CONTEXT: &str = "paycred idempotency fingerprint v1";

/// How long a keyring (or client keyset) loaded from the store is used before it is compared
/// with the store's again: a key another process rotated in a shared store seals new values
/// here this long after the store returns it at the latest.
pub const KEY_RECHECK: Duration = Duration::from_secs(1);

/// A loaded keyring, the stored bytes it was opened from, and when they last matched the
/// store's.
struct Held {
    ring: Arc<Keyring>,
    bytes: Vec<u8>,
    checked: std::time::Instant,
}

impl Held {
    fn new(ring: Arc<Keyring>, bytes: Vec<u8>) -> Self {
        Self {
            ring,
            bytes,
            checked: std::time::Instant::now(),
        }
    }
}

/// Seals and opens card data for all projects.
pub struct Vault {
    master: MasterKey,
    store: Arc<dyn Store>,
    keyrings: RwLock<HashMap<String, Held>>,
    cvc: cvc::CvcKeyring,
    /// The CVC ratchet as last read from or written to the store (after
    /// [`Vault::attach_cvc_ratchet`]).
    cvc_stored: parking_lot::Mutex<Option<Vec<u8>>>,
    client: client_keys::ClientKeys,
    /// The sandbox issuer's secret as kept in the store (after [`Vault::attach_sandbox_secret`]).
    sandbox: parking_lot::Mutex<Option<KeyMaterial>>,
}

/// The keyring name the sandbox issuer's secret is stored under (not a valid project id).
pub const SANDBOX_STORE_NAME: &str = "~sandbox-issuer";

/// The master key's wrapping context of the sandbox issuer's secret, and the context it was
/// first derived from.
pub const SANDBOX_CONTEXT: &str = "paycred/sandbox-issuer";

/// The sandbox issuer's secret as stored: wrapped by the master key.
#[derive(Serialize, Deserialize)]
pub(crate) struct SandboxFile {
    pub(crate) secret: String,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vault({:?})", self.master)
    }
}

impl From<VaultError> for crate::error::ApiError {
    fn from(e: VaultError) -> Self {
        tracing::error!(error = %e, "vault error");
        crate::error::ApiError::internal()
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
            cvc_stored: parking_lot::Mutex::new(None),
            sandbox: parking_lot::Mutex::new(None),
        }
    }

    /// The project's keyring: cached, else loaded (made on first use) and cached. A miss loads
    /// under the cache's write lock, so a ring loaded before a rotation can never be cached
    /// after it. A cached ring older than [`KEY_RECHECK`] is compared with the store's and
    /// replaced when that changed (a rotation elsewhere); if the store cannot say, or its ring
    /// does not open, the cached one stays (it still opens everything it opened).
    fn keyring(&self, project: &str) -> Result<Arc<Keyring>, VaultError> {
        if let Some(held) = self.keyrings.read().get(project) {
            if held.checked.elapsed() < KEY_RECHECK {
                return Ok(held.ring.clone());
            }
        }
        let mut rings = self.keyrings.write();
        if let Some(held) = rings.get_mut(project) {
            if held.checked.elapsed() < KEY_RECHECK {
                return Ok(held.ring.clone());
            }
            held.checked = std::time::Instant::now();
            let newer = match self.store.load_keyring(project) {
                Ok(Some(bytes)) if bytes != held.bytes => bytes,
                Ok(_) => return Ok(held.ring.clone()),
                Err(e) => {
                    tracing::warn!(error = %e, "keyring not read again; the loaded one stays");
                    return Ok(held.ring.clone());
                }
            };
            match parse_keyring(&newer).and_then(|f| self.open_keyring(project, &f)) {
                Ok(ring) => *held = Held::new(Arc::new(ring), newer),
                Err(e) => {
                    tracing::warn!(error = %e, "stored keyring does not open; the loaded one stays")
                }
            }
            return Ok(held.ring.clone());
        }
        let bytes = match self.store.load_keyring(project)? {
            Some(b) => b,
            None => self
                .store
                .create_keyring(project, &self.new_keyring_file(project)?)?,
        };
        let ring = Arc::new(self.open_keyring(project, &parse_keyring(&bytes)?)?);
        rings.insert(project.to_string(), Held::new(ring.clone(), bytes));
        Ok(ring)
    }

    /// A keyring's keys, unwrapped by the master key (which fails for another master).
    fn open_keyring(&self, project: &str, file: &KeyringFile) -> Result<Keyring, VaultError> {
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
        Ok(Keyring {
            request_key: master::derive(&fingerprint_key, REQUEST_FINGERPRINT_CONTEXT),
            fingerprint_key,
            data_keys,
            current: file.current.clone(),
        })
    }

    fn new_keyring_file(&self, project: &str) -> Result<Vec<u8>, VaultError> {
        let fp = KeyMaterial::random();
        let (dk_id, dk_wrapped) = self.new_data_key(project, &[])?;
        let file = KeyringFile {
            fingerprint_key: self
                .master
                .wrap(&format!("paycred/{project}/fingerprint"), &fp)?,
            data_keys: vec![(dk_id.clone(), dk_wrapped)],
            current: dk_id,
        };
        serde_json::to_vec(&file).map_err(|_| VaultError::Corrupt("keyring"))
    }

    /// A fresh data key for `project`, wrapped by the master key, with an id none of `taken`
    /// has.
    fn new_data_key(
        &self,
        project: &str,
        taken: &[(String, String)],
    ) -> Result<(String, String), VaultError> {
        let dk = KeyMaterial::random();
        let id = loop {
            let id = format!("dk{}", hex::encode(&uuid::Uuid::new_v4().as_bytes()[..4]));
            if !taken.iter().any(|(t, _)| *t == id) {
                break id;
            }
        };
        let wrapped = self
            .master
            .wrap(&format!("paycred/{project}/data/{id}"), &dk)?;
        Ok((id, wrapped))
    }

    /// Adds a data key to the project's existing keyring and makes it current: values sealed
    /// from now on use it; older values keep opening with the key whose id they carry. The
    /// new ring, old keys included, is opened before it is stored, so a wrong master key is
    /// refused rather than adding a key it wrapped. It replaces the cached ring under the
    /// cache's lock. Returns the new key's id.
    pub fn rotate_data_key(&self, project: &str) -> Result<String, VaultError> {
        let mut rings = self.keyrings.write();
        let old = self
            .store
            .load_keyring(project)?
            .ok_or(VaultError::NoKeyring)?;
        let mut file = parse_keyring(&old)?;
        let (id, wrapped) = self.new_data_key(project, &file.data_keys)?;
        file.data_keys.push((id.clone(), wrapped));
        file.current = id.clone();
        let ring = Arc::new(self.open_keyring(project, &file)?);
        let new = serde_json::to_vec(&file).map_err(|_| VaultError::Corrupt("keyring"))?;
        if !self.store.swap_keyring(project, &old, &new)? {
            // Nothing else writes keyrings while the lock is held in this process; another
            // process cannot open the store while this one has it.
            return Err(VaultError::Corrupt("keyring changed during rotation"));
        }
        rings.insert(project.to_string(), Held::new(ring, new));
        Ok(id)
    }

    /// Whether the configured master key opens every key the store holds for `projects`
    /// (keyrings and client-encryption keys). A server started with another master key would
    /// answer every read that needs a key with 500: it refuses to start instead, with the
    /// error that names both keys' ids. Projects without keys yet pass.
    pub fn check_master_key<'a>(
        &self,
        projects: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), VaultError> {
        for project in projects {
            if let Some(bytes) = self.store.load_keyring(project)? {
                self.open_keyring(project, &parse_keyring(&bytes)?)?;
            }
            self.client.check(&self.master, project)?;
        }
        Ok(())
    }

    /// The ids of the project's data keys in the store, oldest first, and the current one's;
    /// [`VaultError::NoKeyring`] before the project's first sealed value.
    pub fn data_key_ids(&self, project: &str) -> Result<(Vec<String>, String), VaultError> {
        let bytes = self
            .store
            .load_keyring(project)?
            .ok_or(VaultError::NoKeyring)?;
        let file = parse_keyring(&bytes)?;
        self.open_keyring(project, &file)?;
        Ok((
            file.data_keys.into_iter().map(|(id, _)| id).collect(),
            file.current,
        ))
    }

    /// Seals `plaintext` for `project` under its current data key, bound to `aad`.
    pub fn seal(&self, project: &str, aad: &str, plaintext: &[u8]) -> Result<Sealed, VaultError> {
        let ring = self.keyring(project)?;
        let key = ring
            .data_keys
            .get(&ring.current)
            .ok_or(VaultError::Corrupt("keyring"))?;
        let sealed = key.seal(aad.as_bytes(), plaintext)?;
        Ok(Sealed::data(&ring.current, sealed))
    }

    /// Opens what [`Self::seal`] produced with the same project and `aad`.
    pub fn open(
        &self,
        project: &str,
        aad: &str,
        sealed: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let mut ring = self.keyring(project)?;
        let (id, bytes) = sealed
            .under_data_key()
            .ok_or(VaultError::Corrupt("sealed value"))?;
        if !ring.data_keys.contains_key(id) {
            // Sealed by an instance that has a newer keyring (a key rotated in the shared
            // store): read the keyring again, once, past the store's cache.
            let mut rings = self.keyrings.write();
            if let Some(bytes) = self.store.reload_keyring(project)? {
                let fresh = Arc::new(self.open_keyring(project, &parse_keyring(&bytes)?)?);
                rings.insert(project.to_string(), Held::new(fresh.clone(), bytes));
                ring = fresh;
            }
        }
        let key = ring
            .data_keys
            .get(id)
            .ok_or_else(|| VaultError::UnknownKey(id.to_string()))?;
        key.open(aad.as_bytes(), bytes)
    }

    /// A stable secret derived from the master key for `context` (see [`MasterKey::derive`]).
    pub fn derive_secret(&self, context: &str) -> KeyMaterial {
        self.master.derive(context)
    }

    /// Takes up the sandbox issuer's secret kept in the store, wrapped by the master key (so
    /// it outlives a master-key rotation). A store without one gets the secret derived from
    /// the master key it ran with ([`SANDBOX_CONTEXT`]; the previous key during a rotation),
    /// which is what it used before the secret was kept: the credentials issued before keep
    /// their cryptograms.
    pub fn attach_sandbox_secret(&self) -> Result<(), VaultError> {
        let bytes = match self.store.load_keyring(SANDBOX_STORE_NAME)? {
            Some(bytes) => bytes,
            None => {
                let secret = self.master.derive_oldest(SANDBOX_CONTEXT);
                let file = SandboxFile {
                    secret: self.master.wrap(SANDBOX_CONTEXT, &secret)?,
                };
                let bytes =
                    serde_json::to_vec(&file).map_err(|_| VaultError::Corrupt("sandbox secret"))?;
                self.store.create_keyring(SANDBOX_STORE_NAME, &bytes)?
            }
        };
        let file: SandboxFile =
            serde_json::from_slice(&bytes).map_err(|_| VaultError::Corrupt("sandbox secret"))?;
        let secret = self.master.unwrap_key(SANDBOX_CONTEXT, &file.secret)?;
        *self.sandbox.lock() = Some(secret);
        Ok(())
    }

    /// The sandbox issuer's secret: the stored one once attached, else the one derived from
    /// the master key.
    pub fn sandbox_secret(&self) -> KeyMaterial {
        self.sandbox
            .lock()
            .clone()
            .unwrap_or_else(|| self.master.derive(SANDBOX_CONTEXT))
    }

    /// Keyed HMAC-SHA256 of a card number, per project (128 bits, hex).
    pub fn fingerprint(&self, project: &str, number: &CardNumber) -> Result<String, VaultError> {
        let ring = self.keyring(project)?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(ring.fingerprint_key.expose())
            .map_err(|_| VaultError::Crypto)?;
        mac.update(number.expose().as_bytes());
        Ok(hex::encode(&mac.finalize().into_bytes()[..16]))
    }

    /// Keyed HMAC-SHA256 of a request's `parts` (joined by NUL bytes), per project: `k1:`
    /// and 256 bits in hex. What an idempotency record keeps of the request it answered, so
    /// that a copy of the store cannot be searched for a card the request carried. The key is
    /// derived from the project's fingerprint key, which every instance on the store opens
    /// alike, data-key rotation leaves alone and master-key rotation only wraps again: the
    /// same request fingerprints the same on every instance for as long as the project lives.
    pub fn request_fingerprint(
        &self,
        project: &str,
        parts: &[&[u8]],
    ) -> Result<String, VaultError> {
        let ring = self.keyring(project)?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(ring.request_key.expose())
            .map_err(|_| VaultError::Crypto)?;
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                mac.update(&[0]);
            }
            mac.update(part);
        }
        Ok(format!("k1:{}", hex::encode(mac.finalize().into_bytes())))
    }

    /// Seals a CVC stored at `now_secs` under the short-lived key of that time's bucket (the
    /// time a token first stored it, when a payment method takes a token's cvc).
    pub fn seal_cvc(&self, aad: &str, cvc: &Cvc, now_secs: u64) -> Option<Sealed> {
        self.cvc.seal(aad, cvc, now_secs)
    }

    /// The CVC while it is retained.
    pub fn open_cvc(&self, aad: &str, sealed: &Sealed, now_secs: u64) -> Option<Cvc> {
        self.cvc.open(aad, sealed, now_secs)
    }

    /// Destroys expired CVC keys; once attached, stores the stepped ratchet in place of the
    /// old one (a store that fails now is tried again at the next sweep).
    pub fn sweep_cvc_keys(&self, now_secs: u64) {
        if let Some((epoch, base, secret)) = self.cvc.sweep(now_secs) {
            self.store_cvc_ratchet(&epoch, base, &secret);
        }
    }

    /// Stores the ratchet stepped to `base` in place of the one last read or written.
    fn store_cvc_ratchet(&self, epoch: &str, base: u64, secret: &KeyMaterial) {
        let mut last = self.cvc_stored.lock();
        let Some(expected) = last.clone() else {
            return;
        };
        let Ok(old) = serde_json::from_slice::<cvc::Stored>(&expected) else {
            return;
        };
        let Ok(wrapped) = self.master.wrap(&cvc::Stored::context(epoch, base), secret) else {
            return;
        };
        let new = cvc::Stored {
            base,
            secret: wrapped,
            ..old
        };
        let Ok(bytes) = serde_json::to_vec(&new) else {
            return;
        };
        match self.store.swap_keyring(cvc::STORE_NAME, &expected, &bytes) {
            Ok(true) => *last = Some(bytes),
            // Another instance stepped it: take what it stored as the one to replace.
            Ok(false) => {
                if let Ok(Some(current)) = self.store.load_keyring(cvc::STORE_NAME) {
                    *last = Some(current);
                }
            }
            Err(e) => tracing::warn!(error = %e, "storing the stepped cvc ratchet"),
        }
    }

    /// Takes up the CVC ratchet kept in the store (made now if there is none), so CVCs
    /// stored before a restart, or through another instance on the same database, open here.
    pub fn attach_cvc_ratchet(&self, now_secs: u64) -> Result<(), VaultError> {
        let bytes = match self.store.load_keyring(cvc::STORE_NAME)? {
            Some(bytes) => bytes,
            None => {
                let fresh = self
                    .cvc
                    .new_stored(now_secs, |context, key| self.master.wrap(context, key).ok())
                    .ok_or(VaultError::Crypto)?;
                let bytes =
                    serde_json::to_vec(&fresh).map_err(|_| VaultError::Corrupt("cvc ratchet"))?;
                self.store.create_keyring(cvc::STORE_NAME, &bytes)?
            }
        };
        let stored: cvc::Stored =
            serde_json::from_slice(&bytes).map_err(|_| VaultError::Corrupt("cvc ratchet"))?;
        let secret = self.master.unwrap_key(
            &cvc::Stored::context(&stored.epoch, stored.base),
            &stored.secret,
        )?;
        let (epoch, base, secret) = self.cvc.attach(&stored, secret, now_secs);
        *self.cvc_stored.lock() = Some(bytes);
        if base > stored.base {
            self.store_cvc_ratchet(&epoch, base, &secret);
        }
        Ok(())
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

    /// Seals `plaintext` under a random key of its own, bound to `aad`, and wraps that key
    /// under the project's current data key, bound to `key_aad`: the sealed value and the
    /// wrapped key. Destroying the wrapped key makes the value impossible to open, whatever
    /// copies of the sealed value remain; rotating the master key re-wraps data keys only.
    pub fn seal_under_own_key(
        &self,
        project: &str,
        aad: &str,
        key_aad: &str,
        plaintext: &[u8],
    ) -> Result<(Sealed, Sealed), VaultError> {
        let key = KeyMaterial::random();
        let sealed = SealKey::new(&key).seal(aad.as_bytes(), plaintext)?;
        let wrapped = self.seal(project, key_aad, key.expose())?;
        Ok((Sealed::data(OWN_KEY, sealed), wrapped))
    }

    /// Opens what [`Self::seal_under_own_key`] produced, with its wrapped key.
    pub fn open_under_own_key(
        &self,
        project: &str,
        aad: &str,
        key_aad: &str,
        sealed: &Sealed,
        wrapped_key: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let plain_key = self.open(project, key_aad, wrapped_key)?;
        let mut key = Zeroizing::new([0u8; 32]);
        if plain_key.len() != key.len() {
            return Err(VaultError::Corrupt("own key length"));
        }
        key.copy_from_slice(&plain_key);
        let (_, bytes) = sealed
            .under_data_key()
            .filter(|(id, _)| *id == OWN_KEY)
            .ok_or(VaultError::Corrupt("sealed value"))?;
        SealKey::new(&KeyMaterial::from(key)).open(aad.as_bytes(), bytes)
    }

    /// The project's client-encryption keys.
    pub fn client_keys(&self, project: &str) -> Result<Vec<client_keys::KeyInfo>, VaultError> {
        self.client.list(project)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::store::SledStore;

    fn vault(store: &Arc<dyn Store>, master: &str) -> Vault {
        let master = MasterKey::from_hex(&master.repeat(32)).unwrap();
        Vault::new(master, store.clone(), Duration::from_secs(3600))
    }

    /// A vault (master key `42…`) over a new store in its own directory.
    fn fresh() -> (tempfile::TempDir, Arc<dyn Store>, Vault) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SledStore::open(dir.path(), Default::default()).unwrap());
        let v = vault(&store, "42");
        (dir, store, v)
    }

    #[test]
    fn cvcs_outlive_a_restart_and_open_on_another_instance_until_retention_ends() {
        let (_dir, store, a) = fresh();
        let t0 = 1_800_000_000;
        a.attach_cvc_ratchet(t0).unwrap();
        let sealed = a.seal_cvc("pm_1", &"123".into(), t0).unwrap();
        // Another instance (or this one restarted) on the same store, a little later.
        let b = vault(&store, "42");
        b.attach_cvc_ratchet(t0 + 600).unwrap();
        assert_eq!(
            b.open_cvc("pm_1", &sealed, t0 + 600)
                .map(|c| c.expose().to_string()),
            Some("123".into())
        );
        let later = b.seal_cvc("pm_2", &"456".into(), t0 + 600).unwrap();
        assert!(a.open_cvc("pm_2", &later, t0 + 600).is_some());
        // Past retention (1 h + a 5 min bucket), a sweep steps the stored secret past the
        // bucket: a vault reading the store then cannot open it, whatever its clock says.
        let expired = t0 + 3600 + 300 + 1;
        let before = store.load_keyring(cvc::STORE_NAME).unwrap().unwrap();
        a.sweep_cvc_keys(expired);
        let after = store.load_keyring(cvc::STORE_NAME).unwrap().unwrap();
        assert_ne!(before, after, "the stored secret was stepped and replaced");
        assert!(a.open_cvc("pm_1", &sealed, expired).is_none());
        let c = vault(&store, "42");
        c.attach_cvc_ratchet(expired).unwrap();
        assert!(c.open_cvc("pm_1", &sealed, expired).is_none());
        assert!(
            c.open_cvc("pm_1", &sealed, t0).is_none(),
            "not even with the clock back"
        );
        assert!(
            c.open_cvc("pm_2", &later, expired).is_some(),
            "a later one still opens"
        );
        // Another master key does not open the stored secret.
        let d = vault(&store, "43");
        assert!(d.attach_cvc_ratchet(expired).is_err());
    }

    #[test]
    fn a_value_opens_only_as_sealed_where_it_was_sealed() {
        let (_dir, _store, v) = fresh();
        let sealed = v.seal("p1", "pm/1/number", b"4242424242424242").unwrap();
        let stored = serde_json::to_string(&sealed).unwrap();
        let read: Sealed = serde_json::from_str(&stored).unwrap();
        assert_eq!(
            &*v.open("p1", "pm/1/number", &read).unwrap(),
            b"4242424242424242"
        );
        assert!(matches!(
            v.open("p1", "pm/2/number", &read),
            Err(VaultError::Crypto)
        ));
        let unreadable = Sealed::from_stored(&sealed.to_stored().replacen('.', ":", 1));
        assert!(matches!(
            v.open("p1", "pm/1/number", &unreadable),
            Err(VaultError::Corrupt(_))
        ));
        let cvc = v.seal_cvc("pm/1/cvc", &"123".into(), 1_000).unwrap();
        assert!(matches!(
            v.open("p1", "pm/1/cvc", &cvc),
            Err(VaultError::Corrupt(_))
        ));
        assert_eq!(
            v.open_cvc("pm/1/cvc", &cvc, 1_000)
                .as_ref()
                .map(|c| c.expose()),
            Some("123")
        );
        assert!(v.open_cvc("pm/1/cvc", &sealed, 1_000).is_none());
    }

    #[test]
    fn request_fingerprints_are_keyed_per_project_and_need_the_master_key() {
        use sha2::Digest;
        let (_dir, store, v) = fresh();
        let request: [&[u8]; 3] = [b"POST", b"/projects/p1/payment-methods", b"{\"n\":1}"];
        let fp = v.request_fingerprint("p1", &request).unwrap();
        let plain = hex::encode(sha2::Sha256::digest(request.join(&0u8)));
        assert_eq!(fp.len(), "k1:".len() + 64);
        assert!(fp.starts_with("k1:"), "{fp}");
        assert!(!fp.contains(&plain), "not the plain hash");
        assert_eq!(fp, v.request_fingerprint("p1", &request).unwrap());
        // Another instance on the store (or a restart) computes the same.
        let other = vault(&store, "42");
        assert_eq!(fp, other.request_fingerprint("p1", &request).unwrap());
        // Another project, another key; another request, another fingerprint.
        assert_ne!(fp, v.request_fingerprint("p2", &request).unwrap());
        let another: [&[u8]; 3] = [b"POST", b"/projects/p1/payment-methods", b"{\"n\":2}"];
        assert_ne!(fp, v.request_fingerprint("p1", &another).unwrap());
        // The store without its master key computes nothing.
        assert!(vault(&store, "43")
            .request_fingerprint("p1", &request)
            .is_err());
        // Not the card-number fingerprint's key either.
        let key = v.keyring("p1").unwrap();
        assert_ne!(key.request_key.expose(), key.fingerprint_key.expose());
    }

    #[test]
    fn a_rotated_data_key_seals_new_values_and_the_old_ones_still_open() {
        let (_dir, store, v) = fresh();
        let old = v.seal("p1", "a", b"4242424242424242").unwrap();
        let (ids, first) = v.data_key_ids("p1").unwrap();
        assert_eq!(ids, vec![first.clone()]);

        // Another master key cannot open the keyring, so it adds nothing to it.
        let before = store.load_keyring("p1").unwrap();
        assert!(vault(&store, "43").rotate_data_key("p1").is_err());
        assert_eq!(store.load_keyring("p1").unwrap(), before);

        let second = v.rotate_data_key("p1").unwrap();
        assert_ne!(second, first);
        assert_eq!(
            v.data_key_ids("p1").unwrap(),
            (vec![first.clone(), second.clone()], second.clone())
        );
        let new = v.seal("p1", "b", b"5555555555554444").unwrap();
        assert!(old.to_stored().starts_with(&format!("{first}.")));
        assert!(new.to_stored().starts_with(&format!("{second}.")));
        // A fresh vault (a restart) reads the rotated keyring from the store.
        let restarted = vault(&store, "42");
        assert_eq!(
            &*restarted.open("p1", "a", &old).unwrap(),
            b"4242424242424242"
        );
        assert_eq!(
            &*restarted.open("p1", "b", &new).unwrap(),
            b"5555555555554444"
        );
        // The fingerprint key does not rotate: fingerprints stay comparable.
        assert_eq!(
            v.fingerprint("p1", &"4242424242424242".into()).unwrap(),
            restarted
                .fingerprint("p1", &"4242424242424242".into())
                .unwrap()
        );
        let request: [&[u8]; 3] = [b"POST", b"/p", b"{}"];
        assert_eq!(
            v.request_fingerprint("p1", &request).unwrap(),
            restarted.request_fingerprint("p1", &request).unwrap()
        );
    }
}
