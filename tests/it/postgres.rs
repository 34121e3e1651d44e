//! paycred on PostgreSQL (the test cluster of `paycred::store::postgres::test_cluster`, a
//! database per server): the REST API, the proxy, restarts and the audit log on one
//! instance, and three instances on one database (usage counts, dedup, deletes, the audit
//! chain while they run).

use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::{json, Value};

fn pm_path() -> String {
    format!("/projects/{PROJECT}/payment-methods")
}

fn card_intent(server: &Server, token: &str, pm: &str, limit: u32) -> Value {
    let pi = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(token),
        Some(
            &json!({"entityId": "user_1", "credentialType": "virtual-card", "paymentMethodId": pm,
            "mandates": [
                {"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
                {"type": "usageLimit", "value": limit.to_string(), "details": {"count": limit}}]}),
        ),
    );
    assert_eq!(pi.status, 201, "{}", pi.text);
    pi.json
}

/// The intent's status as GET shows it.
fn intent_status(server: &Server, token: &str, pi: &Value) -> Value {
    let id = pi["id"].as_str().unwrap_or_default();
    let got = server.call(
        "GET",
        &format!("/projects/{PROJECT}/purchase-intents/{id}?entityId=user_1"),
        Some(token),
        None,
    );
    assert_eq!(got.status, 200, "{}", got.text);
    got.json["status"].clone()
}

/// Reads the server's store answered from its cache so far (`/metrics`).
fn cache_hits(server: &Server) -> u64 {
    counter(server, "paycred_store_cache_hits_total")
}

/// A counter of the server's `/metrics`.
fn counter(server: &Server, name: &str) -> u64 {
    let page = server.metrics();
    assert_eq!(page.status, 200, "{}", page.text);
    page.text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name}: {}", page.text))
}

fn charge(pi: &Value) -> Value {
    let mut charge = pi["card"].clone();
    charge["amount"] = json!("1.00");
    charge["currency"] = json!("USD");
    charge["mcc"] = json!("5411");
    charge
}

#[test]
fn one_instance_serves_rest_proxy_and_audit_from_postgres() {
    let mut server = Server::start_with(Options::on(Backend::Postgres));
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    // The same card again: the stored one (dedup by the unique fingerprint index).
    let again = server.call(
        "POST",
        &pm_path(),
        Some(&t),
        Some(&card_body("user_1", VISA, CVC)),
    );
    assert_eq!(
        (again.status, again.json["id"].as_str()),
        (200, Some(pm.as_str()))
    );
    let up = Upstream::start();
    let body = json!({"n": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}"),
                      "c": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.cvc' }}}}")});
    let r = server.proxy_json(&t, &up.url("/charge"), &body);
    assert_eq!(r.status, 201, "{}", r.text);
    let sent: Value = serde_json::from_slice(&up.requests()[0].body).unwrap();
    assert_eq!(
        (sent["n"].as_str(), sent["c"].as_str()),
        (Some(VISA), Some(CVC))
    );

    let pi = card_intent(&server, &t, &pm, 2);
    let auth = format!("/projects/{PROJECT}/sandbox/authorizations");
    for _ in 0..2 {
        let ok = server.call("POST", &auth, Some(&t), Some(&charge(&pi)));
        assert_eq!(ok.json, json!({"approved": true}), "{}", ok.text);
    }
    let third = server.call("POST", &auth, Some(&t), Some(&charge(&pi)));
    assert_eq!(third.json["approved"], false, "{}", third.text);

    // A restart keeps everything, the cvc included (the ratchet is in the database).
    server.restart();
    let r = server.proxy_json(&t, &up.url("/charge"), &body);
    assert_eq!(r.status, 201, "{}", r.text);
    let sent: Value = serde_json::from_slice(&up.requests()[1].body).unwrap();
    assert_eq!(sent["c"].as_str(), Some(CVC), "the cvc after a restart");
    let got = server.call("GET", &format!("{}/{pm}", pm_path()), Some(&t), None);
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(intent_status(&server, &t, &pi), "expired");

    let deleted = server.call("DELETE", &format!("{}/{pm}", pm_path()), Some(&t), None);
    assert!(deleted.status < 300, "{}", deleted.text);
    let r = server.proxy_json(&t, &up.url("/charge"), &body);
    r.assert_error(400, "invalidTemplate");
    assert_eq!(
        up.requests().len(),
        2,
        "nothing substituted after the delete"
    );

    // The log is verified while the server runs (the database is shared).
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{out}{err}");
    assert!(out.contains("audit log verified"), "{out}");
    assert!(out.contains("paymentMethod.delete"), "{out}");
}

/// Three servers on one database with one master key.
fn three_instances() -> Vec<Server> {
    three_instances_on(Backend::Postgres)
}

/// Three servers on the database of `backend` with one master key.
pub(crate) fn three_instances_on(backend: Backend) -> Vec<Server> {
    three_instances_with(Options::on(backend))
}

/// Three servers with `options`, on the database of its backend, with one master key.
pub(crate) fn three_instances_with(options: Options) -> Vec<Server> {
    let a = Server::start_with(options.clone());
    let url = a.database_url.clone().unwrap();
    let shared = || Options {
        backend: Backend::Database(url.clone()),
        master_key: Some(a.master_key.clone()),
        ..options.clone()
    };
    let (b, c) = (Server::start_with(shared()), Server::start_with(shared()));
    vec![a, b, c]
}

#[test]
fn three_instances_share_one_database() {
    let servers = three_instances();
    let t = servers[0].token("user_1", "private");

    // The same card created at once through the three: one payment method.
    let created: Vec<(u16, String)> = std::thread::scope(|s| {
        let calls: Vec<_> = servers
            .iter()
            .map(|server| {
                let t = &t;
                s.spawn(move || {
                    let r = server.call(
                        "POST",
                        &pm_path(),
                        Some(t),
                        Some(&card_body("user_1", MASTERCARD, CVC)),
                    );
                    (
                        r.status,
                        r.json["id"].as_str().unwrap_or_default().to_string(),
                    )
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut statuses: Vec<u16> = created.iter().map(|(s, _)| *s).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 201], "{created:?}");
    let pm = created[0].1.clone();
    assert!(created.iter().all(|(_, id)| *id == pm), "{created:?}");

    // A usageLimit 5 intent, 200 uses spread over the three at once, half sandbox
    // authorizations and half proxied requests revealing its virtual card: exactly 5 succeed,
    // and only the proxied requests among them reach the target.
    let pi = card_intent(&servers[1], &t, &pm, 5);
    let auth = format!("/projects/{PROJECT}/sandbox/authorizations");
    let target = Upstream::start();
    let use_body = json!({"n": format!(
        "{{{{ paymentMethod: {pm} | type: 'virtualCard' | json: '$.number' }}}}"
    )});
    let approved = std::sync::atomic::AtomicUsize::new(0);
    let proxied = std::sync::atomic::AtomicUsize::new(0);
    let answered = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for worker in 0..20 {
            let (servers, t, auth, pi) = (&servers, &t, &auth, &pi);
            let (target, use_body) = (&target, &use_body);
            let (approved, proxied, answered) = (&approved, &proxied, &answered);
            s.spawn(move || {
                for i in 0..10 {
                    let server = &servers[(worker + i) % 3];
                    if (worker + i) % 2 == 0 {
                        let r = server.call("POST", auth, Some(t), Some(&charge(pi)));
                        assert_eq!(r.status, 200, "{}", r.text);
                        if r.json["approved"] == true {
                            approved.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    } else {
                        let r = server.proxy_json(t, &target.url("/use"), use_body);
                        match r.status {
                            201 => {
                                proxied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            // No active intent left (400), or the one found was used up
                            // by the time its use was counted (409).
                            400 => assert!(r.text.contains("invalidTemplate"), "{}", r.text),
                            409 => assert!(r.text.contains("usage limit"), "{}", r.text),
                            other => panic!("proxied use answered {other}: {}", r.text),
                        }
                    }
                    answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let (approved, proxied) = (approved.into_inner(), proxied.into_inner());
    println!(
        "usageLimit 5, {} uses over 3 instances: {approved} authorizations approved, {proxied} proxied",
        answered.into_inner(),
    );
    assert_eq!(approved + proxied, 5);
    assert_eq!(
        target.requests().len(),
        proxied,
        "only counted uses reach the target"
    );

    deleted_everywhere_at_once(&servers, &t, &pm);

    // One chain for the three, verified while they run.
    let (ok, out, err) = audit_cli(&servers[2], true);
    assert!(ok, "{out}{err}");
    let creates = out.matches("\"paymentMethod.create\"").count();
    assert_eq!(creates, 1, "{out}");
}

/// The payment method `pm`, used through the second server until it serves `pm` from its
/// cache, deleted through the first: every server hears of it (its change listener), and the
/// second and third refuse it at once, far sooner than the cache's time to live.
pub(crate) fn deleted_everywhere_at_once(servers: &[Server], t: &str, pm: &str) {
    let up = Upstream::start();
    let body =
        json!({"n": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}")});
    let before = cache_hits(&servers[1]);
    assert!(
        eventually(std::time::Duration::from_secs(10), || {
            assert_eq!(servers[1].proxy_json(t, &up.url("/c"), &body).status, 201);
            cache_hits(&servers[1]) > before
        }),
        "B never served the payment method from its cache"
    );
    let sent = up.requests().len();
    let heard = |s: &Server| counter(s, "paycred_store_changes_heard_total");
    let before: Vec<u64> = servers.iter().map(heard).collect();
    let deleted = servers[0].call("DELETE", &format!("{}/{pm}", pm_path()), Some(t), None);
    assert!(deleted.status < 300, "{}", deleted.text);
    // The delete's message reaches each instance as it commits (well within a millisecond
    // here), far sooner than the cache's time to live; wait for it, not for the TTL.
    for (server, before) in servers.iter().zip(before) {
        assert!(
            eventually(std::time::Duration::from_secs(3), || heard(server) > before),
            "an instance did not hear of the delete"
        );
    }
    for server in &servers[1..] {
        let r = server.proxy_json(t, &up.url("/c"), &body);
        r.assert_error(400, "invalidTemplate");
        assert!(r.text.contains("unknown payment method"), "{}", r.text);
    }
    assert_eq!(
        up.requests().len(),
        sent,
        "nothing substituted after the delete"
    );
}

#[test]
fn one_idempotency_key_sent_to_three_instances_runs_once() {
    let servers = three_instances();
    let t = servers[0].token("user_1", "private");
    let pm = servers[0].add_card(&t, "user_1", VISA);
    let path = format!("/projects/{PROJECT}/purchase-intents");
    let body =
        json!({"entityId": "user_1", "credentialType": "virtual-card", "paymentMethodId": pm,
        "mandates": [{"type": "maxAmount", "value": "10.00", "details": {"currency": "840"}}]})
        .to_string();
    let mut executed = 0;
    let mut replayed = 0;
    let mut in_progress = 0;
    for round in 0..5 {
        let key = format!("idem-{round}");
        let answers: Vec<Reply> = std::thread::scope(|s| {
            let calls: Vec<_> = servers
                .iter()
                .map(|server| {
                    let (t, path, body, key) = (&t, &path, &body, &key);
                    s.spawn(move || {
                        server.raw(
                            "POST",
                            path,
                            &[
                                ("Authorization", &format!("Bearer {t}")),
                                ("Content-Type", "application/json"),
                                ("Idempotency-Key", key),
                            ],
                            Some(body.as_bytes()),
                        )
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        for a in &answers {
            match (a.status, a.header("Idempotent-Replayed")) {
                (201, None) => executed += 1,
                (201, Some("true")) => replayed += 1,
                (409, _) => in_progress += 1,
                other => panic!("{other:?}: {}", a.text),
            }
        }
    }
    println!(
        "5 keys x 3 instances: {executed} executed, {replayed} replayed, {in_progress} answered 409"
    );
    assert_eq!(executed, 5);
    // Every instance wrote its creates into the one audit chain: five intents, no more.
    let (ok, out, err) = audit_cli(&servers[2], true);
    assert!(ok, "{out}{err}");
    assert_eq!(out.matches("\"purchaseIntent.create\"").count(), 5, "{out}");
}

#[test]
fn postgresql_down_answers_503_store_unavailable_and_recovers() {
    use paycred::store::postgres::test_cluster::{database_on, Cluster};
    let cluster = Cluster::start().unwrap();
    let url = database_on(&cluster.url()).unwrap();
    let server = Server::start_with(Options::on(Backend::Database(url)));
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let up = Upstream::start();
    let body =
        json!({"n": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}")});
    assert_eq!(server.proxy_json(&t, &up.url("/c"), &body).status, 201);

    cluster.down("fast").unwrap();
    let get = server.call("GET", &format!("{}/{pm}", pm_path()), Some(&t), None);
    get.assert_error(503, "storeUnavailable");
    let create = server.call(
        "POST",
        &pm_path(),
        Some(&t),
        Some(&card_body("user_1", MASTERCARD, CVC)),
    );
    create.assert_error(503, "storeUnavailable");
    let proxied = server.proxy_json(&t, &up.url("/c"), &body);
    proxied.assert_error(503, "storeUnavailable");
    assert_eq!(
        up.requests().len(),
        1,
        "nothing sent while the store is down"
    );
    let ready = server.call("GET", "/ready", None, None);
    assert_eq!(ready.status, 503, "{}", ready.text);

    cluster.up().unwrap();
    assert!(
        eventually(std::time::Duration::from_secs(20), || {
            server
                .call("GET", &format!("{}/{pm}", pm_path()), Some(&t), None)
                .status
                == 200
        }),
        "no recovery once PostgreSQL is back"
    );
    assert_eq!(server.proxy_json(&t, &up.url("/c"), &body).status, 201);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{out}{err}");
}

/// A random Luhn-valid number: a card no other create has.
fn card_number() -> String {
    crate::crash::card_number(&mut rand::thread_rng())
}

/// The id of the data key a stored payment method's number is sealed under, read from the
/// table.
fn sealed_under(url: &str, pm: &str) -> String {
    on_database(url, async |c| {
        let row = c
            .query_one(
                "SELECT record->'card'->>'number_sealed' FROM payment_methods WHERE id = $1",
                &[&pm],
            )
            .await
            .unwrap();
        let sealed: String = row.get(0);
        sealed.split('.').next().unwrap().to_string()
    })
}

/// Sets its flag when dropped.
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn keys_rotated_in_the_database_are_taken_up_by_every_instance_under_traffic() {
    let servers = three_instances();
    let url = servers[0].database_url.clone().unwrap();
    let t = servers[0].token("user_1", "private");
    let public = servers[0].token("user_1", "public");
    let key_path = format!("/projects/{PROJECT}/client-encryption-key");
    let current_kid = |server: &Server| {
        let r = server.call("GET", &key_path, Some(&public), None);
        assert_eq!(r.status, 200, "{}", r.text);
        r.json["kid"].as_str().unwrap().to_string()
    };
    let old = servers[1].add_card(&t, "user_1", VISA);
    let old_key = servers[1].call("GET", &key_path, Some(&public), None).json;
    let old_kid = old_key["kid"].as_str().unwrap().to_string();
    let up = Upstream::start();
    let body =
        json!({"n": format!("{{{{ paymentMethod: {old} | type: 'pan' | json: '$.number' }}}}")});

    // Traffic on the three while both keys rotate: the old card through the proxy, card
    // creates, the client key.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (sent, failed) = (
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
    );
    let mut rotated = (String::new(), String::new());
    let mut took = Vec::new();
    std::thread::scope(|s| {
        for server in &servers {
            let (stop, sent, failed) = (&stop, &sent, &failed);
            let (t, public, key_path, up, body) = (&t, &public, &key_path, &up, &body);
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let number = card_number();
                    let answers = [
                        server.proxy_json(t, &up.url("/c"), body).status,
                        server
                            .call(
                                "POST",
                                &pm_path(),
                                Some(t),
                                Some(&card_body("user_1", &number, CVC)),
                            )
                            .status,
                        server.call("GET", key_path, Some(public), None).status,
                    ];
                    sent.fetch_add(3, std::sync::atomic::Ordering::Relaxed);
                    for status in answers {
                        if !(200..300).contains(&status) {
                            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // The traffic stops however this ends (a failed check included).
        let _stop = StopOnDrop(&stop);
        rotated = (
            project_cli(&servers[2], &["data-key", "rotate"]),
            project_cli(&servers[2], &["client-key", "rotate"]),
        );
        let rotated_at = std::time::Instant::now();
        // A new card through each instance is sealed under the new data key, and each hands
        // out the new client key, within the bound.
        for server in &servers {
            let fresh = || {
                let pm = server.add_card(&t, "user_1", &card_number());
                rotated.0.contains(&sealed_under(&url, &pm))
                    && rotated.1.contains(&current_kid(server))
            };
            assert!(
                eventually(std::time::Duration::from_secs(15), fresh),
                "an instance kept sealing with the old key"
            );
            took.push(rotated_at.elapsed());
        }
    });
    let (sent, failed) = (sent.into_inner(), failed.into_inner());
    println!(
        "keys rotated under traffic: {sent} requests, {failed} failed; new keys used by the \
         three instances after {took:?}"
    );
    assert_eq!(failed, 0);
    assert!(sent > 0);
    assert!(!rotated.1.contains(&old_kid));
    // Old data still opens: the old card through each, a JWE to the old client key.
    for server in &servers {
        assert_eq!(server.proxy_json(&t, &up.url("/c"), &body).status, 201);
        let jwe = crate::client_encryption::encrypt_card(
            &old_key,
            &json!({"number": MASTERCARD, "expirationMonth": "12", "expirationYear": "2031", "cvc": CVC}),
        );
        let created = server.call(
            "POST",
            &pm_path(),
            Some(&t),
            Some(&json!({"entityId": "user_1", "encryptedCard": jwe})),
        );
        assert!(created.status < 300, "{}", created.text);
    }
}

#[test]
fn store_copy_moves_a_sled_deployment_to_postgresql() {
    let mut old = Server::start();
    let t = old.token("user_1", "private");
    let pm = old.add_card(&t, "user_1", VISA);
    let pi = card_intent(&old, &t, &pm, 3);
    let hooks = format!("/projects/{PROJECT}/webhook-endpoints");
    let hook = old.call(
        "POST",
        &hooks,
        Some(&t),
        Some(&json!({"url": "https://localhost/h"})),
    );
    assert_eq!(hook.status, 201, "{}", hook.text);
    let events_path = format!("/projects/{PROJECT}/events");
    let events = old.call("GET", &events_path, Some(&t), None).json;
    assert_eq!(strings(&events, "type").len(), 2, "{events}");
    old.stop(false);
    let url = paycred::store::postgres::test_cluster::fresh_database().unwrap();
    let text = std::fs::read_to_string(&old.config_path).unwrap();
    let to = old.dir.path().join("postgres.yaml");
    std::fs::write(
        &to,
        text.replacen(
            "master_key_file:",
            &format!("store: {{kind: postgres, url: \"{url}\"}}\nmaster_key_file:"),
            1,
        ),
    )
    .unwrap();
    for run in 0..2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
            .args(["store", "copy", "--from"])
            .arg(&old.config_path)
            .arg("--to")
            .arg(&to)
            .env_remove("PAYCRED_MASTER_KEY")
            .env_remove("PAYCRED_DATABASE_URL")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "run {run}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("payment methods: 1"), "{text}");
        assert!(text.contains("webhook endpoints: 1"), "{text}");
        assert!(text.contains("events: 2"), "{text}");
        assert!(text.contains("passkeys: 0"), "{text}");
        assert!(text.contains("audit log verified"), "{text}");
    }
    let new = Server::start_with(Options {
        backend: Backend::Database(url),
        master_key: Some(old.master_key.clone()),
        ..Options::default()
    });
    let got = new.call("GET", &format!("{}/{pm}", pm_path()), Some(&t), None);
    assert_eq!(got.status, 200, "{}", got.text);
    let listed = new.call("GET", &hooks, Some(&t), None).json;
    assert_eq!(strings(&listed, "id"), [hook.json["id"].as_str().unwrap()]);
    assert_eq!(new.call("GET", &events_path, Some(&t), None).json, events);
    // Events written after the copy come after the copied ones.
    new.add_card(&t, "user_1", MASTERCARD);
    let after = new.call("GET", &events_path, Some(&t), None).json;
    let ids = strings(&after, "id");
    assert_eq!(ids.len(), 3);
    assert!(ids[0] > ids[1], "{ids:?}");
    assert_eq!(intent_status(&new, &t, &pi), "active");
    let up = Upstream::start();
    let body = json!({"n": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}"),
                      "c": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.cvc' }}}}")});
    let r = new.proxy_json(&t, &up.url("/c"), &body);
    assert_eq!(r.status, 201, "{}", r.text);
    let sent: Value = serde_json::from_slice(&up.requests()[0].body).unwrap();
    assert_eq!(
        (sent["n"].as_str(), sent["c"].as_str()),
        (Some(VISA), Some(CVC))
    );
    let (ok, out, err) = audit_cli(&new, true);
    assert!(ok, "{out}{err}");
}

/// Three instances on one database end the same expired intents at once: the finalizer's pass
/// ([`paycred::service::intents::end_due_intents`]) of three apps in this process, each over a
/// store of its own on the database of three running servers, on a manual clock a day and a
/// half ahead, started together. Every intent ends once: the passes' counts add up to the
/// intents, one `purchase_intent.expired` event each on every server, no credential key row
/// left, no error.
#[test]
fn three_finalizers_at_once_end_every_expired_intent_exactly_once() {
    use std::collections::BTreeSet;
    use std::sync::Arc;
    const INTENTS: usize = 60;
    let servers = three_instances();
    let t = servers[0].token("user_1", "private");
    let pm = servers[0].add_card(&t, "user_1", VISA);
    let created: BTreeSet<String> = (0..INTENTS)
        .map(|i| {
            let pi = card_intent(&servers[i % 3], &t, &pm, 5);
            pi["id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(created.len(), INTENTS);
    let url = servers[0].database_url.clone().unwrap();
    let key_rows = || -> i64 {
        on_database(&url, async |c| {
            let row = c.query_one("SELECT count(*) FROM intent_keys", &[]).await;
            row.unwrap().get(0)
        })
    };
    assert_eq!(
        key_rows(),
        INTENTS as i64,
        "one credential key per live intent"
    );

    let config = paycred::config::Config::load(&servers[0].config_path).unwrap();
    let clock = Arc::new(paycred::clock::ManualClock::new(
        time::OffsetDateTime::now_utc() + time::Duration::hours(36),
    ));
    let apps: Vec<Arc<paycred::app::App>> = (0..3)
        .map(|_| {
            let master = paycred::vault::master::MasterKey::from_hex(&servers[0].master_key);
            let master = master.unwrap();
            let store = paycred::store::open_with(&config, master.head_keys()).unwrap();
            let vault = Arc::new(paycred::vault::Vault::new(
                master,
                store.clone(),
                std::time::Duration::from_secs(3600),
            ));
            Arc::new(paycred::app::App::new(
                config.clone(),
                store,
                vault,
                clock.clone(),
            ))
        })
        .collect();
    let start = std::sync::Barrier::new(apps.len());
    let ended: Vec<usize> = std::thread::scope(|s| {
        let passes: Vec<_> = apps
            .iter()
            .map(|app| {
                let start = &start;
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    start.wait();
                    rt.block_on(paycred::service::intents::end_due_intents(app))
                        .unwrap()
                })
            })
            .collect();
        passes.into_iter().map(|p| p.join().unwrap()).collect()
    });
    assert_eq!(
        ended.iter().sum::<usize>(),
        INTENTS,
        "ended per pass: {ended:?}"
    );
    // Nothing is left to end.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for app in &apps {
        let again = rt.block_on(paycred::service::intents::end_due_intents(app));
        assert_eq!(again.unwrap(), 0);
    }
    drop(apps);

    assert_eq!(key_rows(), 0, "a credential key row outlived its intent");
    for server in &servers {
        let r = server.call(
            "GET",
            &format!("/projects/{PROJECT}/events?type=purchase_intent.expired&limit=100"),
            Some(&t),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text);
        let events = r.json.as_array().unwrap();
        let ids: BTreeSet<String> = events
            .iter()
            .map(|e| e["data"]["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(events.len(), INTENTS, "one event per intent: {}", r.text);
        assert_eq!(ids, created);
    }
    let pi = created.iter().next().unwrap();
    let got = servers[2].call(
        "GET",
        &format!("/projects/{PROJECT}/purchase-intents/{pi}?entityId=user_1"),
        Some(&t),
        None,
    );
    assert_eq!(
        (got.status, got.json["status"].as_str()),
        (200, Some("expired"))
    );
    assert!(got.json.get("card").is_none(), "{}", got.text);
}
