//! Handler-level tests of purchase intents, verification and sandbox authorizations: a real
//! sled store in a temp dir, a real vault, and a [`ManualClock`] so expiry needs no sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::purchase_intents::{create, get};
use super::verify::verify;
use super::{payment_methods, sandbox};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::issuer::CredentialType;
use crate::error::ApiResult;
use crate::http::Response;
use crate::service::intents::{
    active_credential, end_due_intents, record_proxy_use, reveal, stored_card_credential,
};
use crate::store::{IntentStatus, Scope, UseOutcome};
use time::Duration;

pub(crate) fn scope<'a>(project: &'a str, entity: &'a str) -> Scope<'a> {
    Scope { project, entity }
}
use crate::auth::{Authenticator, Role};
use crate::clock::ManualClock;
use crate::config::Config;
use crate::domain::issuer::sandbox::{
    TEST_CARD_ALWAYS_VERIFY, TEST_CARD_NO_NETWORK_TOKEN, TEST_CARD_NO_VIRTUAL_CARD,
};
use crate::store::{SledStore, Store};
use crate::vault::master::MasterKey;
use crate::vault::Vault;
use serde_json::{json, Value};
use std::sync::Arc;
use time::macros::datetime;

pub(crate) const PAN_PROJECT: &str = "proj_pan";
const NO_PAN_PROJECT: &str = "proj_nopan";
pub(crate) const VISA: &str = "4242424242424242";
const MASTERCARD: &str = "5555555555554444";

pub(crate) struct Env {
    pub(crate) app: Arc<App>,
    pub(crate) clock: Arc<ManualClock>,
    dir: tempfile::TempDir,
}

/// The config of the tests' two projects in `dir`, with `pan` of [`PAN_PROJECT`] as given.
fn config(dir: &std::path::Path, pan: &str) -> Config {
    let key = dir.join("ed.pem");
    let project = |id: &str, pan: &str| {
        format!(
            "  - id: {id}\n    jwt: {{keys: [{{kid: k1, public_key_file: {}}}]}}\n    pan: {pan}\n",
            key.display()
        )
    };
    let yaml = format!(
        "data_dir: {d}/data\nmaster_key_file: {d}/master.key\nprojects:\n{}{}",
        project(PAN_PROJECT, pan),
        project(NO_PAN_PROJECT, "disabled"),
        d = dir.display(),
    );
    Config::from_yaml(&yaml).unwrap()
}

pub(crate) fn env() -> Env {
    env_from(|dir| config(dir, "enabled"))
}

/// An [`Env`] of the config `make` writes for the temp dir (its `ed.pem` written).
fn env_from(make: impl FnOnce(&std::path::Path) -> Config) -> Env {
    env_over(make, None)
}

/// An [`Env`] of the usual config over a fresh database of the tests' PostgreSQL cluster.
pub(crate) fn env_on_postgres() -> Env {
    let pg = crate::store::postgres::test_cluster::fresh_config(4)
        .unwrap_or_else(|e| panic!("no PostgreSQL for the tests: {e}"));
    let store = crate::store::PgStore::open(&pg, Default::default()).unwrap();
    env_over(|dir| config(dir, "enabled"), Some(Arc::new(store)))
}

/// [`env_from`] over `store`, or a sled store in the temp dir.
fn env_over(make: impl FnOnce(&std::path::Path) -> Config, store: Option<Arc<dyn Store>>) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = crate::auth::mint::generate_ed25519().unwrap();
    std::fs::write(dir.path().join("ed.pem"), public).unwrap();
    let config = make(dir.path());
    let store: Arc<dyn Store> = store.unwrap_or_else(|| {
        Arc::new(SledStore::open(&dir.path().join("data"), Default::default()).unwrap())
    });
    let master = MasterKey::from_hex(&"42".repeat(32)).unwrap();
    let vault = Arc::new(Vault::new(
        master,
        store.clone(),
        std::time::Duration::from_secs(3600),
    ));
    let clock = Arc::new(ManualClock::new(datetime!(2026-11-21 10:00 UTC)));
    let app = Arc::new(App::new(config, store, vault, clock.clone()));
    Env { app, clock, dir }
}

pub(crate) fn who(project: &str, entity: &str, role: Role) -> Principal {
    Principal {
        project: project.into(),
        entity: entity.into(),
        role,
        exp: u64::MAX,
    }
}

pub(crate) fn private(entity: &str) -> Principal {
    who(PAN_PROJECT, entity, Role::Private)
}

fn body(r: &Response) -> Value {
    r.body
        .as_ref()
        .map(|b| serde_json::from_slice(b).unwrap())
        .unwrap_or(Value::Null)
}

/// Status and JSON of a handler result (errors as their envelope).
pub(crate) fn reply(r: ApiResult<Response>) -> (u16, Value) {
    match r {
        Ok(r) => (r.status, body(&r)),
        Err(e) => (e.status(), e.to_envelope()),
    }
}

pub(crate) async fn add_card(env: &Env, p: &Principal, number: &str) -> String {
    let req = json!({"entityId": p.entity, "card": {"number": number,
        "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}});
    let (status, v) = reply(payment_methods::create(&env.app, p, req.to_string().as_bytes()).await);
    assert!(status == 201 || status == 200, "{v}");
    v["id"].as_str().unwrap().to_string()
}

async fn create_intent(env: &Env, p: &Principal, req: Value) -> (u16, Value) {
    reply(create(&env.app, p, req.to_string().as_bytes()).await)
}

pub(crate) fn guide_usd(max: &str) -> Value {
    json!([{"type": "maxAmount", "value": max}, {"type": "currency", "value": "USD"}])
}

async fn intent(env: &Env, p: &Principal, pm: &str, kind: &str, mandates: Value) -> Value {
    let (status, v) = create_intent(
        env,
        p,
        json!({"credentialType": kind, "paymentMethodId": pm, "mandates": mandates}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    v
}

pub(crate) async fn get_intent(env: &Env, p: &Principal, id: &str) -> (u16, Value) {
    reply(get(&env.app, p, id).await)
}

async fn verify_with(env: &Env, p: &Principal, id: &str, code: Option<&str>) -> (u16, Value) {
    let b = match code {
        Some(c) => json!({ "code": c }).to_string(),
        None => String::new(),
    };
    reply(verify(&env.app, p, id, b.as_bytes()).await)
}

async fn authorize(env: &Env, p: &Principal, req: Value) -> Value {
    let (status, v) = reply(sandbox::authorize(&env.app, p, req.to_string().as_bytes()).await);
    assert_eq!(status, 200, "{v}");
    v
}

/// An authorization body for a credential object of a response.
fn charge(c: &Value, amount: &str, currency: &str, mcc: Option<&str>) -> Value {
    let mut b = json!({"number": c["number"], "expirationMonth": c["expirationMonth"],
        "expirationYear": c["expirationYear"], "amount": amount, "currency": currency});
    for k in ["cvc", "cryptogram"] {
        if let Some(v) = c.get(k) {
            b[k] = v.clone();
        }
    }
    if let Some(m) = mcc {
        b["mcc"] = json!(m);
    }
    b
}

fn declined(v: &Value) -> &str {
    assert_eq!(v["approved"], false, "{v}");
    v["declineReason"].as_str().unwrap()
}

mod authorizations;
mod intents;
mod passkeys;
mod retention;
mod verify;
