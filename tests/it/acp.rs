//! ACP's Delegate Payment route, `POST /agentic_commerce/delegate_payment`, on a
//! `paycred serve --dev`: the 201 and its vault token (never the card), the purchase intent
//! behind it, `Idempotency-Key` (required, replayed, refused with another body, in flight),
//! each error in ACP's flat shape, and the vault token used through the proxy once.

use crate::common::upstream::Upstream;
use crate::common::{dev_jwt, DevFixture, Reply};
use serde_json::{json, Value};

pub(crate) const NUMBER: &str = "4242424242424242";
pub(crate) const CVC: &str = "223";
const PATH: &str = "/agentic_commerce/delegate_payment";

pub(crate) struct Acp(DevFixture);

impl std::ops::Deref for Acp {
    type Target = DevFixture;
    fn deref(&self) -> &DevFixture {
        &self.0
    }
}

impl Acp {
    pub(crate) fn start() -> Acp {
        Acp(DevFixture::start())
    }

    /// The purchase intent `id`, through the REST API.
    pub(crate) fn intent(&self, id: &str) -> Value {
        let url = format!("http://{}/projects/dev/purchase-intents/{id}", self.listen);
        let auth = format!("Bearer {}", self.token);
        let got = Reply::of(ureq::get(&url).set("Authorization", &auth).call());
        assert_eq!(got.status, 200, "{}", got.text);
        got.json
    }

    /// A POST with the token, `API-Version` and JSON, and these headers (a header given an
    /// empty value is left out).
    fn send(&self, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut all = vec![
            ("Authorization", format!("Bearer {}", self.token)),
            ("API-Version", "2026-04-17".to_string()),
            ("Content-Type", "application/json".to_string()),
        ];
        for (name, value) in headers {
            all.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            all.push((name, value.to_string()));
        }
        let mut req = ureq::post(&format!("http://{}{PATH}", self.listen));
        for (name, value) in all.iter().filter(|(_, v)| !v.is_empty()) {
            req = req.set(name, value);
        }
        Reply::of(req.send_string(body))
    }

    pub(crate) fn delegate(&self, key: &str, body: &Value) -> Reply {
        self.send(&[("Idempotency-Key", key)], &body.to_string())
    }
}

/// A request as ACP's example writes it, expiring in an hour.
pub(crate) fn request(number: &str) -> Value {
    let expires = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let expires = expires
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    json!({
        "payment_method": {
            "type": "card", "card_number_type": "fpan", "number": number,
            "exp_month": "11", "exp_year": "2030", "name": "Jane Doe", "cvc": CVC,
            "checks_performed": ["avs", "cvv"], "iin": "424242",
            "display_card_funding_type": "credit", "display_brand": "visa",
            "display_last4": &number[number.len() - 4..], "metadata": {"issuing_bank": "temp"}
        },
        "allowance": {
            "reason": "one_time", "max_amount": 2000, "currency": "usd",
            "checkout_session_id": "csn_01HV3P3", "merchant_id": "acme", "expires_at": expires
        },
        "billing_address": {
            "name": "Jane Doe", "line_one": "123 Fake St.", "city": "San Francisco",
            "state": "CA", "country": "US", "postal_code": "12345"
        },
        "risk_signals": [{"type": "card_testing", "score": 10, "action": "manual_review"}],
        "metadata": {"campaign": "q4"}
    })
}

/// ACP's flat error: this status, type and code, nothing of paycred's envelope, and never
/// the card number or CVC.
fn assert_acp_error(r: &Reply, status: u16, kind: &str, code: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.json["type"], kind, "{}", r.text);
    assert_eq!(r.json["code"], code, "{}", r.text);
    assert!(r.json["message"].is_string(), "{}", r.text);
    let fields = r.json.as_object().unwrap();
    for name in fields.keys() {
        assert!(
            ["type", "code", "message", "param", "supported_versions"].contains(&name.as_str()),
            "{name}: {}",
            r.text
        );
    }
    assert_no_card(r);
}

/// Neither the card's number nor its CVC in the answer.
pub(crate) fn assert_no_card(r: &Reply) {
    assert!(
        !r.text.contains(NUMBER) && !r.text.contains(CVC),
        "{}",
        r.text
    );
}

#[test]
fn a_card_and_its_allowance_become_a_single_use_vault_token() {
    let acp = Acp::start();
    let r = acp.delegate("k-created", &request(NUMBER));
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(
        !r.text.contains(NUMBER) && !r.text.contains(CVC),
        "{}",
        r.text
    );
    let keys: Vec<&String> = r.json.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "created", "metadata"], "{}", r.text);
    let id = r.json["id"].as_str().unwrap();
    assert!(id.starts_with("vt_"), "{id}");
    let created = r.json["created"].as_str().unwrap();
    assert!(
        time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339)
            .is_ok()
    );
    let meta = &r.json["metadata"];
    assert_eq!(meta["campaign"], "q4");
    assert_eq!(meta["merchant_id"], "acme");
    assert_eq!(meta["checkout_session_id"], "csn_01HV3P3");
    assert_eq!(meta["idempotency_key"], "k-created");
    assert!(meta.as_object().unwrap().values().all(Value::is_string));

    // The intent behind it: the allowance as mandates.
    let intent = meta["purchase_intent_id"].as_str().unwrap();
    assert_eq!(&intent[3..], &id[3..]);
    let got = acp.intent(intent);
    assert_eq!(got["credentialType"], "virtual-card");
    assert_eq!(got["paymentMethodId"], meta["payment_method_id"]);
    let m = &got["mandates"];
    assert_eq!(
        (&m["maxAmount"], &m["currency"]),
        (&json!("20.00"), &json!("USD")),
        "{m}"
    );
    assert_eq!(m["usageLimit"], 1, "{m}");
    assert!(m["expiresAt"].is_string(), "{m}");

    // A zero-decimal currency: minor units are the amount. A network token's DPAN is stored
    // as the card's number.
    let mut yen = request("5555555555554444");
    yen["allowance"]["currency"] = json!("jpy");
    yen["payment_method"]["card_number_type"] = json!("network_token");
    let r = acp.delegate("k-yen", &yen);
    assert_eq!(r.status, 201, "{}", r.text);
    let intent = r.json["metadata"]["purchase_intent_id"].as_str().unwrap();
    let m = &acp.intent(intent)["mandates"];
    assert_eq!(
        (&m["maxAmount"], &m["currency"]),
        (&json!("2000"), &json!("JPY")),
        "{m}"
    );
}

#[test]
fn the_idempotency_key_is_required_replayed_and_bound_to_its_body() {
    let acp = Acp::start();
    let body = request(NUMBER);
    let r = acp.send(&[], &body.to_string());
    assert_acp_error(&r, 400, "invalid_request", "idempotency_key_required");

    let first = acp.delegate("k-1", &body);
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.header("Idempotent-Replayed"), None);
    // The same body, its keys in another order: the first answer again.
    let mut reordered = serde_json::Map::new();
    for (k, v) in body.as_object().unwrap().iter().rev() {
        reordered.insert(k.clone(), v.clone());
    }
    let again = acp.delegate("k-1", &Value::Object(reordered));
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.json, first.json);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));

    let mut other = body.clone();
    other["allowance"]["max_amount"] = json!(2500);
    let r = acp.delegate("k-1", &other);
    assert_acp_error(&r, 422, "invalid_request", "idempotency_conflict");

    // The same new key sent at once from several clients: one runs, the others get its
    // answer or 409 while it runs.
    let answers: Vec<Reply> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| acp.delegate("k-race", &body)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ran = 0;
    for r in &answers {
        match (r.status, r.header("Idempotent-Replayed")) {
            (201, None) => ran += 1,
            (201, Some("true")) => {}
            (409, _) => {
                assert_acp_error(r, 409, "invalid_request", "idempotency_in_flight");
                assert_eq!(r.header("Retry-After"), Some("1"));
            }
            _ => panic!("{} {}", r.status, r.text),
        }
    }
    assert_eq!(ran, 1);
}

#[test]
fn every_error_is_acps_flat_object() {
    let acp = Acp::start();
    let mut luhn = request("4242424242424241");
    luhn["payment_method"]["display_last4"] = json!("4241");
    let r = acp.delegate("k-luhn", &luhn);
    assert_acp_error(&r, 422, "invalid_request", "invalid_card");
    assert_eq!(r.json["param"], "$.payment_method.number");
    assert!(!r.text.contains("4242424242424241"), "{}", r.text);

    #[rustfmt::skip]
    let refused = [
        ("k-past", "expires_at", json!("2020-01-01T00:00:00Z"), 422, "invalid"),
        ("k-far", "expires_at", json!("2099-01-01T00:00:00Z"), 422, "invalid"),
        ("k-cur", "currency", json!("zzz"), 422, "invalid"),
        ("k-missing", "merchant_id", Value::Null, 400, "missing"),
    ];
    for (key, field, value, status, code) in refused {
        let mut body = request(NUMBER);
        body["allowance"][field] = value;
        let r = acp.delegate(key, &body);
        assert_acp_error(&r, status, "invalid_request", code);
        assert_eq!(r.json["param"], format!("$.allowance.{field}"));
    }

    let body = request(NUMBER).to_string();
    let key = ("Idempotency-Key", "k-e");
    let r = acp.send(&[key, ("Content-Type", "text/plain")], &body);
    assert_acp_error(&r, 415, "invalid_request", "unsupported_media_type");

    let r = acp.send(&[key, ("Authorization", "")], &body);
    assert_acp_error(&r, 401, "invalid_request", "unauthorized");
    assert!(r.header("WWW-Authenticate").is_some());
    let r = acp.send(&[key, ("Authorization", "Bearer not.a.jwt")], &body);
    assert_acp_error(&r, 401, "invalid_request", "unauthorized");
    let public = format!("Bearer {}", dev_jwt(acp.dir.path(), "user_1", "public"));
    let r = acp.send(&[key, ("Authorization", &public)], &body);
    assert_acp_error(&r, 403, "invalid_request", "forbidden");

    let r = acp.send(&[key, ("API-Version", "")], &body);
    assert_acp_error(&r, 400, "invalid_request", "missing_api_version");
    assert_eq!(r.json["supported_versions"][0], "2026-04-17");
    let r = acp.send(&[key, ("API-Version", "2024-01-01")], &body);
    assert_acp_error(&r, 400, "invalid_request", "unsupported_api_version");

    let r = Reply::of(ureq::get(&format!("http://{}{PATH}", acp.listen)).call());
    assert_acp_error(&r, 405, "invalid_request", "method_not_allowed");
    assert_eq!(r.header("Allow"), Some("POST"));
}

#[test]
fn the_vault_token_pays_once_through_the_proxy() {
    let acp = Acp::start();
    let target = Upstream::start();
    let r = acp.delegate("k-pay", &request(NUMBER));
    assert_eq!(r.status, 201, "{}", r.text);
    let vt = r.json["id"].as_str().unwrap();
    let field =
        |f: &str| format!("{{{{ paymentMethod: {vt} | type: 'virtual-card' | json: '$.{f}' }}}}");
    let charge = json!({"number": field("number"), "cvc": field("cvc"), "amount": 1500});
    let pay = || {
        Reply::of(
            ureq::post(&format!("http://{}/projects/dev/proxy", acp.listen))
                .set("Authorization", &format!("Bearer {}", acp.token))
                .set("Svc-Target-URL", &target.url("/charges"))
                .set("Content-Type", "application/json")
                .send_string(&charge.to_string()),
        )
    };
    let first = pay();
    assert!((200..300).contains(&first.status), "{}", first.text);
    let seen = target.requests();
    assert_eq!(seen.len(), 1);
    let sent: Value = serde_json::from_slice(&seen[0].body).unwrap();
    let number = sent["number"].as_str().unwrap();
    assert!(
        number.len() >= 15 && number.bytes().all(|b| b.is_ascii_digit()),
        "{sent}"
    );
    assert_ne!(number, NUMBER, "the single-use card, not the stored one");

    // Its one use is spent: refused before the target is contacted.
    let second = pay();
    second.assert_error(400, "invalidTemplate");
    assert!(second.text.contains("vault token"), "{}", second.text);
    assert_eq!(target.requests().len(), 1);
}
