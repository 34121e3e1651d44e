//! Per-request bookkeeping, per call: recording metrics (`Metrics::record` for every request,
//! `Metrics::record_proxy` for every proxied one) and the rate-limit check (`Limiter::check`,
//! 1000 entities in turn), on one thread and on two threads at once (two cores' requests
//! meeting on the same counters and buckets), and rendering `/metrics`. Baseline of
//! the same run: one `Instant::now()`, which every request already pays for its latency.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use paycred::config::rate_limits::{Limit, RateLimits};
use paycred::config::{ProjectConfig, ProxyConfig};
use paycred::edge::ratelimit::Limiter;
use paycred::ops::metrics::Metrics;

const ROUTES: [&str; 6] = [
    "payment_methods",
    "payment_method",
    "purchase_intents",
    "purchase_intent",
    "proxy",
    "health",
];
const STATUSES: [u16; 3] = [200, 201, 404];

/// `f(i)` on `threads` threads, `iters` calls in all; the wall time.
fn on_threads(threads: u64, iters: u64, f: impl Fn(u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || {
                for i in 0..iters / threads {
                    f(i * threads + t);
                }
            });
        }
    });
    start.elapsed()
}

fn record_args(i: u64) -> (&'static str, u16, Duration) {
    let i = i as usize;
    (
        ROUTES[i % ROUTES.len()],
        STATUSES[i % STATUSES.len()],
        Duration::from_micros((i % 7000) as u64),
    )
}

fn metrics(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("baseline_instant_now", |b| b.iter(Instant::now));

    let m = Metrics::default();
    for threads in [1, 2] {
        group.bench_function(format!("metrics_record/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |i| {
                    let (r, s, d) = record_args(i);
                    m.record(black_box(r), black_box(s), black_box(d));
                })
            })
        });
        group.bench_function(format!("metrics_record_proxy/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |i| {
                    let d = Duration::from_micros(i % 9000);
                    m.record_proxy(black_box(200), Some(d), false, black_box(4));
                })
            })
        });
    }
    let extra = [("paycred_store_flushes_total", "Flushes.", 7)];
    group.bench_function("metrics_render", |b| b.iter(|| m.render(&extra)));
    group.finish();
}

/// A project limited per entity and in all, at rates no bench run reaches.
fn limited_project() -> BTreeMap<String, Arc<ProjectConfig>> {
    let wide = Limit {
        per_second: 1_000_000.0,
        burst: f64::from(u32::MAX),
    };
    let project = ProjectConfig {
        id: "p".into(),
        jwt_keys: Vec::new(),
        jwt_max_lifetime: Duration::from_secs(3600),
        pan_enabled: false,
        token_vault_key: false,
        proxy: ProxyConfig {
            allowed_hosts: Vec::new(),
            allow_http: false,
            allow_private_networks: false,
            ca_file: None,
            timeout: Duration::from_secs(30),
            response_guard: Default::default(),
            response_guard_any_card: false,
        },
        rate_limits: RateLimits {
            project: Some(wide),
            entity: Some(wide),
            ..RateLimits::default()
        },
        cors_allowed_origins: Vec::new(),
        passkeys: None,
        browser_checkout: None,
        merchants: Vec::new(),
    };
    BTreeMap::from([("p".to_string(), Arc::new(project))])
}

fn ratelimit(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let entities: Vec<String> = (0..1000).map(|i| format!("user_{i}")).collect();
    let limiter = Limiter::new(&limited_project());
    for threads in [1, 2] {
        group.bench_function(format!("ratelimit_check/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |i| {
                    let e = &entities[i as usize % entities.len()];
                    assert!(limiter.check(black_box("p"), black_box(e)).is_ok());
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, metrics, ratelimit);
criterion_main!(benches);
