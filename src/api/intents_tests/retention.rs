//! Retention through the app on each backend, the clock moved: a pass removes old events,
//! finished deliveries and ended intents (their GET is then 404) and counts them in the
//! metrics; recent events, a pending delivery (and its event) and live intents stay; a
//! redelivery of a removed event is 404.

use super::*;
use crate::service::retention::prune_old;
use crate::store::events::{self, EventQuery};
use crate::store::{DeliveryStatus, Prunable, WebhookEndpointRecord};

fn endpoint() -> WebhookEndpointRecord {
    WebhookEndpointRecord {
        id: "we_1".into(),
        project: PAN_PROJECT.into(),
        url: "https://hooks.example/in".into(),
        enabled_events: vec!["*".into()],
        enabled: true,
        created_micros: 0,
        secrets: Vec::new(),
    }
}

/// The project's event types, newest first.
async fn event_types(env: &Env) -> Vec<String> {
    let q = EventQuery {
        project: PAN_PROJECT,
        before: None,
        kind: None,
        limit: 100,
    };
    let listed = env.app.store.list_events(q).await.unwrap();
    listed.into_iter().map(|e| e.event.kind).collect()
}

/// Fans out the events and records every delivery claimed as delivered.
async fn deliver_all(env: &Env) {
    let store = &env.app.store;
    let now = env.app.now_micros();
    store.fan_out_events(now, 100).await.unwrap();
    for mut d in store
        .claim_deliveries(now, now + 1, &[], 100)
        .await
        .unwrap()
    {
        d.attempts = 1;
        d.status = DeliveryStatus::Delivered;
        assert!(store.record_delivery(&d, now + 1).await.unwrap());
    }
}

fn pruned(report: &[(Prunable, usize)], kind: Prunable) -> usize {
    report
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0, |(_, n)| *n)
}

async fn a_pass_removes_what_outlived_its_retention(env: Env) {
    let p = private("user_1");
    let sc = scope(PAN_PROJECT, "user_1");
    let store = env.app.store.clone();
    let audit = crate::audit::event(PAN_PROJECT, "user_1", "w", "we_1".into());
    assert!(store
        .put_webhook_endpoint(&endpoint(), false, audit)
        .await
        .unwrap());
    let pm = add_card(&env, &p, VISA).await;
    let old = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    let old = old["id"].as_str().unwrap().to_string();
    env.clock.advance(Duration::hours(24));
    assert_eq!(end_due_intents(&env.app).await.unwrap(), 1);
    deliver_all(&env).await;
    // The card's event sent again: a pending delivery keeps it.
    let q = EventQuery {
        project: PAN_PROJECT,
        before: None,
        kind: Some(events::PM_CREATED),
        limit: 1,
    };
    let card_event = store.list_events(q).await.unwrap()[0].seq;
    let now = env.app.now_micros();
    let again = ["we_1".to_string()];
    store
        .queue_deliveries(PAN_PROJECT, card_event, &again, now)
        .await
        .unwrap();
    assert_eq!(
        event_types(&env).await,
        [events::PI_EXPIRED, events::PI_CREATED, events::PM_CREATED]
    );
    let q = EventQuery {
        project: PAN_PROJECT,
        before: None,
        kind: Some(events::PI_EXPIRED),
        limit: 1,
    };
    let expired = store.list_events(q).await.unwrap()[0].clone();
    // Within 30 days nothing goes.
    env.clock.advance(Duration::days(29));
    let report = prune_old(&env.app).await.unwrap();
    assert!(report.iter().all(|(_, n)| *n == 0), "{report:?}");
    env.clock.advance(Duration::days(2));
    let live = intent(&env, &p, &pm, "virtual-card", guide_usd("100")).await;
    let live = live["id"].as_str().unwrap().to_string();
    let report = prune_old(&env.app).await.unwrap();
    assert_eq!(pruned(&report, Prunable::EndedIntents), 1, "{report:?}");
    assert_eq!(pruned(&report, Prunable::Events), 2, "{report:?}");
    assert_eq!(pruned(&report, Prunable::Deliveries), 3, "{report:?}");
    // The old intent is gone (404); the live one, the new event and the card's event (a
    // delivery of it pending) stay.
    let (status, v) = get_intent(&env, &p, &old).await;
    assert_eq!(status, 404, "{v}");
    assert!(store.get_intent(sc, &old).await.unwrap().is_none());
    let (status, v) = get_intent(&env, &p, &live).await;
    assert_eq!((status, v["status"].as_str()), (200, Some("active")), "{v}");
    assert_eq!(
        event_types(&env).await,
        [events::PI_CREATED, events::PM_CREATED]
    );
    // A redelivery of a removed event is 404 and queues nothing.
    let (status, v) = reply(crate::api::events::redeliver(&env.app, &p, &expired.id(), b"").await);
    assert_eq!(status, 404, "{v}");
    let left = store
        .list_deliveries(PAN_PROJECT, expired.seq)
        .await
        .unwrap();
    assert!(
        left.iter().all(|d| d.status != DeliveryStatus::Pending),
        "{left:?}"
    );
    let pending = store
        .list_deliveries(PAN_PROJECT, card_event)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].status, DeliveryStatus::Pending);
    let text = env.app.metrics.render(&[]);
    for line in [
        "paycred_pruned_total{kind=\"events\"} 2",
        "paycred_pruned_total{kind=\"deliveries\"} 3",
        "paycred_pruned_total{kind=\"ended_intents\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    // A second pass finds nothing more.
    let report = prune_old(&env.app).await.unwrap();
    assert!(report.iter().all(|(_, n)| *n == 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_removes_what_outlived_its_retention_on_sled() {
    a_pass_removes_what_outlived_its_retention(env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_removes_what_outlived_its_retention_on_postgres() {
    a_pass_removes_what_outlived_its_retention(env_on_postgres()).await;
}
