//! Storage faults: a [`FaultyStore`] fails writes (and reads) through the `Store`
//! trait while requests run through the API: every request answers 503 with the envelope and
//! no internal detail, nothing half-written remains (each record is whole, the audit chain
//! verifies, a failed delete leaves the method and its intents as they were), and everything
//! works again once the fault clears.

use http::Method;
use paycred::app::App;
use paycred::auth::{Principal, Role};
use paycred::config::Config;
use paycred::edge::rest::{self as api, ApiRequest};
use paycred::http::Response;
use paycred::store::faulty::FaultyStore;
use paycred::store::{SledStore, Store};
use paycred::vault::master::MasterKey;
use paycred::vault::Vault;
use serde_json::{json, Value};
use std::sync::Arc;

struct Env {
    app: Arc<App>,
    faulty: Arc<FaultyStore>,
    _dir: tempfile::TempDir,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = paycred::auth::mint::generate_ed25519().unwrap();
    let key = dir.path().join("ed.pem");
    std::fs::write(&key, public).unwrap();
    let yaml = format!(
        "data_dir: {d}/data\nmaster_key_file: {d}/master.key\nprojects:\n  - id: p1\n    jwt: {{keys: [{{kid: k1, public_key_file: {k}}}]}}\n    pan: enabled\n",
        d = dir.path().display(),
        k = key.display()
    );
    let config = Config::from_yaml(&yaml).unwrap();
    let sled: Arc<dyn Store> =
        Arc::new(SledStore::open(&dir.path().join("data"), Default::default()).unwrap());
    let faulty = Arc::new(FaultyStore::new(sled));
    let store: Arc<dyn Store> = faulty.clone();
    let master = MasterKey::from_hex(&"42".repeat(32)).unwrap();
    let vault = Arc::new(Vault::new(
        master,
        store.clone(),
        std::time::Duration::from_secs(3600),
    ));
    let clock = Arc::new(paycred::clock::SystemClock);
    let app = Arc::new(App::new(config, store, vault, clock));
    Env {
        app,
        faulty,
        _dir: dir,
    }
}

fn principal() -> Principal {
    Principal {
        project: "p1".into(),
        entity: "user_1".into(),
        role: Role::Private,
        exp: u64::MAX,
    }
}

/// Runs one request the way the gateway does; an error becomes its envelope.
async fn call(app: &App, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let route = paycred::edge::routes::route(path).unwrap();
    let p = principal();
    let req = ApiRequest {
        method: &method,
        route: &route,
        principal: &p,
        query: None,
        body: body.map(|b| bytes::Bytes::from(b.to_string())),
    };
    let resp = match api::dispatch(app, req).await {
        Ok(r) => r,
        Err(e) => Response::error(&e),
    };
    let json = resp
        .body
        .as_ref()
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    (resp.status, json)
}

fn card(number: &str) -> Value {
    json!({"entityId": "user_1", "card": {"number": number, "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}})
}

fn intent(pm: &str) -> Value {
    json!({"entityId": "user_1", "credentialType": "virtual-card", "paymentMethodId": pm,
           "mandates": [{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}}]})
}

fn assert_unavailable(status: u16, body: &Value) {
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["status"], 503);
    assert_eq!(body["error"]["type"], "storeUnavailable");
    assert_eq!(body["error"]["title"], "Store unavailable");
    let text = body.to_string();
    assert!(
        !text.contains("injected") && !text.contains("device"),
        "internal detail leaked: {text}"
    );
}

/// Everything stored is whole: every listed method and intent reads back, the audit chain
/// verifies, and every stored method has its create entry.
async fn assert_consistent(app: &App) {
    let (status, list) = call(app, Method::GET, "/projects/p1/payment-methods", None).await;
    assert_eq!(status, 200);
    let log = app.store.audit_log().unwrap();
    paycred::audit::verify(&log).unwrap();
    for pm in list.as_array().unwrap() {
        let id = pm["id"].as_str().unwrap();
        let (s, _) = call(
            app,
            Method::GET,
            &format!("/projects/p1/payment-methods/{id}"),
            None,
        )
        .await;
        assert_eq!(s, 200);
        assert!(log
            .iter()
            .any(|e| e.event.action == "paymentMethod.create" && e.event.resource == id));
    }
    let scope = paycred::store::Scope {
        project: "p1",
        entity: "user_1",
    };
    for rec in app.store.list_intents(scope).await.unwrap() {
        let (s, _) = call(
            app,
            Method::GET,
            &format!("/projects/p1/purchase-intents/{}", rec.id),
            None,
        )
        .await;
        assert_eq!(s, 200);
        assert!(log
            .iter()
            .any(|e| e.event.action == "purchaseIntent.create" && e.event.resource == rec.id));
    }
}

#[tokio::test]
async fn storage_faults_answer_503_leave_nothing_half_written_and_heal() {
    let Env { app, faulty, _dir } = env();
    let (s, pm) = call(
        &app,
        Method::POST,
        "/projects/p1/payment-methods",
        Some(card("4242424242424242")),
    )
    .await;
    assert_eq!(s, 201, "{pm}");
    let pm_id = pm["id"].as_str().unwrap().to_string();
    let (s, pi) = call(
        &app,
        Method::POST,
        "/projects/p1/purchase-intents",
        Some(intent(&pm_id)),
    )
    .await;
    assert_eq!(s, 201, "{pi}");

    // Writes fail at every step of each handler in turn (after 0, 1, 2 successful writes).
    for allowed in 0..3 {
        faulty.fail_writes_after(allowed);
        let (s, body) = call(
            &app,
            Method::POST,
            "/projects/p1/payment-methods",
            Some(card("5555555555554444")),
        )
        .await;
        if allowed == 0 {
            assert_unavailable(s, &body);
        }
        faulty.fail_writes_after(allowed);
        let (s, body) = call(
            &app,
            Method::POST,
            "/projects/p1/purchase-intents",
            Some(intent(&pm_id)),
        )
        .await;
        if allowed < 2 {
            assert_unavailable(s, &body);
        }
        faulty.fail_writes_after(0);
        let (s, body) = call(
            &app,
            Method::DELETE,
            &format!("/projects/p1/payment-methods/{pm_id}"),
            None,
        )
        .await;
        assert_unavailable(s, &body);
        faulty.heal();
        assert_consistent(&app).await;
        // The failed delete changed nothing: the method and its first intent are as they were.
        let (s, got) = call(
            &app,
            Method::GET,
            &format!(
                "/projects/p1/purchase-intents/{}",
                pi["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
        assert_eq!((s, &got["status"]), (200, &json!("active")));
    }

    // Reads fail too: 503 with the envelope.
    faulty.fail_reads();
    let (s, body) = call(&app, Method::GET, "/projects/p1/payment-methods", None).await;
    assert_unavailable(s, &body);
    let (s, body) = call(
        &app,
        Method::GET,
        &format!("/projects/p1/payment-methods/{pm_id}"),
        None,
    )
    .await;
    assert_unavailable(s, &body);

    // Healed: every route works again.
    faulty.heal();
    let (s, _) = call(
        &app,
        Method::POST,
        "/projects/p1/payment-methods",
        Some(card("378282246310005").tap_cvc("1234")),
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = call(
        &app,
        Method::POST,
        "/projects/p1/purchase-intents",
        Some(intent(&pm_id)),
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = call(
        &app,
        Method::DELETE,
        &format!("/projects/p1/payment-methods/{pm_id}"),
        None,
    )
    .await;
    assert_eq!(s, 204);
    assert_consistent(&app).await;
}

trait TapCvc {
    fn tap_cvc(self, cvc: &str) -> Value;
}

impl TapCvc for Value {
    fn tap_cvc(mut self, cvc: &str) -> Value {
        self["card"]["cvc"] = json!(cvc);
        self
    }
}
