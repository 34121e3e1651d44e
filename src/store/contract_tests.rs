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
    keys_idempotency_tokens_and_audit
);
