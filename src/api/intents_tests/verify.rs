//! Verification: `verify` → `active`, lock-out after wrong codes, concurrent attempts.

use super::*;

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
