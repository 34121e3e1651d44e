//! Client encryption: per-project EC P-256 key pairs for `encryptedCard`.
//!
//! - A browser fetches the current public key as a JWK (`GET .../client-encryption-key`) and
//!   encrypts the card JSON into a compact JWE (`alg` `ECDH-ES`, `enc` `A256GCM`, `kid`).
//! - The private scalar (`d`, 32 bytes) is stored wrapped by the master key, bound to project
//!   and kid; the public point is stored in the clear. The JOSE work (ECDH, Concat KDF,
//!   AES-GCM) is done by `josekit` (openssl).
//! - Rotation (`paycred client-key rotate`) adds a new key that becomes current; older keys
//!   still decrypt until they are retired (`paycred client-key retire`). A JWE for a retired or
//!   unknown kid is refused like any other bad JWE.
//! - Every failure is one [`JweError`] whose text never says anything about the plaintext.

use super::{master::MasterKey, VaultError};
use crate::secret::KeyMaterial;
use crate::store::Store;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use josekit::jwe::{self, ECDH_ES};
use josekit::jwk::alg::ec::{EcCurve, EcKeyPair};
use josekit::jwk::Jwk;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use zeroize::Zeroizing;

/// The one algorithm pair accepted.
pub const ALG: &str = "ECDH-ES";
pub const ENC: &str = "A256GCM";
/// Largest `encryptedCard` accepted (a card JSON is far smaller).
pub const MAX_JWE_LEN: usize = 8 * 1024;

/// Why an `encryptedCard` was refused. The caller sees only the message, which never
/// depends on the plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JweError {
    #[error("is not a compact JWE")]
    Malformed,
    #[error("must use alg ECDH-ES and enc A256GCM")]
    Algorithm,
    #[error("names no current client encryption key (fetch the key again)")]
    UnknownKey,
    #[error("could not be decrypted")]
    Decrypt,
    #[error("does not hold a card object")]
    NotCard,
}

/// One key as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredKey {
    kid: String,
    created_at: i64,
    /// Public point, base64url.
    x: String,
    y: String,
    /// Private scalar wrapped by the master key (context `paycred/{project}/client/{kid}`).
    d_wrapped: String,
    retired: bool,
}

/// The project's keys as stored (`client_keys` tree).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Keyset {
    current: String,
    keys: Vec<StoredKey>,
}

/// A key as listed by the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub kid: String,
    pub created_at: i64,
    pub current: bool,
    pub retired: bool,
}

struct Loaded {
    /// The stored keyset it was loaded from, and when that last matched the store's.
    bytes: Vec<u8>,
    checked: parking_lot::Mutex<std::time::Instant>,
    current: String,
    public: HashMap<String, Value>,
    /// Private JWKs of the keys that still decrypt.
    private: HashMap<String, Jwk>,
}

/// The client-encryption keys of every project, loaded lazily and cached.
pub struct ClientKeys {
    store: Arc<dyn Store>,
    cache: RwLock<HashMap<String, Arc<Loaded>>>,
}

impl std::fmt::Debug for ClientKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientKeys")
    }
}

fn context(project: &str, kid: &str) -> String {
    format!("paycred/{project}/client/{kid}")
}

fn crypto(_: impl std::fmt::Display) -> VaultError {
    VaultError::Crypto
}

fn new_key(master: &MasterKey, project: &str, now: i64) -> Result<StoredKey, VaultError> {
    let pair = EcKeyPair::generate(EcCurve::P256).map_err(crypto)?;
    let jwk = pair.to_jwk_key_pair();
    let field = |name: &str| -> Result<String, VaultError> {
        jwk.parameter(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(VaultError::Crypto)
    };
    let d = Zeroizing::new(B64URL.decode(field("d")?).map_err(crypto)?);
    let d = KeyMaterial::new(d.as_slice().try_into().map_err(crypto)?);
    let kid = format!("ck_{}", hex::encode(&uuid::Uuid::new_v4().as_bytes()[..6]));
    Ok(StoredKey {
        d_wrapped: master.wrap(&context(project, &kid), &d)?,
        x: field("x")?,
        y: field("y")?,
        kid,
        created_at: now,
        retired: false,
    })
}

fn public_jwk(key: &StoredKey) -> Value {
    json!({"kty": "EC", "crv": "P-256", "x": key.x, "y": key.y, "kid": key.kid,
           "use": "enc", "alg": ALG})
}

impl ClientKeys {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            cache: RwLock::new(HashMap::new()),
        }
    }

    fn read(&self, project: &str) -> Result<Option<(Vec<u8>, Keyset)>, VaultError> {
        match self.store.load_client_keys(project)? {
            Some(bytes) => {
                let set = serde_json::from_slice(&bytes)
                    .map_err(|_| VaultError::Corrupt("client keys"))?;
                Ok(Some((bytes, set)))
            }
            None => Ok(None),
        }
    }

    fn write(&self, project: &str, old: Option<&[u8]>, set: &Keyset) -> Result<bool, VaultError> {
        let bytes = serde_json::to_vec(set).map_err(|_| VaultError::Corrupt("client keys"))?;
        let ok = self.store.swap_client_keys(project, old, &bytes)?;
        self.cache.write().remove(project);
        Ok(ok)
    }

    /// The project's keys: cached, else read (made on first use). A cached set older than
    /// [`super::KEY_RECHECK`] is compared with the store's and read again when that changed
    /// (a key rotated or retired elsewhere); if the store cannot say, the cached one stays.
    fn loaded(&self, master: &MasterKey, project: &str) -> Result<Arc<Loaded>, VaultError> {
        if let Some(l) = self.cache.read().get(project).cloned() {
            let mut checked = l.checked.lock();
            if checked.elapsed() < super::KEY_RECHECK {
                return Ok(l.clone());
            }
            *checked = std::time::Instant::now();
            match self.store.load_client_keys(project) {
                Ok(Some(bytes)) if bytes != l.bytes => {}
                Ok(_) => return Ok(l.clone()),
                Err(e) => {
                    tracing::warn!(error = %e, "client keys not read again; the loaded ones stay");
                    return Ok(l.clone());
                }
            }
        }
        let (bytes, set) = loop {
            match self.read(project)? {
                Some(found) => break found,
                None => {
                    let key = new_key(master, project, now())?;
                    let set = Keyset {
                        current: key.kid.clone(),
                        keys: vec![key],
                    };
                    // A concurrent first use may win; then read what it stored.
                    self.write(project, None, &set)?;
                }
            }
        };
        let mut public = HashMap::new();
        let mut private = HashMap::new();
        for key in set.keys.iter().filter(|k| !k.retired) {
            let d = master.unwrap_key(&context(project, &key.kid), &key.d_wrapped)?;
            let mut map = Map::new();
            map.insert("kty".into(), "EC".into());
            map.insert("crv".into(), "P-256".into());
            map.insert("x".into(), key.x.clone().into());
            map.insert("y".into(), key.y.clone().into());
            map.insert("d".into(), B64URL.encode(d.expose()).into());
            let jwk = Jwk::from_map(map).map_err(crypto)?;
            public.insert(key.kid.clone(), public_jwk(key));
            private.insert(key.kid.clone(), jwk);
        }
        if !public.contains_key(&set.current) {
            return Err(VaultError::Corrupt("client keys: current key"));
        }
        let loaded = Arc::new(Loaded {
            bytes,
            checked: parking_lot::Mutex::new(std::time::Instant::now()),
            current: set.current,
            public,
            private,
        });
        self.cache
            .write()
            .insert(project.to_string(), loaded.clone());
        Ok(loaded)
    }

    /// The project's current public key as a JWK (created on first use).
    /// Whether `master` unwraps every key the store holds for `project` (none: yes).
    pub fn check(&self, master: &MasterKey, project: &str) -> Result<(), VaultError> {
        if let Some((_, set)) = self.read(project)? {
            for key in &set.keys {
                master.unwrap_key(&context(project, &key.kid), &key.d_wrapped)?;
            }
        }
        Ok(())
    }

    pub fn current_public(&self, master: &MasterKey, project: &str) -> Result<Value, VaultError> {
        let l = self.loaded(master, project)?;
        l.public
            .get(&l.current)
            .cloned()
            .ok_or(VaultError::Corrupt("client keys: current key"))
    }

    /// Decrypts a compact JWE made with one of the project's unretired keys.
    pub fn decrypt(
        &self,
        master: &MasterKey,
        project: &str,
        compact: &str,
    ) -> Result<Zeroizing<Vec<u8>>, JweError> {
        let kid = check_header(compact)?;
        let loaded = self.loaded(master, project).map_err(|e| {
            tracing::error!(error = %e, "loading client encryption keys");
            JweError::Decrypt
        })?;
        let jwk = loaded.private.get(&kid).ok_or(JweError::UnknownKey)?;
        let decrypter = ECDH_ES
            .decrypter_from_jwk(jwk)
            .map_err(|_| JweError::Decrypt)?;
        let (payload, _header) =
            jwe::deserialize_compact(compact, &decrypter).map_err(|_| JweError::Decrypt)?;
        Ok(Zeroizing::new(payload))
    }

    /// Adds a new key and makes it current; the old ones keep decrypting. Returns the new kid.
    pub fn rotate(&self, master: &MasterKey, project: &str) -> Result<String, VaultError> {
        loop {
            let (old, mut set) = match self.read(project)? {
                Some((bytes, set)) => (Some(bytes), set),
                None => (None, Keyset::default()),
            };
            let key = new_key(master, project, now())?;
            let kid = key.kid.clone();
            set.current = kid.clone();
            set.keys.push(key);
            if self.write(project, old.as_deref(), &set)? {
                return Ok(kid);
            }
        }
    }

    /// Retires a key: JWEs made with it are refused from now on. The current key cannot be
    /// retired (rotate first). `Ok(false)` when there is no such kid.
    pub fn retire(&self, project: &str, kid: &str) -> Result<bool, RetireError> {
        loop {
            let Some((old, mut set)) = self.read(project)? else {
                return Ok(false);
            };
            if set.current == kid {
                return Err(RetireError::Current);
            }
            let Some(key) = set.keys.iter_mut().find(|k| k.kid == kid) else {
                return Ok(false);
            };
            key.retired = true;
            if self.write(project, Some(&old), &set)? {
                return Ok(true);
            }
        }
    }

    /// Wraps every key of the project (retired ones too) by `master`'s current key; the
    /// number of keys it wrapped again. One swap of the whole set.
    pub fn rewrap(&self, master: &MasterKey, project: &str) -> Result<usize, VaultError> {
        loop {
            let Some((old, mut set)) = self.read(project)? else {
                return Ok(0);
            };
            let mut n = 0;
            for key in &mut set.keys {
                if let Some(w) = master.rewrap(&context(project, &key.kid), &key.d_wrapped)? {
                    key.d_wrapped = w;
                    n += 1;
                }
            }
            if n == 0 || self.write(project, Some(&old), &set)? {
                return Ok(n);
            }
        }
    }

    /// The project's keys, oldest first.
    pub fn list(&self, project: &str) -> Result<Vec<KeyInfo>, VaultError> {
        Ok(self
            .read(project)?
            .map(|(_, set)| {
                set.keys
                    .iter()
                    .map(|k| KeyInfo {
                        kid: k.kid.clone(),
                        created_at: k.created_at,
                        current: k.kid == set.current,
                        retired: k.retired,
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// Why a key could not be retired.
#[derive(Debug, thiserror::Error)]
pub enum RetireError {
    #[error("the current key cannot be retired: rotate first")]
    Current,
    #[error(transparent)]
    Vault(#[from] VaultError),
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Checks the protected header before any key is touched: five parts, `alg` `ECDH-ES`,
/// `enc` `A256GCM`, a `kid`, no compression and no critical extensions. Returns the kid.
pub fn check_header(compact: &str) -> Result<String, JweError> {
    if compact.len() > MAX_JWE_LEN {
        return Err(JweError::Malformed);
    }
    let parts: Vec<&str> = compact.split('.').collect();
    let [header, encrypted_key, iv, ciphertext, tag] = parts.as_slice() else {
        return Err(JweError::Malformed);
    };
    // ECDH-ES (direct key agreement) has an empty encrypted key.
    if !encrypted_key.is_empty() || iv.is_empty() || ciphertext.is_empty() || tag.is_empty() {
        return Err(JweError::Malformed);
    }
    let bytes = B64URL.decode(header).map_err(|_| JweError::Malformed)?;
    let Ok(Value::Object(h)) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(JweError::Malformed);
    };
    if h.get("alg").and_then(Value::as_str) != Some(ALG)
        || h.get("enc").and_then(Value::as_str) != Some(ENC)
        || h.contains_key("zip")
        || h.contains_key("crit")
    {
        return Err(JweError::Algorithm);
    }
    match h.get("kid").and_then(Value::as_str) {
        Some(kid) if !kid.is_empty() => Ok(kid.to_string()),
        _ => Err(JweError::UnknownKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(h: &Value) -> String {
        B64URL.encode(h.to_string())
    }

    #[test]
    fn headers_are_checked_before_any_key() {
        let good = json!({"alg": "ECDH-ES", "enc": "A256GCM", "kid": "k1", "epk": {}});
        let body = ".AAAA.BBBB.CCCC";
        assert_eq!(
            check_header(&format!("{}.{body}", enc(&good))),
            Ok("k1".into())
        );
        let cases = [
            ("garbage", JweError::Malformed),
            ("a.b.c.d.e", JweError::Malformed),
            ("a.b.c", JweError::Malformed),
            (
                &*format!("{}.KEY.AAAA.BBBB.CCCC", enc(&good)),
                JweError::Malformed,
            ),
            (
                &*format!(
                    "{}.{body}",
                    enc(&json!({"alg": "ECDH-ES+A256KW", "enc": "A256GCM", "kid": "k1"}))
                ),
                JweError::Algorithm,
            ),
            (
                &*format!(
                    "{}.{body}",
                    enc(&json!({"alg": "ECDH-ES", "enc": "A128GCM", "kid": "k1"}))
                ),
                JweError::Algorithm,
            ),
            (
                &*format!(
                    "{}.{body}",
                    enc(&json!({"alg": "ECDH-ES", "enc": "A256GCM", "kid": "k1", "zip": "DEF"}))
                ),
                JweError::Algorithm,
            ),
            (
                &*format!(
                    "{}.{body}",
                    enc(&json!({"alg": "ECDH-ES", "enc": "A256GCM"}))
                ),
                JweError::UnknownKey,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(check_header(input), Err(want), "{input}");
        }
        assert_eq!(
            check_header(&"a".repeat(MAX_JWE_LEN + 1)),
            Err(JweError::Malformed)
        );
    }
}
