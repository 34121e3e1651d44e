//! What one instance knows of the rate-limit buckets it shares with the other instances on
//! one PostgreSQL database, and how it decides a request between two syncs ([`sync`](super::sync)
//! runs those).
//!
//! Each bucket (a project's own, or one entity's) has here a [`View`]: the tokens the shared
//! bucket held when the last sync answered, refilled since at the limit's rate, less what this
//! instance took since (`pending`, and `sending` while a sync carries it). A request takes a
//! token here when the view holds one and this instance has taken fewer than its [`share`]
//! since the last sync; at its share, the request waits for the next sync. A sync adds what
//! was taken into the shared bucket in one statement and reads what it holds then, below zero
//! when the instances together took more: that debt is refused away before anything more is
//! allowed.
//!
//! The bound: whatever an instance allowed was either synced (and counted in the shared
//! bucket) or is among the at most [`share`] it took since, so `k` instances together allow
//! at most `burst + per_second × t + k × share` in any `t` seconds: 1 % of the burst per
//! instance, or one request per instance for a burst under 100.

use crate::config::rate_limits::Limit;
use crate::store::rate_limits::Taken;
use parking_lot::Mutex;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The part of a bucket's burst one instance may take between two syncs.
pub const SHARE: f64 = 0.01;

const SHARDS: usize = 32;

/// Tokens an instance may take from the bucket of `limit` between two syncs: 1 % of its
/// burst, at least one.
pub fn share(limit: Limit) -> u32 {
    let share = (limit.burst * SHARE).floor();
    if share >= f64::from(u32::MAX) {
        u32::MAX
    } else if share >= 1.0 {
        // In range: checked above.
        share as u32
    } else {
        1
    }
}

/// A bucket: the project's own (`entity` empty) or one entity's.
pub type Key = (Arc<str>, String);

/// What this instance knows of one shared bucket.
#[derive(Debug, Clone, Copy)]
struct View {
    limit: Limit,
    /// Tokens the shared bucket held when the last sync answered (full before any).
    seen: f64,
    seen_at: Instant,
    /// Taken here since the last sync was sent.
    pending: u32,
    /// Taken here and carried by the sync running now.
    sending: u32,
}

impl View {
    fn new(limit: Limit, now: Instant) -> Self {
        Self {
            limit,
            seen: limit.burst,
            seen_at: now,
            pending: 0,
            sending: 0,
        }
    }

    /// The tokens the shared bucket holds as far as this instance knows.
    fn held(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.seen_at).as_secs_f64();
        (self.seen + elapsed * self.limit.per_second).min(self.limit.burst)
            - f64::from(self.pending)
            - f64::from(self.sending)
    }

    fn take(&mut self, now: Instant) -> Decision {
        let held = self.held(now);
        if held < 1.0 {
            return Decision::Refuse(Duration::from_secs_f64(
                (1.0 - held) / self.limit.per_second,
            ));
        }
        if self.pending >= share(self.limit) {
            return Decision::Sync;
        }
        self.pending += 1;
        Decision::Allow
    }

    /// Whether the view is that of a new bucket (nothing to report, full): it can go.
    fn is_idle_full(&self, now: Instant) -> bool {
        self.pending == 0 && self.sending == 0 && self.held(now) >= self.limit.burst
    }
}

/// What a request gets from one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// A token was taken.
    Allow,
    /// The bucket holds no token as this instance knows it; one is back after this long.
    Refuse(Duration),
    /// This instance took its share since the last sync: decide again after the next.
    Sync,
}

/// The views of every shared bucket this instance took from lately, sharded by key.
pub struct SharedCounts {
    shards: Vec<Mutex<HashMap<Key, View>>>,
}

impl Default for SharedCounts {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

/// A batch a sync carries: the buckets and what was taken from each.
pub type Batch = Vec<(Key, Taken)>;

impl SharedCounts {
    fn shard(&self, project: &str, entity: &str) -> &Mutex<HashMap<Key, View>> {
        let mut h = DefaultHasher::new();
        project.hash(&mut h);
        entity.hash(&mut h);
        let i = usize::try_from(h.finish() % SHARDS as u64).unwrap_or(0);
        &self.shards[i]
    }

    /// Takes a token of the bucket (`project`, `entity`) whose limit is `limit`.
    pub fn take(&self, project: &Arc<str>, entity: &str, limit: Limit, now: Instant) -> Decision {
        let mut shard = self.shard(project, entity).lock();
        let view = shard
            .entry((project.clone(), entity.to_string()))
            .or_insert_with(|| View::new(limit, now));
        view.limit = limit;
        view.take(now)
    }

    /// Gives back a token [`Self::take`] allowed, for a request another limit refused.
    pub fn give_back(&self, project: &str, entity: &str) {
        let mut shard = self.shard(project, entity).lock();
        if let Some(view) = shard.get_mut(&(Arc::from(project), entity.to_string())) {
            view.pending = view.pending.saturating_sub(1);
        }
    }

    /// What was taken since the last sync, now carried by the one starting (each bucket's
    /// `pending` becomes its `sending`); views of full, idle buckets are dropped.
    pub fn batch(&self, now: Instant) -> Batch {
        let mut batch = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.retain(|_, v| !v.is_idle_full(now));
            for (key, view) in shard.iter_mut().filter(|(_, v)| v.pending > 0) {
                view.sending += view.pending;
                batch.push((
                    key.clone(),
                    Taken {
                        project: key.0.to_string(),
                        entity: key.1.clone(),
                        limit: view.limit,
                        tokens: view.pending,
                    },
                ));
                view.pending = 0;
            }
        }
        batch
    }

    /// The sync of `batch` answered at `now` with the tokens each bucket holds.
    pub fn synced(&self, batch: &Batch, held: &[f64], now: Instant) {
        for ((key, taken), held) in batch.iter().zip(held) {
            let mut shard = self.shard(&key.0, &key.1).lock();
            if let Some(view) = shard.get_mut(key) {
                view.seen = *held;
                view.seen_at = now;
                view.sending = view.sending.saturating_sub(taken.tokens);
            }
        }
    }

    /// The sync of `batch` failed: what it carried waits for the next one.
    pub fn not_synced(&self, batch: &Batch) {
        for (key, taken) in batch {
            let mut shard = self.shard(&key.0, &key.1).lock();
            if let Some(view) = shard.get_mut(key) {
                view.sending = view.sending.saturating_sub(taken.tokens);
                view.pending = view.pending.saturating_add(taken.tokens);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(per_second: f64, burst: f64) -> Limit {
        Limit { per_second, burst }
    }

    /// The shared bucket as PostgreSQL keeps it (`store::postgres::rate_limits`).
    struct Bucket {
        limit: Limit,
        tokens: f64,
        at: Instant,
    }

    impl Bucket {
        fn take(&mut self, n: u32, now: Instant) -> f64 {
            let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.limit.per_second).min(self.limit.burst)
                - f64::from(n);
            self.at = now;
            self.tokens
        }
    }

    fn sync(instance: &SharedCounts, bucket: &mut Bucket, now: Instant) {
        let batch = instance.batch(now);
        let held: Vec<f64> = batch
            .iter()
            .map(|(_, t)| bucket.take(t.tokens, now))
            .collect();
        instance.synced(&batch, &held, now);
    }

    #[test]
    fn the_share_is_a_hundredth_of_the_burst_and_at_least_one() {
        assert_eq!(share(limit(1.0, 10.0)), 1);
        assert_eq!(share(limit(1.0, 300.0)), 3);
        assert_eq!(share(limit(1.0, 1e12)), u32::MAX);
    }

    /// A start time, an instance's counts, and the project `p`.
    fn start() -> (Instant, SharedCounts, Arc<str>) {
        (Instant::now(), SharedCounts::default(), Arc::from("p"))
    }

    #[test]
    fn an_instance_takes_its_share_then_waits_for_a_sync() {
        let (t0, counts, p) = start();
        let l = limit(0.1, 300.0);
        for _ in 0..3 {
            assert_eq!(counts.take(&p, "", l, t0), Decision::Allow);
        }
        assert_eq!(counts.take(&p, "", l, t0), Decision::Sync);
        let batch = counts.batch(t0);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].1.tokens, 3);
        // While the sync runs, the next share is taken; the view counts both.
        assert_eq!(counts.take(&p, "", l, t0), Decision::Allow);
        counts.synced(&batch, &[10.0], t0);
        // The shared bucket held 10 after the 3: 9 left with the one taken since.
        for _ in 0..2 {
            assert_eq!(counts.take(&p, "", l, t0), Decision::Allow);
        }
        assert_eq!(counts.take(&p, "", l, t0), Decision::Sync);
    }

    #[test]
    fn a_debt_is_refused_until_refilled_and_a_failed_sync_keeps_the_count() {
        let (t0, counts, p) = start();
        let l = limit(2.0, 100.0);
        assert_eq!(counts.take(&p, "e", l, t0), Decision::Allow);
        let batch = counts.batch(t0);
        counts.not_synced(&batch);
        let again = counts.batch(t0);
        assert_eq!(again[0].1.tokens, 1, "the count waits for the next sync");
        counts.synced(&again, &[-2.0], t0);
        // 3 tokens short of one: 1.5 s at 2/s.
        assert_eq!(
            counts.take(&p, "e", l, t0),
            Decision::Refuse(Duration::from_millis(1500))
        );
        let later = t0 + Duration::from_millis(1500);
        assert_eq!(counts.take(&p, "e", l, later), Decision::Allow);
        // A full, idle view is dropped: it is the same as a new one.
        counts.synced(&counts.batch(later), &[100.0], later);
        assert!(counts.batch(later + Duration::from_secs(1)).is_empty());
        assert!(counts.shards.iter().all(|s| s.lock().is_empty()));
    }

    /// Three instances, each syncing every 50 ms or at its share, share one bucket through a
    /// burst of requests at 3 × 2000 a second for 2 s: together they allow the burst and the
    /// refill, and at most 3 shares more.
    #[test]
    fn three_instances_allow_the_limit_within_their_shares() {
        let t0 = Instant::now();
        let l = limit(50.0, 400.0);
        let mut bucket = Bucket {
            limit: l,
            tokens: l.burst,
            at: t0,
        };
        let instances: Vec<SharedCounts> = (0..3).map(|_| SharedCounts::default()).collect();
        let p: Arc<str> = Arc::from("p");
        let mut allowed = 0u32;
        let mut last_sync = [t0; 3];
        let step = Duration::from_micros(500);
        let mut now = t0;
        while now < t0 + Duration::from_secs(2) {
            for (i, instance) in instances.iter().enumerate() {
                match instance.take(&p, "", l, now) {
                    Decision::Allow => allowed += 1,
                    Decision::Refuse(_) => {}
                    Decision::Sync => {
                        sync(instance, &mut bucket, now);
                        last_sync[i] = now;
                    }
                }
                if now.duration_since(last_sync[i]) >= Duration::from_millis(50) {
                    sync(instance, &mut bucket, now);
                    last_sync[i] = now;
                }
            }
            now += step;
        }
        let limit_then = l.burst + l.per_second * 2.0;
        let slack = f64::from(3 * share(l));
        println!("allowed {allowed} of a limit of {limit_then} (+{slack})");
        assert!(f64::from(allowed) <= limit_then + slack, "{allowed}");
        assert!(
            f64::from(allowed) >= limit_then - slack - l.per_second * 0.05,
            "{allowed}"
        );
    }
}
