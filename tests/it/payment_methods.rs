//! Payment methods end to end: create, list, get and delete as the specification defines
//! them (shapes, validation, paging), deduplication, entity isolation.

use crate::common::*;
use serde_json::{json, Value};

fn pm_path() -> String {
    format!("/projects/{PROJECT}/payment-methods")
}

fn create(server: &Server, token: &str, body: &Value) -> Reply {
    server.call("POST", &pm_path(), Some(token), Some(body))
}

#[test]
fn create_returns_the_create_shape() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let r = create(&server, &t, &card_body("user_1", VISA, CVC));
    assert_eq!(r.status, 201, "{}", r.text);
    let pm = &r.json;
    assert!(pm["id"].as_str().unwrap().starts_with("pm_"));
    assert_eq!(pm["type"], "card");
    assert_eq!(pm["entityId"], "user_1");
    assert_eq!(pm["card"]["type"], "credit");
    assert_eq!(pm["card"]["brand"], "visa");
    assert_eq!(
        pm["card"]["details"],
        json!({"bin": "424242", "last4": "4242", "expirationMonth": "12", "expirationYear": "2031"})
    );
    assert_eq!(pm["card"]["display"]["name"], "Visa");
    assert!(pm["card"]["display"]["color"]
        .as_str()
        .unwrap()
        .starts_with('#'));
    assert_eq!(
        pm["credentialTypes"],
        json!(["network-token", "virtual-card", "pan"])
    );
    let created = pm["createdAt"].as_str().unwrap();
    assert!(
        time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339)
            .is_ok(),
        "{created}"
    );
    let token = &pm["token"];
    assert!(token["id"].as_str().unwrap().starts_with("tok_"));
    assert_eq!(token["maskedData"], "424242******4242");
    assert!(token["fingerprint"].as_str().unwrap().len() >= 16);
    assert!(token["createdAt"].is_string());
    assert!(!r.text.contains(VISA) && !r.text.contains("\"123\""));
}

#[test]
fn brands_funding_and_project_settings_shape_the_answer() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let debit = create(&server, &t, &card_body("user_1", VISA_DEBIT, CVC));
    assert_eq!(debit.status, 201, "{}", debit.text);
    assert_eq!(debit.json["card"]["type"], "debit");
    let amex = create(&server, &t, &card_body("user_1", AMEX, AMEX_CVC));
    assert_eq!(amex.status, 201, "{}", amex.text);
    assert_eq!(amex.json["card"]["brand"], "amex");
    let mc = create(&server, &t, &card_body("user_1", MASTERCARD, CVC));
    assert_eq!(mc.json["card"]["brand"], "mastercard");
    // Project B: pan disabled and no vault key: no `pan`, no `token`.
    let tb = other_project_token("user_1", "private");
    let b = server.call(
        "POST",
        &format!("/projects/{OTHER_PROJECT}/payment-methods"),
        Some(&tb),
        Some(&card_body("user_1", VISA, CVC)),
    );
    assert_eq!(b.status, 201, "{}", b.text);
    assert_eq!(
        b.json["credentialTypes"],
        json!(["network-token", "virtual-card"])
    );
    assert!(b.json.get("token").is_none());
}

#[test]
fn the_same_card_again_returns_the_existing_payment_method() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let first = create(&server, &t, &card_body("user_1", VISA, CVC));
    assert_eq!(first.status, 201);
    let again = create(&server, &t, &card_body("user_1", VISA, "999"));
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["id"], first.json["id"]);
    // Another entity's identical card is its own payment method.
    let t2 = server.token("user_2", "private");
    let other = create(&server, &t2, &card_body("user_2", VISA, CVC));
    assert_eq!(other.status, 201);
    assert_ne!(other.json["id"], first.json["id"]);
    let list = server.call("GET", &pm_path(), Some(&t), None);
    assert_eq!(list.json.as_array().unwrap().len(), 1);
}

/// Creating the same card again takes its new cvc and expiry (a reissued card): the payment
/// method keeps its id, the proxy sends the new values at once (the cached record is
/// replaced), and the change is audited. The cvc outlives a restart (its bucket key comes from
/// the ratchet kept in the store) until its retention ends.
#[test]
fn the_same_card_again_takes_the_new_cvc_and_expiry() {
    let mut server = Server::start();
    let up = crate::common::upstream::Upstream::start();
    let t = server.token("user_1", "private");
    let id = server.add_card(&t, "user_1", VISA);
    let field = |f: &str| format!("{{{{ paymentMethod: {id} | type: 'pan' | json: '$.{f}' }}}}");
    let body =
        json!({"m": field("expirationMonth"), "y": field("expirationYear"), "c": field("cvc")});
    let sent = |server: &Server| {
        let r = server.proxy_json(&t, &up.url("/charge"), &body);
        assert_eq!(r.status, 201, "{}", r.text);
        serde_json::from_slice::<Value>(&up.requests().last().unwrap().body).unwrap()
    };
    let create_again = |server: &Server, cvc: &str| {
        let reissued = json!({"entityId": "user_1", "card":
            {"number": VISA, "expirationMonth": "11", "expirationYear": "2033", "cvc": cvc}});
        let again = create(server, &t, &reissued);
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.json["id"], id.as_str());
    };
    assert_eq!(sent(&server), json!({"m": "12", "y": "2031", "c": CVC}));
    create_again(&server, "987");
    let shown = server.call("GET", &format!("{}/{id}", pm_path()), Some(&t), None);
    assert_eq!(shown.json["card"]["details"]["expirationMonth"], "11");
    assert_eq!(shown.json["card"]["details"]["expirationYear"], "2033");
    assert_eq!(sent(&server), json!({"m": "11", "y": "2033", "c": "987"}));

    server.restart();
    assert_eq!(sent(&server), json!({"m": "11", "y": "2033", "c": "987"}));
    create_again(&server, "654");
    assert_eq!(sent(&server), json!({"m": "11", "y": "2033", "c": "654"}));

    server.stop(false);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{err}");
    let update = format!("\"paymentMethod.update\",\"project\":\"{PROJECT}\",\"entity\":\"user_1\",\"resource\":\"{id}\"");
    assert_eq!(out.matches(&update).count(), 2, "{out}");
    // (Quoted: the digits alone turn up in hashes and times.)
    for cvc in ["987", "654"] {
        assert!(
            !out.contains(&format!("\"{cvc}\"")),
            "a cvc is in the audit log"
        );
    }
}

#[test]
fn list_pages_newest_first_with_a_total() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let cards = [
        VISA,
        MASTERCARD,
        VISA_DEBIT,
        "4000000000000077",
        "5200828282828210",
    ];
    let mut ids = Vec::new();
    for n in cards {
        let r = create(&server, &t, &card_body("user_1", n, CVC));
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push(r.json["id"].as_str().unwrap().to_string());
    }
    ids.reverse();
    let all = server.call("GET", &pm_path(), Some(&t), None);
    assert_eq!(all.header("X-Total-Count"), Some("5"));
    let got: Vec<&str> = all
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let first = &all.json[0];
    assert!(first.get("token").is_none());
    let display = &first["card"]["display"];
    assert!(display["backgroundColor"].is_string() && display["foregroundColor"].is_string());
    assert!(display["description"].as_str().unwrap().contains("8210"));
    assert!(display.get("name").is_none());

    let page = server.call(
        "GET",
        &format!("{}?limit=2&offset=1", pm_path()),
        Some(&t),
        None,
    );
    let got: Vec<&str> = page
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[1].as_str(), ids[2].as_str()]);
    assert_eq!(page.header("X-Total-Count"), Some("5"));
    let cards_only = server.call("GET", &format!("{}?type=card", pm_path()), Some(&t), None);
    assert_eq!(cards_only.json.as_array().unwrap().len(), 5);
    let none = server.call("GET", &format!("{}?type=bank", pm_path()), Some(&t), None);
    assert_eq!(none.json, json!([]));
    for bad in ["limit=0", "limit=101", "limit=x", "offset=-1", "offset=abc"] {
        let r = server.call("GET", &format!("{}?{bad}", pm_path()), Some(&t), None);
        r.assert_error(400, "invalidRequest");
        let field = bad.split('=').next().unwrap();
        assert!(
            r.json["error"]["details"]["fields"][field].is_string(),
            "{bad}: {}",
            r.text
        );
    }
}

#[test]
fn another_entitys_payment_method_answers_like_an_unknown_id() {
    let server = Server::start();
    let t1 = server.token("user_1", "private");
    let t2 = server.token("user_2", "private");
    let pm = create(&server, &t1, &card_body("user_1", VISA, CVC));
    let id = pm.json["id"].as_str().unwrap();
    let foreign = server.call("GET", &format!("{}/{id}", pm_path()), Some(&t2), None);
    let unknown = server.call(
        "GET",
        &format!("{}/pm_doesnotexist", pm_path()),
        Some(&t2),
        None,
    );
    foreign.assert_error(404, "notFound");
    assert_eq!(foreign.text, unknown.text);
    let del = server.call("DELETE", &format!("{}/{id}", pm_path()), Some(&t2), None);
    assert_eq!(del.text, unknown.text);
    assert_eq!(
        server.call("GET", &pm_path(), Some(&t2), None).json,
        json!([])
    );
    // Still there for its owner.
    assert_eq!(
        server
            .call("GET", &format!("{}/{id}", pm_path()), Some(&t1), None)
            .status,
        200
    );
}

#[test]
fn get_and_delete() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = create(&server, &t, &card_body("user_1", MASTERCARD, CVC));
    let id = pm.json["id"].as_str().unwrap();
    let got = server.call(
        "GET",
        &format!("/tenants/{PROJECT}/payment-methods/{id}"),
        Some(&t),
        None,
    );
    assert_eq!(got.status, 200);
    assert_eq!(got.json["id"], pm.json["id"]);
    assert_eq!(got.json["card"]["details"], pm.json["card"]["details"]);
    let del = server.call("DELETE", &format!("{}/{id}", pm_path()), Some(&t), None);
    assert_eq!(del.status, 204);
    assert!(del.text.is_empty());
    server
        .call("GET", &format!("{}/{id}", pm_path()), Some(&t), None)
        .assert_error(404, "notFound");
    server
        .call("DELETE", &format!("{}/{id}", pm_path()), Some(&t), None)
        .assert_error(404, "notFound");
    // The card can be added again after deletion.
    assert_eq!(
        create(&server, &t, &card_body("user_1", MASTERCARD, CVC)).status,
        201
    );
}

#[test]
fn invalid_cards_name_every_bad_field() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let card = |number: &str, month: &str, year: &str, cvc: &str| json!({"entityId": "user_1", "card": {"number": number, "expirationMonth": month, "expirationYear": year, "cvc": cvc}});
    let cases = [
        (
            card("4242424242424241", "12", "2031", "123"),
            vec!["card.number"],
        ),
        (card("42424242", "12", "2031", "123"), vec!["card.number"]),
        (
            card("4242x42424242424", "12", "2031", "123"),
            vec!["card.number"],
        ),
        (
            card(VISA, "13", "2031", "123"),
            vec!["card.expirationMonth"],
        ),
        (
            card(VISA, "00", "2031", "123"),
            vec!["card.expirationMonth"],
        ),
        (card(VISA, "12", "31", "123"), vec!["card.expirationYear"]),
        (card(VISA, "01", "2020", "123"), vec!["card.expirationYear"]),
        (card(VISA, "12", "2031", "12"), vec!["card.cvc"]),
        (card(AMEX, "12", "2031", "123"), vec!["card.cvc"]),
        (
            card("4242424242424241", "13", "31", "1"),
            vec![
                "card.number",
                "card.expirationMonth",
                "card.expirationYear",
                "card.cvc",
            ],
        ),
        (
            json!({"entityId": "user_1", "card": {"number": 4242424242424242u64, "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}}),
            vec!["card.number"],
        ),
        (
            json!({"entityId": "user_1", "card": {"expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}}),
            vec!["card.number"],
        ),
        (
            json!({"entityId": "user_1", "card": "4242424242424242"}),
            vec!["card"],
        ),
        (json!({"entityId": "user_1"}), vec!["card"]),
        (
            json!({"card": {"number": VISA, "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}}),
            vec!["entityId"],
        ),
        (
            json!({"entityId": "user_1", "tokenId": "tok_1"}),
            vec!["tokenId"],
        ),
        (
            json!({"entityId": "user_1", "encryptedCard": "eyJ..."}),
            vec!["encryptedCard"],
        ),
        (
            json!({"entityId": "user_1", "tokenId": "tok_1", "card": {}}),
            vec!["tokenId", "card"],
        ),
        (
            json!({"entityId": "user_1", "card": {}, "colour": "red"}),
            vec!["colour"],
        ),
    ];
    for (body, fields) in cases {
        let r = create(&server, &t, &body);
        r.assert_error(400, "invalidRequest");
        let got = r.json["error"]["details"]["fields"]
            .as_object()
            .unwrap_or_else(|| panic!("{}", r.text));
        for f in &fields {
            assert!(got.contains_key(*f), "{body} should name {f}: {}", r.text);
        }
        assert_eq!(got.len(), fields.len(), "{body}: {}", r.text);
        assert!(
            !r.text.contains("424242424242424"),
            "the number was echoed: {}",
            r.text
        );
    }
    assert_eq!(
        server.call("GET", &pm_path(), Some(&t), None).json,
        json!([]),
        "nothing stored"
    );
}
