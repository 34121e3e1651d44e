//! Handler-level tests of purchase intents, verification and sandbox authorizations: a real
//! sled store in a temp dir, a real vault, and a [`ManualClock`] so expiry needs no sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::purchase_intents::{create, get};
use super::verify::verify;
use super::{payment_methods, sandbox};
use crate::app::App;
use crate::auth::Principal;
use crate::clock::micros;
use crate::domain::issuer::CredentialType;
use crate::error::ApiResult;
use crate::http::Response;
use crate::service::intents::{
    active_credential, record_proxy_use, reveal, stored_card_credential,
};
use crate::store::{Scope, UseOutcome};
use time::Duration;

fn scope<'a>(project: &'a str, entity: &'a str) -> Scope<'a> {
    Scope { project, entity }
}
use crate::auth::{Authenticator, Role};
use crate::clock::ManualClock;
use crate::config::Config;
use crate::domain::issuer::sandbox::{
    TEST_CARD_ALWAYS_VERIFY, TEST_CARD_NO_NETWORK_TOKEN, TEST_CARD_NO_VIRTUAL_CARD,
};
use crate::domain::issuer::Sandbox;
use crate::store::{SledStore, Store};
use crate::vault::master::MasterKey;
use crate::vault::Vault;
use serde_json::{json, Value};
use std::sync::Arc;
use time::macros::datetime;

const PAN_PROJECT: &str = "proj_pan";
const NO_PAN_PROJECT: &str = "proj_nopan";
const VISA: &str = "4242424242424242";
const MASTERCARD: &str = "5555555555554444";

struct Env {
    app: Arc<App>,
    clock: Arc<ManualClock>,
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

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = crate::auth::mint::generate_ed25519().unwrap();
    std::fs::write(dir.path().join("ed.pem"), public).unwrap();
    let config = config(dir.path(), "enabled");
    let store: Arc<dyn Store> =
        Arc::new(SledStore::open(&dir.path().join("data"), Default::default()).unwrap());
    let master = MasterKey::from_hex(&"42".repeat(32)).unwrap();
    let vault = Arc::new(Vault::new(
        master,
        store.clone(),
        std::time::Duration::from_secs(3600),
    ));
    let clock = Arc::new(ManualClock::new(datetime!(2026-11-21 10:00 UTC)));
    let issuer = Arc::new(Sandbox::new(vault.derive_secret("paycred/sandbox-issuer")));
    let app = Arc::new(App {
        auth: Authenticator::new(config.projects.clone()),
        config: Arc::new(config),
        store,
        vault,
        clock: clock.clone(),
        metrics: Default::default(),
        issuer,
        verifying: Default::default(),
    });
    Env { app, clock, dir }
}

fn who(project: &str, entity: &str, role: Role) -> Principal {
    Principal {
        project: project.into(),
        entity: entity.into(),
        role,
        exp: u64::MAX,
    }
}

fn private(entity: &str) -> Principal {
    who(PAN_PROJECT, entity, Role::Private)
}

fn body(r: &Response) -> Value {
    r.body
        .as_ref()
        .map(|b| serde_json::from_slice(b).unwrap())
        .unwrap_or(Value::Null)
}

/// Status and JSON of a handler result (errors as their envelope).
fn reply(r: ApiResult<Response>) -> (u16, Value) {
    match r {
        Ok(r) => (r.status, body(&r)),
        Err(e) => (e.status(), e.to_envelope()),
    }
}

async fn add_card(env: &Env, p: &Principal, number: &str) -> String {
    let req = json!({"entityId": p.entity, "card": {"number": number,
        "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}});
    let (status, v) = reply(payment_methods::create(&env.app, p, req.to_string().as_bytes()).await);
    assert!(status == 201 || status == 200, "{v}");
    v["id"].as_str().unwrap().to_string()
}

async fn create_intent(env: &Env, p: &Principal, req: Value) -> (u16, Value) {
    reply(create(&env.app, p, req.to_string().as_bytes()).await)
}

fn guide_usd(max: &str) -> Value {
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

async fn get_intent(env: &Env, p: &Principal, id: &str) -> (u16, Value) {
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

#[tokio::test]
async fn virtual_card_is_active_then_expires_after_24_hours() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    assert_eq!(v["status"], "active");
    assert_eq!(v["entityId"], "user_1");
    assert_eq!(v["credentialType"], "virtual-card");
    assert_eq!(v["createdAt"], "2026-11-21T10:00:00.000Z");
    assert_eq!(v["expiresAt"], "2026-11-22T10:00:00.000Z");
    let card = &v["card"];
    let number = card["number"].as_str().unwrap();
    assert!(number.starts_with("499990") && number != VISA);
    assert!(crate::domain::issuer::luhn_valid(number));
    assert_eq!(card["cvc"].as_str().unwrap().len(), 3);
    assert!(v.get("token").is_none() && v.get("pan").is_none());

    let id = v["id"].as_str().unwrap();
    let (status, got) = get_intent(&env, &p, id).await;
    assert_eq!(status, 200);
    assert_eq!(got["card"], *card);

    env.clock
        .advance(Duration::hours(24) - Duration::seconds(1));
    assert_eq!(get_intent(&env, &p, id).await.1["status"], "active");
    env.clock.advance(Duration::seconds(1));
    let (_, got) = get_intent(&env, &p, id).await;
    assert_eq!(got["status"], "expired");
    assert!(got.get("card").is_none(), "{got}");

    // Reveals are audited, without values.
    let log = env.app.store.audit_log().unwrap();
    let actions: Vec<_> = log.iter().map(|e| e.event.action.as_str()).collect();
    assert!(actions.contains(&"purchaseIntent.create"));
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == "purchaseIntent.reveal")
            .count(),
        3
    );
    let text = serde_json::to_string(&log).unwrap();
    assert!(!text.contains(number) && !text.contains(VISA));
}

#[tokio::test]
async fn expiration_date_mandate_makes_expires_at_sooner() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(
        &env,
        &p,
        &pm,
        "virtual-card",
        json!([
            {"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}},
            {"type": "expirationDate", "value": "x", "details": {"date": "2026-11-21T12:00:00Z"}}
        ]),
    )
    .await;
    assert_eq!(v["expiresAt"], "2026-11-21T12:00:00.000Z");
    env.clock.advance(Duration::hours(2));
    let (_, got) = get_intent(&env, &p, v["id"].as_str().unwrap()).await;
    assert_eq!(got["status"], "expired");
}

#[tokio::test]
async fn network_token_verify_then_active_and_later_tokens_skip_verification() {
    let env = env();
    let p = private("user_1");
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    let pm = add_card(&env, &p, MASTERCARD).await;
    let v = intent(&env, &p, &pm, "network-token", guide_usd("20")).await;
    assert_eq!(v["status"], "verify");
    assert!(v.get("token").is_none(), "{v}");
    let id = v["id"].as_str().unwrap();
    assert_eq!(get_intent(&env, &p, id).await.1["status"], "verify");

    let (status, step) = verify_with(&env, &public, id, None).await;
    assert_eq!(status, 200);
    assert_eq!(step["status"], "verify");
    assert_eq!(step["nextAction"]["type"], "otp");
    assert_eq!(step["nextAction"]["attemptsRemaining"], 5);
    let (_, wrong) = verify_with(&env, &public, id, Some("000000")).await;
    assert_eq!(wrong["status"], "verify");
    assert_eq!(wrong["nextAction"]["error"], "invalidCode");
    assert_eq!(wrong["nextAction"]["attemptsRemaining"], 4);
    let (status, done) = verify_with(&env, &public, id, Some("123456")).await;
    assert_eq!(status, 200);
    assert_eq!(done, json!({"status": "active", "nextAction": null}));
    // Idempotent once active.
    assert_eq!(
        verify_with(&env, &public, id, None).await.1["status"],
        "active"
    );

    let (_, got) = get_intent(&env, &p, id).await;
    assert_eq!(got["status"], "active");
    let token = &got["token"];
    assert!(token["number"].as_str().unwrap().starts_with("529991"));
    assert_eq!(token["cryptogram"].as_str().unwrap().len(), 28);
    assert!(token.get("cvc").is_none());

    // The payment method passed verification once: the next token is active at once.
    let next = intent(&env, &p, &pm, "network-token", guide_usd("20")).await;
    assert_eq!(next["status"], "active");
    assert!(next["token"]["cryptogram"].is_string());
    assert_ne!(next["token"]["cryptogram"], token["cryptogram"]);
}

#[tokio::test]
async fn verification_locks_after_five_wrong_codes() {
    let env = env();
    let p = private("user_1");
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "network-token", guide_usd("20")).await;
    let id = v["id"].as_str().unwrap();
    for remaining in (1..5).rev() {
        let (status, r) = verify_with(&env, &public, id, Some("111111")).await;
        assert_eq!(status, 200);
        assert_eq!(r["nextAction"]["attemptsRemaining"], remaining);
    }
    let (status, r) = verify_with(&env, &public, id, Some("222222")).await;
    assert_eq!(status, 409, "{r}");
    assert_eq!(r["error"]["type"], "conflict");
    // Locked: even the right code is refused, and the intent stays in verify.
    let (status, _) = verify_with(&env, &public, id, Some("123456")).await;
    assert_eq!(status, 409);
    assert_eq!(get_intent(&env, &p, id).await.1["status"], "verify");
}

#[tokio::test]
async fn concurrent_verification_of_one_intent_is_a_conflict() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "network-token", guide_usd("20")).await;
    let id = v["id"].as_str().unwrap();
    let held = env
        .app
        .verifying
        .enter(format!("{PAN_PROJECT}\0user_1\0{id}"))
        .unwrap();
    let (status, r) = verify_with(&env, &p, id, Some("123456")).await;
    assert_eq!(status, 409, "{r}");
    assert_eq!(r["error"]["type"], "conflict");
    drop(held);
    assert_eq!(verify_with(&env, &p, id, Some("123456")).await.0, 200);
}

#[tokio::test]
async fn verify_of_an_expired_or_unknown_intent() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "network-token", guide_usd("20")).await;
    let id = v["id"].as_str().unwrap();
    env.clock.advance(Duration::hours(25));
    assert_eq!(verify_with(&env, &p, id, Some("123456")).await.0, 409);
    assert_eq!(verify_with(&env, &p, "pi_nope", None).await.0, 404);
    // Another entity's intent is not found.
    let other = who(PAN_PROJECT, "user_2", Role::Public);
    assert_eq!(verify_with(&env, &other, id, None).await.0, 404);
}

#[tokio::test]
async fn deleting_the_payment_method_cancels_its_intents() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let keep_pm = add_card(&env, &p, MASTERCARD).await;
    let a = intent(&env, &p, &pm, "virtual-card", guide_usd("20")).await;
    let b = intent(&env, &p, &pm, "pan", guide_usd("20")).await;
    let c = intent(&env, &p, &keep_pm, "virtual-card", guide_usd("20")).await;
    let (status, _) = reply(payment_methods::delete(&env.app, &p, &pm).await);
    assert_eq!(status, 204);
    for v in [&a, &b] {
        let (_, got) = get_intent(&env, &p, v["id"].as_str().unwrap()).await;
        assert_eq!(got["status"], "canceled");
        assert!(got.get("card").is_none() && got.get("pan").is_none());
    }
    assert_eq!(
        get_intent(&env, &p, c["id"].as_str().unwrap()).await.1["status"],
        "active"
    );
    // A canceled credential no longer authorizes.
    let r = authorize(&env, &p, charge(&a["card"], "1", "USD", None)).await;
    assert_eq!(declined(&r), "notActive");
    // And the proxy finds nothing for the deleted method.
    let found = active_credential(
        &env.app,
        PAN_PROJECT,
        "user_1",
        &pm,
        CredentialType::VirtualCard,
    )
    .await
    .unwrap();
    assert!(found.is_none());
    let log = env.app.store.audit_log().unwrap();
    assert!(log.iter().any(|e| e.event.action == "paymentMethod.delete"));
}

#[tokio::test]
async fn pan_is_the_stored_card_only_where_enabled() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "pan", guide_usd("20")).await;
    assert_eq!(v["status"], "active");
    assert_eq!(
        v["pan"],
        json!({"number": VISA, "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"})
    );
    let approved = authorize(&env, &p, charge(&v["pan"], "5", "USD", None)).await;
    assert_eq!(approved, json!({"approved": true}));

    let q = who(NO_PAN_PROJECT, "user_1", Role::Private);
    let pm = add_card(&env, &q, VISA).await;
    let v = intent(&env, &q, &pm, "pan", guide_usd("20")).await;
    assert_eq!(v["status"], "unavailable");
    assert!(v.get("pan").is_none());
    assert!(
        stored_card_credential(&env.app, NO_PAN_PROJECT, "user_1", &pm)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn test_cards_drive_the_documented_outcomes() {
    let env = env();
    let p = private("user_1");
    let public = who(PAN_PROJECT, "user_1", Role::Public);

    let no_vc = add_card(&env, &p, TEST_CARD_NO_VIRTUAL_CARD).await;
    let v = intent(&env, &p, &no_vc, "virtual-card", guide_usd("1")).await;
    assert_eq!(v["status"], "unavailable");
    assert!(v.get("card").is_none());

    let no_nt = add_card(&env, &p, TEST_CARD_NO_NETWORK_TOKEN).await;
    let v = intent(&env, &p, &no_nt, "network-token", guide_usd("1")).await;
    assert_eq!(v["status"], "unavailable");
    assert_eq!(
        intent(&env, &p, &no_nt, "virtual-card", guide_usd("1")).await["status"],
        "active"
    );

    let always = add_card(&env, &p, TEST_CARD_ALWAYS_VERIFY).await;
    let first = intent(&env, &p, &always, "network-token", guide_usd("1")).await;
    assert_eq!(first["status"], "verify");
    let id = first["id"].as_str().unwrap();
    assert_eq!(
        verify_with(&env, &public, id, Some("123456")).await.1["status"],
        "active"
    );
    // Verified once, but this card's tokens always need verification.
    let second = intent(&env, &p, &always, "network-token", guide_usd("1")).await;
    assert_eq!(second["status"], "verify");
}

#[tokio::test]
async fn create_validation_and_scoping() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let (status, v) = create_intent(
        &env,
        &p,
        json!({"credentialType": "virtualCard", "paymentMethodId": pm, "mandates": guide_usd("1")}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(v["error"]["details"]["fields"]["credentialType"].is_string());
    let (status, v) = create_intent(
        &env,
        &p,
        json!({"credentialType": "pan", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "1"}, {"type": "currency", "value": "XYZ"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["details"]["fields"]["mandates[1].value"].is_string(),
        "{v}"
    );
    let (status, v) = create_intent(&env, &p, json!({"paymentMethodId": pm})).await;
    assert_eq!(status, 400);
    assert!(v["error"]["details"]["fields"]["credentialType"].is_string());
    assert!(v["error"]["details"]["fields"]["mandates"].is_string());
    // Unknown, and another entity's payment method: 404 alike.
    let ok = |pm: &str| json!({"credentialType": "virtual-card", "paymentMethodId": pm, "mandates": guide_usd("1")});
    assert_eq!(create_intent(&env, &p, ok("pm_nope")).await.0, 404);
    let other = private("user_2");
    let (status, v) = create_intent(&env, &other, ok(&pm)).await;
    assert_eq!(
        (status, v["error"]["type"].as_str()),
        (404, Some("notFound"))
    );
    // entityId, when given, must be the token's subject.
    let mut body = ok(&pm);
    body["entityId"] = json!("user_2");
    assert_eq!(create_intent(&env, &p, body.clone()).await.0, 403);
    body["entityId"] = json!("user_1");
    assert_eq!(create_intent(&env, &p, body).await.0, 201);
    // Public role may not create or get.
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    assert_eq!(create_intent(&env, &public, ok(&pm)).await.0, 403);
    // Another entity cannot read an intent.
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("1")).await;
    assert_eq!(
        get_intent(&env, &other, v["id"].as_str().unwrap()).await.0,
        404
    );
}

#[tokio::test]
async fn every_decline_reason() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    // Reference form: maxAmount 100.00 in "840", MCC 5411, usage limit 1.
    let v = intent(
        &env,
        &p,
        &pm,
        "virtual-card",
        json!([
            {"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
            {"type": "merchantMcc", "value": "5411"},
            {"type": "usageLimit", "value": "1", "details": {"count": 1}}
        ]),
    )
    .await;
    let card = &v["card"];
    let ok = || charge(card, "100.00", "USD", Some("5411"));
    let d = |mut b: Value, k: &str, val: Value| {
        b[k] = val;
        b
    };
    assert_eq!(
        declined(&authorize(&env, &p, d(ok(), "amount", json!("100.01"))).await),
        "amountOverMaximum"
    );
    assert_eq!(
        declined(&authorize(&env, &p, d(ok(), "currency", json!("EUR"))).await),
        "currencyMismatch"
    );
    assert_eq!(
        declined(&authorize(&env, &p, d(ok(), "mcc", json!("5812"))).await),
        "mccNotAllowed"
    );
    let wrong_cvc = if card["cvc"] == "000" { "001" } else { "000" };
    assert_eq!(
        declined(&authorize(&env, &p, d(ok(), "cvc", json!(wrong_cvc))).await),
        "invalidCvc"
    );
    assert_eq!(
        declined(&authorize(&env, &p, d(ok(), "number", json!("4999900000000000"))).await),
        "invalidCard"
    );
    assert_eq!(
        declined(&authorize(&env, &p, d(ok(), "expirationYear", json!("2040"))).await),
        "invalidCard"
    );
    // Numeric currency and a JSON-number amount are the same charge.
    let approved = authorize(
        &env,
        &p,
        d(d(ok(), "currency", json!("840")), "amount", json!(99.5)),
    )
    .await;
    assert_eq!(approved, json!({"approved": true}));
    assert_eq!(
        declined(&authorize(&env, &p, ok()).await),
        "usageLimitReached"
    );
    // A used-up usage limit reads as expired.
    assert_eq!(
        get_intent(&env, &p, v["id"].as_str().unwrap()).await.1["status"],
        "expired"
    );

    // expired: past expiresAt.
    let e = intent(&env, &p, &pm, "virtual-card", guide_usd("10")).await;
    env.clock.advance(Duration::hours(24));
    assert_eq!(
        declined(&authorize(&env, &p, charge(&e["card"], "1", "USD", None)).await),
        "expired"
    );

    // notActive and invalidCryptogram: a network token in verify, then after verification.
    let t = intent(&env, &p, &pm, "network-token", guide_usd("10")).await;
    assert_eq!(t["status"], "verify");
    let id = t["id"].as_str().unwrap();
    let stored = env
        .app
        .store
        .get_intent(scope(PAN_PROJECT, "user_1"), id)
        .await
        .unwrap()
        .unwrap();
    let token = serde_json::to_value(reveal(&env.app, &stored).await.unwrap().unwrap()).unwrap();
    assert_eq!(
        declined(&authorize(&env, &p, charge(&token, "1", "USD", None)).await),
        "notActive"
    );
    verify_with(&env, &p, id, Some("123456")).await;
    let bad = d(
        charge(&token, "1", "USD", None),
        "cryptogram",
        json!("AAAA"),
    );
    assert_eq!(
        declined(&authorize(&env, &p, bad).await),
        "invalidCryptogram"
    );
    assert_eq!(
        authorize(&env, &p, charge(&token, "1", "USD", None)).await,
        json!({"approved": true})
    );
    // Another entity cannot charge this entity's credential: unknown card for it.
    let other = private("user_2");
    assert_eq!(
        declined(&authorize(&env, &other, charge(&token, "1", "USD", None)).await),
        "invalidCard"
    );
}

#[tokio::test]
async fn authorization_body_errors_name_the_field() {
    let env = env();
    let p = private("user_1");
    let (status, v) = reply(
        sandbox::authorize(
            &env.app,
            &p,
            json!({"number": "4242", "expirationMonth": "12", "expirationYear": "2030",
                "amount": "-1", "currency": "US", "mcc": "54"})
            .to_string()
            .as_bytes(),
        )
        .await,
    );
    assert_eq!(status, 400);
    let f = &v["error"]["details"]["fields"];
    for k in ["amount", "currency", "mcc", "cvc"] {
        assert!(f[k].is_string(), "{k}: {v}");
    }
    assert!(!v.to_string().contains("4242"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn fifty_concurrent_authorizations_against_usage_limit_three_approve_three() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(
        &env,
        &p,
        &pm,
        "virtual-card",
        json!([{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}},
               {"type": "usageLimit", "details": {"count": 3}}]),
    )
    .await;
    let req = charge(&v["card"], "5", "USD", None).to_string();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let app = env.app.clone();
        let p = p.clone();
        let req = req.clone();
        tasks.push(tokio::spawn(async move {
            let r = sandbox::authorize(&app, &p, req.as_bytes()).await.unwrap();
            body(&r)
        }));
    }
    let mut approved = 0;
    let mut limit = 0;
    for t in tasks {
        let v = t.await.unwrap();
        if v["approved"] == true {
            approved += 1;
        } else {
            assert_eq!(declined(&v), "usageLimitReached");
            limit += 1;
        }
    }
    assert_eq!((approved, limit), (3, 47));
    let stored = env
        .app
        .store
        .get_intent(scope(PAN_PROJECT, "user_1"), v["id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.uses, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn fifty_concurrent_record_use_calls_count_exactly_the_limit() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(
        &env,
        &p,
        &pm,
        "virtual-card",
        json!([{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}},
               {"type": "usageLimit", "value": 3}]),
    )
    .await;
    let id = v["id"].as_str().unwrap().to_string();
    let now = env.app.clock.now();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let app = env.app.clone();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            app.store
                .record_use(scope(PAN_PROJECT, "user_1"), &id, now)
                .await
                .unwrap()
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let recorded = outcomes
        .iter()
        .filter(|o| matches!(o, UseOutcome::Recorded(_)))
        .count();
    assert_eq!(recorded, 3);
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, UseOutcome::Recorded(_) | UseOutcome::UsageLimitReached)));
}

#[tokio::test]
async fn proxy_helpers_find_the_newest_active_intent_and_count_uses() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let find = |kind| active_credential(&env.app, PAN_PROJECT, "user_1", &pm, kind);
    assert!(find(CredentialType::VirtualCard).await.unwrap().is_none());
    let old = intent(&env, &p, &pm, "virtual-card", guide_usd("10")).await;
    env.clock.advance(Duration::seconds(1));
    let new = intent(
        &env,
        &p,
        &pm,
        "virtual-card",
        json!([{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}},
               {"type": "usageLimit", "details": {"count": 1}}]),
    )
    .await;
    let (id, cred) = find(CredentialType::VirtualCard).await.unwrap().unwrap();
    assert_eq!(id, new["id"].as_str().unwrap());
    assert_eq!(serde_json::to_value(&cred).unwrap(), new["card"]);
    // No network token yet (the first one would be in verify).
    assert!(find(CredentialType::NetworkToken).await.unwrap().is_none());
    record_proxy_use(&env.app, PAN_PROJECT, "user_1", &id)
        .await
        .unwrap();
    let e = record_proxy_use(&env.app, PAN_PROJECT, "user_1", &id)
        .await
        .unwrap_err();
    assert_eq!(e.status(), 409);
    // The newest is used up: the older one is found.
    let (id, _) = find(CredentialType::VirtualCard).await.unwrap().unwrap();
    assert_eq!(id, old["id"].as_str().unwrap());
    let card = stored_card_credential(&env.app, PAN_PROJECT, "user_1", &pm)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(card.number.expose(), VISA);
    assert_eq!(
        record_proxy_use(&env.app, PAN_PROJECT, "user_1", "pi_nope")
            .await
            .unwrap_err()
            .status(),
        404
    );
}

#[tokio::test]
async fn credentials_are_sealed_at_rest() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("10")).await;
    let stored = env
        .app
        .store
        .get_intent(scope(PAN_PROJECT, "user_1"), v["id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    let raw = serde_json::to_string(&stored).unwrap();
    assert!(!raw.contains(v["card"]["number"].as_str().unwrap()));
    assert!(stored.credential_sealed.is_some());
}

/// A create answered through `Idempotency-Key`: status, body, and whether it was a replay.
async fn create_once(env: &Env, p: &Principal, key: &str, req: &str) -> (u16, Value, bool) {
    let path = format!("/projects/{PAN_PROJECT}/purchase-intents");
    let in_flight = crate::edge::idempotency::InFlight::default();
    let r = crate::edge::idempotency::run(
        &env.app,
        &in_flight,
        p,
        ("POST", &path, req.as_bytes()),
        key,
        create(&env.app, p, req.as_bytes()),
    )
    .await;
    let replayed = r
        .as_ref()
        .is_ok_and(|r| r.headers.iter().any(|(n, _)| *n == "Idempotent-Replayed"));
    let (status, v) = reply(r);
    (status, v, replayed)
}

#[tokio::test]
async fn idempotent_replays_of_a_create_follow_the_intent_and_the_cvc_retention() {
    let env = env();
    let p = private("user_1");
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    let pm = add_card(&env, &p, VISA).await;
    let req = json!({"credentialType": "pan", "paymentMethodId": pm, "mandates": guide_usd("10")})
        .to_string();
    let (status, first, replayed) = create_once(&env, &p, "new", &req).await;
    assert_eq!((status, replayed), (201, false), "{first}");
    assert_eq!(first["pan"]["cvc"], "123");

    // A record as stored before intents were kept by id: the whole answer, no role.
    let path = format!("/projects/{PAN_PROJECT}/purchase-intents");
    let now = micros(env.app.clock.now());
    let legacy = crate::store::IdempotentRecord {
        fingerprint: crate::edge::idempotency::fingerprint("POST", &path, req.as_bytes()),
        status: 201,
        body_sealed: Some(
            env.app
                .vault
                .seal(
                    PAN_PROJECT,
                    &crate::edge::idempotency::aad(&p, "old"),
                    first.to_string().as_bytes(),
                )
                .unwrap(),
        ),
        intent_id: None,
        role: None,
        created_micros: now,
        expires_micros: now + 86_400_000_000,
    };
    let sc = scope(PAN_PROJECT, "user_1");
    env.app
        .store
        .put_idempotent(sc, "old", &legacy)
        .await
        .unwrap();

    for key in ["new", "old"] {
        let (status, v, replayed) = create_once(&env, &p, key, &req).await;
        assert_eq!((status, &v, replayed), (201, &first, true), "{key}");
    }
    // The entity's public token gets no card: another request for a new record, the
    // private role's answer for an old one.
    assert_eq!(create_once(&env, &public, "new", &req).await.0, 409);
    assert_eq!(create_once(&env, &public, "old", &req).await.0, 403);

    // Past the cvc's retention the replays carry the card without it, as GET does.
    env.clock.advance(Duration::hours(2));
    let (_, now_shown) = get_intent(&env, &p, first["id"].as_str().unwrap()).await;
    assert_eq!(now_shown["pan"]["number"], VISA, "{now_shown}");
    assert!(now_shown["pan"].get("cvc").is_none(), "{now_shown}");
    for key in ["new", "old"] {
        let (status, v, _) = create_once(&env, &p, key, &req).await;
        assert_eq!((status, &v), (201, &now_shown), "{key}");
    }

    // After the payment method is deleted: the intent, canceled, and no card.
    let (status, _) = reply(payment_methods::delete(&env.app, &p, &pm).await);
    assert_eq!(status, 204);
    for key in ["new", "old"] {
        let (status, v, _) = create_once(&env, &p, key, &req).await;
        assert_eq!(
            (status, v["status"].as_str()),
            (201, Some("canceled")),
            "{v}"
        );
        assert!(v.get("pan").is_none(), "{v}");
    }
}

#[tokio::test]
async fn a_pan_intent_shows_no_card_once_its_project_disables_pan() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "pan", guide_usd("10")).await;
    assert_eq!(v["pan"]["number"], VISA);
    let id = v["id"].as_str().unwrap();

    // The same store and keys under a config that no longer enables `pan`.
    let config = config(env.dir.path(), "disabled");
    let app = App {
        auth: Authenticator::new(config.projects.clone()),
        config: Arc::new(config),
        store: env.app.store.clone(),
        vault: env.app.vault.clone(),
        clock: env.app.clock.clone(),
        metrics: Default::default(),
        issuer: env.app.issuer.clone(),
        verifying: Default::default(),
    };
    let (status, got) = reply(get(&app, &p, id).await);
    assert_eq!(status, 200, "{got}");
    assert!(got.get("pan").is_none(), "{got}");
    assert!(
        active_credential(&app, PAN_PROJECT, "user_1", &pm, CredentialType::Pan)
            .await
            .unwrap()
            .is_none()
    );
}
