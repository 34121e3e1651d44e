//! Purchase intents over HTTP against the real server, as the specification defines them:
//! both path forms, the create and get shapes, entity isolation, verification and a sandbox
//! authorization.

use crate::common::*;
use serde_json::{json, Value};

fn mandates() -> Value {
    json!([
        {"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
        {"type": "merchantMcc", "value": "5411"}
    ])
}

#[test]
fn create_and_get_on_both_path_forms() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);

    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(&t),
        Some(
            &json!({"entityId": "user_1", "credentialType": "virtual-card",
            "paymentMethodId": pm, "mandates": mandates()}),
        ),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let pi = &r.json;
    let id = pi["id"].as_str().unwrap();
    assert!(id.starts_with("pi_"));
    assert_eq!(pi["entityId"], "user_1");
    assert_eq!(pi["credentialType"], "virtual-card");
    assert_eq!(pi["status"], "active");
    for k in ["number", "expirationMonth", "expirationYear", "cvc"] {
        assert!(pi["card"][k].is_string(), "{k}: {}", r.text);
    }
    assert_ne!(pi["card"]["number"], VISA);
    let created = time::OffsetDateTime::parse(
        pi["createdAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let expires = time::OffsetDateTime::parse(
        pi["expiresAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(expires - created, time::Duration::hours(24));

    // The tenant form, singular, without entityId; and the plural tenant form.
    let r2 = server.call(
        "POST",
        &format!("/tenants/{PROJECT}/purchase-intent"),
        Some(&t),
        Some(
            &json!({"credentialType": "virtual-card", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "20"}, {"type": "currency", "value": "USD"},
                         {"type": "mcc", "value": "5411"}]}),
        ),
    );
    assert_eq!(r2.status, 201, "{}", r2.text);
    assert_eq!(r2.json["entityId"], "user_1");
    for path in [
        format!("/projects/{PROJECT}/purchase-intents/{id}"),
        format!("/tenants/{PROJECT}/purchase-intent/{id}"),
        format!("/tenants/{PROJECT}/purchase-intents/{id}"),
    ] {
        let g = server.call("GET", &path, Some(&t), None);
        assert_eq!(g.status, 200, "{path}: {}", g.text);
        assert_eq!(g.json["id"], pi["id"]);
        assert_eq!(g.json["card"], pi["card"]);
    }
    // No card value in the server log.
    let number = pi["card"]["number"].as_str().unwrap();
    assert!(!server.log().contains(number) && !server.log().contains(VISA));
}

#[test]
fn invalid_requests_and_other_entities() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let path = format!("/projects/{PROJECT}/purchase-intents");
    let r = server.call(
        "POST",
        &path,
        Some(&t),
        Some(&json!({"credentialType": "card", "paymentMethodId": pm, "mandates": mandates()})),
    );
    r.assert_error(400, "invalidRequest");
    assert!(r.json["error"]["details"]["fields"]["credentialType"].is_string());

    // Another entity's payment method: 404 like an unknown id.
    let t2 = server.token("user_2", "private");
    let body =
        json!({"credentialType": "virtual-card", "paymentMethodId": pm, "mandates": mandates()});
    server
        .call("POST", &path, Some(&t2), Some(&body))
        .assert_error(404, "notFound");
    let mut mismatched = body.clone();
    mismatched["entityId"] = json!("user_2");
    server
        .call("POST", &path, Some(&t), Some(&mismatched))
        .assert_error(403, "forbidden");
    let public = server.token("user_1", "public");
    server
        .call("POST", &path, Some(&public), Some(&body))
        .assert_error(403, "forbidden");
    let created = server.call("POST", &path, Some(&t), Some(&body));
    let id = created.json["id"].as_str().unwrap();
    server
        .call("GET", &format!("{path}/{id}"), Some(&t2), None)
        .assert_error(404, "notFound");
    server
        .call("GET", &format!("{path}/pi_nope"), Some(&t), None)
        .assert_error(404, "notFound");
}

#[test]
fn verification_then_authorization_over_http() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let public = server.token("user_1", "public");
    let pm = server.add_card(&t, "user_1", VISA);
    let r = server.call(
        "POST",
        &format!("/tenants/{PROJECT}/purchase-intent"),
        Some(&t),
        Some(
            &json!({"credentialType": "network-token", "paymentMethodId": pm,
            "mandates": mandates()}),
        ),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["status"], "verify");
    assert!(r.json.get("token").is_none());
    let id = r.json["id"].as_str().unwrap();
    let verify = format!("/projects/{PROJECT}/purchase-intents/{id}/verify");

    let step = server.call("POST", &verify, Some(&public), Some(&json!({})));
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(step.json["status"], "verify");
    assert_eq!(step.json["nextAction"]["type"], "otp");
    let done = server.call(
        "POST",
        &verify,
        Some(&public),
        Some(&json!({"code": "123456"})),
    );
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(done.json, json!({"status": "active", "nextAction": null}));

    let got = server.call(
        "GET",
        &format!("/tenants/{PROJECT}/purchase-intent/{id}"),
        Some(&t),
        None,
    );
    assert_eq!(got.json["status"], "active");
    let token = &got.json["token"];
    assert!(token["cryptogram"].is_string(), "{}", got.text);

    let auth = format!("/projects/{PROJECT}/sandbox/authorizations");
    let charge = |amount: &str| {
        json!({"number": token["number"], "expirationMonth": token["expirationMonth"],
            "expirationYear": token["expirationYear"], "cryptogram": token["cryptogram"],
            "amount": amount, "currency": "USD", "mcc": "5411"})
    };
    let ok = server.call("POST", &auth, Some(&t), Some(&charge("42.50")));
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json, json!({"approved": true}));
    let over = server.call("POST", &auth, Some(&t), Some(&charge("100.01")));
    assert_eq!(
        over.json,
        json!({"approved": false, "declineReason": "amountOverMaximum"})
    );
    // The authorization endpoint is private-role only.
    server
        .call("POST", &auth, Some(&public), Some(&charge("1")))
        .assert_error(403, "forbidden");
    let crypt = token["cryptogram"].as_str().unwrap();
    assert!(!server.log().contains(crypt));
}

#[test]
fn sandbox_credentials_survive_a_restart() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(&t),
        Some(
            &json!({"credentialType": "virtual-card", "paymentMethodId": pm,
            "mandates": mandates()}),
        ),
    );
    let card = r.json["card"].clone();
    server.restart();
    let t = server.token("user_1", "private");
    let ok = server.call(
        "POST",
        &format!("/projects/{PROJECT}/sandbox/authorizations"),
        Some(&t),
        Some(
            &json!({"number": card["number"], "expirationMonth": card["expirationMonth"],
            "expirationYear": card["expirationYear"], "cvc": card["cvc"],
            "amount": "1", "currency": "840", "mcc": "5411"}),
        ),
    );
    assert_eq!(ok.json, json!({"approved": true}), "{}", ok.text);
}
