//! What every backend must do, run against sled and against a real PostgreSQL
//! ([`super::postgres::test_cluster`]): the same test body for each backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::audit::chain::HashFunction;
use crate::domain::issuer::CredentialType;

/// A store of `backend` and what keeps it alive (sled's temp dir).
fn open(backend: &str) -> (Arc<dyn Store>, Option<tempfile::TempDir>) {
    match backend {
        "sled" => {
            let dir = tempfile::tempdir().unwrap();
            let store = SledStore::open(dir.path(), HashFunction::Sha256).unwrap();
            (Arc::new(store), Some(dir))
        }
        _ => {
            let config = postgres::test_cluster::fresh_config(8)
                .unwrap_or_else(|e| panic!("no PostgreSQL for the tests: {e}"));
            (
                Arc::new(PgStore::open(&config, HashFunction::Sha256).unwrap()),
                None,
            )
        }
    }
}

pub(super) const SCOPE: Scope<'static> = Scope {
    project: "p1",
    entity: "e1",
};

pub(super) fn pm(id: &str, fingerprint: &str, created: i64) -> PaymentMethodRecord {
    PaymentMethodRecord {
        id: id.into(),
        project: SCOPE.project.into(),
        entity: SCOPE.entity.into(),
        created_micros: created,
        card: StoredCard {
            brand: "visa".into(),
            funding: "credit".into(),
            bin: "424242".into(),
            last4: "4242".into(),
            expiration_month: "12".into(),
            expiration_year: "2031".into(),
            number_sealed: Sealed::from_stored("dk1.sealed-number"),
            cvc_sealed: None,
        },
        fingerprint: fingerprint.into(),
        token: None,
    }
}

pub(super) fn intent(
    id: &str,
    pm_id: &str,
    limit: Option<u32>,
    status: IntentStatus,
) -> IntentRecord {
    IntentRecord {
        id: id.into(),
        project: SCOPE.project.into(),
        entity: SCOPE.entity.into(),
        payment_method_id: pm_id.into(),
        credential_type: CredentialType::VirtualCard,
        status,
        created_micros: 10,
        expires_micros: i64::MAX / 2,
        mandates: crate::domain::mandate::Mandates {
            usage_limit: limit,
            ..Default::default()
        },
        credential_sealed: None,
        uses: 0,
        failed_verifications: 0,
        otp_method: None,
        credential_key: None,
        key_slot: None,
        ended_micros: None,
        ahead: Default::default(),
    }
}

pub(super) fn ev(action: &str) -> AuditEvent {
    crate::audit::event(SCOPE.project, SCOPE.entity, action, "r".into())
}

pub(super) fn keep(existing: &PaymentMethodRecord) -> (PaymentMethodRecord, AuditEvent) {
    let mut r = existing.clone();
    r.card.expiration_year = "2032".into();
    (r, ev("paymentMethod.update"))
}

async fn payment_methods_dedup_list_and_delete(store: Arc<dyn Store>) {
    let first = store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    assert_eq!(first, Inserted::Created);
    store
        .insert_payment_method(&pm("pm_b", "fp2", 2), ev("c"), &keep)
        .await
        .unwrap();
    // Same card again: the first record, refreshed.
    match store
        .insert_payment_method(&pm("pm_c", "fp1", 3), ev("c"), &keep)
        .await
        .unwrap()
    {
        Inserted::Existing(r) => {
            assert_eq!(
                (r.id.as_str(), r.card.expiration_year.as_str()),
                ("pm_a", "2032")
            )
        }
        other => panic!("{other:?}"),
    }
    let page = store.list_payment_methods(SCOPE, 0, 10).await.unwrap();
    let ids: Vec<_> = page.items.iter().map(|p| p.id.as_str()).collect();
    assert_eq!((ids, page.total), (vec!["pm_b", "pm_a"], 2));
    let other = Scope {
        project: "p1",
        entity: "e2",
    };
    assert!(store
        .get_payment_method(other, "pm_a")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .insert_intent(&intent("pi_1", "pm_a", None, IntentStatus::Active), ev("i"))
        .await
        .unwrap());
    assert!(!store
        .insert_intent(
            &intent("pi_x", "pm_none", None, IntentStatus::Active),
            ev("i")
        )
        .await
        .unwrap());
    assert!(store
        .delete_payment_method(SCOPE, "pm_a", ev("d"))
        .await
        .unwrap());
    assert!(!store
        .delete_payment_method(SCOPE, "pm_a", ev("d"))
        .await
        .unwrap());
    assert!(store
        .get_payment_method(SCOPE, "pm_a")
        .await
        .unwrap()
        .is_none());
    let pi = store.get_intent(SCOPE, "pi_1").await.unwrap().unwrap();
    assert_eq!(pi.status, IntentStatus::Canceled);
    // The card can be stored again once deleted.
    assert_eq!(
        store
            .insert_payment_method(&pm("pm_d", "fp1", 4), ev("c"), &keep)
            .await
            .unwrap(),
        Inserted::Created
    );
}

async fn usage_is_counted_exactly(store: Arc<dyn Store>) {
    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    store
        .insert_intent(
            &intent("pi_1", "pm_a", Some(5), IntentStatus::Active),
            ev("i"),
        )
        .await
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    let uses = (0..40).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.record_use(SCOPE, "pi_1", now).await.unwrap() })
    });
    let mut recorded = 0;
    for u in uses {
        match u.await.unwrap() {
            UseOutcome::Recorded(_) => recorded += 1,
            UseOutcome::UsageLimitReached => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(recorded, 5);
    let pi = store.get_intent(SCOPE, "pi_1").await.unwrap().unwrap();
    assert_eq!(pi.uses, 5);
    assert_eq!(pi.status_at(0), IntentStatus::Expired);
    assert_eq!(
        store.record_use(SCOPE, "pi_none", now).await.unwrap(),
        UseOutcome::NotFound
    );
    store
        .insert_intent(&intent("pi_v", "pm_a", None, IntentStatus::Verify), ev("i"))
        .await
        .unwrap();
    assert_eq!(
        store.record_use(SCOPE, "pi_v", now).await.unwrap(),
        UseOutcome::NotActive
    );
    let failed = store
        .record_verification(SCOPE, "pi_v", VerificationAttempt::Failed, ev("v"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (failed.status, failed.failed_verifications),
        (IntentStatus::Verify, 1)
    );
    assert!(!store.payment_method_verified(SCOPE, "pm_a").await.unwrap());
    let passed = store
        .record_verification(SCOPE, "pi_v", VerificationAttempt::Passed, ev("v"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(passed.status, IntentStatus::Active);
    assert!(store.payment_method_verified(SCOPE, "pm_a").await.unwrap());
    let newest = store
        .newest_active_intent(SCOPE, "pm_a", CredentialType::VirtualCard, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(newest.id, "pi_v");
    let set = store
        .set_intent_status(SCOPE, "pi_v", IntentStatus::Unavailable)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(set.status, IntentStatus::Unavailable);
    assert_eq!(store.list_intents(SCOPE).await.unwrap().len(), 2);
}

async fn keys_idempotency_tokens_and_audit(store: Arc<dyn Store>) {
    assert!(store.load_keyring("p1").unwrap().is_none());
    assert_eq!(store.create_keyring("p1", b"ring-1").unwrap(), b"ring-1");
    assert_eq!(store.create_keyring("p1", b"ring-x").unwrap(), b"ring-1");
    assert!(!store.swap_keyring("p1", b"ring-x", b"ring-2").unwrap());
    assert!(store.swap_keyring("p1", b"ring-1", b"ring-2").unwrap());
    assert_eq!(store.load_keyring("p1").unwrap().unwrap(), b"ring-2");
    assert!(store.swap_client_keys("p1", None, b"set-1").unwrap());
    assert!(!store.swap_client_keys("p1", None, b"set-x").unwrap());
    assert!(store
        .swap_client_keys("p1", Some(b"set-1"), b"set-2")
        .unwrap());
    assert_eq!(store.load_client_keys("p1").unwrap().unwrap(), b"set-2");

    let rec = IdempotentRecord {
        fingerprint: "f".into(),
        status: 201,
        body_sealed: None,
        intent_id: Some("pi_1".into()),
        role: Some("private".into()),
        created_micros: 1,
        expires_micros: 100,
    };
    store.put_idempotent(SCOPE, "k1", &rec).await.unwrap();
    assert_eq!(
        store.get_idempotent(SCOPE, "k1", 50).await.unwrap(),
        Some(rec)
    );
    assert_eq!(store.get_idempotent(SCOPE, "k1", 100).await.unwrap(), None);
    assert_eq!(store.sweep_idempotent(100).unwrap(), 1);

    let token = CardTokenRecord {
        id: "tok_1".into(),
        fingerprint: "f".into(),
        masked_data: "424242******4242".into(),
        created_micros: 1,
        expires_micros: 1000,
        expiration_month: "12".into(),
        expiration_year: "2031".into(),
        number_sealed: Some(Sealed::from_stored("dk.n")),
        cvc_sealed: None,
        used: false,
    };
    store.insert_card_token(SCOPE, &token).await.unwrap();
    assert!(matches!(
        store.take_card_token(SCOPE, "tok_1", 5).await.unwrap(),
        TokenTake::Taken(t) if t.number_sealed.is_some()
    ));
    assert_eq!(
        store.take_card_token(SCOPE, "tok_1", 5).await.unwrap(),
        TokenTake::Used
    );
    assert_eq!(
        store.take_card_token(SCOPE, "tok_2", 5).await.unwrap(),
        TokenTake::Unknown
    );

    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("first"), &keep)
        .await
        .unwrap();
    store.append_audit(ev("second")).await.unwrap();
    store.append_audit_nowait(ev("third"));
    let log = store.audit_log().unwrap();
    let actions: Vec<_> = log.iter().map(|e| e.event.action.as_str()).collect();
    assert_eq!(actions, ["first", "second", "third"]);
    assert_eq!(crate::audit::verify(&log).unwrap(), 3);
    store.ready().await.unwrap();
}

async fn intents_end_once_and_keep_no_credential(store: Arc<dyn Store>) {
    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    let sealed = Some(Sealed::from_stored("own.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
    let key = Some(Sealed::from_stored("dk1.BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"));
    let with = |id: &str, limit: Option<u32>, status: IntentStatus, expires: i64| IntentRecord {
        expires_micros: expires,
        credential_sealed: sealed.clone(),
        credential_key: key.clone(),
        ..intent(id, "pm_a", limit, status)
    };
    for rec in [
        with("pi_time", None, IntentStatus::Active, 100),
        with("pi_limit", Some(2), IntentStatus::Active, i64::MAX / 2),
        with("pi_verify", None, IntentStatus::Verify, i64::MAX / 2),
        with("pi_none", None, IntentStatus::Unavailable, 100),
    ] {
        assert!(store.insert_intent(&rec, ev("i")).await.unwrap());
    }
    let live = store.get_intent(SCOPE, "pi_verify").await.unwrap().unwrap();
    assert_eq!(
        live.credential_key, key,
        "the key is read back with the intent"
    );
    assert!(store.intents_due_to_end(99, 10).await.unwrap().is_empty());
    let due = store.intents_due_to_end(100, 10).await.unwrap();
    assert_eq!(
        due.iter()
            .map(|d| (d.id.as_str(), d.end))
            .collect::<Vec<_>>(),
        vec![("pi_time", IntentEnd::Expired)],
        "unavailable is never due"
    );
    assert!(store
        .end_intent(SCOPE, "pi_time", IntentEnd::Expired, 99)
        .await
        .unwrap()
        .is_none());
    let ended = store
        .end_intent(SCOPE, "pi_time", IntentEnd::Expired, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            ended.status,
            ended.credential_sealed.is_none(),
            ended.credential_key.is_none()
        ),
        (IntentStatus::Expired, true, true)
    );
    assert!(
        store
            .end_intent(SCOPE, "pi_time", IntentEnd::Expired, 100)
            .await
            .unwrap()
            .is_none(),
        "an intent ends once"
    );
    let stored = store.get_intent(SCOPE, "pi_time").await.unwrap().unwrap();
    assert_eq!(stored, ended);
    // Finalizers racing (instances on one database): one ends it.
    let racer = with("pi_race", None, IntentStatus::Verify, 100);
    assert!(store.insert_intent(&racer, ev("i")).await.unwrap());
    let racing = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .end_intent(SCOPE, "pi_race", IntentEnd::Expired, 100)
                .await
                .unwrap()
        })
    });
    let mut ends = 0;
    for r in racing {
        ends += usize::from(r.await.unwrap().is_some());
    }
    assert_eq!(ends, 1);
    assert!(store.intents_due_to_end(100, 10).await.unwrap().is_empty());

    // The use that reaches the limit ends the intent.
    let now = time::OffsetDateTime::now_utc();
    for n in 1..=2 {
        assert_eq!(
            store.record_use(SCOPE, "pi_limit", now).await.unwrap(),
            UseOutcome::Recorded(n)
        );
    }
    let used = store.get_intent(SCOPE, "pi_limit").await.unwrap().unwrap();
    assert_eq!(
        (
            used.status,
            used.uses,
            used.credential_sealed.is_none(),
            used.credential_key.is_none()
        ),
        (IntentStatus::Expired, 2, true, true)
    );
    assert_eq!(
        store.record_use(SCOPE, "pi_limit", now).await.unwrap(),
        UseOutcome::UsageLimitReached
    );

    // Deleting the payment method cancels the rest, credentials gone.
    assert!(store
        .delete_payment_method(SCOPE, "pm_a", ev("d"))
        .await
        .unwrap());
    for id in ["pi_verify", "pi_none", "pi_time", "pi_race"] {
        let rec = store.get_intent(SCOPE, id).await.unwrap().unwrap();
        assert_eq!(rec.status, IntentStatus::Canceled, "{id}");
        assert!(rec.credential_sealed.is_none(), "{id}");
        assert!(rec.credential_key.is_none(), "{id}");
    }
    assert!(store
        .intents_due_to_end(i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());
}

/// The project's events before `before` (all: `None`), 100 at most.
fn events_before(before: Option<u64>) -> EventQuery<'static> {
    EventQuery {
        project: SCOPE.project,
        before,
        kind: None,
        limit: 100,
    }
}

/// The types of the project's events, newest first.
async fn event_types(store: &Arc<dyn Store>, before: Option<u64>) -> Vec<String> {
    let events = store.list_events(events_before(before)).await.unwrap();
    events.into_iter().map(|e| e.event.kind).collect()
}

/// Each change writes its events in its transaction: the types, in order, and the records
/// without secrets; a list pages by sequence number and filters by type.
async fn changes_write_their_events(store: Arc<dyn Store>) {
    use events::*;
    let mut sealed = intent("pi_1", "pm_a", Some(1), IntentStatus::Active);
    sealed.credential_sealed = Some(Sealed::from_stored("dk1.sealed-credential"));
    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    store
        .insert_payment_method(&pm("pm_x", "fp1", 2), ev("c"), &keep)
        .await
        .unwrap();
    store.insert_intent(&sealed, ev("i")).await.unwrap();
    let v = intent("pi_v", "pm_a", None, IntentStatus::Verify);
    store.insert_intent(&v, ev("i")).await.unwrap();
    let u = intent("pi_u", "pm_a", None, IntentStatus::Unavailable);
    store.insert_intent(&u, ev("i")).await.unwrap();
    store
        .record_verification(SCOPE, "pi_v", VerificationAttempt::Failed, ev("v"))
        .await
        .unwrap();
    store
        .record_verification(SCOPE, "pi_v", VerificationAttempt::Passed, ev("v"))
        .await
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    store.record_use(SCOPE, "pi_1", now).await.unwrap();
    store.record_use(SCOPE, "pi_1", now).await.unwrap();
    store
        .delete_payment_method(SCOPE, "pm_a", ev("d"))
        .await
        .unwrap();
    let mut types = event_types(&store, None).await;
    types.reverse();
    let (deleted, canceled) = types.split_at(types.len() - 3);
    assert_eq!(
        deleted,
        [
            PM_CREATED,
            PI_CREATED,
            PI_CREATED,
            PI_VERIFICATION_REQUIRED,
            PI_CREATED,
            PI_UNAVAILABLE,
            PI_ACTIVATED,
            PI_USED,
            PI_EXHAUSTED,
            PM_DELETED,
        ]
    );
    assert_eq!(canceled, [PI_CANCELED; 3], "one per intent");

    let all = store
        .list_events(EventQuery {
            project: SCOPE.project,
            before: None,
            kind: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert!(all.windows(2).all(|w| w[0].seq > w[1].seq), "newest first");
    let text: String = all
        .iter()
        .map(|e| serde_json::to_string(&e.event).unwrap())
        .collect();
    assert!(!text.contains("sealed-number") && !text.contains("sealed-credential"));
    let exhausted = all.iter().find(|e| e.event.kind == PI_EXHAUSTED).unwrap();
    match &exhausted.event.object {
        EventObject::PurchaseIntent(pi) => assert_eq!((pi.id.as_str(), pi.uses), ("pi_1", 1)),
        other => panic!("{other:?}"),
    }
    // Paging: older than the third newest; one type.
    let older = event_types(&store, Some(all[2].seq)).await;
    assert_eq!(older.len(), all.len() - 3);
    assert_eq!(older[0], PM_DELETED);
    let created = store
        .list_events(EventQuery {
            project: SCOPE.project,
            before: None,
            kind: Some(PI_CREATED),
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(created.len(), 2);
    assert!(created.iter().all(|e| e.event.kind == PI_CREATED));
    let elsewhere = EventQuery {
        project: "p2",
        before: None,
        kind: None,
        limit: 10,
    };
    assert!(store.list_events(elsewhere).await.unwrap().is_empty());
}

/// Webhook endpoints: stored once per id, replaced only while stored, listed newest first,
/// per project.
pub(super) fn endpoint(id: &str, created: i64) -> WebhookEndpointRecord {
    WebhookEndpointRecord {
        id: id.into(),
        project: SCOPE.project.into(),
        url: "https://hooks.example/in".into(),
        enabled_events: vec!["*".into()],
        enabled: true,
        created_micros: created,
        secrets: vec![WebhookSecret {
            n: 1,
            sealed: Sealed::from_stored("dk1.sealed-secret"),
            expires_micros: None,
        }],
    }
}

async fn webhook_endpoints_are_kept_per_project(store: Arc<dyn Store>) {
    let a = endpoint("we_a", 1);
    assert!(store
        .put_webhook_endpoint(&a, false, ev("w"))
        .await
        .unwrap());
    assert!(!store
        .put_webhook_endpoint(&a, false, ev("w"))
        .await
        .unwrap());
    assert!(!store
        .put_webhook_endpoint(&endpoint("we_none", 1), true, ev("w"))
        .await
        .unwrap());
    let b = endpoint("we_b", 2);
    assert!(store
        .put_webhook_endpoint(&b, false, ev("w"))
        .await
        .unwrap());
    let mut rotated = a.clone();
    rotated.secrets[0].expires_micros = Some(9);
    assert!(store
        .put_webhook_endpoint(&rotated, true, ev("w"))
        .await
        .unwrap());
    let got = store.get_webhook_endpoint("p1", "we_a").await.unwrap();
    assert_eq!(got, Some(rotated));
    assert!(store
        .get_webhook_endpoint("p2", "we_a")
        .await
        .unwrap()
        .is_none());
    let ids: Vec<String> = store
        .list_webhook_endpoints("p1")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, ["we_b", "we_a"]);
    assert!(store.list_webhook_endpoints("p2").await.unwrap().is_empty());
    assert!(store
        .delete_webhook_endpoint("p1", "we_a", ev("wd"))
        .await
        .unwrap());
    assert!(!store
        .delete_webhook_endpoint("p1", "we_a", ev("wd"))
        .await
        .unwrap());
    let actions: Vec<String> = store
        .audit_log()
        .unwrap()
        .into_iter()
        .map(|e| e.event.action)
        .collect();
    assert_eq!(actions, ["w", "w", "w", "wd"]);
}

/// Passkeys: stored once per id, replaced (a use) only while stored, listed oldest first per
/// entity, deleted with their audit entry; ceremony states taken once, not after expiry.
async fn passkeys_and_webauthn_states(store: Arc<dyn Store>) {
    let passkey = |id: &str, entity: &str, created: i64| PasskeyRecord {
        id: id.into(),
        project: SCOPE.project.into(),
        entity: entity.into(),
        created_micros: created,
        last_used_micros: None,
        name: Some("laptop".into()),
        credential: serde_json::json!({"cred": {"counter": 0}}),
    };
    let a = passkey("pk_a", "e1", 2);
    assert!(store.put_passkey(&a, Some(ev("pc"))).await.unwrap());
    assert!(!store.put_passkey(&a, Some(ev("pc"))).await.unwrap());
    assert!(!store
        .put_passkey(&passkey("pk_none", "e1", 1), None)
        .await
        .unwrap());
    assert!(store
        .put_passkey(&passkey("pk_b", "e1", 1), Some(ev("pc")))
        .await
        .unwrap());
    assert!(store
        .put_passkey(&passkey("pk_c", "e2", 1), Some(ev("pc")))
        .await
        .unwrap());
    let mut used = a.clone();
    used.last_used_micros = Some(9);
    used.credential = serde_json::json!({"cred": {"counter": 7}});
    assert!(store.put_passkey(&used, None).await.unwrap());
    let listed = store.list_passkeys(SCOPE).await.unwrap();
    assert_eq!(
        listed.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(),
        ["pk_b", "pk_a"]
    );
    assert_eq!(listed[1], used);
    assert!(!store.delete_passkey(SCOPE, "pk_c", ev("pd")).await.unwrap());
    assert!(store.delete_passkey(SCOPE, "pk_a", ev("pd")).await.unwrap());
    assert!(!store.put_passkey(&used, None).await.unwrap());
    let actions: Vec<String> = store
        .audit_log()
        .unwrap()
        .into_iter()
        .map(|e| e.event.action)
        .collect();
    assert_eq!(actions, ["pc", "pc", "pc", "pd"]);

    let state = |expires: i64| WebauthnStateRecord {
        expires_micros: expires,
        state: serde_json::json!({"challenge": expires}),
    };
    store
        .put_webauthn_state(SCOPE, "r1", &state(100), 0)
        .await
        .unwrap();
    store
        .put_webauthn_state(SCOPE, "r1", &state(200), 0)
        .await
        .unwrap();
    store
        .put_webauthn_state(SCOPE, "r2", &state(50), 0)
        .await
        .unwrap();
    let other = Scope {
        project: "p1",
        entity: "e2",
    };
    assert_eq!(
        store.take_webauthn_state(other, "r1", 10).await.unwrap(),
        None
    );
    assert_eq!(
        store.take_webauthn_state(SCOPE, "r1", 10).await.unwrap(),
        Some(state(200))
    );
    assert_eq!(
        store.take_webauthn_state(SCOPE, "r1", 10).await.unwrap(),
        None
    );
    assert_eq!(
        store.take_webauthn_state(SCOPE, "r2", 50).await.unwrap(),
        None
    );
    // An expired one is dropped when the entity starts another.
    store
        .put_webauthn_state(SCOPE, "r3", &state(60), 0)
        .await
        .unwrap();
    store
        .put_webauthn_state(SCOPE, "r4", &state(500), 100)
        .await
        .unwrap();
    assert_eq!(
        store.take_webauthn_state(SCOPE, "r3", 0).await.unwrap(),
        None
    );
}

/// A fan-out takes up to its limit of events at once and queues each event's delivery once,
/// across batches.
async fn many_events_fan_out_in_batches_once_each(store: Arc<dyn Store>) {
    store
        .put_webhook_endpoint(&endpoint("we_all", 1), false, ev("w"))
        .await
        .unwrap();
    for i in 0..150 {
        let card = pm(&format!("pm_{i}"), &format!("fp{i}"), i);
        store
            .insert_payment_method(&card, ev("c"), &keep)
            .await
            .unwrap();
    }
    assert_eq!(store.fan_out_events(10, 100).await.unwrap(), 100);
    assert_eq!(store.fan_out_events(10, 100).await.unwrap(), 50);
    assert_eq!(store.fan_out_events(10, 100).await.unwrap(), 0);
    assert_eq!(store.deliveries_pending().await.unwrap(), 150);
    let mut seqs = Vec::new();
    let mut before = None;
    loop {
        let page = store.list_events(events_before(before)).await.unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        seqs.extend(page.iter().map(|e| e.seq));
    }
    assert_eq!(seqs.len(), 150);
    for seq in seqs {
        let ds = store.list_deliveries(SCOPE.project, seq).await.unwrap();
        assert_eq!(ds.len(), 1, "event {seq}: {ds:?}");
        assert_eq!(ds[0].endpoint_id, "we_all");
    }
}

/// The webhook outbox: every event fans out once, to the enabled endpoints that take its
/// type; a claim leases a due delivery to one claimant, and only that claim records it.
async fn the_webhook_outbox_fans_out_and_leases(store: Arc<dyn Store>) {
    let all = endpoint("we_all", 1);
    let mut pm_only = endpoint("we_pm", 2);
    pm_only.enabled_events = vec![events::PM_DELETED.into()];
    let mut off = endpoint("we_off", 3);
    off.enabled = false;
    for e in [&all, &pm_only, &off] {
        store.put_webhook_endpoint(e, false, ev("w")).await.unwrap();
    }
    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    store
        .delete_payment_method(SCOPE, "pm_a", ev("d"))
        .await
        .unwrap();
    let listed = store.list_events(events_before(None)).await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (deleted, created) = (listed[0].seq, listed[1].seq);
    assert_eq!(
        store.get_event("p1", created).await.unwrap(),
        Some(listed[1].clone())
    );
    assert!(store.get_event("p2", created).await.unwrap().is_none());
    // Two markers, fanned out once.
    assert_eq!(store.fan_out_events(10, 1).await.unwrap(), 1);
    assert_eq!(store.fan_out_events(10, 10).await.unwrap(), 1);
    assert_eq!(store.fan_out_events(10, 10).await.unwrap(), 0);
    let ids = |ds: Vec<DeliveryRecord>| {
        let mut ids: Vec<String> = ds.into_iter().map(|d| d.endpoint_id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(store.list_deliveries("p1", created).await.unwrap()),
        ["we_all"]
    );
    assert_eq!(
        ids(store.list_deliveries("p1", deleted).await.unwrap()),
        ["we_all", "we_pm"]
    );
    assert_eq!(store.deliveries_pending().await.unwrap(), 3);
    // Not due yet; then due, claimed once (one endpoint skipped), leased until 100.
    assert!(store
        .claim_deliveries(5, 100, &[], 10)
        .await
        .unwrap()
        .is_empty());
    let claimed = store
        .claim_deliveries(20, 100, &["we_pm".to_string()], 10)
        .await
        .unwrap();
    assert_eq!(ids(claimed.clone()), ["we_all", "we_all"]);
    assert!(claimed.iter().all(|d| d.next_micros == 100));
    assert!(store
        .claim_deliveries(20, 200, &["we_pm".to_string()], 10)
        .await
        .unwrap()
        .is_empty());
    let mut done = claimed[0].clone();
    done.attempts = 1;
    done.status = DeliveryStatus::Delivered;
    done.last_outcome = Some("http_200".into());
    assert!(!store.record_delivery(&done, 99).await.unwrap());
    assert!(store.record_delivery(&done, 100).await.unwrap());
    assert!(!store.record_delivery(&done, 100).await.unwrap());
    assert_eq!(store.deliveries_pending().await.unwrap(), 2);
    // The other claim was never recorded: due again once its lease is over.
    let again = store.claim_deliveries(150, 300, &[], 10).await.unwrap();
    assert_eq!(ids(again.clone()), ["we_all", "we_pm"]);
    assert!(again.iter().any(|d| d.id == claimed[1].id));
    // A redelivery is a fresh pending delivery.
    store
        .queue_deliveries("p1", done.event_seq, &["we_pm".to_string()], 400)
        .await
        .unwrap();
    let all_of = store.list_deliveries("p1", done.event_seq).await.unwrap();
    assert_eq!(all_of.len(), 2, "{all_of:?}");
    let stored = all_of.iter().find(|d| d.id == done.id).unwrap();
    assert_eq!(stored.status, DeliveryStatus::Delivered);
    assert_eq!(stored.last_outcome.as_deref(), Some("http_200"));
    assert_eq!(store.deliveries_pending().await.unwrap(), 3);
}

fn session_record(id: &str, intent_id: &str, stand_in_key: &str) -> BrowserSessionRecord {
    BrowserSessionRecord {
        id: id.into(),
        project: SCOPE.project.into(),
        entity: SCOPE.entity.into(),
        intent_id: intent_id.into(),
        status: BrowserSessionStatus::Active,
        allowed_hosts: vec!["shop.test".into()],
        created_micros: 100,
        expires_micros: 1_000,
        ended_micros: None,
        uses: 0,
        stand_ins_sealed: Sealed::from_stored("dk1.sealed-stand-ins"),
        stand_in_key: stand_in_key.into(),
        password_hash: "hash".into(),
    }
}

/// Browser sessions: found by id and, while active, by stand-in key; a stand-in key held by
/// an active session is refused until that one ends; uses and the end write their events,
/// which keep no secrets; an end happens once.
async fn browser_sessions_keep_stand_ins_apart(store: Arc<dyn Store>) {
    use events::*;
    let a = session_record("bs_a", "pi_1", "k1");
    assert!(store.insert_browser_session(&a, ev("c")).await.unwrap());
    assert!(
        !store.insert_browser_session(&a, ev("c")).await.unwrap(),
        "same id"
    );
    let b = session_record("bs_b", "pi_1", "k1");
    assert!(
        !store.insert_browser_session(&b, ev("c")).await.unwrap(),
        "held stand-in"
    );
    assert!(store.get_browser_session("bs_b").await.unwrap().is_none());
    let other = session_record("bs_c", "pi_2", "k2");
    assert!(store.insert_browser_session(&other, ev("c")).await.unwrap());

    assert_eq!(
        store.get_browser_session("bs_a").await.unwrap(),
        Some(a.clone())
    );
    let found = store.browser_session_by_stand_in("k1").await.unwrap();
    assert_eq!(found.map(|s| s.id), Some("bs_a".to_string()));
    let listed = store.list_browser_sessions(SCOPE, "pi_1").await.unwrap();
    assert_eq!(listed, std::slice::from_ref(&a));
    let elsewhere = Scope {
        project: SCOPE.project,
        entity: "e2",
    };
    assert!(store
        .list_browser_sessions(elsewhere, "pi_1")
        .await
        .unwrap()
        .is_empty());

    let used = store
        .change_browser_session("bs_a", SessionChange::Use, 200, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(used.uses, 1);
    let ended = store
        .change_browser_session("bs_a", SessionChange::End, 300, Some(ev("e")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (ended.status, ended.ended_micros, ended.uses),
        (BrowserSessionStatus::Ended, Some(300), 1)
    );
    assert!(
        store
            .change_browser_session("bs_a", SessionChange::End, 301, None)
            .await
            .unwrap()
            .is_none(),
        "once"
    );
    assert!(store
        .change_browser_session("bs_a", SessionChange::Use, 302, None)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .browser_session_by_stand_in("k1")
        .await
        .unwrap()
        .is_none());
    assert!(
        store.insert_browser_session(&b, ev("c")).await.unwrap(),
        "stand-in freed"
    );

    assert_eq!(
        event_types(&store, None).await[..5],
        [BS_CREATED, BS_ENDED, BS_USED, BS_CREATED, BS_CREATED]
    );
    let query = EventQuery {
        project: SCOPE.project,
        before: None,
        kind: Some(BS_ENDED),
        limit: 1,
    };
    let event = store.list_events(query).await.unwrap().remove(0);
    match event.event.object {
        EventObject::BrowserSession(s) => {
            assert_eq!(
                (s.id.as_str(), s.status),
                ("bs_a", BrowserSessionStatus::Ended)
            );
            assert!(s.password_hash.is_empty() && s.stand_in_key.is_empty());
            assert_eq!(s.stand_ins_sealed, Sealed::from_stored(""));
        }
        other => panic!("{other:?}"),
    }
}

/// Retention: old events, finished deliveries and ended intents go, in batches; what is
/// recent, a pending delivery and its event, an event not fanned out yet and a live intent
/// stay.
async fn old_records_are_pruned_and_the_rest_kept(store: Arc<dyn Store>) {
    let prune_all = |kind: Prunable, before: i64| {
        let store = store.clone();
        async move {
            let mut removed = 0;
            loop {
                let p = store.prune(kind, before, 2).await.unwrap();
                removed += p.removed;
                if !p.more {
                    return removed;
                }
            }
        }
    };
    store
        .put_webhook_endpoint(&endpoint("we_all", 1), false, ev("w"))
        .await
        .unwrap();
    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    for (id, status) in [
        ("pi_old", IntentStatus::Active),
        ("pi_recent", IntentStatus::Active),
        ("pi_live", IntentStatus::Active),
        ("pi_none", IntentStatus::Unavailable),
    ] {
        let rec = intent(id, "pm_a", None, status);
        assert!(store.insert_intent(&rec, ev("i")).await.unwrap());
    }
    let canceled = IntentEnd::Canceled;
    assert!(store
        .end_intent(SCOPE, "pi_old", canceled, 100)
        .await
        .unwrap()
        .is_some());
    assert!(store
        .end_intent(SCOPE, "pi_recent", canceled, 10_000)
        .await
        .unwrap()
        .is_some());
    let ended = store.get_intent(SCOPE, "pi_old").await.unwrap().unwrap();
    assert_eq!(ended.ended_micros, Some(100));
    // Not fanned out yet: no event goes.
    assert_eq!(prune_all(Prunable::Events, 5_000).await, 0);
    let events = store.list_events(events_before(None)).await.unwrap();
    assert_eq!(events.len(), 8, "{events:?}");
    assert_eq!(store.fan_out_events(20, 100).await.unwrap(), 8);
    // Every delivery pending: still no event goes.
    assert_eq!(prune_all(Prunable::Events, 5_000).await, 0);
    // All delivered or failed at 50 but the first event's, still pending.
    let first = events.last().unwrap().seq;
    let claimed = store.claim_deliveries(30, 50, &[], 100).await.unwrap();
    assert_eq!(claimed.len(), 8);
    for mut d in claimed.into_iter().filter(|d| d.event_seq != first) {
        d.attempts = 1;
        d.status = if d.event_seq % 2 == 0 {
            DeliveryStatus::Delivered
        } else {
            DeliveryStatus::Failed
        };
        assert!(store.record_delivery(&d, 50).await.unwrap());
    }
    assert_eq!(
        prune_all(Prunable::Deliveries, 50).await,
        0,
        "not before 50"
    );
    assert_eq!(prune_all(Prunable::Deliveries, 5_000).await, 7);
    assert_eq!(prune_all(Prunable::Deliveries, 5_000).await, 0);
    assert_eq!(store.deliveries_pending().await.unwrap(), 1);
    assert_eq!(store.list_deliveries("p1", first).await.unwrap().len(), 1);
    // A new event, not fanned out: kept too, however old.
    store
        .insert_payment_method(&pm("pm_b", "fp2", 2), ev("c"), &keep)
        .await
        .unwrap();
    // Events before 5000 go, but the one a delivery waits for and the new one.
    assert_eq!(prune_all(Prunable::Events, 5_000).await, 6);
    assert_eq!(
        event_types(&store, None).await,
        [events::PM_CREATED, events::PI_CANCELED, events::PM_CREATED],
        "pm_b's, pi_recent's end, pm_a's"
    );
    assert!(store.get_event("p1", first).await.unwrap().is_some());
    // Ended intents before 5000 go (an unavailable one counts from its creation).
    assert_eq!(prune_all(Prunable::EndedIntents, 5_000).await, 2);
    assert_eq!(prune_all(Prunable::EndedIntents, 5_000).await, 0);
    for (id, there) in [
        ("pi_old", false),
        ("pi_none", false),
        ("pi_recent", true),
        ("pi_live", true),
    ] {
        let got = store.get_intent(SCOPE, id).await.unwrap();
        assert_eq!(got.is_some(), there, "{id}");
    }
    assert_eq!(store.list_intents(SCOPE).await.unwrap().len(), 2);
    // The payment method's intents still add up: its delete cancels the live one.
    assert!(store
        .delete_payment_method(SCOPE, "pm_a", ev("d"))
        .await
        .unwrap());
    let live = store.get_intent(SCOPE, "pi_live").await.unwrap().unwrap();
    assert_eq!(live.status, IntentStatus::Canceled);
    assert_eq!(prune_all(Prunable::EndedIntents, i64::MAX).await, 2);
    assert!(store.list_intents(SCOPE).await.unwrap().is_empty());
}

/// `n` events (of payment methods `pm_0`…) fanned out to the endpoint `we_all` and
/// delivered, so retention may remove them: their numbers, newest first.
pub(super) async fn delivered_events(store: &dyn Store, n: usize) -> Vec<u64> {
    store
        .put_webhook_endpoint(&endpoint("we_all", 1), false, ev("w"))
        .await
        .unwrap();
    for i in 0..n {
        let card = pm(&format!("pm_{i}"), &format!("fp{i}"), 1);
        store
            .insert_payment_method(&card, ev("c"), &keep)
            .await
            .unwrap();
    }
    assert_eq!(store.fan_out_events(10, 100).await.unwrap(), n);
    for mut d in store.claim_deliveries(10, 20, &[], 100).await.unwrap() {
        d.status = DeliveryStatus::Delivered;
        assert!(store.record_delivery(&d, 20).await.unwrap());
    }
    let listed = store.list_events(events_before(None)).await.unwrap();
    listed.iter().map(|e| e.seq).collect()
}

/// A redelivery of an event retention removed queues nothing; one queued first keeps the
/// event.
async fn a_redelivery_and_the_removal_of_its_event_exclude_each_other(store: Arc<dyn Store>) {
    let seqs = delivered_events(&*store, 2).await;
    let (kept, pruned) = (seqs[0], seqs[1]);
    let again = ["we_all".to_string()];
    // Queued before the prune: the event stays.
    assert!(store
        .queue_deliveries("p1", kept, &again, 30)
        .await
        .unwrap());
    assert_eq!(
        store.prune(Prunable::Events, i64::MAX, 10).await.unwrap(),
        Pruned {
            removed: 1,
            more: false
        }
    );
    assert!(store.get_event("p1", kept).await.unwrap().is_some());
    // After it: nothing queued, nothing pending for the missing event.
    assert!(store.get_event("p1", pruned).await.unwrap().is_none());
    assert!(!store
        .queue_deliveries("p1", pruned, &again, 30)
        .await
        .unwrap());
    let left = store.list_deliveries("p1", pruned).await.unwrap();
    assert!(
        left.iter().all(|d| d.status != DeliveryStatus::Pending),
        "{left:?}"
    );
    assert_eq!(store.deliveries_pending().await.unwrap(), 1);
    // Another project's event of that number is not this one.
    assert!(!store
        .queue_deliveries("p2", kept, &again, 30)
        .await
        .unwrap());
}

/// A `merchant` mandate is stored with the intent and survives a use.
async fn a_merchant_mandate_is_kept(store: Arc<dyn Store>) {
    store
        .insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
        .await
        .unwrap();
    let mut bound = intent("pi_bound", "pm_a", Some(2), IntentStatus::Active);
    bound.mandates.merchant = crate::domain::mandate::MerchantId::parse("acme");
    let unbound = intent("pi_free", "pm_a", None, IntentStatus::Active);
    for rec in [&bound, &unbound] {
        assert!(store.insert_intent(rec, ev("i")).await.unwrap());
    }
    let read = |id: &'static str| {
        let store = store.clone();
        async move { store.get_intent(SCOPE, id).await.unwrap().unwrap() }
    };
    assert_eq!(read("pi_bound").await.mandates, bound.mandates);
    assert_eq!(read("pi_free").await.mandates.merchant, None);
    // A use rewrites the record: the mandate stays.
    let now = time::OffsetDateTime::from_unix_timestamp(0).unwrap();
    assert!(matches!(
        store.record_use(SCOPE, "pi_bound", now).await.unwrap(),
        UseOutcome::Recorded(_)
    ));
    let after = read("pi_bound").await;
    assert_eq!((after.uses, after.mandates), (1, bound.mandates));
}

/// One test per (body, backend).
macro_rules! on_both {
    ($($body:ident),*) => {
        mod sled_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $body() {
                let (store, _dir) = super::open("sled");
                super::$body(store).await;
            })*
        }
        mod postgres_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $body() {
                let (store, _dir) = super::open("postgres");
                super::$body(store).await;
            })*
        }
    };
}

on_both!(
    payment_methods_dedup_list_and_delete,
    usage_is_counted_exactly,
    keys_idempotency_tokens_and_audit,
    intents_end_once_and_keep_no_credential,
    changes_write_their_events,
    webhook_endpoints_are_kept_per_project,
    passkeys_and_webauthn_states,
    the_webhook_outbox_fans_out_and_leases,
    many_events_fan_out_in_batches_once_each,
    browser_sessions_keep_stand_ins_apart,
    old_records_are_pruned_and_the_rest_kept,
    a_redelivery_and_the_removal_of_its_event_exclude_each_other,
    a_merchant_mandate_is_kept
);
