//! [`SharedLimits`]: the rate limits an instance shares with the others on its PostgreSQL
//! database. Requests decide on [`SharedCounts`]; a thread of its own (`paycred-limits`)
//! syncs them with the store every [`SYNC_EVERY`], and at once when a request waits because
//! this instance took its share. A request waits at most [`WAIT_AT_MOST`].
//!
//! A sync that fails, or does not answer within [`SYNC_TIMEOUT`], marks the store as not
//! answering until one succeeds (the thread then tries every [`SYNC_EVERY`] even with nothing
//! to report). Meanwhile each project's `rate_limits.on_store_error` decides: `allow` leaves
//! the decision to the instance's own buckets, `deny` answers 503 `storeUnavailable`.

use super::limited;
use super::shared::{Batch, Decision, SharedCounts};
use crate::config::rate_limits::{OnStoreError, RateLimits};
use crate::error::{ApiError, ErrorKind};
use crate::store::Store;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How often an instance reports what it took (when it took anything).
pub const SYNC_EVERY: Duration = Duration::from_millis(50);

/// Longest a sync may take before the store counts as not answering.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest a request waits for syncs (the one running and the next).
pub const WAIT_AT_MOST: Duration = Duration::from_secs(2);

/// See the module documentation.
pub struct SharedLimits {
    counts: SharedCounts,
    /// Whether the last sync succeeded.
    answering: AtomicBool,
    /// A request waits for a sync.
    wanted: Notify,
    /// A sync ended (either way).
    synced: Notify,
}

impl std::fmt::Debug for SharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedLimits(answering: {})", self.answering())
    }
}

/// 503 `storeUnavailable`, `Retry-After: 1`: the limits of a project that denies while the
/// store does not answer.
fn store_unavailable() -> ApiError {
    let mut e = ApiError::new(
        ErrorKind::StoreUnavailable,
        "Rate limits cannot be checked now; retry after 1 s.",
    );
    e.headers.push(("Retry-After", "1".to_string()));
    e
}

impl SharedLimits {
    /// The shared limits of `store`, synced by a thread of their own until they are dropped.
    pub fn start(store: &Arc<dyn Store>) -> std::io::Result<Arc<Self>> {
        let limits = Arc::new(Self {
            counts: SharedCounts::default(),
            answering: AtomicBool::new(true),
            wanted: Notify::new(),
            synced: Notify::new(),
        });
        let (weak, store) = (Arc::downgrade(&limits), Arc::downgrade(store));
        std::thread::Builder::new()
            .name("paycred-limits".into())
            .spawn(move || run(&weak, &store))?;
        Ok(limits)
    }

    /// Whether the last sync succeeded.
    pub fn answering(&self) -> bool {
        self.answering.load(Ordering::Relaxed)
    }

    /// Takes a token of the shared buckets of `limits` for a request of `entity` in
    /// `project`: 429 when one is empty; while the store does not answer, what
    /// `on_store_error` says.
    pub async fn admit(
        &self,
        project: &Arc<str>,
        entity: &str,
        limits: &RateLimits,
    ) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + WAIT_AT_MOST;
        loop {
            if !self.answering() {
                return match limits.on_store_error {
                    OnStoreError::Allow => Ok(()),
                    OnStoreError::Deny => Err(store_unavailable()),
                };
            }
            let synced = self.synced.notified();
            tokio::pin!(synced);
            synced.as_mut().enable();
            if self.take(project, entity, limits)? {
                return Ok(());
            }
            self.wanted.notify_one();
            if tokio::time::timeout_at(deadline, synced).await.is_err() && self.answering() {
                // The store answers (a sync that fails or hangs marks it down within
                // SYNC_TIMEOUT), and the syncs gave this request no token: the instances
                // took the shared buckets. This request is refused; the others decide alone.
                return Err(limited(Duration::from_secs(1), "project"));
            }
        }
    }

    /// A token of the entity's bucket and of the project's, or neither: `true` when taken,
    /// `false` when the request waits for a sync, 429 when a bucket is empty.
    fn take(
        &self,
        project: &Arc<str>,
        entity: &str,
        limits: &RateLimits,
    ) -> Result<bool, ApiError> {
        let now = Instant::now();
        let mut took_entity = false;
        if let Some(el) = limits.entity {
            match self.counts.take(project, entity, el, now) {
                Decision::Allow => took_entity = true,
                Decision::Refuse(wait) => return Err(limited(wait, "entity")),
                Decision::Sync => return Ok(false),
            }
        }
        let Some(pl) = limits.project else {
            return Ok(true);
        };
        let project_took = self.counts.take(project, "", pl, now);
        if project_took != Decision::Allow && took_entity {
            self.counts.give_back(project, entity);
        }
        match project_took {
            Decision::Allow => Ok(true),
            Decision::Refuse(wait) => Err(limited(wait, "project")),
            Decision::Sync => Ok(false),
        }
    }

    /// One sync: what was taken since the last, into the store; what the buckets hold, back.
    async fn sync(&self, store: &dyn Store) {
        let batch: Batch = self.counts.batch(Instant::now());
        if batch.is_empty() && self.answering() {
            return;
        }
        let taken: Vec<_> = batch.iter().map(|(_, t)| t.clone()).collect();
        match tokio::time::timeout(SYNC_TIMEOUT, store.take_shared(&taken)).await {
            Ok(Ok(held)) if held.len() == batch.len() => {
                self.counts.synced(&batch, &held, Instant::now());
                if !self.answering.swap(true, Ordering::Relaxed) {
                    tracing::info!("shared rate limits: the store answers again");
                }
            }
            failed => {
                self.counts.not_synced(&batch);
                if self.answering.swap(false, Ordering::Relaxed) {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(_)) => "an answer of another length".into(),
                        Err(_) => "no answer in time".into(),
                    };
                    tracing::warn!(error = %why, "shared rate limits: the store does not answer");
                }
            }
        }
        self.synced.notify_waiters();
    }
}

/// The sync thread: a sync every [`SYNC_EVERY`] or when a request wants one, until the
/// limits or the store are dropped.
fn run(limits: &Weak<SharedLimits>, store: &Weak<dyn Store>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "shared rate limits: no runtime; the store counts as not answering");
            if let Some(limits) = limits.upgrade() {
                limits.answering.store(false, Ordering::Relaxed);
            }
            return;
        }
    };
    loop {
        let Some(shared) = limits.upgrade() else {
            return;
        };
        runtime.block_on(async {
            let _ = tokio::time::timeout(SYNC_EVERY, shared.wanted.notified()).await;
        });
        let Some(store) = store.upgrade() else {
            return;
        };
        runtime.block_on(shared.sync(store.as_ref()));
        // `store` is dropped here, outside the runtime, should this thread hold it last.
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::audit::chain::HashFunction;
    use crate::edge::ratelimit::Limiter;
    use crate::store::postgres::test_cluster::fresh_config;
    use crate::store::PgStore;

    /// The projects of a config whose project `p` has `rate_limits` (YAML).
    fn projects(
        rate_limits: &str,
    ) -> std::collections::BTreeMap<String, Arc<crate::config::ProjectConfig>> {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.pem");
        let (_, public) = crate::auth::mint::generate_ed25519().unwrap();
        std::fs::write(&key, public).unwrap();
        let yaml = format!(
            "master_key_file: /k\nprojects:\n  - id: p\n    jwt: {{keys: [{{kid: k, public_key_file: {}}}]}}\n    rate_limits: {rate_limits}\n",
            key.display()
        );
        crate::config::Config::from_yaml(&yaml).unwrap().projects
    }

    /// Microseconds a request of `admit` takes over `n` requests of 1000 entities, and how
    /// many were refused.
    async fn per_request(limiter: &Limiter, n: u32) -> (f64, u32) {
        let entities: Vec<String> = (0..1000).map(|i| format!("user_{i}")).collect();
        let started = Instant::now();
        let mut refused = 0;
        for i in 0..n {
            let entity = &entities[i as usize % entities.len()];
            if limiter.admit("p", entity).await.is_err() {
                refused += 1;
            }
        }
        (
            started.elapsed().as_secs_f64() * 1e6 / f64::from(n),
            refused,
        )
    }

    /// The cost of shared limits on PostgreSQL against this instance's own buckets alone
    /// (printed, not asserted): `cargo test --release --lib shared_limits_cost -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "a measurement"]
    fn shared_limits_cost() {
        let store: Arc<dyn Store> =
            Arc::new(PgStore::open(&fresh_config(4).unwrap(), HashFunction::Sha256).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let n = 200_000;
        for (what, rate_limits) in [
            (
                "far from the limit (share 10000)",
                "{project: {per_second: 1000000, burst: 1000000}, entity: {per_second: 1000000, burst: 1000000}}",
            ),
            (
                "at a share of 3 (a sync every 3 requests)",
                "{project: {per_second: 1000000, burst: 300}}",
            ),
        ] {
            let projects = projects(rate_limits);
            let own = Limiter::new(&projects);
            let shared = SharedLimits::start(&store).unwrap();
            let both = Limiter::with_shared(&projects, Some(shared.clone()));
            let (own_us, own_refused) = runtime.block_on(per_request(&own, n));
            let (shared_us, shared_refused) = runtime.block_on(per_request(&both, n));
            println!(
                "{what}: own buckets {own_us:.3} µs/request ({own_refused} refused), shared \
                 {shared_us:.3} µs/request ({shared_refused} refused), {:.2}× ({:+.3} µs)",
                shared_us / own_us,
                shared_us - own_us
            );
            assert!(shared.answering());
        }
    }
}
