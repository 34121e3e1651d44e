//! Webhook delivery: the worker that sends the store's outbox ([`crate::store::deliveries`])
//! to the projects' webhook endpoints, following the Standard Webhooks specification
//! ([`send`]).
//!
//! - At least once: every event is fanned out from its marker into deliveries, and a
//!   delivery is pending until an attempt is answered 2xx or its attempts run out. A restart
//!   (or a kill) loses nothing: the next start finds the pending deliveries, and a claim of
//!   the instance that died is due again when its lease ([`LEASE`]) ends. An attempt whose
//!   answer was lost to a crash is sent again, with the same `webhook-id`, by which the
//!   receiver dedupes.
//! - Retries: [`RETRIES`] after the first attempt, each after its delay of [`RETRY_AFTER`]
//!   with jitter (a random delay between half and the whole of it), about 10 to 21 hours in
//!   all; then the delivery is `failed` (a redelivery queues a new one).
//! - Bounded concurrency: at most [`PER_ENDPOINT`] attempts in flight to one endpoint and
//!   [`IN_FLIGHT`] in all, each bounded by [`ATTEMPT_TIMEOUT`]; deliveries to an endpoint
//!   that is full are not claimed, so a slow or dead endpoint delays no other endpoint's
//!   deliveries, and the API never waits on a delivery (it only writes the outbox).
//! - The worker runs on a thread of its own with its own runtime, under the configuration
//!   the server runs now (a reload's projects and CA roots apply to the next attempt).
//!
//! May import: `api` (an event's JSON), `proxy` (the peer and the CA roots), `service`
//! (the target guard), `app`, `store`, `domain`, `ops`, `audit`, `config`, `clock`.

pub mod send;

use crate::app::App;
use crate::proxy::CaRoots;
use crate::store::{DeliveryRecord, DeliveryStatus};
use parking_lot::Mutex;
use rand::Rng;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The delays before each retry, before jitter.
pub const RETRY_AFTER: [Duration; 8] = [
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(2 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(6 * 3600),
    Duration::from_secs(12 * 3600),
];

/// Retries after the first attempt.
pub const RETRIES: usize = RETRY_AFTER.len();

/// Longest attempt: connecting, sending and reading the answer's head.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a claim holds a delivery: well beyond an attempt.
pub const LEASE: Duration = Duration::from_secs(60);

/// Attempts in flight to one endpoint, at most.
pub const PER_ENDPOINT: usize = 4;

/// Attempts in flight in all, at most.
pub const IN_FLIGHT: usize = 32;

/// How often the worker looks for new events and due deliveries.
const POLL: Duration = Duration::from_millis(250);

/// How often the pending gauge is read from the store.
const GAUGE_EVERY: Duration = Duration::from_secs(5);

/// Markers fanned out per store call.
const FAN_OUT_BATCH: usize = 100;

/// In debug builds, `PAYCRED_TEST_WEBHOOK_RETRY_SCALE` (a factor such as `0.001`) shortens
/// the retry delays, so tests of retries stay short. Release builds ignore it.
pub const RETRY_SCALE_ENV: &str = "PAYCRED_TEST_WEBHOOK_RETRY_SCALE";

fn retry_scale() -> f64 {
    #[cfg(debug_assertions)]
    if let Some(scale) = std::env::var(RETRY_SCALE_ENV)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 1.0)
    {
        return scale;
    }
    1.0
}

/// The delay before the next attempt after `attempts` failed ones, jittered and scaled;
/// `None` when none is left.
pub fn next_delay(attempts: u32, scale: f64) -> Option<Duration> {
    let base = RETRY_AFTER.get(usize::try_from(attempts).ok()?.checked_sub(1)?)?;
    let half = base.as_secs_f64() / 2.0;
    let jittered = half + rand::thread_rng().gen_range(0.0..=half);
    Some(Duration::from_secs_f64(jittered * scale))
}

/// What the worker runs under now: the application and the proxy's CA roots of the running
/// configuration; `None` once the server is gone (the worker stops).
pub type Current = Box<dyn Fn() -> Option<(Arc<App>, CaRoots)> + Send>;

/// Attempts in flight, by endpoint.
#[derive(Default, Clone)]
struct Busy(Arc<Mutex<HashMap<String, usize>>>);

/// One attempt's place in [`Busy`], given back on drop.
struct Slot {
    busy: Busy,
    endpoint: String,
}

impl Busy {
    fn total(&self) -> usize {
        self.0.lock().values().sum()
    }

    /// The endpoints that have no room.
    fn full(&self) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter(|(_, n)| **n >= PER_ENDPOINT)
            .map(|(e, _)| e.clone())
            .collect()
    }

    fn take(&self, endpoint: &str) -> Option<Slot> {
        let mut map = self.0.lock();
        let n = map.entry(endpoint.to_string()).or_insert(0);
        (*n < PER_ENDPOINT).then(|| {
            *n += 1;
            Slot {
                busy: self.clone(),
                endpoint: endpoint.to_string(),
            }
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.busy.0.lock();
        if let Some(n) = map.get_mut(&self.endpoint) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.endpoint);
            }
        }
    }
}

/// Starts the worker on a thread of its own; it runs while `current` gives a configuration.
pub fn spawn(current: Current) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "the webhook worker could not start its runtime");
            return;
        }
    };
    let started = std::thread::Builder::new()
        .name("paycred-webhooks".into())
        .spawn(move || runtime.block_on(run(current)));
    if let Err(e) = started {
        tracing::error!(error = %e, "the webhook worker did not start");
    }
}

async fn run(current: Current) {
    let busy = Busy::default();
    let scale = retry_scale();
    let connector = Arc::new(pingora::connectors::http::Connector::new(None));
    let mut gauge_at: Option<Instant> = None;
    loop {
        let Some((app, ca_roots)) = current() else {
            return;
        };
        if let Err(e) = round(&app, &ca_roots, &busy, &connector, scale).await {
            tracing::warn!(error = %e, "webhook delivery");
        }
        if gauge_at.is_none_or(|at| at.elapsed() >= GAUGE_EVERY) {
            gauge_at = Some(Instant::now());
            if let Ok(n) = app.store.deliveries_pending().await {
                app.metrics.set_webhook_pending(n);
            }
        }
        drop(app);
        tokio::time::sleep(POLL).await;
    }
}

/// Fans out new events and starts the attempts that are due and have room.
async fn round(
    app: &Arc<App>,
    ca_roots: &CaRoots,
    busy: &Busy,
    connector: &Arc<pingora::connectors::http::Connector>,
    scale: f64,
) -> Result<(), crate::store::StoreError> {
    let now = app.now_micros();
    while app.store.fan_out_events(now, FAN_OUT_BATCH).await? == FAN_OUT_BATCH {}
    let room = IN_FLIGHT.saturating_sub(busy.total());
    if room == 0 {
        return Ok(());
    }
    let lease_until = now.saturating_add(micros(LEASE));
    let claimed = app
        .store
        .claim_deliveries(now, lease_until, &busy.full(), room)
        .await?;
    for d in claimed {
        let Some(slot) = busy.take(&d.endpoint_id) else {
            // More of this endpoint's deliveries were due than it has room for: due again.
            let mut back = d.clone();
            back.next_micros = now;
            app.store.record_delivery(&back, lease_until).await?;
            continue;
        };
        let (app, connector) = (app.clone(), connector.clone());
        let ca = ca_roots.get(&d.project).cloned();
        tokio::spawn(async move {
            attempt(&app, &connector, ca, d, scale).await;
            drop(slot);
        });
    }
    Ok(())
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// One attempt of `d` (claimed until its `next_micros`), and its outcome recorded.
async fn attempt(
    app: &Arc<App>,
    connector: &pingora::connectors::http::Connector,
    ca: Option<Arc<Box<[pingora::tls::x509::X509]>>>,
    mut d: DeliveryRecord,
    scale: f64,
) {
    let claimed_until = d.next_micros;
    let started = Instant::now();
    let outcome = send::attempt(app, connector, ca.as_ref(), &d).await;
    let elapsed = started.elapsed();
    d.attempts = d.attempts.saturating_add(1);
    d.last_outcome = Some(outcome.name());
    let now = app.now_micros();
    let label = match outcome {
        send::Outcome::Delivered(_) => {
            d.status = DeliveryStatus::Delivered;
            "delivered"
        }
        send::Outcome::Gone(_) => {
            d.status = DeliveryStatus::Failed;
            "failed"
        }
        _ => match next_delay(d.attempts, scale) {
            Some(delay) => {
                d.next_micros = now.saturating_add(micros(delay));
                "retry"
            }
            None => {
                d.status = DeliveryStatus::Failed;
                "failed"
            }
        },
    };
    app.metrics.record_webhook(label, elapsed);
    match app.store.record_delivery(&d, claimed_until).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            event = %crate::store::events::id_of(d.event_seq),
            endpoint = %d.endpoint_id,
            "webhook delivery: the claim ran out before the outcome was recorded"
        ),
        Err(e) => tracing::warn!(error = %e, "webhook delivery: recording an outcome"),
    }
    if d.status != DeliveryStatus::Pending {
        let action = if d.status == DeliveryStatus::Delivered {
            "webhook.delivered"
        } else {
            "webhook.failed"
        };
        let resource = format!(
            "{} {} attempts={} outcome={}",
            crate::store::events::id_of(d.event_seq),
            d.endpoint_id,
            d.attempts,
            d.last_outcome.as_deref().unwrap_or("")
        );
        app.store.append_audit_nowait(crate::audit::AuditEvent {
            at_micros: now,
            action: action.to_string(),
            project: d.project.clone(),
            entity: String::new(),
            resource,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_follow_the_schedule_with_jitter_then_stop() {
        for (i, base) in RETRY_AFTER.iter().enumerate() {
            let attempts = u32::try_from(i + 1).unwrap_or(0);
            for _ in 0..20 {
                let d = next_delay(attempts, 1.0).unwrap_or_default();
                assert!(d >= *base / 2 && d <= *base, "{attempts}: {d:?}");
            }
        }
        assert_eq!(next_delay(0, 1.0), None);
        assert_eq!(
            next_delay(u32::try_from(RETRIES).unwrap_or(0) + 1, 1.0),
            None
        );
        let total: Duration = RETRY_AFTER.iter().sum();
        assert!(total > Duration::from_secs(20 * 3600) && total < Duration::from_secs(22 * 3600));
        assert!(next_delay(1, 0.001).unwrap_or_default() <= Duration::from_millis(5));
    }

    #[test]
    fn an_endpoint_gets_at_most_its_share_of_slots() {
        let busy = Busy::default();
        let slots: Vec<Slot> = (0..PER_ENDPOINT)
            .filter_map(|_| busy.take("we_a"))
            .collect();
        assert_eq!(slots.len(), PER_ENDPOINT);
        assert!(busy.take("we_a").is_none());
        assert_eq!(busy.full(), ["we_a"]);
        let other = busy.take("we_b");
        assert!(other.is_some());
        assert_eq!(busy.total(), PER_ENDPOINT + 1);
        drop(slots);
        drop(other);
        assert_eq!(busy.total(), 0);
        assert!(busy.full().is_empty());
    }
}
