//! Webhook delivery end to end: a real server sends its events to receivers on 127.0.0.1
//! over TLS (a test CA, trusted through the project's `proxy.ca_file`). Retry delays are
//! shortened with `PAYCRED_TEST_WEBHOOK_RETRY_SCALE` (honored by debug builds only).

use crate::common::receiver::Receiver;
use crate::common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const HOOKS: &str = "proj_hooks";

/// A server with project [`HOOKS`] trusting the test CA made in `tls` (whose `srv.pem`
/// receivers serve), its retry delays scaled by `scale`.
fn server(tls: &std::path::Path, scale: &str, backend: Backend) -> Server {
    Server::start_with(options(tls, scale, backend))
}

/// The options of [`server`].
fn options(tls: &std::path::Path, scale: &str, backend: Backend) -> Options {
    let ca = tls.join("ca.pem").display().to_string();
    Options {
        extra_project_yaml: format!(
            "  - id: {HOOKS}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    pan: enabled\n    proxy:\n      allowed_hosts: [localhost]\n      allow_private_networks: true\n      ca_file: {ca}\n"
        ),
        env: vec![("PAYCRED_TEST_WEBHOOK_RETRY_SCALE", scale.to_string())],
        backend,
        ..Options::default()
    }
}

fn test_ca() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    tls_files(dir.path());
    dir
}

fn token() -> String {
    ed_token(HOOKS, "user_1", "private")
}

/// Creates an endpoint for `url` taking every event; its id and secret.
fn endpoint(server: &Server, url: &str) -> (String, String) {
    let r = server.call(
        "POST",
        &format!("/projects/{HOOKS}/webhook-endpoints"),
        Some(&token()),
        Some(&json!({ "url": url })),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    (
        r.json["id"].as_str().unwrap().to_string(),
        r.json["secret"].as_str().unwrap().to_string(),
    )
}

/// Stores a card of `entity` (one `payment_method.created` event); its id.
fn card(server: &Server, entity: &str) -> String {
    let r = server.call(
        "POST",
        &format!("/projects/{HOOKS}/payment-methods"),
        Some(&ed_token(HOOKS, entity, "private")),
        Some(&card_body(entity, VISA, CVC)),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["id"].as_str().unwrap().to_string()
}

/// The project's events as `GET /events` lists them (newest first).
fn listed_events(server: &Server) -> Value {
    let r = server.call(
        "GET",
        &format!("/projects/{HOOKS}/events?limit=100"),
        Some(&token()),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
}

/// The project's event ids, oldest first.
fn event_ids(server: &Server) -> Vec<String> {
    let listed = listed_events(server);
    let mut ids: Vec<String> = strings(&listed, "id")
        .into_iter()
        .map(str::to_string)
        .collect();
    ids.reverse();
    ids
}

/// How often each id occurs.
fn counts(ids: &[String]) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for id in ids {
        *c.entry(id.clone()).or_insert(0) += 1;
    }
    c
}

/// Whether every one of `events` was answered 200 by `r`.
fn all_delivered(r: &Receiver, events: &[String]) -> bool {
    let got = counts(&r.delivered());
    events.iter().all(|e| got.contains_key(e))
}

/// Waits up to `secs` seconds for every one of `events` to be answered 200 by `r`.
fn wait_delivered(r: &Receiver, events: &[String], secs: u64) {
    assert!(
        eventually(Duration::from_secs(secs), || all_delivered(r, events)),
        "delivered {:?} of {events:?}",
        r.delivered()
    );
}

/// The value of a metric line `name` on `/metrics`.
fn metric(server: &Server, name: &str) -> f64 {
    let m = server.metrics();
    m.text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(-1.0)
}

/// Every delivery a receiver got carries the Standard Webhooks headers and the event as
/// `GET /events` shows it, and its signature verifies with Python's `standardwebhooks`
/// (PyPI, pinned in `scripts/webhooks-venv`) under the endpoint's secret: the receiver's
/// check is an independent implementation. The same deliveries checked with another secret
/// do not verify.
#[test]
fn deliveries_verify_with_the_standardwebhooks_library() {
    let tls = test_ca();
    let mut server = server(tls.path(), "0.001", Backend::Sled);
    let receiver = Receiver::start(tls.path(), 0);
    let (_, secret) = endpoint(&server, &receiver.url());
    let pm = card(&server, "user_1");
    card(&server, "user_2");
    let r = server.call(
        "POST",
        &format!("/projects/{HOOKS}/purchase-intents"),
        Some(&token()),
        Some(
            &json!({"credentialType": "virtual-card", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "10.00", "details": {"currency": "840"}}]}),
        ),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let events = event_ids(&server);
    assert_eq!(events.len(), 3, "{events:?}");
    wait_delivered(&receiver, &events, 30);
    let listed = listed_events(&server);
    let mut deliveries = Vec::new();
    for req in receiver.requests() {
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/hooks?source=paycred");
        assert_eq!(req.header("content-type"), Some("application/json"));
        let id = req.header("webhook-id").unwrap().to_string();
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(body["id"], id.as_str());
        let shown = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id.as_str());
        assert_eq!(Some(&body), shown, "{id}");
        let sig = req.header("webhook-signature").unwrap();
        assert!(sig.starts_with("v1,"), "{sig}");
        deliveries.push(json!({
            "id": id,
            "timestamp": req.header("webhook-timestamp").unwrap(),
            "signature": sig,
            "body": String::from_utf8(req.body.clone()).unwrap(),
        }));
    }
    let other = paycred::domain::webhook::shown_secret(&[9u8; 32]);
    assert_eq!(
        verify_all(&secret, &deliveries),
        vec!["valid"; deliveries.len()]
    );
    assert!(verify_all(&other, &deliveries)
        .iter()
        .all(|v| v.starts_with("invalid")));
    // The log (debug level) names neither the secret, nor the URL's query, nor a signature.
    let log = server.log();
    let signature = deliveries[0]["signature"].as_str().unwrap().to_string();
    for hidden in [secret.as_str(), "source=paycred", &signature[3..]] {
        assert!(!log.contains(hidden), "{hidden} in the log");
    }
}

/// Each delivery checked by `standardwebhooks.Webhook(secret).verify`: `valid` or
/// `invalid <error>`.
fn verify_all(secret: &str, deliveries: &[Value]) -> Vec<String> {
    use std::io::Write;
    let python = webhooks_python();
    let script = r#"
import json, sys
from standardwebhooks import Webhook
hook = Webhook(sys.argv[1])
for d in json.load(sys.stdin):
    try:
        hook.verify(d["body"], {"webhook-id": d["id"], "webhook-timestamp": d["timestamp"],
                                "webhook-signature": d["signature"]})
        print("valid")
    except Exception as e:
        print("invalid", type(e).__name__)
"#;
    let mut child = std::process::Command::new(python)
        .args(["-c", script, secret])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(deliveries).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A receiver that fails 3 times: the event is delivered once, at the 4th attempt, every
/// attempt with the same `webhook-id`; the metrics count 3 retries and 1 delivery.
#[test]
fn a_failing_receiver_gets_the_event_again_until_it_takes_it() {
    let tls = test_ca();
    let server = server(tls.path(), "0.001", Backend::Sled);
    let receiver = Receiver::start(tls.path(), 3);
    endpoint(&server, &receiver.url());
    card(&server, "user_1");
    let events = event_ids(&server);
    assert_eq!(events.len(), 1, "{events:?}");
    wait_delivered(&receiver, &events, 30);
    let ids: Vec<String> = receiver
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, vec![events[0].clone(); 4]);
    assert_eq!(receiver.delivered(), events);
    assert!(eventually(Duration::from_secs(5), || metric(
        &server,
        "paycred_webhook_deliveries_total{outcome=\"delivered\"}"
    ) == 1.0));
    assert_eq!(
        metric(
            &server,
            "paycred_webhook_deliveries_total{outcome=\"retry\"}"
        ),
        3.0
    );
    // Nothing more is sent.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(receiver.requests().len(), 4);
}

/// An endpoint that never answers does not hold back another's deliveries: every event
/// reaches the healthy endpoint while the hanging one still holds its first attempts (at
/// most 4 at once), and the API answers meanwhile.
#[test]
fn a_hanging_endpoint_delays_no_other() {
    let tls = test_ca();
    let server = server(tls.path(), "0.001", Backend::Sled);
    let hanging = Receiver::hanging(tls.path());
    let healthy = Receiver::start(tls.path(), 0);
    endpoint(&server, &hanging.url());
    endpoint(&server, &healthy.url());
    for i in 0..6 {
        card(&server, &format!("user_{i}"));
    }
    let events = event_ids(&server);
    assert_eq!(events.len(), 6, "{events:?}");
    wait_delivered(&healthy, &events, 30);
    // The hanging endpoint still holds its attempts, no more than its share of them.
    let held = hanging.hanging_now();
    assert!((1..=4).contains(&held), "{held}");
    assert!(
        hanging.requests().len() <= 4,
        "{}",
        hanging.requests().len()
    );
    assert!(hanging.delivered().is_empty());
    // The API answers meanwhile.
    assert_eq!(listed_events(&server).as_array().map(Vec::len), Some(6));
    assert_eq!(counts(&healthy.delivered()).len(), 6);
}

/// kill -9 of paycred while its deliveries wait for a retry: after the restart every event
/// is delivered. Sent, delivered, duplicated and lost are counted (the log of the test run
/// prints them).
#[test]
fn a_kill_during_retries_loses_no_event() {
    let tls = test_ca();
    let mut server = server(tls.path(), "0.01", Backend::Sled);
    let receiver = Receiver::start(tls.path(), usize::MAX);
    endpoint(&server, &receiver.url());
    for i in 0..3 {
        card(&server, &format!("user_{i}"));
    }
    let events = event_ids(&server);
    assert_eq!(events.len(), 3, "{events:?}");
    // Every event has failed at least once (so each is in retry), then the kill.
    assert!(eventually(Duration::from_secs(30), || {
        let tried = counts(
            &receiver
                .requests()
                .iter()
                .map(|r| r.header("webhook-id").unwrap_or("").to_string())
                .collect::<Vec<_>>(),
        );
        events.iter().all(|e| tried.contains_key(e))
    }));
    server.stop(true);
    let before = receiver.requests().len();
    receiver.fail_next(0);
    server.restart();
    wait_delivered(&receiver, &events, 120);
    let delivered = counts(&receiver.delivered());
    let duplicated: usize = delivered.values().map(|n| n - 1).sum();
    let lost = events
        .iter()
        .filter(|e| !delivered.contains_key(*e))
        .count();
    println!(
        "kill -9 mid-retry: sent {} events, delivered {}, duplicated {duplicated}, lost {lost} \
         ({before} failed attempts before the kill)",
        events.len(),
        delivered.len(),
    );
    assert_eq!(lost, 0);
    assert_eq!(delivered.len(), events.len());
}

/// The deliveries of an event as `GET …/events/:id/deliveries` shows them.
fn deliveries_of(server: &Server, event: &str) -> Value {
    let r = server.call(
        "GET",
        &format!("/projects/{HOOKS}/events/{event}/deliveries"),
        Some(&token()),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
}

fn redeliver(server: &Server, event: &str, body: Option<&Value>) -> Reply {
    server.call(
        "POST",
        &format!("/projects/{HOOKS}/events/{event}/redeliver"),
        Some(&token()),
        Some(body.unwrap_or(&json!({}))),
    )
}

/// A delivery whose every attempt failed is `failed` (9 attempts); a redelivery sends the
/// event again, with the same `webhook-id`, and it is delivered; a delivered event can be
/// redelivered too, to one endpoint. An unknown event or endpoint is 404.
#[test]
fn redeliver_sends_a_failed_or_delivered_event_again() {
    let tls = test_ca();
    let mut server = server(tls.path(), "0.00001", Backend::Sled);
    let receiver = Receiver::start(tls.path(), usize::MAX);
    let (we, _) = endpoint(&server, &receiver.url());
    card(&server, "user_1");
    let events = event_ids(&server);
    let event = events[0].clone();
    assert!(
        eventually(Duration::from_secs(60), || deliveries_of(&server, &event)
            [0]["status"]
            == "failed"),
        "{}",
        deliveries_of(&server, &event)
    );
    let failed = deliveries_of(&server, &event);
    assert_eq!(failed[0]["attempts"], 9, "{failed}");
    assert_eq!(failed[0]["lastOutcome"], "http_500", "{failed}");
    assert_eq!(failed[0]["endpointId"], we.as_str());
    assert_eq!(receiver.requests().len(), 9);
    assert_eq!(
        metric(
            &server,
            "paycred_webhook_deliveries_total{outcome=\"failed\"}"
        ),
        1.0
    );

    receiver.fail_next(0);
    let r = redeliver(&server, &event, None);
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json["endpointIds"], json!([we]));
    assert!(eventually(Duration::from_secs(30), || receiver.delivered()
        == [event.clone()]));
    let r = redeliver(&server, &event, Some(&json!({ "endpointId": we })));
    assert_eq!(r.status, 202, "{}", r.text);
    assert!(eventually(Duration::from_secs(30), || receiver.delivered()
        == [event.clone(), event.clone()]));
    assert!(receiver
        .requests()
        .iter()
        .all(|r| r.header("webhook-id") == Some(event.as_str())));
    assert!(
        eventually(Duration::from_secs(10), || strings(
            &deliveries_of(&server, &event),
            "status"
        ) == [
            "failed",
            "delivered",
            "delivered"
        ]),
        "{}",
        deliveries_of(&server, &event)
    );

    redeliver(&server, "evt_00000000000fffff", None).assert_error(404, "notFound");
    redeliver(&server, "pm_1", None).assert_error(404, "notFound");
    redeliver(&server, &event, Some(&json!({"endpointId": "we_none"})))
        .assert_error(404, "notFound");
    redeliver(&server, &event, Some(&json!({"endpoint": we}))).assert_error(400, "invalidRequest");
    let public = ed_token(HOOKS, "user_1", "public");
    server
        .call(
            "POST",
            &format!("/projects/{HOOKS}/events/{event}/redeliver"),
            Some(&public),
            Some(&json!({})),
        )
        .assert_error(403, "forbidden");

    // The audit log names each final outcome and the redeliveries, by event and endpoint.
    server.stop(false);
    let audit = audit_cli(&server, false).1;
    let line = |action: &str| {
        audit
            .lines()
            .filter(|l| l.contains(&format!("\"{action}\"")))
            .count()
    };
    assert_eq!(line("webhook.failed"), 1, "{audit}");
    assert_eq!(line("webhook.delivered"), 2, "{audit}");
    assert_eq!(line("event.redeliver"), 2, "{audit}");
    assert!(audit.contains(&format!("{event} {we} attempts=9 outcome=http_500")));
}

/// Two instances on one PostgreSQL database share the outbox: events written through either
/// are each delivered, through retries (the slow receiver fails its first 5 requests), with
/// no loss and no duplicate (claims are `FOR UPDATE SKIP LOCKED` with a lease).
#[test]
fn two_instances_share_the_outbox_on_postgres() {
    let tls = test_ca();
    let a = server(tls.path(), "0.001", Backend::Postgres);
    let url = a.database_url.clone().unwrap();
    let b = Server::start_with(Options {
        master_key: Some(a.master_key.clone()),
        ..options(tls.path(), "0.001", Backend::Database(url))
    });
    let receiver = Receiver::start(tls.path(), 5);
    // Slow answers: the instances' claims overlap attempts in flight.
    receiver.set_delay(Duration::from_millis(400));
    endpoint(&a, &receiver.url());
    for i in 0..10 {
        card(if i % 2 == 0 { &a } else { &b }, &format!("user_{i}"));
    }
    let events = event_ids(&b);
    assert_eq!(events.len(), 10, "{events:?}");
    wait_delivered(&receiver, &events, 60);
    // Anything still due would arrive within a few polls.
    std::thread::sleep(Duration::from_secs(1));
    let delivered = counts(&receiver.delivered());
    let duplicated: usize = delivered.values().map(|n| n - 1).sum();
    let lost = events
        .iter()
        .filter(|e| !delivered.contains_key(*e))
        .count();
    println!(
        "two instances on PostgreSQL: sent {} events, delivered {}, duplicated {duplicated}, \
         lost {lost} ({} requests, 5 of them failed on purpose)",
        events.len(),
        delivered.len(),
        receiver.requests().len()
    );
    assert_eq!((lost, duplicated), (0, 0));
    assert_eq!(receiver.requests().len(), events.len() + 5);
}

/// A redirect is a failed attempt, never followed: the receiver it points to gets nothing,
/// and the event is delivered at the endpoint's own URL once it answers 200.
#[test]
fn a_redirect_is_not_followed() {
    let tls = test_ca();
    let server = server(tls.path(), "0.001", Backend::Sled);
    let elsewhere = Receiver::start(tls.path(), 0);
    let receiver = Receiver::start(tls.path(), 2);
    receiver.fail_with(&format!(
        "HTTP/1.1 302 Found\r\nLocation: {}\r\nContent-Length: 0\r\n\r\n",
        elsewhere.url()
    ));
    endpoint(&server, &receiver.url());
    card(&server, "user_1");
    let events = event_ids(&server);
    wait_delivered(&receiver, &events, 30);
    assert_eq!(receiver.requests().len(), 3);
    assert!(elsewhere.requests().is_empty());
    assert!(eventually(Duration::from_secs(10), || deliveries_of(
        &server, &events[0]
    )[0]["status"]
        == "delivered"));
    assert_eq!(deliveries_of(&server, &events[0])[0]["attempts"], 3);
}

/// kill -9 of paycred while an attempt waits for the receiver's answer: the answer is lost
/// with the process, so after the restart the event is sent again with the same
/// `webhook-id` (at least once: the receiver sees it twice and dedupes by that id).
#[test]
fn a_kill_during_an_attempt_sends_it_again() {
    let tls = test_ca();
    let mut server = server(tls.path(), "0.001", Backend::Sled);
    let receiver = Receiver::start(tls.path(), 0);
    receiver.set_delay(Duration::from_millis(1500));
    endpoint(&server, &receiver.url());
    card(&server, "user_1");
    let events = event_ids(&server);
    assert!(eventually(Duration::from_secs(30), || !receiver
        .requests()
        .is_empty()));
    server.stop(true);
    server.restart();
    assert!(eventually(Duration::from_secs(30), || receiver
        .delivered()
        .len()
        == 2));
    let delivered = counts(&receiver.delivered());
    let duplicated: usize = delivered.values().map(|n| n - 1).sum();
    let lost = events
        .iter()
        .filter(|e| !delivered.contains_key(*e))
        .count();
    println!(
        "kill -9 mid-attempt: sent {} events, delivered {}, duplicated {duplicated}, lost {lost}",
        events.len(),
        delivered.len(),
    );
    assert_eq!((delivered.len(), duplicated, lost), (1, 1, 0));
    assert!(receiver
        .requests()
        .iter()
        .all(|r| r.header("webhook-id") == Some(events[0].as_str())));
}

/// The URL passes the target guard again at each attempt, under the configuration running
/// then: once a reload takes its host out of `allowed_hosts`, attempts are refused and the
/// receiver gets nothing; once a reload puts it back, the next retry delivers.
#[test]
fn each_attempt_passes_the_target_guard_of_the_running_configuration() {
    let tls = test_ca();
    let server = server(tls.path(), "0.001", Backend::Sled);
    let receiver = Receiver::start(tls.path(), 0);
    endpoint(&server, &receiver.url());
    let good = std::fs::read_to_string(&server.config_path).unwrap();
    let reload = |server: &Server, yaml: &str, n: usize| {
        std::fs::write(&server.config_path, yaml).unwrap();
        server.signal("HUP");
        // The log as written so far (the server keeps running).
        assert!(eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(server.log_path())
                .unwrap_or_default()
                .matches("configuration reloaded")
                .count()
                == n
        }));
    };
    let moved = good.replace(
        "allowed_hosts: [localhost]\n",
        "allowed_hosts: [hooks.example]\n",
    );
    assert_ne!(moved, good);
    reload(&server, &moved, 1);
    card(&server, "user_1");
    let events = event_ids(&server);
    assert!(
        eventually(Duration::from_secs(30), || deliveries_of(
            &server, &events[0]
        )[0]["lastOutcome"]
            == "refused"),
        "{}",
        deliveries_of(&server, &events[0])
    );
    assert!(receiver.requests().is_empty());
    reload(&server, &good, 2);
    wait_delivered(&receiver, &events, 60);
}
