//! Logs and metrics hold no secrets: requests on every route, with the
//! server logging at trace level (sled's debug lines included; pingora's are capped at info,
//! since they print request headers and bodies), then the whole
//! log is searched for every card number, cvc, cryptogram, credential number and JWT the run
//! used or received; `/metrics` labels carry route shapes and statuses, never an id.

use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::{json, Value};

fn tpl(pm: &str, kind: &str, path: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: '{kind}' | json: '{path}' }}}}")
}

#[test]
fn no_secret_reaches_the_debug_log_or_a_metric_label() {
    // Trace level: pingora's trace lines print whole request headers and bodies.
    let mut server = Server::start_with(Options {
        log_level: Some("trace"),
        ..Options::default()
    });
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let public = server.token("user_1", "public");
    let mut secrets: Vec<String> = vec![t.clone(), public.clone()];
    let mut cvcs: Vec<String> = Vec::new();
    let p = |s: &str| format!("/projects/{PROJECT}{s}");

    assert_eq!(server.call("GET", "/health", None, None).status, 200);
    assert_eq!(server.call("GET", "/openapi.json", None, None).status, 200);

    // Payment methods (two cards, one deleted at the end).
    let mut pms = Vec::new();
    for (number, cvc) in [(VISA, "731"), (MASTERCARD, "842")] {
        let r = server.call(
            "POST",
            &p("/payment-methods"),
            Some(&t),
            Some(&card_body("user_1", number, cvc)),
        );
        assert_eq!(r.status, 201, "{}", r.text);
        pms.push(r.json["id"].as_str().unwrap().to_string());
        secrets.push(number.to_string());
        cvcs.push(cvc.to_string());
    }
    // An invalid card: the validation error must not echo it.
    let bad = server.call(
        "POST",
        &p("/payment-methods"),
        Some(&t),
        Some(&card_body("user_1", "4242424242424241", "555")),
    );
    assert_eq!(bad.status, 400);
    secrets.push("4242424242424241".into());
    server.call("GET", &p("/payment-methods"), Some(&t), None);
    server.call(
        "GET",
        &p(&format!("/payment-methods/{}", pms[0])),
        Some(&t),
        None,
    );

    // Token vault and client encryption key (public role), where the server has them.
    server.call("GET", &p("/client-encryption-key"), Some(&public), None);
    let tok = server.call(
        "POST",
        &p("/tokens"),
        Some(&t),
        Some(&json!({"card": {"number": AMEX, "expirationMonth": "12", "expirationYear": "2031", "cvc": "9534"}})),
    );
    secrets.push(AMEX.into());
    cvcs.push("9534".into());
    let _ = tok;

    // Purchase intents of every type, verification, the sandbox authorization.
    let mandates =
        json!([{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}}]);
    let mut intents: Vec<Value> = Vec::new();
    for kind in ["virtual-card", "network-token", "pan"] {
        let r = server.call(
            "POST",
            &p("/purchase-intents"),
            Some(&t),
            Some(&json!({"entityId": "user_1", "credentialType": kind, "paymentMethodId": pms[0], "mandates": mandates})),
        );
        assert_eq!(r.status, 201, "{}", r.text);
        intents.push(r.json);
    }
    let nt_id = intents[1]["id"].as_str().unwrap().to_string();
    if intents[1]["status"] == "verify" {
        let v = p(&format!("/purchase-intents/{nt_id}/verify"));
        server.call("POST", &v, Some(&public), Some(&json!({})));
        server.call("POST", &v, Some(&public), Some(&json!({"code": "000000"})));
        let ok = server.call("POST", &v, Some(&public), Some(&json!({"code": "123456"})));
        assert_eq!(ok.status, 200, "{}", ok.text);
    }
    for i in &intents {
        let id = i["id"].as_str().unwrap();
        let g = server.call(
            "GET",
            &p(&format!("/purchase-intents/{id}")),
            Some(&t),
            None,
        );
        for obj in ["card", "token", "pan"] {
            let c = &g.json[obj];
            if let Some(n) = c["number"].as_str() {
                secrets.push(n.to_string());
            }
            if let Some(x) = c["cryptogram"].as_str() {
                secrets.push(x.to_string());
            }
            if let Some(x) = c["cvc"].as_str() {
                cvcs.push(x.to_string());
            }
        }
    }
    let mut charge = intents[0]["card"].clone();
    charge["amount"] = json!("10.00");
    charge["currency"] = json!("USD");
    charge["mcc"] = json!("5411");
    let a = server.call(
        "POST",
        &p("/sandbox/authorizations"),
        Some(&t),
        Some(&charge),
    );
    assert_eq!(a.status, 200, "{}", a.text);

    // The proxy with pan and virtual-card templates.
    let body = json!({
        "number": tpl(&pms[0], "pan", "$.number"),
        "cvc": tpl(&pms[0], "pan", "$.cvc"),
        "vc": tpl(&pms[0], "virtualCard", "$.number"),
    });
    let r = server.raw(
        "POST",
        &p("/proxy"),
        &[
            ("Authorization", &format!("Bearer {t}")),
            ("Svc-Target-URL", &up.url("/charge")),
            ("Content-Type", "application/json"),
        ],
        Some(body.to_string().as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.text);

    // A request that pingora proxies itself (no body to substitute), with paycred's token in
    // `Svc-Authorization` and the target's own key in `Authorization`: pingora's debug lines
    // print the upstream request header, so paycred caps pingora's log targets at info.
    let target_key = "sk_target_5f1c9e7a2b40";
    secrets.push(target_key.into());
    let r = server.raw(
        "GET",
        &p("/proxy"),
        &[
            ("Svc-Authorization", &format!("Bearer {t}")),
            ("Authorization", &format!("Bearer {target_key}")),
            ("Svc-Target-URL", &up.url("/charges/1")),
        ],
        None,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let seen = up.requests().pop().unwrap();
    assert_eq!(seen.path, "/charges/1");
    assert_eq!(
        seen.header("Authorization"),
        Some(format!("Bearer {target_key}").as_str())
    );

    // Auth failures: another project's token and a broken one.
    let other = other_project_token("user_1", "private");
    secrets.push(other.clone());
    server.call("GET", &p("/payment-methods"), Some(&other), None);
    let broken = format!("{}x", &t[..t.len() - 1]);
    server.call("GET", &p("/payment-methods"), Some(&broken), None);
    assert_eq!(
        server
            .call(
                "DELETE",
                &p(&format!("/payment-methods/{}", pms[1])),
                Some(&t),
                None
            )
            .status,
        204
    );
    let metrics = server.metrics();
    assert_eq!(metrics.status, 200);
    std::thread::sleep(std::time::Duration::from_millis(200));

    let log = server.log();
    assert!(
        log.contains("DEBUG"),
        "the server did not log at debug level"
    );
    for s in &secrets {
        assert!(
            !log.contains(s.as_str()),
            "a secret ({} chars, starting {:?}) is in the log",
            s.len(),
            &s[..4]
        );
    }
    assert!(!log.contains("eyJ"), "something JWT-shaped is in the log");
    for cvc in &cvcs {
        for shape in [
            format!("\"{cvc}\""),
            format!("cvc={cvc}"),
            format!("cvc: {cvc}"),
        ] {
            assert!(!log.contains(&shape), "a cvc is in the log");
        }
    }
    // Metrics: labels are route shapes, statuses and classes only.
    let ids: Vec<&str> = pms
        .iter()
        .map(String::as_str)
        .chain(intents.iter().filter_map(|i| i["id"].as_str()))
        .collect();
    for line in metrics.text.lines().filter(|l| !l.starts_with('#')) {
        for id in &ids {
            assert!(!line.contains(id), "an id in a metric: {line}");
        }
        assert!(
            !line.contains("user_1") && !line.contains("127.0.0.1"),
            "{line}"
        );
    }
    assert!(
        metrics
            .text
            .contains("paycred_templates_substituted_total 3"),
        "{}",
        metrics.text
    );
    assert!(metrics
        .text
        .contains("paycred_target_responses_total{class=\"2xx\"} 2"));
    assert!(metrics
        .text
        .contains("paycred_target_duration_seconds_count 2"));
}
