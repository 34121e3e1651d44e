//! Decoded records by store key, so the proxy does not read and decode the same record for
//! every request that names it: payment methods on both backends, and on PostgreSQL the
//! newest active intent of a payment method too.
//!
//! A payment method changes only when a second create of the same card refreshes it (expiry
//! and cvc), and ends when it is deleted. Either bumps the generation and removes the key
//! before it answers. A reader that raced with one (read the record before it committed) puts
//! it in and then sees the generation moved, and takes it out again, so a replaced or deleted
//! record is never served after the change returned. Records hold card data only sealed, as
//! on disk. They are shared, not copied, with the readers: a record is a dozen strings, and
//! cloning them was about half the cost of a cached read.
//!
//! A cache that other processes' changes reach only by message (PostgreSQL's NOTIFY) has a
//! hard time to live besides ([`RecordCache::with_ttl`]): an entry older than it is never
//! served, so a lost message is outlived by no entry. While the messages cannot arrive (the
//! listening connection is down) such a cache is [paused](RecordCache::pause): it serves
//! nothing and keeps nothing.

use super::PaymentMethodRecord;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records kept at most (a record is about 1 KiB).
const CAPACITY: usize = 4096;

#[derive(Debug)]
pub struct RecordCache<V = PaymentMethodRecord> {
    records: quick_cache::sync::Cache<Vec<u8>, (Arc<V>, Instant)>,
    /// Changes (refreshes and deletes) so far.
    generation: AtomicU64,
    /// How long an entry may be served after it was read (`None`: until it changes).
    ttl: Option<Duration>,
    /// Whether entries are served and kept ([`RecordCache::pause`]).
    serving: AtomicBool,
    hits: AtomicU64,
}

impl<V> Default for RecordCache<V> {
    fn default() -> Self {
        Self {
            records: quick_cache::sync::Cache::new(CAPACITY),
            generation: AtomicU64::new(0),
            ttl: None,
            serving: AtomicBool::new(true),
            hits: AtomicU64::new(0),
        }
    }
}

impl<V> RecordCache<V> {
    /// A cache whose entries are served for at most `ttl` after they were read.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            ..Self::default()
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<Arc<V>> {
        if !self.serving.load(Ordering::SeqCst) {
            return None;
        }
        let (record, read) = self.records.get(key)?;
        if self.ttl.is_some_and(|ttl| read.elapsed() >= ttl) {
            self.records.remove(key);
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(record)
    }

    /// Read before reading the store, for [`RecordCache::fill`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Keeps a record read from the store when no change (refresh or delete) happened since
    /// `read_at` (and the cache is serving).
    pub fn fill(&self, key: &[u8], record: &Arc<V>, read_at: u64) {
        if !self.serving.load(Ordering::SeqCst) {
            return;
        }
        self.records
            .insert(key.to_vec(), (Arc::clone(record), Instant::now()));
        if self.generation() != read_at || !self.serving.load(Ordering::SeqCst) {
            self.records.remove(key);
        }
    }

    /// A change (refresh or delete) of `key` committed.
    pub fn invalidate(&self, key: &[u8]) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.records.remove(key);
    }

    /// Forgets every entry (and every read in flight).
    pub fn clear(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.records.clear();
    }

    /// Stops serving and keeping entries, and forgets them: changes may go unannounced now.
    pub fn pause(&self) {
        self.serving.store(false, Ordering::SeqCst);
        self.clear();
    }

    /// Serves again, from an empty cache.
    pub fn resume(&self) {
        self.clear();
        self.serving.store(true, Ordering::SeqCst);
    }

    /// Whether entries are served ([`RecordCache::pause`]).
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// Reads answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::StoredCard;

    fn record() -> Arc<PaymentMethodRecord> {
        Arc::new(PaymentMethodRecord {
            id: "pm_1".into(),
            project: "p".into(),
            entity: "e".into(),
            created_micros: 1,
            card: StoredCard {
                brand: "visa".into(),
                funding: "credit".into(),
                bin: "424242".into(),
                last4: "4242".into(),
                expiration_month: "12".into(),
                expiration_year: "2030".into(),
                number_sealed: crate::store::Sealed::from_stored("k1.sealed"),
                cvc_sealed: None,
            },
            fingerprint: "f".into(),
            token: None,
        })
    }

    #[test]
    fn a_read_that_raced_with_a_delete_is_not_kept() {
        let cache = RecordCache::default();
        let read_at = cache.generation();
        cache.invalidate(b"k");
        cache.fill(b"k", &record(), read_at);
        assert!(cache.get(b"k").is_none());
        let read_at = cache.generation();
        cache.fill(b"k", &record(), read_at);
        assert_eq!(cache.get(b"k").unwrap().id, "pm_1");
        cache.invalidate(b"k");
        assert!(cache.get(b"k").is_none());
    }

    #[test]
    fn an_entry_past_its_ttl_is_not_served() {
        let cache = RecordCache::with_ttl(Duration::ZERO);
        cache.fill(b"k", &record(), cache.generation());
        assert!(cache.get(b"k").is_none());
        let cache = RecordCache::with_ttl(Duration::from_secs(3600));
        cache.fill(b"k", &record(), cache.generation());
        assert_eq!(cache.get(b"k").unwrap().id, "pm_1");
        assert_eq!(cache.hits(), 1);
    }

    #[test]
    fn a_paused_cache_serves_and_keeps_nothing() {
        let cache = RecordCache::default();
        cache.fill(b"k", &record(), cache.generation());
        cache.pause();
        assert!(cache.get(b"k").is_none());
        cache.fill(b"k", &record(), cache.generation());
        cache.resume();
        assert!(cache.get(b"k").is_none());
        cache.fill(b"k", &record(), cache.generation());
        assert!(cache.get(b"k").is_some());
    }
}
