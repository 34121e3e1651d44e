//! Events over HTTP: each type written by the change that causes it (one test per type, named
//! after it), read back with `GET /projects/:p/events` (newest first, `limit`,
//! `startingAfter`, `type`), never carrying a card number, cvc or cryptogram.

use crate::common::*;
use serde_json::{json, Value};

/// A server, a private token of `user_1` and one of its cards.
fn setup(number: &str) -> (Server, String, String) {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", number);
    (server, t, pm)
}

/// Creates an intent of `kind` with `mandates`; its response.
fn intent(server: &Server, t: &str, pm: &str, kind: &str, mandates: Value) -> Value {
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(t),
        Some(&json!({"credentialType": kind, "paymentMethodId": pm, "mandates": mandates})),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json
}

fn max_amount() -> Value {
    json!([{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}}])
}

/// The events of `kind` (newest first), checked free of card data.
fn events_of(server: &Server, t: &str, kind: &str) -> Vec<Value> {
    let r = server.call(
        "GET",
        &format!("/projects/{PROJECT}/events?type={kind}"),
        Some(t),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    for secret in [VISA, "4000009900000020", "\"cvc\"", "cryptogram"] {
        assert!(!r.text.contains(secret), "{secret} in {}", r.text);
    }
    let list = r.json.as_array().cloned().unwrap_or_default();
    for e in &list {
        assert_eq!(e["type"], kind);
        assert!(e["id"].as_str().unwrap().starts_with("evt_"), "{e}");
        assert!(e["createdAt"].is_string(), "{e}");
    }
    list
}

/// The one event of `kind`, its `data`.
fn only(server: &Server, t: &str, kind: &str) -> Value {
    let list = events_of(server, t, kind);
    assert_eq!(list.len(), 1, "{kind}: {list:?}");
    list[0]["data"].clone()
}

/// A sandbox authorization with a virtual card of an intent.
fn charge(server: &Server, t: &str, card: &Value) -> Value {
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/sandbox/authorizations"),
        Some(t),
        Some(
            &json!({"number": card["number"], "expirationMonth": card["expirationMonth"],
            "expirationYear": card["expirationYear"], "cvc": card["cvc"],
            "amount": "1", "currency": "840", "mcc": "5411"}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
}

#[test]
fn payment_method_created() {
    let (server, t, pm) = setup(VISA);
    let data = only(&server, &t, "payment_method.created");
    assert_eq!(data["id"], pm.as_str());
    assert_eq!(data["entityId"], "user_1");
    assert_eq!(data["card"]["details"]["last4"], "4242");
    // A second create of the same card is the same payment method: no second event.
    let again = server.call(
        "POST",
        &format!("/projects/{PROJECT}/payment-methods"),
        Some(&t),
        Some(&card_body("user_1", VISA, CVC)),
    );
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(events_of(&server, &t, "payment_method.created").len(), 1);
}

#[test]
fn payment_method_deleted() {
    let (server, t, pm) = setup(VISA);
    let path = format!("/projects/{PROJECT}/payment-methods/{pm}");
    assert_eq!(server.call("DELETE", &path, Some(&t), None).status, 204);
    let data = only(&server, &t, "payment_method.deleted");
    assert_eq!(data["id"], pm.as_str());
}

#[test]
fn purchase_intent_created() {
    let (server, t, pm) = setup(VISA);
    let pi = intent(&server, &t, &pm, "virtual-card", max_amount());
    assert!(pi["card"]["number"].is_string());
    let data = only(&server, &t, "purchase_intent.created");
    assert_eq!(data["id"], pi["id"]);
    assert_eq!(data["status"], "active");
    assert!(data.get("card").is_none(), "{data}");
    assert_eq!(data["mandates"], pi["mandates"]);
}

/// A new intent of `kind` for card `number` is in `status`, and its one `event` says so.
fn new_intent_writes(number: &str, kind: &str, status: &str, event: &str) {
    let (server, t, pm) = setup(number);
    let pi = intent(&server, &t, &pm, kind, max_amount());
    assert_eq!(pi["status"], status);
    let data = only(&server, &t, event);
    assert_eq!(data["id"], pi["id"]);
    assert_eq!(data["status"], status);
}

#[test]
fn purchase_intent_verification_required() {
    new_intent_writes(
        VISA,
        "network-token",
        "verify",
        "purchase_intent.verification_required",
    );
}

#[test]
fn purchase_intent_activated() {
    let (server, t, pm) = setup(VISA);
    let pi = intent(&server, &t, &pm, "network-token", max_amount());
    let id = pi["id"].as_str().unwrap();
    let public = server.token("user_1", "public");
    let verify = format!("/projects/{PROJECT}/purchase-intents/{id}/verify");
    assert!(events_of(&server, &t, "purchase_intent.activated").is_empty());
    // A wrong code changes no status: no event.
    server.call(
        "POST",
        &verify,
        Some(&public),
        Some(&json!({"code": "000000"})),
    );
    assert!(events_of(&server, &t, "purchase_intent.activated").is_empty());
    let done = server.call(
        "POST",
        &verify,
        Some(&public),
        Some(&json!({"code": "123456"})),
    );
    assert_eq!(done.status, 200, "{}", done.text);
    let data = only(&server, &t, "purchase_intent.activated");
    assert_eq!(data["id"], id);
    assert_eq!(data["status"], "active");
    assert!(data.get("token").is_none(), "{data}");
}

#[test]
fn purchase_intent_unavailable() {
    new_intent_writes(
        "4000009900000020",
        "virtual-card",
        "unavailable",
        "purchase_intent.unavailable",
    );
}

#[test]
fn purchase_intent_used() {
    let (server, t, pm) = setup(VISA);
    let pi = intent(&server, &t, &pm, "virtual-card", max_amount());
    assert_eq!(charge(&server, &t, &pi["card"]), json!({"approved": true}));
    assert_eq!(charge(&server, &t, &pi["card"]), json!({"approved": true}));
    let used = events_of(&server, &t, "purchase_intent.used");
    assert_eq!(used.len(), 2, "{used:?}");
    assert!(used.iter().all(|e| e["data"]["id"] == pi["id"]));
    assert!(used.iter().all(|e| e["data"]["status"] == "active"));
    assert!(events_of(&server, &t, "purchase_intent.exhausted").is_empty());
}

#[test]
fn purchase_intent_exhausted() {
    let (server, t, pm) = setup(VISA);
    let limit = json!([{"type": "usageLimit", "value": "2", "details": {"count": 2}}]);
    let pi = intent(&server, &t, &pm, "virtual-card", limit);
    assert_eq!(charge(&server, &t, &pi["card"]), json!({"approved": true}));
    assert!(events_of(&server, &t, "purchase_intent.exhausted").is_empty());
    assert_eq!(charge(&server, &t, &pi["card"]), json!({"approved": true}));
    let data = only(&server, &t, "purchase_intent.exhausted");
    assert_eq!(data["id"], pi["id"]);
    assert_eq!(data["status"], "expired");
    // A refused use changes nothing: no event.
    assert_eq!(charge(&server, &t, &pi["card"])["approved"], false);
    assert_eq!(events_of(&server, &t, "purchase_intent.used").len(), 2);
    assert_eq!(events_of(&server, &t, "purchase_intent.exhausted").len(), 1);
}

#[test]
fn purchase_intent_canceled() {
    let (server, t, pm) = setup(VISA);
    let a = intent(&server, &t, &pm, "virtual-card", max_amount());
    let b = intent(&server, &t, &pm, "virtual-card", max_amount());
    let path = format!("/projects/{PROJECT}/payment-methods/{pm}");
    assert_eq!(server.call("DELETE", &path, Some(&t), None).status, 204);
    let canceled = events_of(&server, &t, "purchase_intent.canceled");
    let mut ids: Vec<&Value> = canceled.iter().map(|e| &e["data"]["id"]).collect();
    ids.sort_by_key(|v| v.to_string());
    let mut want = vec![&a["id"], &b["id"]];
    want.sort_by_key(|v| v.to_string());
    assert_eq!(ids, want);
    assert!(canceled.iter().all(|e| e["data"]["status"] == "canceled"));
}

/// The list: newest first across types, pages by `startingAfter`, the project's events only,
/// private role, bad parameters named.
#[test]
fn the_list_pages_newest_first() {
    let (server, t, pm) = setup(VISA);
    intent(&server, &t, &pm, "virtual-card", max_amount());
    // Another entity of the project: its events are the project's too.
    let t2 = server.token("user_2", "private");
    server.add_card(&t2, "user_2", MASTERCARD);
    let path = format!("/projects/{PROJECT}/events");
    let all = server.call("GET", &path, Some(&t), None);
    assert_eq!(all.status, 200, "{}", all.text);
    let kinds = strings(&all.json, "type");
    assert_eq!(
        kinds,
        [
            "payment_method.created",
            "purchase_intent.created",
            "payment_method.created"
        ]
    );
    let ids = strings(&all.json, "id");
    let first = server.call("GET", &format!("{path}?limit=1"), Some(&t), None);
    assert_eq!(first.json.as_array().unwrap().len(), 1);
    assert_eq!(first.json[0]["id"], ids[0]);
    let next = server.call(
        "GET",
        &format!("{path}?limit=5&startingAfter={}", ids[0]),
        Some(&t),
        None,
    );
    let rest = strings(&next.json, "id");
    assert_eq!(rest, ids[1..]);

    server
        .call("GET", &path, Some(&server.token("user_1", "public")), None)
        .assert_error(403, "forbidden");
    let other = other_project_token("user_1", "private");
    let theirs = server.call(
        "GET",
        &format!("/projects/{OTHER_PROJECT}/events"),
        Some(&other),
        None,
    );
    assert_eq!(theirs.status, 200, "{}", theirs.text);
    assert_eq!(theirs.json, json!([]));
    for bad in ["limit=0", "limit=101", "type=nope", "startingAfter=pi_1"] {
        let r = server.call("GET", &format!("{path}?{bad}"), Some(&t), None);
        r.assert_error(400, "invalidRequest");
        let field = bad.split('=').next().unwrap();
        assert!(
            r.json["error"]["details"]["fields"][field].is_string(),
            "{}",
            r.text
        );
    }
}
