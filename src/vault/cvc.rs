//! Short-lived CVC keys, for erasure by destruction.
//!
//! sled never overwrites removed bytes, so a deleted CVC could be read back from its log.
//! Instead each CVC is sealed under the key of the time bucket it was stored in; the keys
//! live only in this process's memory (zeroed on drop) and a bucket's key is destroyed
//! `retention` after the bucket ends. Once the key is gone, the stored ciphertext is noise.
//! A CVC is thus readable for at least `retention` and at most `retention + bucket`.
//! A restart destroys every CVC key early: `pan` credentials then carry no CVC.

use super::master::SealKey;
use super::Sealed;
use crate::secret::{Cvc, KeyMaterial};
use parking_lot::Mutex;
use rand::RngCore;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The in-memory CVC keys of this process.
pub struct CvcKeyring {
    /// Random per process: ciphertexts of an earlier run never match a key of this one.
    epoch: String,
    retention_secs: u64,
    bucket_secs: u64,
    /// Keys by bucket, expanded once; a key in use stays alive until its user is done.
    keys: Mutex<BTreeMap<u64, Arc<SealKey>>>,
}

impl std::fmt::Debug for CvcKeyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CvcKeyring(epoch {}, {} keys)",
            self.epoch,
            self.keys.lock().len()
        )
    }
}

impl CvcKeyring {
    pub fn new(retention: Duration) -> Self {
        let retention_secs = retention.as_secs().max(1);
        let mut epoch = [0u8; 6];
        rand::rngs::OsRng.fill_bytes(&mut epoch);
        Self {
            epoch: hex::encode(epoch),
            retention_secs,
            // Twelve buckets per retention period: keys outlive their CVCs by at most 1/12.
            bucket_secs: (retention_secs / 12).max(1),
            keys: Mutex::new(BTreeMap::new()),
        }
    }

    fn bucket_alive(&self, bucket: u64, now_secs: u64) -> bool {
        (bucket + 1) * self.bucket_secs + self.retention_secs > now_secs
    }

    /// Destroys every key whose retention has passed.
    pub fn sweep(&self, now_secs: u64) {
        let mut keys = self.keys.lock();
        keys.retain(|b, _| self.bucket_alive(*b, now_secs));
    }

    /// Seals a CVC stored at `now_secs` (unix seconds), bound to `aad`.
    pub fn seal(&self, aad: &str, cvc: &Cvc, now_secs: u64) -> Option<Sealed> {
        let bucket = now_secs / self.bucket_secs;
        let key = {
            let mut keys = self.keys.lock();
            keys.retain(|b, _| self.bucket_alive(*b, now_secs));
            let key = keys
                .entry(bucket)
                .or_insert_with(|| Arc::new(SealKey::new(&KeyMaterial::random())));
            Arc::clone(key)
        };
        let sealed = key.seal(aad.as_bytes(), cvc.expose().as_bytes()).ok()?;
        Some(Sealed::cvc(&self.epoch, bucket, sealed))
    }

    /// The CVC, or `None` once its key is destroyed (or the value is not ours).
    pub fn open(&self, aad: &str, sealed: &Sealed, now_secs: u64) -> Option<Cvc> {
        let (epoch, bucket, bytes) = sealed.under_cvc_key()?;
        if epoch != self.epoch || !self.bucket_alive(bucket, now_secs) {
            return None;
        }
        let key = Arc::clone(self.keys.lock().get(&bucket)?);
        let plain = key.open(aad.as_bytes(), bytes).ok()?;
        std::str::from_utf8(&plain).ok().map(Cvc::new)
    }

    /// Keys held now.
    pub fn key_count(&self) -> usize {
        self.keys.lock().len()
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
