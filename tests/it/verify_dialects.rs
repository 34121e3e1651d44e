//! The reference client's verify dialect (`action`: `START`, `SELECT_OTP`, `VALIDATE_OTP`) on
//! the verify route, beside paycred's own: its state machine, the choice of method kept in
//! the store (it survives a restart), and the same rules as paycred's dialect (attempts
//! counted together, lock-out, 409 when not in verify, the intent's own entity only).

use crate::common::*;
use serde_json::{json, Value};

/// A network-token intent in `verify` for `user_1` on card `number`; its id and verify path.
fn intent_in_verify(server: &Server, number: &str) -> (String, String) {
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", number);
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(&t),
        Some(&json!({"entityId": "user_1", "credentialType": "network-token",
            "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}}]})),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["status"], "verify");
    let id = r.json["id"].as_str().unwrap().to_string();
    let verify = format!("/projects/{PROJECT}/purchase-intents/{id}/verify");
    (id, verify)
}

fn step(server: &Server, path: &str, body: Value) -> Reply {
    let public = server.token("user_1", "public");
    server.call("POST", path, Some(&public), Some(&body))
}

/// The intent as its backend reads it.
fn intent(server: &Server, id: &str) -> Value {
    let t = server.token("user_1", "private");
    let r = server.call(
        "GET",
        &format!("/projects/{PROJECT}/purchase-intents/{id}"),
        Some(&t),
        None,
    );
    r.json
}

fn intent_status(server: &Server, id: &str) -> Value {
    intent(server, id)["status"].clone()
}

fn assert_field(r: &Reply, field: &str) {
    r.assert_error(400, "invalidRequest");
    assert!(
        r.json["error"]["details"]["fields"].get(field).is_some(),
        "{field}: {}",
        r.text
    );
}

#[test]
fn start_select_validate_with_the_choice_kept_in_the_store() {
    let mut server = Server::start();
    let (id, verify) = intent_in_verify(&server, VISA);

    let started = step(&server, &verify, json!({"action": "START"}));
    assert_eq!(started.status, 200, "{}", started.text);
    assert_eq!(started.json["status"], "OTP_REQUIRED");
    let methods = started.json["data"]["methods"].as_array().unwrap();
    let kinds: Vec<_> = methods.iter().map(|m| m["method"].clone()).collect();
    assert_eq!(kinds, vec![json!("OTPSMS"), json!("OTPEMAIL")]);
    let sms = methods[0]["identifier"].as_str().unwrap();

    let selected = step(
        &server,
        &verify,
        json!({"action": "SELECT_OTP", "payload": {"methodId": sms}}),
    );
    assert_eq!(selected.status, 200, "{}", selected.text);
    assert_eq!(selected.json["status"], "OTP_PENDING");

    // Another instance (here: the same one restarted) serves the next call.
    server.restart();
    let wrong = step(
        &server,
        &verify,
        json!({"action": "VALIDATE_OTP", "payload": {"otpCode": "000000"}}),
    );
    assert_eq!(wrong.status, 200, "{}", wrong.text);
    assert_eq!(wrong.json["status"], "ERROR");
    assert!(wrong.json["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("4 attempts remaining")));
    assert_eq!(intent_status(&server, &id), "verify");
    // paycred's dialect sees the same count.
    let own = step(&server, &verify, json!({}));
    assert_eq!(
        own.json["nextAction"]["attemptsRemaining"], 4,
        "{}",
        own.text
    );

    let right = step(
        &server,
        &verify,
        json!({"action": "VALIDATE_OTP", "payload": {"otpCode": "123456"}}),
    );
    assert_eq!(right.status, 200, "{}", right.text);
    assert_eq!(right.json, json!({"status": "VERIFIED"}));
    assert_eq!(intent_status(&server, &id), "active");
    // Once active, both dialects say so.
    assert_eq!(
        step(&server, &verify, json!({"action": "START"})).json,
        json!({"status": "VERIFIED"})
    );
    assert_eq!(step(&server, &verify, json!({})).json["status"], "active");
}

#[test]
fn unknown_or_out_of_order_actions_are_400_naming_the_field() {
    let server = Server::start();
    let (id, verify) = intent_in_verify(&server, VISA);
    let validate = json!({"action": "VALIDATE_OTP", "payload": {"otpCode": "123456"}});
    // VALIDATE_OTP before SELECT_OTP, with or without START.
    assert_field(&step(&server, &verify, validate.clone()), "action");
    assert_eq!(
        step(&server, &verify, json!({"action": "START"})).status,
        200
    );
    assert_field(&step(&server, &verify, validate.clone()), "action");
    for (body, field) in [
        (json!({"action": "AUTHENTICATE_PASSKEY"}), "action"),
        (json!({"action": "start"}), "action"),
        (json!({"action": 1}), "action"),
        (json!({"action": "SELECT_OTP"}), "payload.methodId"),
        (
            json!({"action": "SELECT_OTP", "payload": {"methodId": "fax"}}),
            "payload.methodId",
        ),
        (json!({"action": "SELECT_OTP", "payload": []}), "payload"),
        (
            json!({"action": "VALIDATE_OTP", "payload": {"otpCode": 123456}}),
            "payload.otpCode",
        ),
        (json!({"action": "START", "code": "123456"}), "code"),
        (json!({"action": "START", "extra": true}), "extra"),
    ] {
        assert_field(&step(&server, &verify, body), field);
    }
    // START clears a choice: VALIDATE_OTP needs SELECT_OTP again.
    let select = json!({"action": "SELECT_OTP", "payload": {"methodId": "email"}});
    assert_eq!(step(&server, &verify, select).status, 200);
    assert_eq!(
        step(&server, &verify, json!({"action": "START"})).status,
        200
    );
    assert_field(&step(&server, &verify, validate), "action");
    // Nothing of that counted as an attempt, nor changed the intent.
    assert_eq!(
        step(&server, &verify, json!({})).json["nextAction"]["attemptsRemaining"],
        5
    );
    assert_eq!(intent_status(&server, &id), "verify");
}

#[test]
fn the_same_rules_lock_out_and_conflicts() {
    let server = Server::start();
    let (id, verify) = intent_in_verify(&server, VISA);
    // Another entity's public token: not found.
    let other = server.token("user_2", "public");
    server
        .call(
            "POST",
            &verify,
            Some(&other),
            Some(&json!({"action": "START"})),
        )
        .assert_error(404, "notFound");

    let select = json!({"action": "SELECT_OTP", "payload": {"methodId": "sms"}});
    assert_eq!(step(&server, &verify, select).status, 200);
    let wrong = json!({"action": "VALIDATE_OTP", "payload": {"otpCode": "999999"}});
    // Wrong codes in both dialects count together: the fifth locks.
    for _ in 0..2 {
        assert_eq!(step(&server, &verify, json!({"code": "1"})).status, 200);
    }
    for _ in 0..2 {
        assert_eq!(
            step(&server, &verify, wrong.clone()).json["status"],
            "ERROR"
        );
    }
    step(&server, &verify, wrong.clone()).assert_error(409, "conflict");
    let right = json!({"action": "VALIDATE_OTP", "payload": {"otpCode": "123456"}});
    step(&server, &verify, right).assert_error(409, "conflict");
    step(&server, &verify, json!({"action": "START"})).assert_error(409, "conflict");
    assert_eq!(intent_status(&server, &id), "verify");

    // An intent no longer in verify (its payment method deleted: canceled): 409.
    let (id2, verify2) = intent_in_verify(&server, MASTERCARD);
    let t = server.token("user_1", "private");
    let got = intent(&server, &id2);
    let pm = got["paymentMethodId"].as_str().unwrap().to_string();
    let deleted = server.call(
        "DELETE",
        &format!("/projects/{PROJECT}/payment-methods/{pm}"),
        Some(&t),
        None,
    );
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    step(&server, &verify2, json!({"action": "START"})).assert_error(409, "conflict");
}
