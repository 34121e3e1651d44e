//! Rate limits on PostgreSQL hold for all instances together: three instances on one
//! database allow a project's limit once between them (within 10 %); while the database is
//! down, `on_store_error: deny` answers 503 and `allow` lets requests through; a bad
//! `on_store_error` is refused by the config check. The figures (allowed against the limit)
//! are printed.

use crate::common::upstream::Upstream;
use crate::common::*;
use crate::postgres::three_instances_with;
use paycred::store::postgres::test_cluster::{database_on, Cluster};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const SHARED: &str = "proj_shared";
const DENY: &str = "proj_deny";

/// A project `id` with `rate_limits` (the YAML of its value), Ed25519 tokens.
fn limited_project(id: &str, rate_limits: &str) -> String {
    format!(
        "  - id: {id}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    \
         proxy: {{allowed_hosts: [127.0.0.1], allow_http: true, allow_private_networks: true}}\n    \
         rate_limits: {rate_limits}\n"
    )
}

fn token(project: &str, entity: &str) -> String {
    token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        project,
        entity,
        "private",
        600,
    )
}

fn list(server: &Server, project: &str, entity: &str) -> Reply {
    server.call(
        "GET",
        &format!("/projects/{project}/payment-methods"),
        Some(&token(project, entity)),
        None,
    )
}

#[test]
fn three_instances_allow_a_project_limit_once_between_them() {
    // 300 at once and one a second: the 900 requests below, from 12 clients spread over
    // the three instances and 30 entities, are counted out long before much comes back.
    let (per_second, burst) = (1.0, 300.0);
    let servers = three_instances_with(Options {
        extra_project_yaml: limited_project(
            SHARED,
            &format!("{{project: {{per_second: {per_second}, burst: {burst}}}}}"),
        ),
        ..Options::on(Backend::Postgres)
    });
    let (allowed, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        for client in 0..12 {
            let (server, allowed, refused) = (&servers[client % 3], &allowed, &refused);
            s.spawn(move || {
                for i in 0..75 {
                    let r = list(server, SHARED, &format!("user_{}", (client + i) % 30));
                    match r.status {
                        200 => allowed.fetch_add(1, Ordering::Relaxed),
                        429 => refused.fetch_add(1, Ordering::Relaxed),
                        _ => panic!("{}: {}", r.status, r.text),
                    };
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let (allowed, refused) = (allowed.into_inner(), refused.into_inner());
    let limit = burst + per_second * secs;
    let off = (allowed as f64 - limit) / limit * 100.0;
    eprintln!(
        "shared limits: three instances allowed {allowed} and refused {refused} of 900 \
         requests in {secs:.2} s; the limit for the window is {limit:.0} \
         ({off:+.1} %; each instance alone would allow {limit:.0})"
    );
    assert!(
        allowed as f64 <= 1.1 * limit,
        "{allowed} allowed of {limit}"
    );
    assert!(
        allowed as f64 >= 0.9 * limit,
        "{allowed} allowed of {limit}"
    );
}

/// The proxy route to `target` as `project`: it reads nothing from the store, so it answers
/// while the database is down unless a limit refuses.
fn proxied(server: &Server, project: &str, target: &Upstream) -> Reply {
    server.raw(
        "POST",
        &format!("/projects/{project}/proxy"),
        &[
            (
                "Authorization",
                &format!("Bearer {}", token(project, "user_1")),
            ),
            ("Svc-Target-URL", &target.url("/charge")),
            ("Content-Type", "application/json"),
        ],
        Some(b"{\"amount\": 1}"),
    )
}

#[test]
fn a_database_that_is_down_denies_or_allows_as_the_project_says() {
    let cluster = Cluster::start().unwrap();
    let limits = |on_error: &str| {
        format!("{{project: {{per_second: 1000, burst: 1000}}, on_store_error: {on_error}}}")
    };
    let server = Server::start_with(Options {
        extra_project_yaml: limited_project(SHARED, &limits("allow"))
            + &limited_project(DENY, &limits("deny")),
        ..Options::on(Backend::Database(database_on(&cluster.url()).unwrap()))
    });
    let target = Upstream::start();
    for project in [SHARED, DENY] {
        let r = proxied(&server, project, &target);
        assert_eq!(r.status, 201, "{}", r.text);
    }

    cluster.down("fast").unwrap();
    let down = Instant::now();
    assert!(
        eventually(Duration::from_secs(10), || proxied(&server, DENY, &target)
            .status
            == 503),
        "deny never refused while the database was down"
    );
    let refused_after = down.elapsed();
    let r = proxied(&server, DENY, &target);
    r.assert_error(503, "storeUnavailable");
    assert_eq!(r.header("Retry-After"), Some("1"));
    let started = Instant::now();
    for _ in 0..20 {
        let r = proxied(&server, SHARED, &target);
        assert_eq!(r.status, 201, "allow refused: {}", r.text);
    }
    eprintln!(
        "shared limits, database down: deny refuses {refused_after:?} after the stop, \
         allow passes (20 requests in {:?})",
        started.elapsed()
    );

    cluster.up().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || proxied(&server, DENY, &target)
            .status
            == 201),
        "deny still refused once the database was back"
    );
}

#[test]
fn a_bad_on_store_error_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ed.pem"), &KEYS.ed.public_pem).unwrap();
    let config = dir.path().join("paycred.yaml");
    let check = |on_error: &str| {
        let project = limited_project(
            SHARED,
            &format!("{{project: {{per_second: 5}}, on_store_error: {on_error}}}"),
        )
        .replace("KEYS_DIR", &dir.path().display().to_string());
        std::fs::write(
            &config,
            format!("master_key_file: ./master.key\nprojects:\n{project}"),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
            .args(["check", "-c"])
            .arg(&config)
            .env("PAYCRED_MASTER_KEY", "11".repeat(32))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), said)
    };
    for good in ["allow", "deny"] {
        let (ok, said) = check(good);
        assert!(ok, "{good}: {said}");
    }
    for bad in ["refuse", "'yes'", "[allow]"] {
        let (ok, said) = check(bad);
        assert!(!ok, "{bad} passed: {said}");
        assert!(
            said.contains("projects[0].rate_limits.on_store_error"),
            "{bad}: {said}"
        );
    }
}
