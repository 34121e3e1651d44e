//! Decoded payment-method records by store key, so the proxy does not read and decode the
//! same record for every request that names it.
//!
//! A record changes only when a second create of the same card refreshes it (expiry and
//! cvc), and ends when it is deleted. Either bumps the generation and removes the key before
//! it answers. A reader that raced with one (read the record before it committed) puts it in
//! and then sees the generation moved, and takes it out again, so a replaced or deleted
//! record is never served after the change returned. Records hold card data only sealed, as on disk. They are shared, not
//! copied, with the readers: a record is a dozen strings, and cloning them was about half the
//! cost of a cached read.

use super::PaymentMethodRecord;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Records kept at most (a record is about 1 KiB).
const CAPACITY: usize = 4096;

#[derive(Debug)]
pub struct RecordCache {
    records: quick_cache::sync::Cache<Vec<u8>, Arc<PaymentMethodRecord>>,
    /// Changes (refreshes and deletes) so far.
    generation: AtomicU64,
}

impl Default for RecordCache {
    fn default() -> Self {
        Self {
            records: quick_cache::sync::Cache::new(CAPACITY),
            generation: AtomicU64::new(0),
        }
    }
}

impl RecordCache {
    pub fn get(&self, key: &[u8]) -> Option<Arc<PaymentMethodRecord>> {
        self.records.get(key)
    }

    /// Read before reading the store, for [`RecordCache::fill`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Keeps a record read from the store when no change (refresh or delete) happened since `read_at`.
    pub fn fill(&self, key: &[u8], record: &Arc<PaymentMethodRecord>, read_at: u64) {
        self.records.insert(key.to_vec(), Arc::clone(record));
        if self.generation() != read_at {
            self.records.remove(key);
        }
    }

    /// A change (refresh or delete) of `key` committed.
    pub fn invalidate(&self, key: &[u8]) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.records.remove(key);
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
}
