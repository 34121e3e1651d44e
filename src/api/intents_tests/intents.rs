//! Purchase intents: create, get, expiry, mandates, test cards, deletion, the proxy's helpers,
//! sealing at rest and idempotent replays.

use super::*;

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

/// An expired intent's browser sessions end with it, at the finalizer's pass.
#[tokio::test]
async fn the_finalizer_ends_the_browser_sessions_of_an_expired_intent() {
    use crate::store::{BrowserSessionRecord, BrowserSessionStatus, Sealed};
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    let id = v["id"].as_str().unwrap();
    let session = BrowserSessionRecord {
        id: "bs_1".into(),
        project: PAN_PROJECT.into(),
        entity: "user_1".into(),
        intent_id: id.into(),
        status: BrowserSessionStatus::Active,
        allowed_hosts: vec!["shop.test".into()],
        created_micros: env.app.now_micros(),
        expires_micros: i64::MAX,
        ended_micros: None,
        uses: 0,
        stand_ins_sealed: Sealed::from_stored(""),
        stand_in_key: "k".into(),
        password_hash: "h".into(),
    };
    let audit = crate::audit::event(
        PAN_PROJECT,
        "user_1",
        "browserSession.create",
        "bs_1".into(),
    );
    assert!(env
        .app
        .store
        .insert_browser_session(&session, audit)
        .await
        .unwrap());
    env.clock.advance(Duration::hours(24));
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 1);
    let stored = env
        .app
        .store
        .get_browser_session("bs_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, BrowserSessionStatus::Ended);
    assert_eq!(stored.ended_micros, Some(env.app.now_micros()));
}

#[tokio::test]
async fn the_finalizer_stores_the_end_of_an_expired_intent_and_drops_its_credential() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    let id = v["id"].as_str().unwrap();
    let stored = || async {
        env.app
            .store
            .get_intent(scope(PAN_PROJECT, "user_1"), id)
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 0);
    assert!(stored().await.credential_sealed.is_some());
    env.clock.advance(Duration::hours(24));
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 1);
    let ended = stored().await;
    assert_eq!(ended.status, IntentStatus::Expired);
    assert!(ended.credential_sealed.is_none());
    assert_eq!(ended.mandates, stored().await.mandates);
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 0, "ended once");
    let (_, got) = get_intent(&env, &p, id).await;
    assert_eq!(got["status"], "expired");
    assert!(got.get("card").is_none(), "{got}");
}

#[tokio::test]
async fn a_credential_sealed_under_the_data_key_itself_opens_until_its_intent_ends() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    let sc = scope(PAN_PROJECT, "user_1");
    let issued = env.app.store.get_intent(sc, v["id"].as_str().unwrap());
    let issued = issued.await.unwrap().unwrap();
    assert!(
        issued.credential_key.is_some(),
        "new credentials have a key of their own"
    );
    let credential = reveal(&env.app, &issued).await.unwrap().unwrap();
    // The same credential stored as intents stored it before they had keys of their own.
    let plain = serde_json::to_vec(&credential).unwrap();
    let at = crate::service::aad::intent_credential(PAN_PROJECT, "pi_legacy");
    let legacy = crate::store::IntentRecord {
        id: "pi_legacy".into(),
        credential_sealed: Some(env.app.vault.seal(PAN_PROJECT, &at, &plain).unwrap()),
        credential_key: None,
        key_slot: None,
        ahead: Default::default(),
        ..issued
    };
    let event = crate::audit::event(PAN_PROJECT, "user_1", "test", "pi_legacy".into());
    assert!(env.app.store.insert_intent(&legacy, event).await.unwrap());
    let stored = env
        .app
        .store
        .get_intent(sc, "pi_legacy")
        .await
        .unwrap()
        .unwrap();
    let opened = reveal(&env.app, &stored).await.unwrap().unwrap();
    assert_eq!(opened.number.expose(), credential.number.expose());
    let end = crate::store::IntentEnd::Canceled;
    let ended = env
        .app
        .store
        .end_intent(sc, "pi_legacy", end, 0)
        .await
        .unwrap();
    assert!(ended.unwrap().credential_sealed.is_none());
    let stored = env
        .app
        .store
        .get_intent(sc, "pi_legacy")
        .await
        .unwrap()
        .unwrap();
    assert!(reveal(&env.app, &stored).await.unwrap().is_none());
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
    // A canceled credential is destroyed: the sandbox no longer knows it.
    let r = authorize(&env, &p, charge(&a["card"], "1", "USD", None)).await;
    assert_eq!(declined(&r), "invalidCard");
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

/// `purchase_intent.expired`: written by the finalizer's end, once, with the intent as it
/// ended (status `expired`, no credential).
#[tokio::test]
async fn purchase_intent_expired() {
    let env = env();
    let p = private("user_1");
    let pm = add_card(&env, &p, VISA).await;
    let v = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    let expired = || async {
        let (status, list) = reply(
            crate::api::events::list(&env.app, &p, Some("type=purchase_intent.expired")).await,
        );
        assert_eq!(status, 200, "{list}");
        list.as_array().cloned().unwrap_or_default()
    };
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 0);
    assert!(expired().await.is_empty());
    env.clock.advance(Duration::hours(24));
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 1);
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 0);
    let events = expired().await;
    assert_eq!(events.len(), 1, "{events:?}");
    let data = &events[0]["data"];
    assert_eq!(data["id"], v["id"]);
    assert_eq!(data["status"], "expired");
    assert!(data.get("card").is_none(), "{data}");
    assert_eq!(events[0]["createdAt"], "2026-11-22T10:00:00.000Z");
}
