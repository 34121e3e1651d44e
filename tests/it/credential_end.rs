//! Issued credentials end with their intent (docs/design.md, "Credential lifecycle"): for
//! each way an intent ends, (a) no route returns its credential any more (GET, the
//! idempotent replay of its create, proxy templates naming it), (b) the raw store files (every
//! file of the data dir, sled's log and the key file) hold nothing that opens it: the card
//! number never was there, and the wrapped key of its own that sealed it, present before the
//! end, is gone; (c) the same after a restart.

use crate::common::upstream::Upstream;
use crate::common::*;
use paycred::store::{Scope, Store};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// The files under `dir` that contain `needle`.
fn holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(p, _)| p)
        .collect()
}

/// The wrapped keys in the key file's taken slots (`len | tag(16) | key`, 256 bytes each).
fn wrapped_keys(data_dir: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(data_dir.join(paycred::store::sled::key_file::NAME)).unwrap();
    bytes
        .chunks(paycred::store::sled::key_file::SLOT)
        .filter(|slot| slot[0] != 0)
        .map(|slot| slot[17..1 + usize::from(slot[0])].to_vec())
        .collect()
}

fn data_dir(server: &Server) -> PathBuf {
    server.dir.path().join("data")
}

fn intents_path() -> String {
    format!("/projects/{PROJECT}/purchase-intents")
}

/// Creates an intent with `Idempotency-Key: key`; the create's body and its answer.
fn create(
    server: &Server,
    t: &str,
    pm: &str,
    kind: &str,
    mandates: Value,
    key: &str,
) -> (Value, Value) {
    let body = json!({"entityId": "user_1", "credentialType": kind, "paymentMethodId": pm, "mandates": mandates});
    let r = replay(server, t, &body, key);
    assert_eq!(r.status, 201, "{}", r.text);
    (body, r.json)
}

fn replay(server: &Server, t: &str, body: &Value, key: &str) -> Reply {
    server.raw(
        "POST",
        &intents_path(),
        &[
            ("Authorization", &format!("Bearer {t}")),
            ("Content-Type", "application/json"),
            ("Idempotency-Key", key),
        ],
        Some(body.to_string().as_bytes()),
    )
}

fn tpl(pm: &str, kind: &str, path: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: '{kind}' | json: '{path}' }}}}")
}

/// What a live intent's credential leaves in the data dir: its number (never there) and the
/// wrapped key of its own (there while it lives).
struct Before {
    number: String,
    wrapped_key: Vec<u8>,
}

fn before_the_end(server: &Server, intent: &Value, field: &str) -> Before {
    let number = intent[field]["number"].as_str().unwrap().to_string();
    let dir = data_dir(server);
    assert!(
        holding(&dir, number.as_bytes()).is_empty(),
        "never in clear"
    );
    let keys = wrapped_keys(&dir);
    assert_eq!(keys.len(), 1, "one live intent, one key");
    let wrapped_key = keys[0].clone();
    assert!(
        !holding(&dir, &wrapped_key).is_empty(),
        "the search finds the key while the intent lives"
    );
    Before {
        number,
        wrapped_key,
    }
}

/// (a) and (b): no route shows the credential, and the data dir holds nothing that opens it.
fn assert_gone(
    server: &Server,
    t: &str,
    pm: &str,
    created: &(Value, Value),
    key: &str,
    before: &Before,
    status: &str,
) {
    let (body, intent) = created;
    let id = intent["id"].as_str().unwrap();
    let kind = intent["credentialType"].as_str().unwrap();
    let got = server.call("GET", &format!("{}/{id}", intents_path()), Some(t), None);
    assert_eq!(got.json["status"], status, "{}", got.text);
    assert!(!got.text.contains(&before.number), "{}", got.text);
    assert!(got.json.get("card").is_none() && got.json.get("token").is_none());
    let again = replay(server, t, body, key);
    assert_eq!(
        (again.status, &again.json["id"]),
        (201, &intent["id"]),
        "{}",
        again.text
    );
    assert!(!again.text.contains(&before.number), "{}", again.text);
    assert!(again.json.get("card").is_none() && again.json.get("token").is_none());
    let template = match kind {
        "virtual-card" => tpl(pm, "virtualCard", "$.number"),
        _ => tpl(pm, "networkToken", "$.token.number"),
    };
    let up = Upstream::start();
    let r = server.proxy_json(t, &up.url("/pay"), &json!({"n": template}));
    r.assert_error(400, "invalidTemplate");
    assert!(up.requests().is_empty());
    let dir = data_dir(server);
    assert_eq!(
        holding(&dir, before.number.as_bytes()),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        holding(&dir, &before.wrapped_key),
        Vec::<PathBuf>::new(),
        "the intent's key is gone from every file"
    );
    assert!(wrapped_keys(&dir).is_empty());
}

fn usage_limit(n: u32) -> Value {
    json!([{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
           {"type": "usageLimit", "value": n.to_string(), "details": {"count": n}}])
}

/// Creates a virtual card with usage limit `limit` on a new server, ends it with `end`
/// (given the server, the token, the payment method and the intent), and checks that it is
/// gone as `status`, before and after a restart.
fn ends_and_stays_gone(limit: u32, status: &str, end: impl FnOnce(&Server, &str, &str, &Value)) {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let created = create(
        &server,
        &t,
        &pm,
        "virtual-card",
        usage_limit(limit),
        "k-end",
    );
    let before = before_the_end(&server, &created.1, "card");
    end(&server, &t, &pm, &created.1);
    assert_gone(&server, &t, &pm, &created, "k-end", &before, status);
    server.restart();
    assert_gone(&server, &t, &pm, &created, "k-end", &before, status);
}

#[test]
fn usage_limit_used_up_by_sandbox_authorizations_destroys_the_credential() {
    ends_and_stays_gone(1, "expired", |server, t, _, intent| {
        let mut charge = intent["card"].clone();
        charge["amount"] = json!("1.00");
        charge["currency"] = json!("USD");
        charge["mcc"] = json!("5411");
        let auth = format!("/projects/{PROJECT}/sandbox/authorizations");
        let ok = server.call("POST", &auth, Some(t), Some(&charge));
        assert_eq!(ok.json, json!({"approved": true}), "{}", ok.text);
        let again = server.call("POST", &auth, Some(t), Some(&charge));
        assert_eq!(again.json["approved"], false, "{}", again.text);
    });
}

#[test]
fn usage_limit_used_up_through_the_proxy_destroys_the_credential() {
    ends_and_stays_gone(1, "expired", |server, t, pm, _| {
        let up = Upstream::start();
        let body = json!({"n": tpl(pm, "virtualCard", "$.number")});
        let r = server.proxy_json(t, &up.url("/pay"), &body);
        assert_eq!(r.status, 201, "{}", r.text);
    });
}

#[test]
fn deleting_the_payment_method_cancels_and_destroys_the_credential() {
    ends_and_stays_gone(5, "canceled", |server, t, pm, _| {
        let path = format!("/projects/{PROJECT}/payment-methods/{pm}");
        let deleted = server.call("DELETE", &path, Some(t), None);
        assert_eq!(deleted.status, 204, "{}", deleted.text);
    });
}

/// The time expiry, on the manual clock: an app in this process over a sled store, its
/// finalizer running, the clock moved past `expiresAt`.
#[test]
fn time_expiry_on_the_manual_clock_destroys_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_, public) = paycred::auth::mint::generate_ed25519().unwrap();
    let key = dir.path().join("ed.pem");
    std::fs::write(&key, public).unwrap();
    let yaml = format!(
        "data_dir: {}\nmaster_key_file: {d}/master.key\nprojects:\n  - id: p1\n    jwt: {{keys: [{{kid: k1, public_key_file: {k}}}]}}\n",
        data.display(),
        d = dir.path().display(),
        k = key.display()
    );
    let config = paycred::config::Config::from_yaml(&yaml).unwrap();
    let master = "42".repeat(32);
    let clock = Arc::new(paycred::clock::ManualClock::new(
        time::macros::datetime!(2026-11-21 10:00 UTC),
    ));
    let open = |config: paycred::config::Config| {
        let store: Arc<dyn Store> = reopen(&data);
        let vault = Arc::new(paycred::vault::Vault::new(
            paycred::vault::master::MasterKey::from_hex(&master).unwrap(),
            store.clone(),
            Duration::from_secs(3600),
        ));
        Arc::new(paycred::app::App::new(config, store, vault, clock.clone()))
    };
    let app = open(config.clone());
    paycred::service::intents::spawn_finalizer(Arc::downgrade(&app));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let principal = paycred::auth::Principal {
        project: "p1".into(),
        entity: "user_1".into(),
        role: paycred::auth::Role::Private,
        exp: u64::MAX,
    };
    let call = |app: &paycred::app::App, method: http::Method, path: &str, body: Option<Value>| {
        rt.block_on(async {
            let route = paycred::edge::routes::route(path).unwrap();
            let req = paycred::edge::rest::ApiRequest {
                method: &method,
                route: &route,
                principal: &principal,
                query: None,
                body: body.map(|b| bytes::Bytes::from(b.to_string())),
            };
            let resp = match paycred::edge::rest::dispatch(app, req).await {
                Ok(r) => r,
                Err(e) => paycred::http::Response::error(&e),
            };
            resp.body
                .as_ref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .unwrap_or(Value::Null)
        })
    };
    let pm = call(
        &app,
        http::Method::POST,
        "/projects/p1/payment-methods",
        Some(card_body("user_1", VISA, CVC)),
    );
    let pm_id = pm["id"].as_str().unwrap().to_string();
    let intent = call(
        &app,
        http::Method::POST,
        "/projects/p1/purchase-intents",
        Some(
            json!({"entityId": "user_1", "credentialType": "virtual-card",
            "paymentMethodId": pm_id, "mandates": usage_limit(5)}),
        ),
    );
    assert_eq!(intent["status"], "active", "{intent}");
    let id = intent["id"].as_str().unwrap().to_string();
    let number = intent["card"]["number"].as_str().unwrap().to_string();
    let keys = wrapped_keys(&data);
    assert_eq!(keys.len(), 1);
    let wrapped_key = keys[0].clone();
    assert!(!holding(&data, &wrapped_key).is_empty());
    let scope = Scope {
        project: "p1",
        entity: "user_1",
    };
    let stored = |app: &paycred::app::App| {
        rt.block_on(app.store.get_intent(scope, &id))
            .unwrap()
            .unwrap()
    };

    clock.advance(time::Duration::hours(24));
    // Before the finalizer stores the end, the caller already sees `expired` and no card.
    let got = call(
        &app,
        http::Method::GET,
        &format!("/projects/p1/purchase-intents/{id}"),
        None,
    );
    assert_eq!(got["status"], "expired");
    assert!(got.get("card").is_none(), "{got}");
    assert!(
        eventually(Duration::from_secs(30), || stored(&app).status
            == paycred::store::IntentStatus::Expired
            && wrapped_keys(&data).is_empty()),
        "the finalizer ends the intent and erases its key (right after the end is durable)"
    );
    let ended = stored(&app);
    assert!(ended.credential_sealed.is_none() && ended.credential_key.is_none());
    let check = |app: &paycred::app::App| {
        let got = call(
            app,
            http::Method::GET,
            &format!("/projects/p1/purchase-intents/{id}"),
            None,
        );
        assert_eq!(got["status"], "expired", "{got}");
        assert!(got.get("card").is_none(), "{got}");
        let found = rt
            .block_on(paycred::service::intents::active_credential(
                app,
                "p1",
                "user_1",
                &pm_id,
                paycred::domain::issuer::CredentialType::VirtualCard,
            ))
            .unwrap();
        assert!(found.is_none(), "no template resolves to it");
        assert_eq!(holding(&data, number.as_bytes()), Vec::<PathBuf>::new());
        assert_eq!(holding(&data, &wrapped_key), Vec::<PathBuf>::new());
        assert!(wrapped_keys(&data).is_empty());
    };
    check(&app);
    // A restart: the store closed and opened again.
    drop(app);
    let app = open(config);
    check(&app);
}

/// Opens the sled store in `dir` once the last one let it go.
fn reopen(dir: &Path) -> Arc<dyn Store> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match paycred::store::SledStore::open(dir, Default::default()) {
            Ok(s) => return Arc::new(s),
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// On PostgreSQL: the use that reaches the usage limit deletes the intent's row in
/// `intent_keys`.
#[test]
fn postgres_usage_limit_used_up_deletes_the_key_row() {
    let mut server = Server::start_with(Options::on(Backend::Postgres));
    let url = server.database_url.clone().unwrap();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let created = create(&server, &t, &pm, "virtual-card", usage_limit(1), "k-pg");
    let id = created.1["id"].as_str().unwrap().to_string();
    let number = created.1["card"]["number"].as_str().unwrap().to_string();
    assert_eq!(key_rows(&url, &id), 1);
    let up = Upstream::start();
    let r = server.proxy_json(
        &t,
        &up.url("/pay"),
        &json!({"n": tpl(&pm, "virtualCard", "$.number")}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(key_rows(&url, &id), 0, "the key row is gone");
    for _ in 0..2 {
        let got = server.call("GET", &format!("{}/{id}", intents_path()), Some(&t), None);
        assert_eq!(got.json["status"], "expired", "{}", got.text);
        assert!(!got.text.contains(&number));
        let again = replay(&server, &t, &created.0, "k-pg");
        assert!(!again.text.contains(&number), "{}", again.text);
        server.restart();
    }
}

/// Rows of `intent_keys` for the intent `id`.
fn key_rows(url: &str, id: &str) -> i64 {
    on_database(url, async |c| {
        let sql = "SELECT count(*) FROM intent_keys WHERE id = $1";
        c.query_one(sql, &[&id]).await.unwrap().get(0)
    })
}
