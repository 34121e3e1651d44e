//! Browser checkout from the command line: `paycred ca --out DIR` writes an interception CA
//! (the key its owner's alone, never over an existing file) and says how to trust it, and
//! `paycred check` loads the CA a config names, accepting a good one and naming the file of
//! a bad one, as it checks `browser_checkout` of each project.

use std::path::Path;
use std::process::{Command, Output};

fn paycred(args: &[&str], config: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_paycred"));
    cmd.args(args);
    if let Some(config) = config {
        cmd.arg("-c").arg(config);
    }
    // A master key, so that `check` gets as far as the browser settings.
    cmd.env("PAYCRED_MASTER_KEY", "11".repeat(32))
        .output()
        .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn ca_writes_a_private_key_never_over_a_file_and_says_how_to_trust_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("ca");
    let out = paycred(&["ca", "--out", out_dir.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (cert, key) = (out_dir.join("ca.pem"), out_dir.join("ca-key.pem"));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n paycred -i {}",
            cert.display()
        )),
        "{said}"
    );
    assert!(said.contains("Playwright"), "{said}");
    let pem = std::fs::read_to_string(&cert).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert!(!said.contains("PRIVATE KEY"), "{said}");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let key_before = std::fs::read(&key).unwrap();
    // Again: refused, nothing replaced.
    let again = paycred(&["ca", "--out", out_dir.to_str().unwrap()], None);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(std::fs::read(&key).unwrap(), key_before);
    assert_eq!(std::fs::read_to_string(&cert).unwrap(), pem);
    // What it wrote is a CA paycred loads.
    assert!(paycred::browser::ca::Ca::load(&cert, &key).is_ok());
}

#[test]
fn check_loads_the_browser_proxys_ca_and_checks_browser_checkout() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for d in [&a, &b] {
        assert!(paycred(&["ca", "--out", d.to_str().unwrap()], None)
            .status
            .success());
    }
    let public = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAS+dfUdbmyFT3/GCljB09GG+5I0reVaJ7DuKtkfmIe5s=\n-----END PUBLIC KEY-----\n";
    std::fs::write(dir.path().join("jwt.pem"), public).unwrap();
    let config = dir.path().join("paycred.yaml");
    let check = |ca: &str, checkout: &str| {
        std::fs::write(
            &config,
            format!(
                "data_dir: ./data\nmaster_key_file: ./master.key\n\
                 browser_proxy: {{listen: 127.0.0.1:8443, ca: {ca}}}\n\
                 projects:\n  - id: p\n    jwt: {{keys: [{{kid: k, public_key_file: jwt.pem}}]}}\n\
                 \x20   proxy: {{allow_private_networks: true}}\n\
                 \x20   browser_checkout: {checkout}\n"
            ),
        )
        .unwrap();
        let out = paycred(&["check"], Some(&config));
        (out.status.success(), text(&out.stdout) + &text(&out.stderr))
    };
    let checkout = "{allowed_hosts: [shop.test, '*.pay.test'], max_ttl: 30m, resolve: {'shop.test:443': '127.0.0.1:9443'}}";
    let (ok, said) = check("{cert_file: a/ca.pem, key_file: a/ca-key.pem}", checkout);
    assert!(ok, "{said}");
    for (ca, checkout, says) in [
        (
            "{cert_file: a/ca.pem, key_file: b/ca-key.pem}",
            checkout,
            "browser_proxy.ca: the key in",
        ),
        (
            "{cert_file: a/ca-key.pem, key_file: a/ca-key.pem}",
            checkout,
            "ca-key.pem: no PEM certificate",
        ),
        (
            "{cert_file: a/none.pem, key_file: a/ca-key.pem}",
            checkout,
            "browser_proxy.ca.cert_file: ",
        ),
        (
            "{cert_file: a/ca.pem, key_file: a/ca-key.pem}",
            "{allowed_hosts: [shop.test], max_ttl: 2d}",
            "projects[0].browser_checkout.max_ttl: must be between 1s and 24h",
        ),
        (
            "{cert_file: a/ca.pem, key_file: a/ca-key.pem}",
            "{allowed_hosts: ['shop test']}",
            "projects[0].browser_checkout.allowed_hosts[0]",
        ),
    ] {
        let (ok, said) = check(ca, checkout);
        assert!(!ok && said.contains(says), "{ca} {checkout}: {said}");
        assert!(!said.contains("PRIVATE KEY"), "{said}");
    }
}

/// The project of the browser session tests: pan enabled, private networks allowed, and a
/// browser checkout ceiling of `shop.test`, `*.pay.test` and 30 minutes.
const SHOP: &str = "proj_shop";

/// A server whose project [`SHOP`] has browser checkout, with the browser proxy's CA in `ca_dir`.
fn shop_server(ca_dir: &Path) -> crate::common::Server {
    use crate::common::*;
    let ca = paycred::browser::ca::Ca::generate().unwrap();
    let (cert, key) = ca.write(ca_dir).unwrap();
    let extra = format!(
        "\x20 - id: {SHOP}\n\
         \x20   jwt: {{keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]}}\n\
         \x20   pan: enabled\n\
         \x20   proxy: {{allow_private_networks: true}}\n\
         \x20   browser_checkout: {{allowed_hosts: [shop.test, '*.pay.test'], max_ttl: 30m}}\n\
         browser_proxy: {{listen: 127.0.0.1:{port}, ca: {{cert_file: {cert}, key_file: {key}}}}}\n",
        port = free_port(),
        cert = cert.display(),
        key = key.display(),
    );
    Server::start_with(Options {
        extra_project_yaml: extra,
        ..Options::default()
    })
}

/// A card of `entity` in [`SHOP`] and an intent of `kind` for it: (payment method, intent).
fn shop_intent(
    server: &crate::common::Server,
    token: &str,
    kind: &str,
) -> (String, serde_json::Value) {
    use crate::common::*;
    let pm = server.call(
        "POST",
        &format!("/projects/{SHOP}/payment-methods"),
        Some(token),
        Some(&card_body("user_1", VISA, CVC)),
    );
    assert!([200, 201].contains(&pm.status), "{}", pm.text);
    let pm = pm.json["id"].as_str().unwrap().to_string();
    let pi = server.call(
        "POST",
        &format!("/projects/{SHOP}/purchase-intents"),
        Some(token),
        Some(
            &serde_json::json!({"entityId": "user_1", "credentialType": kind,
            "paymentMethodId": pm, "mandates": [{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]}),
        ),
    );
    assert_eq!(pi.status, 201, "{}", pi.text);
    (pm, pi.json)
}

#[test]
fn browser_sessions_show_stand_ins_once_with_their_password_and_end() {
    use crate::common::*;
    use serde_json::json;
    let ca_dir = tempfile::tempdir().unwrap();
    let server = shop_server(ca_dir.path());
    let t = ed_token(SHOP, "user_1", "private");
    let (pm, intent) = shop_intent(&server, &t, "virtual-card");
    let pi = intent["id"].as_str().unwrap();
    let real = intent["card"]["number"].as_str().unwrap();
    let real_cvc = intent["card"]["cvc"].as_str().unwrap();
    let sessions = format!("/projects/{SHOP}/purchase-intents/{pi}/browser-sessions");

    let made = server.call(
        "POST",
        &sessions,
        Some(&t),
        Some(&json!({"allowedHosts": ["shop.test", "API.pay.test"], "ttl": 600})),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    let s = &made.json;
    let id = s["id"].as_str().unwrap();
    assert!(id.starts_with("bs_"), "{id}");
    assert_eq!(s["purchaseIntentId"], pi);
    assert_eq!(s["status"], "active");
    assert_eq!(s["allowedHosts"], json!(["shop.test", "api.pay.test"]));
    let number = s["card"]["number"].as_str().unwrap();
    assert_eq!(number.len(), real.len());
    assert_eq!(number[..6], real[..6], "same BIN, same brand");
    assert!(
        paycred::domain::issuer::luhn_valid(number) && number != real,
        "{number}"
    );
    let cvc = s["card"]["cvc"].as_str().unwrap();
    assert!(cvc.len() == real_cvc.len() && cvc != real_cvc);
    assert_eq!(
        s["card"]["expirationMonth"],
        intent["card"]["expirationMonth"]
    );
    assert_eq!(s["proxy"]["username"], id);
    assert!(s["proxy"]["url"]
        .as_str()
        .unwrap()
        .starts_with("http://127.0.0.1:"));
    assert_eq!(s["proxy"]["password"].as_str().unwrap().len(), 43);
    let pem = std::fs::read_to_string(ca_dir.path().join("ca.pem")).unwrap();
    assert_eq!(s["caCertificate"], pem);
    let created = time::OffsetDateTime::parse(
        s["createdAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let expires = time::OffsetDateTime::parse(
        s["expiresAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(expires - created, time::Duration::minutes(10));

    // Shown once: get and list carry the stand-ins, never the password; the tenant form too.
    for path in [
        format!("{sessions}/{id}"),
        format!("/tenants/{SHOP}/purchase-intent/{pi}/browser-sessions/{id}"),
    ] {
        let got = server.call("GET", &path, Some(&t), None);
        assert_eq!(got.status, 200, "{}", got.text);
        assert_eq!(got.json["card"], s["card"]);
        assert!(got.json["proxy"].get("password").is_none(), "{}", got.text);
        assert!(!got.text.contains(real), "{}", got.text);
    }
    let list = server.call("GET", &sessions, Some(&t), None);
    assert_eq!(strings(&list.json, "id"), [id]);

    // A second session's stand-ins differ from the first's.
    let other = server.call(
        "POST",
        &sessions,
        Some(&t),
        Some(&json!({"allowedHosts": ["shop.test"]})),
    );
    assert_eq!(other.status, 201, "{}", other.text);
    assert_ne!(other.json["card"]["number"], s["card"]["number"]);
    let other_id = other.json["id"].as_str().unwrap();

    // Delete ends it, once; an ended session shows no card, proxy or CA.
    let ended = server.call("DELETE", &format!("{sessions}/{id}"), Some(&t), None);
    assert_eq!(ended.status, 200, "{}", ended.text);
    assert_eq!(ended.json["status"], "ended");
    for k in ["card", "proxy", "caCertificate"] {
        assert!(ended.json.get(k).is_none(), "{k}: {}", ended.text);
    }
    let again = server.call("DELETE", &format!("{sessions}/{id}"), Some(&t), None);
    assert_eq!(
        (again.status, &again.json["status"]),
        (200, &json!("ended"))
    );

    // The intent's end ends its sessions: the payment method's delete cancels the intent.
    let gone = server.call(
        "DELETE",
        &format!("/projects/{SHOP}/payment-methods/{pm}"),
        Some(&t),
        None,
    );
    assert!(gone.status < 300, "{}", gone.text);
    let got = server.call("GET", &format!("{sessions}/{other_id}"), Some(&t), None);
    assert_eq!(got.json["status"], "ended", "{}", got.text);

    let events = server.call(
        "GET",
        &format!("/projects/{SHOP}/events?limit=100"),
        Some(&t),
        None,
    );
    let kinds: Vec<&str> = strings(&events.json, "type")
        .into_iter()
        .filter(|k| k.starts_with("browser_session."))
        .collect();
    assert_eq!(
        kinds,
        [
            "browser_session.ended",
            "browser_session.ended",
            "browser_session.created",
            "browser_session.created"
        ],
        "{}",
        events.text
    );
    assert!(!events.text.contains(number), "no stand-in in events");
}

#[test]
fn browser_sessions_refuse_what_the_project_does_not_allow() {
    use crate::common::*;
    use serde_json::json;
    let ca_dir = tempfile::tempdir().unwrap();
    let server = shop_server(ca_dir.path());
    let t = ed_token(SHOP, "user_1", "private");
    let (_, intent) = shop_intent(&server, &t, "virtual-card");
    let pi = intent["id"].as_str().unwrap();
    let sessions = format!("/projects/{SHOP}/purchase-intents/{pi}/browser-sessions");
    for (body, field, says) in [
        (
            json!({"allowedHosts": ["shop.test", "evil.test"]}),
            "allowedHosts[1]",
            "evil.test is not allowed",
        ),
        (
            json!({"allowedHosts": ["a.b.pay.test"]}),
            "allowedHosts[0]",
            "a.b.pay.test is not allowed",
        ),
        (
            json!({"allowedHosts": ["*.test"]}),
            "allowedHosts[0]",
            "*.test is not allowed",
        ),
        (json!({"allowedHosts": []}), "allowedHosts", "required"),
        (
            json!({"allowedHosts": ["shop.test"], "ttl": 1801}),
            "ttl",
            "from 1 to 1800",
        ),
        (
            json!({"allowedHosts": ["shop.test"], "extra": 1}),
            "extra",
            "unknown field",
        ),
    ] {
        let r = server.call("POST", &sessions, Some(&t), Some(&body));
        r.assert_error(400, "invalidRequest");
        let said = r.json["error"]["details"]["fields"][field]
            .as_str()
            .unwrap_or_default();
        assert!(said.contains(says), "{body}: {}", r.text);
    }
    // A network token cannot be typed: 400 naming credentialType.
    let (_, token_intent) = shop_intent(&server, &t, "network-token");
    let nt = token_intent["id"].as_str().unwrap();
    let r = server.call(
        "POST",
        &format!("/projects/{SHOP}/purchase-intents/{nt}/browser-sessions"),
        Some(&t),
        Some(&json!({"allowedHosts": ["shop.test"]})),
    );
    r.assert_error(400, "invalidRequest");
    assert!(
        r.json["error"]["details"]["fields"]["credentialType"].is_string(),
        "{}",
        r.text
    );
    // Private role only; another entity's intent is not found; so is another project's.
    let public = ed_token(SHOP, "user_1", "public");
    let body = json!({"allowedHosts": ["shop.test"]});
    server
        .call("POST", &sessions, Some(&public), Some(&body))
        .assert_error(403, "forbidden");
    let stranger = ed_token(SHOP, "user_2", "private");
    server
        .call("POST", &sessions, Some(&stranger), Some(&body))
        .assert_error(404, "notFound");
    // A project without browser_checkout refuses.
    let a = server.token("user_1", "private");
    let pm = server.add_card(&a, "user_1", VISA);
    let pi_a = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(&a),
        Some(
            &json!({"entityId": "user_1", "credentialType": "virtual-card", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "5", "details": {"currency": "840"}}]}),
        ),
    );
    let pi_a = pi_a.json["id"].as_str().unwrap();
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents/{pi_a}/browser-sessions"),
        Some(&a),
        Some(&body),
    );
    r.assert_error(400, "invalidRequest");
    assert!(r.text.contains("browser_checkout"), "{}", r.text);
}
