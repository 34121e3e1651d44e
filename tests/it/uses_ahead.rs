//! Uses reserved ahead on sled (a use of an intent rarely waits for a flush): concurrent
//! uses through the proxy stop exactly at the usage limit; a clean stop keeps the count
//! exact; a SIGKILL counts what was reserved and not taken as used, so the limit still holds
//! across it, and costs at most a quarter of the uses that were left.

use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn tpl(pm: &str, path: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: 'virtual-card' | json: '{path}' }}}}")
}

/// A virtual-card intent of `pm` for `user_1` with usage limit `limit`.
fn intent(server: &Server, t: &str, pm: &str, limit: u32) -> Value {
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(t),
        Some(&json!({"entityId": "user_1", "credentialType": "virtual-card", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
                         {"type": "usageLimit", "value": limit.to_string(), "details": {"count": limit}}]})),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json
}

/// One sandbox authorization with the intent's card: whether it was approved.
fn charge(server: &Server, t: &str, card: &Value) -> bool {
    let mut charge = card.clone();
    charge["amount"] = json!("1.00");
    charge["currency"] = json!("USD");
    charge["mcc"] = json!("5411");
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/sandbox/authorizations"),
        Some(t),
        Some(&charge),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["approved"] == true
}

/// The stored use count of intent `id` (the server stopped: sled has one process).
fn stored_uses(server: &Server, id: &str) -> u32 {
    let store =
        paycred::store::SledStore::open(&server.dir.path().join("data"), Default::default())
            .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scope = paycred::store::Scope {
        project: PROJECT,
        entity: "user_1",
    };
    use paycred::store::IntentStore;
    rt.block_on(store.get_intent(scope, id))
        .unwrap()
        .unwrap()
        .uses
}

#[test]
fn concurrent_uses_through_the_proxy_stop_exactly_at_the_usage_limit() {
    let server = Arc::new(Server::start());
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let limit = 240;
    let pi = intent(&server, &t, &pm, limit);
    let passed = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (server, t, pm, passed, url) = (
                server.clone(),
                t.clone(),
                pm.clone(),
                passed.clone(),
                up.url("/pay"),
            );
            std::thread::spawn(move || loop {
                let r = server.proxy_json(&t, &url, &json!({"n": tpl(&pm, "$.number")}));
                match r.status {
                    201 => passed.fetch_add(1, Ordering::Relaxed),
                    // Used up: refused at the use (409), or no active intent left to take (400).
                    400 | 409 => return,
                    other => panic!("a use answered {other}: {}", r.text),
                };
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(passed.load(Ordering::Relaxed), limit);
    assert_eq!(
        up.requests().len(),
        limit as usize,
        "the target got each use once"
    );
    let read = server.call(
        "GET",
        &format!(
            "/projects/{PROJECT}/purchase-intents/{}",
            pi["id"].as_str().unwrap()
        ),
        Some(&t),
        None,
    );
    assert_eq!(read.json["status"], "expired", "{}", read.text);
}

#[test]
fn a_clean_stop_keeps_the_count_exact_and_a_kill_counts_what_was_reserved_as_used() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let limit = 400;
    let pi = intent(&server, &t, &pm, limit);
    let id = pi["id"].as_str().unwrap().to_string();
    let mut approved = 0;
    for _ in 0..30 {
        assert!(charge(&server, &t, &pi["card"]));
        approved += 1;
    }
    server.stop(false);
    assert_eq!(
        stored_uses(&server, &id),
        approved,
        "a clean stop hands back what it held ({approved} approved)"
    );
    server.restart();
    for _ in 0..40 {
        assert!(charge(&server, &t, &pi["card"]));
        approved += 1;
    }
    server.stop(true);
    let counted = stored_uses(&server, &id);
    let left = limit - approved;
    assert!(
        counted > approved && counted - approved <= left / 4,
        "after a kill at {approved} uses of {limit}, {counted} are counted"
    );
    server.restart();
    let t = server.token("user_1", "private");
    while charge(&server, &t, &pi["card"]) {
        approved += 1;
        assert!(approved <= limit, "the limit was exceeded");
    }
    assert_eq!(approved, limit - (counted - 70));
    server.stop(false);
    assert_eq!(stored_uses(&server, &id), limit);
}
