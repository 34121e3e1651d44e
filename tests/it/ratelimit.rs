//! Rate limits per project and per entity: 429 `rateLimited` with `Retry-After`,
//! entities isolated from each other. The isolation figure (latency of a quiet entity alone
//! and next to a noisy one) is printed; timing is reported, not asserted.

use crate::common::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RL_PROJECT: &str = "proj_rl";

/// A server whose project `RL_PROJECT` allows each entity `entity` and all of them together
/// `project`, each as (requests a second, burst). Tests that count a burst out use a slow
/// rate, so that no token comes back while a slow machine serves the burst.
fn start(
    (entity_rate, entity_burst): (f64, u32),
    (project_rate, project_burst): (f64, u32),
) -> Server {
    Server::start_with(Options {
        extra_project_yaml: format!(
            "  - id: {RL_PROJECT}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    \
             rate_limits:\n      entity: {{per_second: {entity_rate}, burst: {entity_burst}}}\n      \
             project: {{per_second: {project_rate}, burst: {project_burst}}}\n"
        ),
        ..Options::default()
    })
}

fn token(entity: &str) -> String {
    token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        RL_PROJECT,
        entity,
        "private",
        600,
    )
}

fn list(server: &Server, token: &str) -> Reply {
    server.call(
        "GET",
        &format!("/projects/{RL_PROJECT}/payment-methods"),
        Some(token),
        None,
    )
}

#[test]
fn over_the_entity_limit_is_429_with_retry_after() {
    // A token every 5 s (refilling from the first request on): the burst of 5 and the
    // requests below are counted out long before one comes back.
    let server = start((0.2, 5), (1000.0, 1000));
    let t = token("user_1");
    for _ in 0..5 {
        assert_eq!(list(&server, &t).status, 200);
    }
    let r = list(&server, &t);
    r.assert_error(429, "rateLimited");
    let retry: u64 = r.header("Retry-After").unwrap().parse().unwrap();
    assert!((1..=5).contains(&retry), "{retry}");
    // Another entity has its own bucket; the proxy route counts too.
    assert_eq!(list(&server, &token("user_2")).status, 200);
    let p = server.raw(
        "POST",
        &format!("/projects/{RL_PROJECT}/proxy"),
        &[
            ("Authorization", &format!("Bearer {t}")),
            ("Svc-Target-URL", "http://127.0.0.1:9/x"),
        ],
        Some(b""),
    );
    p.assert_error(429, "rateLimited");
    // The project without limits is not limited.
    let ta = server.token("user_1", "private");
    for _ in 0..20 {
        assert_eq!(
            server
                .call(
                    "GET",
                    &format!("/projects/{PROJECT}/payment-methods"),
                    Some(&ta),
                    None
                )
                .status,
            200
        );
    }
    std::thread::sleep(Duration::from_secs(retry));
    assert_eq!(list(&server, &t).status, 200);
}

#[test]
fn the_project_limit_covers_all_entities() {
    let server = start((100.0, 100), (0.1, 3));
    let mut statuses = Vec::new();
    for i in 0..5 {
        statuses.push(list(&server, &token(&format!("user_{i}"))).status);
    }
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// A quiet entity's latencies (40 requests, 25 ms apart); panics on any non-200.
fn quiet_run(server: &Server) -> Vec<Duration> {
    let t = token("quiet");
    let mut out = Vec::new();
    for _ in 0..40 {
        let start = Instant::now();
        let r = list(server, &t);
        out.push(start.elapsed());
        assert_eq!(r.status, 200, "the quiet entity was refused: {}", r.text);
        std::thread::sleep(Duration::from_millis(25));
    }
    out.sort();
    out
}

#[test]
fn a_noisy_entity_does_not_slow_another() {
    let server = Arc::new(start((50.0, 50), (100_000.0, 100_000)));
    let alone = quiet_run(&server);

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, limited) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let noisy: Vec<_> = (0..4)
        .map(|_| {
            let (server, stop, ok, limited) =
                (server.clone(), stop.clone(), ok.clone(), limited.clone());
            std::thread::spawn(move || {
                let t = token("noisy");
                while !stop.load(Ordering::Relaxed) {
                    match list(&server, &t).status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        429 => limited.fetch_add(1, Ordering::Relaxed),
                        s => panic!("noisy entity got {s}"),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let noisy_started = Instant::now();
    let together = quiet_run(&server);
    // On a slow machine the noisy entity may not have outrun its limit yet: give it time.
    eventually(Duration::from_secs(10), || {
        limited.load(Ordering::Relaxed) > 0
    });
    let noisy_secs = noisy_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in noisy {
        h.join().unwrap();
    }
    let (ok, limited) = (ok.load(Ordering::Relaxed), limited.load(Ordering::Relaxed));
    eprintln!(
        "rate-limit isolation: quiet entity p50 {:?} / p99 {:?} alone, p50 {:?} / p99 {:?} next to \
         a noisy entity sending {:.0} req/s ({ok} allowed, {limited} refused with 429); quiet \
         entity: 40/40 answered 200",
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        percentile(&together, 0.5),
        percentile(&together, 0.99),
        (ok + limited) as f64 / noisy_secs,
    );
    assert!(limited > 0, "the noisy entity was never limited");
}
