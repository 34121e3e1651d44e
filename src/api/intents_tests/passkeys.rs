//! Passkeys: registration routes, and verification of an intent with a passkey. The signed
//! paths use a software authenticator ([`SoftKey`]: a P-256 key whose credential is stored as
//! a registration would store it, and assertions built as an authenticator builds them); the
//! browser's own ceremonies are in sdk/js's Chromium tests.

use super::*;
use crate::api::passkeys as routes;
use crate::store::PasskeyRecord;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use p256::ecdsa::signature::Signer;
use sha2::{Digest, Sha256};

const RP_ID: &str = "shop.example";
const ORIGIN: &str = "https://shop.example";

/// The tests' projects, [`PAN_PROJECT`] with passkeys on.
fn passkey_env() -> Env {
    env_from(|dir| {
        let key = dir.join("ed.pem");
        let yaml = format!(
            "data_dir: {d}/data\nmaster_key_file: {d}/master.key\nprojects:\n\
             \x20 - id: {PAN_PROJECT}\n    jwt: {{keys: [{{kid: k1, public_key_file: {k}}}]}}\n    pan: enabled\n\
             \x20   verification: {{passkeys: {{rp_id: {RP_ID}, origins: [\"{ORIGIN}\"]}}}}\n\
             \x20 - id: {NO_PAN_PROJECT}\n    jwt: {{keys: [{{kid: k1, public_key_file: {k}}}]}}\n    pan: disabled\n",
            d = dir.display(),
            k = key.display(),
        );
        Config::from_yaml(&yaml).unwrap()
    })
}

/// A software authenticator holding one ES256 credential.
struct SoftKey {
    key: p256::ecdsa::SigningKey,
    id: Vec<u8>,
    counter: u32,
}

impl SoftKey {
    fn new() -> Self {
        SoftKey {
            key: p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng),
            id: uuid::Uuid::new_v4().as_bytes().to_vec(),
            counter: 0,
        }
    }

    /// The credential as the WebAuthn library serialises a registered passkey.
    fn credential(&self) -> Value {
        let point = self.key.verifying_key().to_encoded_point(false);
        let x: Vec<u8> = point.x().unwrap().to_vec();
        let y: Vec<u8> = point.y().unwrap().to_vec();
        json!({"cred": {
            "cred_id": B64.encode(&self.id),
            "cred": {"type_": "ES256", "key": {"EC_EC2": {"curve": "SECP256R1", "x": x, "y": y}}},
            "counter": 0,
            "transports": null,
            "user_verified": true,
            "backup_eligible": false,
            "backup_state": false,
            "registration_policy": "required",
            "extensions": {"cred_protect": "NotRequested", "hmac_create_secret": "NotRequested"},
            "attestation": {"data": "None", "metadata": "None"},
            "attestation_format": "none"
        }})
    }

    /// An assertion of `options` (the verify step's) made on a page of `origin`, the counter
    /// moved to `counter`.
    fn assert(&mut self, options: &Value, origin: &str, counter: u32) -> Value {
        self.counter = counter;
        let client = json!({"type": "webauthn.get",
            "challenge": options["challenge"], "origin": origin, "crossOrigin": false})
        .to_string();
        let mut auth = Sha256::digest(RP_ID.as_bytes()).to_vec();
        auth.push(0x05); // user present, user verified
        auth.extend_from_slice(&counter.to_be_bytes());
        let mut signed = auth.clone();
        signed.extend_from_slice(&Sha256::digest(client.as_bytes()));
        let signature: p256::ecdsa::Signature = self.key.sign(&signed);
        json!({"id": B64.encode(&self.id), "rawId": B64.encode(&self.id), "type": "public-key",
            "extensions": {},
            "response": {"authenticatorData": B64.encode(&auth),
                "clientDataJSON": B64.encode(client.as_bytes()),
                "signature": B64.encode(signature.to_der().as_bytes()), "userHandle": null}})
    }
}

/// Stores `soft`'s credential as the passkey of `p`'s entity (what a registration stores).
async fn register(env: &Env, p: &Principal, soft: &SoftKey) -> String {
    let record = PasskeyRecord {
        id: crate::service::passkeys::new_id("pk_"),
        project: p.project.clone(),
        entity: p.entity.clone(),
        created_micros: env.app.now_micros(),
        last_used_micros: None,
        name: None,
        credential: soft.credential(),
    };
    let audit = crate::service::audit_event(&env.app, p, "passkey.create", &record.id);
    assert!(env
        .app
        .store
        .put_passkey(&record, Some(audit))
        .await
        .unwrap());
    record.id
}

async fn post_verify(env: &Env, p: &Principal, id: &str, body: Value) -> (u16, Value) {
    reply(verify(&env.app, p, id, body.to_string().as_bytes()).await)
}

/// A fresh intent in `verify` of `p`'s entity, for a card not verified yet.
async fn verify_intent(env: &Env, p: &Principal, card: &str) -> String {
    let pm = add_card(env, p, card).await;
    let v = intent(env, p, &pm, "network-token", guide_usd("20")).await;
    assert_eq!(v["status"], "verify");
    v["id"].as_str().unwrap().to_string()
}

/// The passkey step of an intent: its request options.
async fn passkey_step(env: &Env, p: &Principal, id: &str) -> Value {
    let (status, step) = post_verify(env, p, id, json!({})).await;
    assert_eq!(status, 200, "{step}");
    assert_eq!(step["nextAction"]["type"], "passkey", "{step}");
    step["nextAction"]["options"].clone()
}

#[tokio::test]
async fn without_passkeys_the_one_time_code_stays() {
    // Passkeys off for the project: otp, and the passkey routes are 404.
    let env = env();
    let p = private("user_1");
    let id = verify_intent(&env, &p, VISA).await;
    let (_, step) = post_verify(&env, &p, &id, json!({})).await;
    assert_eq!(step["nextAction"]["type"], "otp");
    let (status, e) = reply(routes::registration_options(&env.app, &p, b"").await);
    assert_eq!(
        (status, e["error"]["type"].as_str()),
        (404, Some("notFound"))
    );
    // Passkeys on, but the entity has none: otp as well.
    let env = passkey_env();
    let id = verify_intent(&env, &p, MASTERCARD).await;
    let (_, step) = post_verify(&env, &p, &id, json!({})).await;
    assert_eq!(step["nextAction"]["type"], "otp", "{step}");
    assert_eq!(
        post_verify(&env, &p, &id, json!({"code": "123456"}))
            .await
            .1["status"],
        "active"
    );
}

#[tokio::test]
async fn registration_options_and_unknown_or_expired_registrations() {
    let env = passkey_env();
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    let (status, v) = reply(routes::registration_options(&env.app, &public, b"{}").await);
    assert_eq!(status, 200, "{v}");
    let reg = v["registrationId"].as_str().unwrap();
    assert!(reg.starts_with("pkr_"));
    let o = &v["options"];
    assert_eq!(o["rp"]["id"], RP_ID);
    assert!(B64.decode(o["challenge"].as_str().unwrap()).unwrap().len() >= 16);
    assert_eq!(o["authenticatorSelection"]["userVerification"], "required");
    assert_eq!(o["authenticatorSelection"]["residentKey"], "preferred");
    assert!(o["user"]["id"].is_string());
    assert!(o["pubKeyCredParams"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["alg"] == -7));
    // Another entity named in the body: 403.
    let other = json!({"entityId": "user_2"}).to_string();
    let (status, _) =
        reply(routes::registration_options(&env.app, &public, other.as_bytes()).await);
    assert_eq!(status, 403);
    let finish = |reg: &str| json!({"registrationId": reg, "credential": {"id": "x"}}).to_string();
    // A credential that is not one: 400 naming it (the registration is not used up by it).
    let bad = json!({"registrationId": reg, "credential": {"id": 1}}).to_string();
    let (status, e) = reply(routes::create(&env.app, &public, bad.as_bytes()).await);
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["details"]["fields"]["credential"].is_string(),
        "{e}"
    );
    // Unknown, or expired after 5 minutes: 400 naming registrationId.
    let unknown = finish("pkr_nope").replace("\"x\"", "\"AAAA\"");
    let (status, e) = reply(routes::create(&env.app, &public, unknown.as_bytes()).await);
    assert_eq!(status, 400, "{e}");
    let complete = |reg: &str| {
        json!({"registrationId": reg, "credential": {"id": "AAAA", "rawId": "AAAA",
            "type": "public-key", "extensions": {},
            "response": {"attestationObject": "AAAA", "clientDataJSON": "AAAA"}}})
        .to_string()
    };
    let (status, e) =
        reply(routes::create(&env.app, &public, complete("pkr_nope").as_bytes()).await);
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["details"]["fields"]["registrationId"].is_string(),
        "{e}"
    );
    env.clock.advance(Duration::minutes(6));
    let (status, e) = reply(routes::create(&env.app, &public, complete(reg).as_bytes()).await);
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["details"]["fields"]["registrationId"].is_string(),
        "{e}"
    );
    // A fresh one with a credential that does not verify: invalidPasskey; then it is used up.
    let (_, v) = reply(routes::registration_options(&env.app, &public, b"").await);
    let reg = v["registrationId"].as_str().unwrap();
    let (status, e) = reply(routes::create(&env.app, &public, complete(reg).as_bytes()).await);
    assert_eq!(
        (status, e["error"]["type"].as_str()),
        (400, Some("invalidPasskey")),
        "{e}"
    );
    let (_, e) = reply(routes::create(&env.app, &public, complete(reg).as_bytes()).await);
    assert!(
        e["error"]["details"]["fields"]["registrationId"].is_string(),
        "{e}"
    );
}

#[tokio::test]
async fn an_intent_is_verified_with_the_entitys_passkey() {
    let env = passkey_env();
    let p = private("user_1");
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    let mut soft = SoftKey::new();
    let pk = register(&env, &p, &soft).await;
    let id = verify_intent(&env, &p, VISA).await;
    let options = passkey_step(&env, &public, &id).await;
    assert_eq!(options["rpId"], RP_ID);
    assert_eq!(options["userVerification"], "required");
    assert_eq!(options["allowCredentials"][0]["id"], B64.encode(&soft.id));
    // The code is not taken in place of the passkey, in either dialect.
    let (status, e) = post_verify(&env, &public, &id, json!({"code": "123456"})).await;
    assert_eq!(status, 400);
    assert!(e["error"]["details"]["fields"]["code"].is_string(), "{e}");
    for action in [
        json!({"action": "START"}),
        json!({"action": "VALIDATE_OTP", "payload": {"otpCode": "123456"}}),
    ] {
        let (status, e) = post_verify(&env, &public, &id, action).await;
        assert_eq!(status, 400, "{e}");
        assert!(e["error"]["details"]["fields"]["action"].is_string(), "{e}");
    }
    assert_eq!(get_intent(&env, &p, &id).await.1["status"], "verify");
    let assertion = soft.assert(&options, ORIGIN, 1);
    let (status, done) = post_verify(&env, &public, &id, json!({ "assertion": assertion })).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done, json!({"status": "active", "nextAction": null}));
    assert_eq!(get_intent(&env, &p, &id).await.1["status"], "active");
    let (_, listed) = reply(routes::list(&env.app, &public).await);
    assert_eq!(listed[0]["id"], pk.as_str());
    assert!(listed[0]["lastUsedAt"].is_string(), "{listed}");
    // Replayed on another intent (its own challenge waiting): refused.
    let other = verify_intent(&env, &p, MASTERCARD).await;
    let fresh = passkey_step(&env, &public, &other).await;
    let (status, e) = post_verify(&env, &public, &other, json!({ "assertion": assertion })).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["type"], "invalidPasskey");
    assert_eq!(e["error"]["details"]["reason"], "challenge");
    assert_eq!(e["error"]["details"]["attemptsRemaining"], 4);
    // The challenge was taken by the refused attempt: a good assertion of it is refused too.
    let late = soft.assert(&fresh, ORIGIN, 2);
    let (_, e) = post_verify(&env, &public, &other, json!({ "assertion": late })).await;
    assert_eq!(e["error"]["details"]["reason"], "challenge", "{e}");
    // A wrong origin, then a counter that did not grow (a cloned authenticator).
    let fresh = passkey_step(&env, &public, &other).await;
    let wrong = soft.assert(&fresh, "https://evil.example", 3);
    let (_, e) = post_verify(&env, &public, &other, json!({ "assertion": wrong })).await;
    assert_eq!(e["error"]["details"]["reason"], "origin", "{e}");
    let fresh = passkey_step(&env, &public, &other).await;
    let cloned = soft.assert(&fresh, ORIGIN, 1);
    let (_, e) = post_verify(&env, &public, &other, json!({ "assertion": cloned })).await;
    assert_eq!(e["error"]["details"]["reason"], "counter", "{e}");
    assert_eq!(e["error"]["details"]["attemptsRemaining"], 1);
    // The fifth failure locks the intent, as wrong codes do.
    let (status, e) = post_verify(&env, &public, &other, json!({ "assertion": cloned })).await;
    assert_eq!(
        (status, e["error"]["type"].as_str()),
        (409, Some("conflict")),
        "{e}"
    );
    assert_eq!(get_intent(&env, &p, &other).await.1["status"], "verify");
}

#[tokio::test]
async fn an_assertion_for_another_intents_challenge_is_refused() {
    let env = passkey_env();
    let p = private("user_1");
    let mut soft = SoftKey::new();
    register(&env, &p, &soft).await;
    let a = verify_intent(&env, &p, VISA).await;
    let b = verify_intent(&env, &p, MASTERCARD).await;
    let for_a = passkey_step(&env, &p, &a).await;
    passkey_step(&env, &p, &b).await;
    let assertion = soft.assert(&for_a, ORIGIN, 1);
    let (status, e) = post_verify(&env, &p, &b, json!({ "assertion": assertion })).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["details"]["reason"], "challenge");
    assert_eq!(get_intent(&env, &p, &b).await.1["status"], "verify");
    // A's own challenge is still waiting and takes it.
    let (status, done) = post_verify(&env, &p, &a, json!({ "assertion": assertion })).await;
    assert_eq!((status, &done["status"]), (200, &json!("active")), "{done}");
    // Two challenges given at counter 1; the passkey used at 5 for one: the other's assertion
    // at 3 (above its challenge's counter, below the stored one) is a clone's.
    let c = verify_intent(&env, &p, "4000056655665556").await;
    let d = verify_intent(&env, &p, "5200828282828210").await;
    let (for_c, for_d) = (
        passkey_step(&env, &p, &c).await,
        passkey_step(&env, &p, &d).await,
    );
    let at5 = soft.assert(&for_c, ORIGIN, 5);
    assert_eq!(
        post_verify(&env, &p, &c, json!({ "assertion": at5 }))
            .await
            .0,
        200
    );
    let at3 = soft.assert(&for_d, ORIGIN, 3);
    let (status, e) = post_verify(&env, &p, &d, json!({ "assertion": at3 })).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["details"]["reason"], "counter", "{e}");
}

#[tokio::test]
async fn a_deleted_passkey_is_refused_at_once_and_only_its_entity_deletes_it() {
    let env = passkey_env();
    let p = private("user_1");
    let public = who(PAN_PROJECT, "user_1", Role::Public);
    let stranger = who(PAN_PROJECT, "user_2", Role::Public);
    let mut soft = SoftKey::new();
    let pk = register(&env, &p, &soft).await;
    let id = verify_intent(&env, &p, VISA).await;
    let options = passkey_step(&env, &public, &id).await;
    // Another entity neither sees nor deletes it.
    assert_eq!(reply(routes::list(&env.app, &stranger).await).1, json!([]));
    assert_eq!(reply(routes::delete(&env.app, &stranger, &pk).await).0, 404);
    assert_eq!(reply(routes::delete(&env.app, &public, &pk).await).0, 204);
    assert_eq!(reply(routes::delete(&env.app, &public, &pk).await).0, 404);
    // The challenge given before the delete: refused.
    let assertion = soft.assert(&options, ORIGIN, 1);
    let (status, e) = post_verify(&env, &public, &id, json!({ "assertion": assertion })).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["details"]["reason"], "unknownPasskey", "{e}");
    // No passkey left: the one-time code again.
    let (_, step) = post_verify(&env, &public, &id, json!({})).await;
    assert_eq!(step["nextAction"]["type"], "otp");
    let actions: Vec<String> = env
        .app
        .store
        .audit_log()
        .unwrap()
        .into_iter()
        .map(|e| e.event.action)
        .filter(|a| a.starts_with("passkey."))
        .collect();
    assert_eq!(actions, ["passkey.create", "passkey.delete"]);
}
