//! Sandbox authorizations: every decline reason, body errors, and exact usage counts under
//! concurrency.

use super::*;

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
    // The use that reached the limit ended the intent and destroyed its credential: the
    // sandbox no longer knows the card.
    assert_eq!(declined(&authorize(&env, &p, ok()).await), "invalidCard");
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
            // Refused at the count, or after the end destroyed the credential.
            assert!(
                ["usageLimitReached", "invalidCard"].contains(&declined(&v)),
                "{v}"
            );
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
