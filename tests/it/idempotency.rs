//! `Idempotency-Key` on POST (docs/design.md): replay, conflict, scoping, validation
//! failures not stored, concurrent requests executed once, replay across a restart.

use crate::common::*;
use serde_json::{json, Value};
use std::sync::Arc;

fn post(server: &Server, token: &str, path: &str, key: &str, body: &Value) -> Reply {
    server.raw(
        "POST",
        path,
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
            ("Idempotency-Key", key),
        ],
        Some(body.to_string().as_bytes()),
    )
}

fn pm_path() -> String {
    format!("/projects/{PROJECT}/payment-methods")
}

fn count(server: &Server, token: &str) -> usize {
    let r = server.call("GET", &pm_path(), Some(token), None);
    r.json.as_array().unwrap().len()
}

#[test]
fn same_key_same_body_replays_the_first_response() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let body = card_body("user_1", VISA, CVC);
    let first = post(&server, &t, &pm_path(), "key-1", &body);
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.header("Idempotent-Replayed"), None);
    let again = post(&server, &t, &pm_path(), "key-1", &body);
    assert_eq!(again.status, 201);
    assert_eq!(again.text, first.text);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));

    // A purchase intent: the same intent (and credential) comes back, one is issued.
    let pm = first.json["id"].as_str().unwrap();
    let pi_body = json!({"entityId": "user_1", "credentialType": "virtual-card",
        "paymentMethodId": pm, "mandates": [{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}}]});
    let pi_path = format!("/projects/{PROJECT}/purchase-intents");
    let pi1 = post(&server, &t, &pi_path, "key-pi", &pi_body);
    assert_eq!(pi1.status, 201, "{}", pi1.text);
    let pi2 = post(&server, &t, &pi_path, "key-pi", &pi_body);
    assert_eq!(pi2.text, pi1.text);

    // The stored response survives a restart and holds no readable card value.
    server.restart();
    let t = server.token("user_1", "private");
    let pi3 = post(&server, &t, &pi_path, "key-pi", &pi_body);
    assert_eq!((pi3.status, &pi3.text), (201, &pi1.text));
    server.stop(false);
    let number = pi1.json["card"]["number"].as_str().unwrap();
    let mut found = false;
    for entry in walk(&server.dir.path().join("data")) {
        let bytes = std::fs::read(entry).unwrap();
        found |= bytes.windows(number.len()).any(|w| w == number.as_bytes());
    }
    assert!(!found, "a credential is readable in the data dir");
}

#[test]
fn a_replayed_intent_shows_the_intent_as_it_is_now() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let pm = post(
        &server,
        &t,
        &pm_path(),
        "pm",
        &card_body("user_1", VISA, CVC),
    );
    let pm = pm.json["id"].as_str().unwrap().to_string();
    let pi_path = format!("/projects/{PROJECT}/purchase-intents");
    let body = json!({"entityId": "user_1", "credentialType": "pan", "paymentMethodId": pm,
        "mandates": [{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}}]});
    let first = post(&server, &t, &pi_path, "pi", &body);
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.json["pan"]["cvc"], CVC);
    let id = first.json["id"].as_str().unwrap().to_string();

    // Within the cvc's retention the replay is the first answer, byte for byte.
    let again = post(&server, &t, &pi_path, "pi", &body);
    assert_eq!((again.status, &again.text), (201, &first.text));
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));

    // The same key and body from the entity's public token (which may not create intents,
    // nor read credentials) is another request, not a way to the stored answer.
    let public = server.token("user_1", "public");
    post(&server, &public, &pi_path, "pi", &body).assert_error(409, "conflict");

    // After a restart the replay shows the intent exactly as GET shows it then, the cvc
    // included (its key comes from the ratchet kept in the store).
    server.restart();
    let t = server.token("user_1", "private");
    let after = post(&server, &t, &pi_path, "pi", &body);
    assert_eq!(after.status, 201, "{}", after.text);
    assert_eq!(after.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(after.json["id"], id.as_str());
    assert_eq!(after.json["pan"]["number"], VISA);
    assert_eq!(after.json["pan"]["cvc"], CVC, "{}", after.text);
    let shown = server.call("GET", &format!("{pi_path}/{id}"), Some(&t), None);
    assert_eq!(after.json, shown.json);

    // Deleting the payment method cancels the intent: the replay shows it canceled, and no
    // card.
    let deleted = server.call("DELETE", &format!("{}/{pm}", pm_path()), Some(&t), None);
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    let gone = post(&server, &t, &pi_path, "pi", &body);
    assert_eq!(gone.status, 201, "{}", gone.text);
    assert_eq!(gone.json["status"], "canceled");
    assert!(gone.json.get("pan").is_none(), "{}", gone.text);
    assert_eq!(gone.json["id"], id.as_str());

    // Every answer that showed the card is a reveal in the audit log: the first, the two
    // replays and the GET; not the canceled one.
    server.stop(false);
    let (ok, log, err) = audit_cli(&server, true);
    assert!(ok, "{err}");
    let reveals = log
        .lines()
        .filter(|l| l.contains("purchaseIntent.reveal") && l.contains(&id))
        .count();
    assert_eq!(reveals, 4, "{log}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn another_body_is_a_conflict_and_keys_are_scoped_per_entity() {
    let server = Server::start();
    let t1 = server.token("user_1", "private");
    let t2 = server.token("user_2", "private");
    let r = post(
        &server,
        &t1,
        &pm_path(),
        "k",
        &card_body("user_1", VISA, CVC),
    );
    assert_eq!(r.status, 201);
    let c = post(
        &server,
        &t1,
        &pm_path(),
        "k",
        &card_body("user_1", MASTERCARD, CVC),
    );
    c.assert_error(409, "conflict");
    // Another path with the same key and body: a conflict too.
    let c = post(
        &server,
        &t1,
        &format!("/tenants/{PROJECT}/payment-methods"),
        "k",
        &card_body("user_1", VISA, CVC),
    );
    c.assert_error(409, "conflict");
    // Another entity's key space is its own.
    let r2 = post(
        &server,
        &t2,
        &pm_path(),
        "k",
        &card_body("user_2", MASTERCARD, CVC),
    );
    assert_eq!(r2.status, 201, "{}", r2.text);
    assert_eq!(count(&server, &t1), 1);
    assert_eq!(count(&server, &t2), 1);
}

#[test]
fn validation_failures_are_not_stored_and_bad_keys_are_refused() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let bad = post(
        &server,
        &t,
        &pm_path(),
        "k2",
        &card_body("user_1", "4242424242424241", CVC),
    );
    bad.assert_error(400, "invalidRequest");
    let good = post(
        &server,
        &t,
        &pm_path(),
        "k2",
        &card_body("user_1", VISA, CVC),
    );
    assert_eq!(good.status, 201, "{}", good.text);
    let long = "x".repeat(300);
    let r = post(
        &server,
        &t,
        &pm_path(),
        &long,
        &card_body("user_1", VISA, CVC),
    );
    r.assert_error(400, "invalidRequest");
    assert!(r.json["error"]["details"]["fields"]["Idempotency-Key"].is_string());
}

#[test]
fn concurrent_requests_with_one_key_execute_once() {
    let server = Arc::new(Server::start());
    let t = server.token("user_1", "private");
    let body = card_body("user_1", VISA, CVC);
    let pm = post(&server, &t, &pm_path(), "seed", &body);
    let pm_id = pm.json["id"].as_str().unwrap().to_string();
    let pi_body = json!({"entityId": "user_1", "credentialType": "virtual-card",
        "paymentMethodId": pm_id, "mandates": [{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}}]});
    let pi_path = format!("/projects/{PROJECT}/purchase-intents");
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (server, t, b, p) = (server.clone(), t.clone(), pi_body.clone(), pi_path.clone());
            std::thread::spawn(move || {
                let r = post(&server, &t, &p, "race", &b);
                (r.status, r.json["id"].as_str().map(str::to_string))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ids: std::collections::HashSet<_> = results
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, id)| id.clone().unwrap())
        .collect();
    assert!(
        results.iter().all(|(s, _)| *s == 201 || *s == 409),
        "{results:?}"
    );
    assert_eq!(ids.len(), 1, "executed more than once: {results:?}");
    let replay = post(&server, &t, &pi_path, "race", &pi_body);
    assert_eq!(replay.status, 201);
    assert!(ids.contains(replay.json["id"].as_str().unwrap()));
}

#[test]
fn a_card_bearing_request_is_kept_as_a_keyed_fingerprint_and_replays_after_a_data_key_rotation() {
    use paycred::store::{IdempotentRecord, Scope};
    use sha2::Digest;
    use std::time::Duration;
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let body = card_body("user_1", VISA, CVC);
    let first = post(&server, &t, &pm_path(), "pm", &body);
    assert_eq!(first.status, 201, "{}", first.text);
    server.stop(false);

    // Read back through the store: no plain SHA-256 of the request is kept.
    let plain = hex::encode(sha2::Sha256::digest(
        [
            b"POST".as_slice(),
            pm_path().as_bytes(),
            body.to_string().as_bytes(),
        ]
        .join(&0u8),
    ));
    let config = paycred::config::Config::load(&server.config_path).unwrap();
    let master = paycred::vault::master::MasterKey::from_hex(&server.master_key).unwrap();
    let store = paycred::store::open_with(&config, master.head_keys()).unwrap();
    let vault = paycred::vault::Vault::new(master, store.clone(), Duration::from_secs(3600));
    let scope = Scope {
        project: PROJECT,
        entity: "user_1",
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stored: IdempotentRecord = rt
        .block_on(store.get_idempotent(scope, "pm", 0))
        .unwrap()
        .unwrap();
    assert!(
        stored.fingerprint.starts_with("k1:"),
        "{}",
        stored.fingerprint
    );
    assert!(
        !stored.fingerprint.contains(&plain),
        "a searchable hash is stored"
    );

    // A record as an earlier release stored it: the plain SHA-256 of the same request.
    let aad = |key: &str| format!("idem/{PROJECT}/user_1/{key}");
    let answer = vault
        .open(PROJECT, &aad("pm"), stored.body_sealed.as_ref().unwrap())
        .unwrap();
    let legacy = IdempotentRecord {
        fingerprint: plain,
        body_sealed: Some(vault.seal(PROJECT, &aad("legacy"), &answer).unwrap()),
        ..stored
    };
    rt.block_on(store.put_idempotent(scope, "legacy", &legacy))
        .unwrap();
    drop((vault, store));

    // A data-key rotation, then both replay (the legacy one too) and another card conflicts.
    project_cli(&server, &["data-key", "rotate"]);
    server.restart();
    let t = server.token("user_1", "private");
    let other = card_body("user_1", MASTERCARD, CVC);
    for key in ["pm", "legacy"] {
        let again = post(&server, &t, &pm_path(), key, &body);
        assert_eq!((again.status, &again.text), (201, &first.text), "{key}");
        assert_eq!(again.header("Idempotent-Replayed"), Some("true"), "{key}");
        post(&server, &t, &pm_path(), key, &other).assert_error(409, "conflict");
    }
}
