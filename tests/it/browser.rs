//! Browser checkout from the command line: `paycred ca --out DIR` writes an interception CA
//! (the key its owner's alone, never over an existing file) and says how to trust it, and
//! `paycred check` loads the CA a config names, accepting a good one and naming the file of
//! a bad one, as it checks `browser_checkout` of each project; `paycred serve --dev` makes
//! a CA on its first run, keeps it, and runs the browser proxy beside the API.

use crate::common::{dev_jwt, serve_dev};
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
fn serve_dev_makes_a_ca_once_and_runs_the_browser_proxy() {
    use serde_json::{json, Value};
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", crate::common::free_port());
    let proxy = format!("127.0.0.1:{}", crate::common::free_port());
    let ca_pem = dir.path().join("dev/browser-ca/ca.pem");
    let first = {
        let _server = serve_dev(dir.path(), &listen, &proxy);
        let banner = std::fs::read_to_string(dir.path().join("dev.log")).unwrap();
        assert!(
            banner.contains(&format!("Browser checkout proxy on http://{proxy}")),
            "{banner}"
        );
        let trust = format!("-A -t C,, -n paycred -i {}", ca_pem.display());
        assert!(banner.contains(&trust), "{banner}");
        assert!(!banner.contains("PRIVATE KEY"));
        let t = dev_jwt(dir.path(), "user_1", "private");
        let post = |path: &str, body: Value| -> Value {
            ureq::post(&format!("http://{listen}/projects/dev{path}"))
                .set("Authorization", &format!("Bearer {t}"))
                .send_json(body)
                .unwrap()
                .into_json()
                .unwrap()
        };
        let card = json!({"number": "4242424242424242", "expirationMonth": "12",
            "expirationYear": "2030", "cvc": "123"});
        let pm = post(
            "/payment-methods",
            json!({"entityId": "user_1", "card": card}),
        );
        let pi = post(
            "/purchase-intents",
            json!({"entityId": "user_1", "paymentMethodId": pm["id"], "credentialType": "pan",
                "mandates": [{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]}),
        );
        assert_eq!(pi["status"], "active", "{pi}");
        let pi = pi["id"].as_str().unwrap();
        let session = post(
            &format!("/purchase-intents/{pi}/browser-sessions"),
            json!({"allowedHosts": ["localhost"], "ttl": 600}),
        );
        assert_eq!(
            session["proxy"]["url"],
            format!("http://{proxy}"),
            "{session}"
        );
        let pem = std::fs::read_to_string(&ca_pem).unwrap();
        assert_eq!(session["caCertificate"], pem);
        // The proxy listens and asks for the session's credentials.
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&proxy).unwrap();
        c.write_all(b"CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n")
            .unwrap();
        let mut head = [0u8; 12];
        c.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 407");
        pem
    };
    // A second run keeps the CA the browser was told to trust.
    let _server = serve_dev(dir.path(), &listen, &proxy);
    assert_eq!(std::fs::read_to_string(&ca_pem).unwrap(), first);
    use std::os::unix::fs::PermissionsExt;
    let key = std::fs::metadata(dir.path().join("dev/browser-ca/ca-key.pem")).unwrap();
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
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
    shop_server_with(ca_dir, "{allow_private_networks: true}", "")
}

/// [`shop_server`] with the project's `proxy:` and more of its `browser_checkout:` (after
/// `max_ttl`).
fn shop_server_with(ca_dir: &Path, proxy: &str, checkout: &str) -> crate::common::Server {
    use crate::common::*;
    let ca = paycred::browser::ca::Ca::generate().unwrap();
    let (cert, key) = ca.write(ca_dir).unwrap();
    let extra = format!(
        "\x20 - id: {SHOP}\n\
         \x20   jwt: {{keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]}}\n\
         \x20   pan: enabled\n\
         \x20   proxy: {proxy}\n\
         \x20   browser_checkout: {{allowed_hosts: [shop.test, '*.pay.test'], max_ttl: 30m{checkout}}}\n\
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
    let mandates = serde_json::json!([{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]);
    shop_intent_with(server, token, kind, mandates)
}

/// [`shop_intent`] with these mandates.
fn shop_intent_with(
    server: &crate::common::Server,
    token: &str,
    kind: &str,
    mandates: serde_json::Value,
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
            "paymentMethodId": pm, "mandates": mandates}),
        ),
    );
    assert_eq!(pi.status, 201, "{}", pi.text);
    (pm, pi.json)
}

/// A [`shop_server`] (its CA's directory kept), a private token of `user_1`, and a
/// `virtual-card` intent of its card: (CA directory, server, token, payment method, intent).
fn shop_setup() -> (
    tempfile::TempDir,
    crate::common::Server,
    String,
    String,
    serde_json::Value,
) {
    let ca_dir = tempfile::tempdir().unwrap();
    let server = shop_server(ca_dir.path());
    let t = crate::common::ed_token(SHOP, "user_1", "private");
    let (pm, intent) = shop_intent(&server, &t, "virtual-card");
    (ca_dir, server, t, pm, intent)
}

#[test]
fn browser_sessions_show_stand_ins_once_with_their_password_and_end() {
    use crate::common::*;
    use serde_json::json;
    let (ca_dir, server, t, pm, intent) = shop_setup();
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
    assert!(ended.json["endedAt"].is_string(), "{}", ended.text);
    assert_eq!(ended.json["expiresAt"], s["expiresAt"]);
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
    let (_ca_dir, server, t, _, intent) = shop_setup();
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

/// A merchant over TLS on 127.0.0.1: records each whole request (head and body) and answers
/// 200 with a JSON echo of what it received, so its answer carries whatever it was sent.
struct Merchant {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Merchant {
    fn start(cert: &Path, key: &Path) -> Merchant {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let acceptor = std::sync::Arc::new(crate::common::upstream::tls_acceptor(cert, key));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> = Default::default();
        let connections: std::sync::Arc<std::sync::atomic::AtomicUsize> = Default::default();
        let (s, c) = (seen.clone(), connections.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let (acceptor, s) = (acceptor.clone(), s.clone());
                std::thread::spawn(move || {
                    conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
                        .unwrap();
                    let Ok(tls) = acceptor.accept(conn) else {
                        return;
                    };
                    let mut reader = BufReader::new(tls);
                    loop {
                        let mut head = String::new();
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            head.push_str(&line);
                        }
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        let mut body = vec![0; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        let body = String::from_utf8_lossy(&body).into_owned();
                        let echo = serde_json::json!({"received": body, "head": head}).to_string();
                        s.lock().unwrap().push((head, body));
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{echo}",
                            echo.len()
                        );
                        if reader.get_mut().write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Merchant {
            port,
            seen,
            connections,
        }
    }

    /// A merchant with a certificate of the test CA in `certs` for `hosts`, named `name`.
    fn for_hosts(certs: &Path, name: &str, hosts: &[&str]) -> Merchant {
        crate::common::server_cert(certs, name, hosts);
        Merchant::start(
            &certs.join(format!("{name}.pem")),
            &certs.join(format!("{name}.key")),
        )
    }

    fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }

    /// TCP connections accepted.
    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A browser's tunnel through the proxy at `proxy_port` to `host:443`, with the session's
/// `user:password`: the proxy's answer to the CONNECT (its head and body) when it is not
/// 200, else the TLS stream (ALPN http/1.1), verified for `host` against the CA at `ca`.
fn browse(
    proxy_port: u16,
    auth: Option<&str>,
    host: &str,
    ca: &Path,
) -> Result<openssl::ssl::SslStream<std::net::TcpStream>, (u16, String)> {
    let tcp = tunnel(proxy_port, auth, host)?;
    let mut builder =
        openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls_client()).unwrap();
    builder.set_ca_file(ca).unwrap();
    builder.set_alpn_protos(b"\x08http/1.1").unwrap();
    let connector = builder.build();
    connector.connect(host, tcp).map_err(|e| (0, e.to_string()))
}

/// A browser's h2 connection through the proxy at `proxy_port` to `host:443` (ALPN h2 and
/// http/1.1; the proxy must choose h2), verified for `host` against the CA at `ca`.
async fn browse_h2(
    proxy_port: u16,
    auth: &str,
    host: &str,
    ca: &Path,
) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tunnel(proxy_port, Some(auth), host).unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tcp = tokio::net::TcpStream::from_std(tcp).unwrap();
    crate::common::tls::h2_over(tcp, host, ca)
        .await
        .expect("no h2 through the proxy")
}

/// A `CONNECT` to `host:443` through the proxy at `proxy_port` with `user:password` `auth`:
/// the tunnel's socket, or the proxy's answer (status, head and body) when it is not 200.
fn tunnel(
    proxy_port: u16,
    auth: Option<&str>,
    host: &str,
) -> Result<std::net::TcpStream, (u16, String)> {
    use base64::Engine;
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let auth = auth
        .map(|a| {
            format!(
                "Proxy-Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(a)
            )
        })
        .unwrap_or_default();
    write!(
        tcp,
        "CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n{auth}\r\n"
    )
    .unwrap();
    let head = read_head(&mut tcp);
    let status = crate::common::tls::h1_status(&head);
    if status != 200 {
        let mut rest = String::new();
        let _ = tcp.read_to_string(&mut rest);
        return Err((status, head + &rest));
    }
    Ok(tcp)
}

/// An answer's head, read a byte at a time up to its blank line (or the end).
fn read_head(from: &mut impl std::io::Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if from.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Sends one HTTP/1.1 request in a tunnel and reads its answer (Content-Length or chunked):
/// (status, head, body).
fn send(
    tls: &mut openssl::ssl::SslStream<std::net::TcpStream>,
    request: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    tls.write_all(request.as_bytes()).unwrap();
    let head = read_head(tls);
    let mut byte = [0u8; 1];
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let mut body = Vec::new();
    if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        tls.read_exact(&mut body).unwrap();
    } else if header("transfer-encoding").is_some() {
        loop {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                tls.read_exact(&mut byte).unwrap();
                line.push(byte[0]);
            }
            let n = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            tls.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        let _ = tls.read_to_end(&mut body);
    }
    (
        crate::common::tls::h1_status(&head),
        head,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// A form post of the card to `path` on `host`.
fn form_post(host: &str, path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The proxy's port, from a session's `proxy.url`.
fn proxy_port(session: &serde_json::Value) -> u16 {
    let url = session["proxy"]["url"].as_str().unwrap();
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// A server of [`SHOP`] whose project trusts the merchants' test CA in `certs` and reaches
/// each (host, port) of `resolve` on 127.0.0.1 (`localhost` its tunnel host), an intent with
/// `mandates`, and a browser session of it for `shop.test` and `*.pay.test`.
struct Proxied {
    server: crate::common::Server,
    token: String,
    intent: serde_json::Value,
    session: serde_json::Value,
    /// The session's `user:password`.
    auth: String,
    /// The browser proxy's port.
    port: u16,
    /// paycred's interception CA, which the browser trusts.
    ca: std::path::PathBuf,
    _ca_dir: tempfile::TempDir,
}

impl Proxied {
    fn intent_id(&self) -> &str {
        self.intent["id"].as_str().unwrap()
    }
}

/// The real card's number and CVC of an `intent` and its `session`'s stand-ins:
/// ((number, cvc), (stand-in number, stand-in cvc)).
fn cards<'a>(
    intent: &'a serde_json::Value,
    session: &'a serde_json::Value,
) -> ((&'a str, &'a str), (&'a str, &'a str)) {
    fn value<'v>(v: &'v serde_json::Value, k: &str) -> &'v str {
        v["card"][k].as_str().unwrap()
    }
    (
        (value(intent, "number"), value(intent, "cvc")),
        (value(session, "number"), value(session, "cvc")),
    )
}

fn proxied(certs: &Path, resolve: &[(&str, u16)], mandates: serde_json::Value) -> Proxied {
    let ca_dir = tempfile::tempdir().unwrap();
    let proxy = format!(
        "{{allow_private_networks: true, ca_file: {}}}",
        certs.join("ca.pem").display()
    );
    let map: Vec<String> = resolve
        .iter()
        .map(|(host, port)| format!("'{host}:443': '127.0.0.1:{port}'"))
        .collect();
    let checkout = format!(
        ", tunnel_hosts: [localhost], resolve: {{{}}}",
        map.join(", ")
    );
    let server = shop_server_with(ca_dir.path(), &proxy, &checkout);
    let token = crate::common::ed_token(SHOP, "user_1", "private");
    let (_, intent) = shop_intent_with(&server, &token, "virtual-card", mandates);
    let made = server.call(
        "POST",
        &format!(
            "/projects/{SHOP}/purchase-intents/{}/browser-sessions",
            intent["id"].as_str().unwrap()
        ),
        Some(&token),
        Some(&serde_json::json!({"allowedHosts": ["shop.test", "*.pay.test"]})),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    let session = made.json;
    let auth = format!(
        "{}:{}",
        session["proxy"]["username"].as_str().unwrap(),
        session["proxy"]["password"].as_str().unwrap()
    );
    Proxied {
        port: proxy_port(&session),
        ca: ca_dir.path().join("ca.pem"),
        server,
        token,
        intent,
        session,
        auth,
        _ca_dir: ca_dir,
    }
}

#[test]
fn the_browser_proxy_swaps_stand_ins_on_the_way_to_the_merchant_only() {
    use serde_json::json;
    let certs = tempfile::tempdir().unwrap();
    let shop = Merchant::for_hosts(certs.path(), "shop", &["shop.test", "api.pay.test"]);
    let limit = json!([{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}},
        {"type": "usageLimit", "value": "2", "details": {"count": 2}}]);
    let mut p = proxied(
        certs.path(),
        &[("shop.test", shop.port), ("api.pay.test", shop.port)],
        limit,
    );
    let pi = p.intent_id();
    let (s, auth, port, ca) = (&p.session, p.auth.as_str(), p.port, p.ca.as_path());
    let ((real, real_cvc), (number, cvc)) = cards(&p.intent, &p.session);

    // A form post of the stand-ins, the number grouped as the form wrote it: the merchant
    // gets the real values (the same separators), the page shows the stand-ins again.
    let mut tls = browse(port, Some(auth), "shop.test", ca).unwrap();
    let spaced: String = number
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("+");
    let body = format!("number={spaced}&cvc={cvc}&quantity={cvc}&zip=12345");
    let (status, _, answer) = send(&mut tls, &form_post("shop.test", "/pay", &body));
    assert_eq!(status, 200, "{answer}");
    let (head, received) = shop.seen().pop().unwrap();
    let real_spaced: String = real
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("+");
    assert_eq!(
        received,
        format!("number={real_spaced}&cvc={real_cvc}&quantity={cvc}&zip=12345")
    );
    assert!(
        head.to_ascii_lowercase().contains("host: shop.test"),
        "{head}"
    );
    assert!(
        !head.to_ascii_lowercase().contains("proxy-authorization"),
        "{head}"
    );
    assert!(
        !answer.contains(&real_spaced) && !answer.contains(real),
        "{answer}"
    );
    assert!(
        answer.contains(&spaced),
        "the page shows the stand-in: {answer}"
    );
    assert!(answer.contains(&format!("cvc={cvc}")), "{answer}");

    // In the same tunnel, a request without stand-ins passes as it is and counts no use.
    let (status, _, _) = send(&mut tls, &form_post("shop.test", "/cart", "quantity=2"));
    assert_eq!(status, 200);
    assert_eq!(shop.seen().pop().unwrap().1, "quantity=2");

    // JSON to an API host of the session's wildcard, in a tunnel of its own.
    let mut api = browse(port, Some(auth), "api.pay.test", ca).unwrap();
    let json_body = json!({"card": {"number": number, "cvc": cvc}, "amount": 1200}).to_string();
    let request = format!(
        "POST /v1/tokens?pan={number} HTTP/1.1\r\nHost: api.pay.test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json_body}",
        json_body.len()
    );
    let (status, _, answer) = send(&mut api, &request);
    assert_eq!(status, 200, "{answer}");
    let (head, received) = shop.seen().pop().unwrap();
    assert!(
        head.starts_with(&format!("POST /v1/tokens?pan={real} ")),
        "{head}"
    );
    let received: serde_json::Value = serde_json::from_str(&received).unwrap();
    assert_eq!(received["card"], json!({"number": real, "cvc": real_cvc}));
    assert!(!answer.contains(real), "{answer}");

    // Two uses counted: the usage limit (2) is reached, the intent and the session end, and
    // the next submission is refused; the merchant sees nothing.
    let before = shop.seen().len();
    let refused = browse(port, Some(auth), "shop.test", ca);
    assert_eq!(refused.err().map(|e| e.0), Some(407));
    let (status, _, answer) = send(&mut tls, &form_post("shop.test", "/pay", &body));
    assert_ne!(status, 200, "{answer}");
    assert!(
        answer.contains("ended") || answer.contains("used up"),
        "{answer}"
    );
    assert_eq!(shop.seen().len(), before);
    let got = p.server.call(
        "GET",
        &format!(
            "/projects/{SHOP}/purchase-intents/{pi}/browser-sessions/{}",
            s["id"].as_str().unwrap()
        ),
        Some(p.token.as_str()),
        None,
    );
    assert_eq!(
        (got.json["status"].as_str(), got.json["uses"].as_u64()),
        (Some("ended"), Some(2)),
        "{}",
        got.text
    );
    // Neither the real number nor its stand-in reaches the server's log (at debug level; a
    // CVC's three digits are in any log by chance).
    let log = p.server.log();
    for value in [real, number, &real_spaced, &spaced] {
        assert!(!log.contains(value), "{value} in the log");
    }
}

#[test]
fn the_browser_proxy_refuses_what_it_must_not_carry() {
    let certs = tempfile::tempdir().unwrap();
    let wrong = Merchant::for_hosts(certs.path(), "wrong", &["elsewhere.test"]);
    let mandates = serde_json::json!([{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]);
    let p = proxied(certs.path(), &[("bad.pay.test", wrong.port)], mandates);
    let pi = p.intent_id();
    let (s, auth, port, ca) = (&p.session, p.auth.as_str(), p.port, p.ca.as_path());
    let intent = &p.intent;
    let user = s["proxy"]["username"].as_str().unwrap();
    let status = |r: Result<openssl::ssl::SslStream<std::net::TcpStream>, (u16, String)>| {
        r.err().map(|e| e.0)
    };
    // No credentials, a wrong password, an unknown user: 407.
    assert_eq!(status(browse(port, None, "shop.test", ca)), Some(407));
    assert_eq!(
        status(browse(port, Some(&format!("{user}:nope")), "shop.test", ca)),
        Some(407)
    );
    assert_eq!(
        status(browse(port, Some("bs_none:x"), "shop.test", ca)),
        Some(407)
    );
    // A host neither the session nor the tunnels allow: 403; a tunnel to a loopback
    // address: 403.
    assert_eq!(status(browse(port, Some(auth), "evil.test", ca)), Some(403));
    assert_eq!(status(browse(port, Some(auth), "localhost", ca)), Some(403));
    // Plain HTTP is never proxied (405); a CONNECT without a port is 400.
    let raw = |request: &str| {
        use std::io::{Read, Write};
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        tcp.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        answer
    };
    let answer = raw("GET http://shop.test/ HTTP/1.1\r\nHost: shop.test\r\n\r\n");
    assert_eq!(crate::common::tls::h1_status(&answer), 405, "{answer}");
    let answer = raw("CONNECT shop.test HTTP/1.1\r\nHost: shop.test\r\n\r\n");
    assert_eq!(crate::common::tls::h1_status(&answer), 400, "{answer}");
    // A host whose certificate does not verify for its name: 502, nothing sent.
    let mut tls = browse(port, Some(auth), "bad.pay.test", ca).unwrap();
    let number = s["card"]["number"].as_str().unwrap();
    let (code, _, answer) = send(
        &mut tls,
        &form_post("bad.pay.test", "/pay", &format!("number={number}")),
    );
    assert_eq!(code, 502, "{answer}");
    assert!(wrong.seen().is_empty());
    assert!(!answer.contains(intent["card"]["number"].as_str().unwrap()));
    // Bad requests inside a tunnel are answered there, before any host is reached: a head
    // over 64 KiB (431), a body over 1 MiB (413), a body without a length (400).
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: bad.pay.test\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let too_long = format!(
        "POST /pay HTTP/1.1\r\nHost: bad.pay.test\r\nContent-Length: {}\r\n\r\n",
        2 * 1024 * 1024
    );
    let chunked = "POST /pay HTTP/1.1\r\nHost: bad.pay.test\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (request, want) in [
        (huge.as_str(), 431),
        (too_long.as_str(), 413),
        (chunked, 400),
    ] {
        let mut tls = browse(port, Some(auth), "bad.pay.test", ca).unwrap();
        let (code, _, answer) = send(&mut tls, request);
        assert_eq!(code, want, "{answer}");
    }
    assert_eq!(
        wrong.connections(),
        1,
        "only the refused handshake reached it"
    );
    // A browser that does not trust paycred's CA fails its handshake.
    let other_ca = certs.path().join("ca.pem");
    assert!(matches!(
        browse(port, Some(auth), "bad.pay.test", &other_ca),
        Err((0, _))
    ));
    // An ended session: 407.
    let ended = p.server.call(
        "DELETE",
        &format!("/projects/{SHOP}/purchase-intents/{pi}/browser-sessions/{user}"),
        Some(p.token.as_str()),
        None,
    );
    assert_eq!(ended.status, 200);
    assert_eq!(status(browse(port, Some(auth), "shop.test", ca)), Some(407));
}

#[test]
fn the_browser_proxy_serves_h2_by_alpn_with_the_same_swap_and_bounds() {
    use crate::common::tls::{h2_request, runtime};
    use serde_json::json;
    use std::time::Duration;
    let certs = tempfile::tempdir().unwrap();
    let shop = Merchant::for_hosts(certs.path(), "shop", &["shop.test"]);
    let mandates = json!([{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]);
    let p = proxied(certs.path(), &[("shop.test", shop.port)], mandates);
    let (auth, port, ca) = (p.auth.as_str(), p.port, p.ca.as_path());
    let ((real, real_cvc), (number, cvc)) = cards(&p.intent, &p.session);
    let form = ("content-type", "application/x-www-form-urlencoded");
    runtime().block_on(async {
        let mut h2 = browse_h2(port, auth, "shop.test", ca).await;

        // JSON: the merchant gets the real values (query and body), `Host` the tunnel's; its
        // echo comes back with the stand-ins.
        let body = json!({"card": {"number": number, "cvc": cvc}, "amount": 1200}).to_string();
        let reply = h2_request(
            &mut h2,
            "POST",
            &format!("/v1/tokens?pan={number}"),
            &[
                ("content-type", "application/json"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
            ],
            &[body.as_bytes()],
            Duration::ZERO,
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "{reply:?}");
        let (head, received) = shop.seen().pop().unwrap();
        assert!(
            head.starts_with(&format!("POST /v1/tokens?pan={real} HTTP/1.1")),
            "{head}"
        );
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("host: shop.test\r\n"), "{head}");
        assert!(lower.contains("cookie: a=1; b=2\r\n"), "{head}");
        let received: serde_json::Value = serde_json::from_str(&received).unwrap();
        assert_eq!(received["card"], json!({"number": real, "cvc": real_cvc}));
        let answer = String::from_utf8_lossy(&reply.body).into_owned();
        assert!(!answer.contains(real), "{answer}");
        assert!(
            answer.contains(number),
            "the page shows the stand-in: {answer}"
        );
        for hop in ["connection", "transfer-encoding", "keep-alive"] {
            assert!(!reply.headers.contains_key(hop), "{reply:?}");
        }

        // A form post, its body in two DATA frames.
        let body = format!("number={number}&cvc={cvc}&quantity={cvc}");
        let (first, second) = body.as_bytes().split_at(10);
        let reply = h2_request(
            &mut h2,
            "POST",
            "/pay",
            &[form],
            &[first, second],
            Duration::from_millis(20),
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(
            shop.seen().pop().unwrap().1,
            format!("number={real}&cvc={real_cvc}&quantity={cvc}")
        );
        assert!(!String::from_utf8_lossy(&reply.body).contains(real));

        // Two streams at once on the connection, each swapped and answered.
        let before = shop.seen().len();
        let (mut a, mut b) = (h2.clone(), h2.clone());
        let (body_a, body_b) = (
            format!("number={number}&n=a"),
            format!("number={number}&n=b"),
        );
        let (headers, a_body, b_body) = ([form], [body_a.as_bytes()], [body_b.as_bytes()]);
        let (ra, rb) = tokio::join!(
            h2_request(&mut a, "POST", "/a", &headers, &a_body, Duration::ZERO),
            h2_request(&mut b, "POST", "/b", &headers, &b_body, Duration::ZERO),
        );
        for (reply, n) in [(ra.unwrap(), "a"), (rb.unwrap(), "b")] {
            assert_eq!(reply.status, 200, "{reply:?}");
            let answer = String::from_utf8_lossy(&reply.body).into_owned();
            assert!(
                answer.contains(&format!("number={number}&n={n}")),
                "{answer}"
            );
        }
        let mut seen: Vec<String> = shop.seen()[before..]
            .iter()
            .map(|(_, b)| b.clone())
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [format!("number={real}&n=a"), format!("number={real}&n=b")]
        );

        // A body over 1 MiB, with its length or without: 413 with the error envelope, the
        // merchant sees nothing, and the connection serves on.
        let before = shop.seen().len();
        let big = vec![b'a'; 1024 * 1024 + 10];
        let length = big.len().to_string();
        for headers in [vec![form, ("content-length", length.as_str())], vec![form]] {
            let reply = h2_request(&mut h2, "POST", "/pay", &headers, &[&big], Duration::ZERO)
                .await
                .unwrap();
            assert_eq!(reply.status, 413, "{reply:?}");
            assert_eq!(
                reply.json()["error"]["type"],
                "payloadTooLarge",
                "{reply:?}"
            );
        }
        // Headers over 64 KiB (under h2's own limit) or over 128 fields: 431; a body that
        // stops: 408 once `server.body_read_timeout` (5 s) has passed.
        let long = "a".repeat(70 * 1024);
        let names: Vec<String> = (0..130).map(|i| format!("x-h{i}")).collect();
        let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
        for headers in [vec![("x-big", long.as_str())], many] {
            let reply = h2_request(&mut h2, "GET", "/", &headers, &[], Duration::ZERO)
                .await
                .unwrap();
            assert_eq!(reply.status, 431, "{reply:?}");
            assert_eq!(reply.json()["error"]["type"], "requestHeaderFieldsTooLarge");
        }
        let stalled = crate::common::tls::h2_stalled(
            &mut h2,
            "/pay",
            &[form, ("content-length", "100")],
            b"number=",
        )
        .await
        .unwrap();
        assert_eq!(stalled.status, 408, "{stalled:?}");
        assert_eq!(shop.seen().len(), before);
        let reply = h2_request(&mut h2, "GET", "/cart", &[], &[], Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(reply.status, 200, "{reply:?}");
    });

    // A browser offering http/1.1 alone is served HTTP/1.1, swapped the same.
    let mut tls = browse(port, Some(auth), "shop.test", ca).unwrap();
    assert_eq!(tls.ssl().selected_alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, _, answer) = send(
        &mut tls,
        &form_post("shop.test", "/pay", &format!("number={number}")),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(shop.seen().pop().unwrap().1, format!("number={real}"));
    assert!(!answer.contains(real), "{answer}");
}
