//! Short-lived CVC keys, for erasure by destruction.
//!
//! Neither store overwrites removed bytes at once (sled's log, PostgreSQL's dead tuples and
//! WAL), so a deleted CVC could be read back. Instead each CVC is sealed under the key of
//! the time bucket it was stored in (retention / 12 long), and a bucket's key is destroyed
//! `retention` after the bucket ends. Once the key is gone, the stored ciphertext is noise.
//! A CVC is thus readable for at least `retention` and at most `retention + bucket`.
//!
//! The bucket keys come from a hash ratchet ([`Ratchet`]): a secret for the oldest bucket
//! still alive, from which the next bucket's secret is a one-way step (HMAC-SHA256), and each
//! bucket's key another. When a bucket expires the secret is stepped past it and the old one
//! overwritten: what is left derives only the keys of live and later buckets. The secret is
//! kept in the store, wrapped by the master key ([`Stored`], under the keyring name
//! [`STORE_NAME`]), so a restarted instance, and every other instance on the same database,
//! opens the CVCs stored before. Without [`CvcKeyring::attach`] (tests) the ratchet starts
//! from a random secret of this process only.

use super::master::SealKey;
use super::Sealed;
use crate::secret::{Cvc, KeyMaterial};
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The keyring name the ratchet is stored under (not a valid project id).
pub const STORE_NAME: &str = "~cvc-ratchet";

/// Most buckets a key is derived ahead of the ratchet's base (a clock far ahead finds none).
const MAX_STEPS: u64 = 4096;

/// The ratchet as stored: its secret wrapped by the master key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stored {
    /// Names the chain in every sealed CVC (`cvc1.<epoch>.<bucket>.…`).
    pub epoch: String,
    pub bucket_secs: u64,
    /// The bucket whose secret `secret` is.
    pub base: u64,
    /// The secret of `base`, wrapped (context [`Stored::context`]).
    pub secret: String,
}

impl Stored {
    /// The master key's wrapping context of this secret.
    pub fn context(epoch: &str, base: u64) -> String {
        format!("paycred/cvc/{epoch}/{base}")
    }
}

fn hmac(key: &KeyMaterial, label: &[u8]) -> KeyMaterial {
    let mut padded = zeroize::Zeroizing::new([0u8; 64]);
    padded[..32].copy_from_slice(key.expose());
    let mut mac = <Hmac<Sha256> as Mac>::new(&(*padded).into());
    mac.update(label);
    KeyMaterial::new(mac.finalize().into_bytes().into())
}

/// The secret of bucket `base`; later buckets' secrets follow by [`Ratchet::step`].
pub struct Ratchet {
    pub base: u64,
    pub secret: KeyMaterial,
}

impl Ratchet {
    fn step(secret: &KeyMaterial) -> KeyMaterial {
        hmac(secret, b"paycred cvc ratchet step")
    }

    /// Steps the secret up to `bucket`, overwriting the old one.
    fn advance_to(&mut self, bucket: u64) {
        while self.base < bucket {
            self.secret = Self::step(&self.secret);
            self.base += 1;
        }
    }

    /// The key of `bucket`, if the ratchet still reaches it.
    fn key(&self, bucket: u64) -> Option<SealKey> {
        if bucket < self.base || bucket - self.base > MAX_STEPS {
            return None;
        }
        let mut secret = self.secret.clone();
        for _ in self.base..bucket {
            secret = Self::step(&secret);
        }
        Some(SealKey::new(&hmac(&secret, b"paycred cvc bucket key")))
    }
}

struct State {
    /// Random per process until [`CvcKeyring::attach`]: then the stored chain's.
    epoch: String,
    bucket_secs: u64,
    ratchet: Ratchet,
    /// A chain of this process not used yet: its base is set at the first bucket used.
    fresh: bool,
    /// Keys by bucket, expanded once; a key in use stays alive until its user is done.
    keys: BTreeMap<u64, Arc<SealKey>>,
}

/// The CVC keys of this process.
pub struct CvcKeyring {
    retention_secs: u64,
    state: Mutex<State>,
}

impl std::fmt::Debug for CvcKeyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        write!(f, "CvcKeyring(epoch {}, {} keys)", s.epoch, s.keys.len())
    }
}

impl CvcKeyring {
    pub fn new(retention: Duration) -> Self {
        let retention_secs = retention.as_secs().max(1);
        let mut epoch = [0u8; 6];
        rand::rngs::OsRng.fill_bytes(&mut epoch);
        Self {
            retention_secs,
            state: Mutex::new(State {
                epoch: hex::encode(epoch),
                // Twelve buckets per retention period: keys outlive their CVCs by at most 1/12.
                bucket_secs: (retention_secs / 12).max(1),
                ratchet: Ratchet {
                    base: 0,
                    secret: KeyMaterial::random(),
                },
                fresh: true,
                keys: BTreeMap::new(),
            }),
        }
    }

    /// A new chain to store: a random secret from the bucket of `now_secs`, wrapped by `wrap`.
    pub fn new_stored(
        &self,
        now_secs: u64,
        wrap: impl Fn(&str, &KeyMaterial) -> Option<String>,
    ) -> Option<Stored> {
        let mut epoch = [0u8; 6];
        rand::rngs::OsRng.fill_bytes(&mut epoch);
        let epoch = hex::encode(epoch);
        let bucket_secs = self.state.lock().bucket_secs;
        let base = now_secs / bucket_secs;
        let secret = wrap(&Stored::context(&epoch, base), &KeyMaterial::random())?;
        Some(Stored {
            epoch,
            bucket_secs,
            base,
            secret,
        })
    }

    /// Takes up a stored chain (its secret unwrapped): CVCs sealed under it by any process
    /// open here. Keys of this process's own chain are dropped. The chain's epoch, and its
    /// base and secret stepped to the first live bucket.
    pub fn attach(
        &self,
        stored: &Stored,
        secret: KeyMaterial,
        now_secs: u64,
    ) -> (String, u64, KeyMaterial) {
        let mut s = self.state.lock();
        s.epoch = stored.epoch.clone();
        s.bucket_secs = stored.bucket_secs.max(1);
        s.ratchet = Ratchet {
            base: stored.base,
            secret,
        };
        s.keys.clear();
        s.fresh = false;
        let first = self.first_alive(s.bucket_secs, now_secs);
        s.ratchet.advance_to(first);
        (s.epoch.clone(), s.ratchet.base, s.ratchet.secret.clone())
    }

    fn first_alive(&self, bucket_secs: u64, now_secs: u64) -> u64 {
        now_secs.saturating_sub(self.retention_secs) / bucket_secs
    }

    fn bucket_alive(&self, bucket_secs: u64, bucket: u64, now_secs: u64) -> bool {
        (bucket + 1) * bucket_secs + self.retention_secs > now_secs
    }

    /// Destroys every key whose retention has passed, and steps the ratchet past them. The
    /// new base and secret when it stepped (to store in place of the old), else `None`.
    pub fn sweep(&self, now_secs: u64) -> Option<(String, u64, KeyMaterial)> {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        let bucket_secs = s.bucket_secs;
        s.keys
            .retain(|b, _| (b + 1) * bucket_secs + self.retention_secs > now_secs);
        let first = self.first_alive(bucket_secs, now_secs);
        if s.fresh || first <= s.ratchet.base {
            return None;
        }
        s.ratchet.advance_to(first);
        Some((s.epoch.clone(), s.ratchet.base, s.ratchet.secret.clone()))
    }

    fn key(&self, s: &mut State, bucket: u64) -> Option<Arc<SealKey>> {
        if let Some(key) = s.keys.get(&bucket) {
            return Some(Arc::clone(key));
        }
        if s.fresh {
            s.fresh = false;
            s.ratchet.base = bucket;
        }
        let key = Arc::new(s.ratchet.key(bucket)?);
        s.keys.insert(bucket, Arc::clone(&key));
        Some(key)
    }

    /// Seals a CVC stored at `now_secs` (unix seconds), bound to `aad`.
    pub fn seal(&self, aad: &str, cvc: &Cvc, now_secs: u64) -> Option<Sealed> {
        let (epoch, bucket, key) = {
            let mut s = self.state.lock();
            let bucket = now_secs / s.bucket_secs;
            let key = self.key(&mut s, bucket)?;
            (s.epoch.clone(), bucket, key)
        };
        let sealed = key.seal(aad.as_bytes(), cvc.expose().as_bytes()).ok()?;
        Some(Sealed::cvc(&epoch, bucket, sealed))
    }

    /// The CVC, or `None` once its key is destroyed (or the value is not ours).
    pub fn open(&self, aad: &str, sealed: &Sealed, now_secs: u64) -> Option<Cvc> {
        let (epoch, bucket, bytes) = sealed.under_cvc_key()?;
        let key = {
            let mut s = self.state.lock();
            if epoch != s.epoch || !self.bucket_alive(s.bucket_secs, bucket, now_secs) {
                return None;
            }
            self.key(&mut s, bucket)?
        };
        let plain = key.open(aad.as_bytes(), bytes).ok()?;
        std::str::from_utf8(&plain).ok().map(Cvc::new)
    }

    /// Keys held now.
    pub fn key_count(&self) -> usize {
        self.state.lock().keys.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn readable_within_retention_and_gone_after() {
        let ring = CvcKeyring::new(Duration::from_secs(3600));
        let t0 = 1_000_000;
        let s = ring.seal("pm_1", &"123".into(), t0).unwrap();
        assert_eq!(
            ring.open("pm_1", &s, t0 + 3599)
                .as_ref()
                .map(|s| s.expose()),
            Some("123")
        );
        assert!(ring.open("pm_2", &s, t0).is_none(), "bound to its aad");
        assert!(ring.open("pm_1", &s, t0 + 3600 + 300 + 1).is_none());
        ring.sweep(t0 + 3600 + 300 + 1);
        assert_eq!(ring.key_count(), 0, "the key itself is destroyed");
    }

    #[test]
    fn another_process_cannot_read() {
        let a = CvcKeyring::new(Duration::from_secs(60));
        let b = CvcKeyring::new(Duration::from_secs(60));
        let s = a.seal("x", &"999".into(), 10).unwrap();
        assert!(b.open("x", &s, 10).is_none());
        // Its own run, but a bucket it has no key for; and a value it cannot read.
        let (epoch, bucket, bytes) = s.under_cvc_key().unwrap();
        let no_key = Sealed::cvc(epoch, bucket + 1, bytes.to_vec());
        assert!(a.open("x", &no_key, 10).is_none());
        let unreadable = Sealed::from_stored(&s.to_stored().replacen("cvc1", "cvc2", 1));
        assert!(a.open("x", &unreadable, 10).is_none());
        assert!(a.open("x", &s, 10).is_some());
    }
}
