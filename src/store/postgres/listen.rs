//! How an instance hears other instances' changes: it LISTENs on `CHANNEL` over a
//! connection of its own (`listen`) and drops what each message names from its caches
//! ([`super::cache`]); and the key rows read ahead (`read_keys_ahead`).

use super::cache::{Caches, Change};
use super::{client, timed, CACHE_TTL};
use crate::store::StoreResult;
use deadpool_postgres::Pool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The channel changes are announced on.
pub(super) const CHANNEL: &str = "paycred_changes";

/// The `application_name` of each instance's listening connection.
pub const LISTENER_NAME: &str = "paycred-listen";

/// Every key row, into the caches.
pub(super) async fn read_keys_ahead(pool: &Pool, caches: &Caches) -> StoreResult<()> {
    let c = client(pool).await?;
    for (sql, cache) in [
        ("SELECT project, keyring FROM keyrings", &caches.keyrings),
        (
            "SELECT project, keyset FROM client_keys",
            &caches.client_keys,
        ),
    ] {
        let rows = timed(c.query(sql, &[])).await?;
        let now = std::time::Instant::now();
        *cache.write() = rows
            .iter()
            .map(|r| (r.get::<_, String>(0), (r.get::<_, Vec<u8>>(1), now)))
            .collect();
    }
    Ok(())
}

/// The listener of an instance, on the store's runtime for as long as it runs: LISTENs on
/// [`CHANNEL`] over a connection of its own and drops from `caches` what each message names
/// (a key row is read again at once instead). Every [`CACHE_TTL`] / 2 it checks that its
/// connection answers and reads the key rows again. While the connection is down the record
/// caches are paused; it connects again (after 0.1 s, doubling up to 2 s) and resumes them
/// empty once it listens.
pub(super) async fn listen(
    config: tokio_postgres::Config,
    tls: postgres_openssl::MakeTlsConnector,
    pool: Pool,
    caches: Arc<Caches>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match listen_once(&config, &tls, &pool, &caches).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => tracing::warn!(error = %e, "postgres change listener: reconnecting"),
        }
        caches.listening(false);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One connection of [`listen`]: returns when it is lost.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: &postgres_openssl::MakeTlsConnector,
    pool: &Pool,
    caches: &Caches,
) -> StoreResult<()> {
    let (client, mut connection) = timed(config.connect(tls.clone())).await?;
    let (tx, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_string()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "postgres change listener: connection lost");
                    break;
                }
            }
        }
    });
    let listened = timed(client.batch_execute(&format!("LISTEN {CHANNEL}"))).await;
    if let Err(e) = listened {
        driver.abort();
        return Err(e);
    }
    caches.listening(true);
    let mut tick = tokio::time::interval(CACHE_TTL / 2);
    let lost = loop {
        tokio::select! {
            message = messages.recv() => match message {
                Some(payload) => apply(&payload, pool, caches).await,
                None => break Ok(()),
            },
            _ = tick.tick() => {
                if let Err(e) = timed(client.simple_query("SELECT 1")).await {
                    break Err(e);
                }
                if let Err(e) = read_keys_ahead(pool, caches).await {
                    tracing::warn!(error = %e, "postgres change listener: reading keys");
                }
            }
        }
    };
    driver.abort();
    lost
}

/// What one message on [`CHANNEL`] does to this instance's caches.
async fn apply(payload: &str, pool: &Pool, caches: &Caches) {
    let change: Change = match serde_json::from_str(payload) {
        Ok(change) => change,
        Err(e) => {
            tracing::warn!(error = %e, "postgres change listener: unknown message");
            return;
        }
    };
    caches.forget(&change);
    caches.heard.fetch_add(1, Ordering::Relaxed);
    let (sql, cache, project) = match &change {
        Change::PaymentMethod { .. } => return,
        Change::Keyring { project } => (
            "SELECT keyring FROM keyrings WHERE project = $1",
            &caches.keyrings,
            project,
        ),
        Change::ClientKeys { project } => (
            "SELECT keyset FROM client_keys WHERE project = $1",
            &caches.client_keys,
            project,
        ),
    };
    let read = async {
        let c = client(pool).await?;
        timed(c.query_opt(sql, &[project])).await
    };
    if let Ok(Some(row)) = read.await {
        cache.write().insert(
            project.clone(),
            (row.get::<_, Vec<u8>>(0), std::time::Instant::now()),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::super::{test_cluster, PgStore, CACHE_TTL};
    use super::*;
    use crate::audit::chain::HashFunction;
    use crate::domain::issuer::CredentialType;
    use crate::store::contract_tests::{ev, intent, keep, pm, SCOPE};
    use crate::store::{IntentStatus, IntentStore, PaymentMethodStore, StoreHealth, UseOutcome};

    /// Two instances on one fresh database, each listening.
    async fn two_instances() -> (PgStore, PgStore) {
        let config = test_cluster::fresh_config(4).unwrap();
        let a = PgStore::open(&config, HashFunction::Sha256).unwrap();
        let b = PgStore::open(&config, HashFunction::Sha256).unwrap();
        for store in [&a, &b] {
            until(|| store.caches.pms.serving()).await;
        }
        (a, b)
    }

    /// Waits until `done` (at most 20 s, then fails).
    async fn until(mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "not within 20 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stores payment method `pm_1` with an active intent `pi_1` through `a`, and has `b`
    /// read both twice (the second time from its cache).
    async fn warm(a: &PgStore, b: &PgStore) {
        let heard = b.caches.pms.generation();
        a.insert_payment_method(&pm("pm_1", "fp1", 1), ev("c"), &keep)
            .await
            .unwrap();
        let pi = intent("pi_1", "pm_1", Some(3), IntentStatus::Active);
        assert!(a.insert_intent(&pi, ev("c")).await.unwrap());
        // The intent's message has reached b (it would drop what b reads before).
        until(|| b.caches.pms.generation() > heard).await;
        let hits = b.stats().cache_hits;
        for _ in 0..2 {
            assert!(b.get_payment_method(SCOPE, "pm_1").await.unwrap().is_some());
            let newest = b
                .newest_active_intent(SCOPE, "pm_1", CredentialType::VirtualCard, now())
                .await
                .unwrap();
            assert_eq!(newest.unwrap().id, "pi_1");
        }
        assert_eq!(
            b.stats().cache_hits,
            hits + 2,
            "b did not serve from its cache"
        );
    }

    fn now() -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_on_one_instance_leaves_the_others_cache_by_its_message() {
        let (a, b) = two_instances().await;
        warm(&a, &b).await;
        let before = b.caches.pms.generation();
        assert!(a
            .delete_payment_method(SCOPE, "pm_1", ev("d"))
            .await
            .unwrap());
        // Only a message moves b's generation (nothing was written through b).
        until(|| b.caches.pms.generation() > before).await;
        assert!(b.get_payment_method(SCOPE, "pm_1").await.unwrap().is_none());
        let newest = b
            .newest_active_intent(SCOPE, "pm_1", CredentialType::VirtualCard, now())
            .await
            .unwrap();
        assert!(newest.is_none(), "the canceled intent is still served");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_message_is_outlived_by_no_entry() {
        let (a, b) = two_instances().await;
        warm(&a, &b).await;
        a.lose_announcements();
        let canceled = a
            .set_intent_status(SCOPE, "pi_1", IntentStatus::Canceled)
            .await
            .unwrap();
        assert_eq!(canceled.unwrap().status, IntentStatus::Canceled);
        assert!(a
            .delete_payment_method(SCOPE, "pm_1", ev("d"))
            .await
            .unwrap());
        let read = std::time::Instant::now();
        // b has not heard: its entries are served until they are CACHE_TTL old...
        assert!(b.get_payment_method(SCOPE, "pm_1").await.unwrap().is_some());
        // ...but a use is decided by the database alone.
        assert_eq!(
            b.record_use(SCOPE, "pi_1", now()).await.unwrap(),
            UseOutcome::NotActive
        );
        // Both entries were read while warming (a few milliseconds apart): each is gone once
        // its TTL has passed.
        let (mut pm_gone, mut intent_gone) = (false, false);
        while read.elapsed() < CACHE_TTL + Duration::from_secs(2) && !(pm_gone && intent_gone) {
            pm_gone = b.get_payment_method(SCOPE, "pm_1").await.unwrap().is_none();
            intent_gone = b
                .newest_active_intent(SCOPE, "pm_1", CredentialType::VirtualCard, now())
                .await
                .unwrap()
                .is_none();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            pm_gone,
            "a deleted payment method served past the cache's TTL"
        );
        assert!(intent_gone, "a canceled intent served past the cache's TTL");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_listener_that_reconnects_starts_from_an_empty_cache() {
        let (a, b) = two_instances().await;
        warm(&a, &b).await;
        a.lose_announcements();
        let before = b.caches.pms.generation();
        let c = a.client().await.unwrap();
        let killed = c
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1 AND datname = current_database()",
                &[&LISTENER_NAME],
            )
            .await
            .unwrap();
        assert_eq!(killed.len(), 2, "one listener per instance");
        assert!(a
            .delete_payment_method(SCOPE, "pm_1", ev("d"))
            .await
            .unwrap());
        // Paused when the connection was lost (one step), resumed when listening again (one
        // more); no message told b of the delete.
        until(|| b.caches.pms.serving() && b.caches.pms.generation() >= before + 2).await;
        assert!(b.get_payment_method(SCOPE, "pm_1").await.unwrap().is_none());
    }
}
