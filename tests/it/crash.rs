//! Crash safety: many clients create payment methods and purchase intents and
//! charge them at the sandbox, the server is SIGKILLed at a random moment, restarted, and
//! every acknowledged (2xx) write must be back and intact; usage counts never go backwards.
//!
//! On PostgreSQL the trials alternate: the instance SIGKILLed, and PostgreSQL restarted
//! (fast shutdown) under the writers, with the instance left running to recover by itself.
//!
//! `CRASH_TRIALS` (default 20 on sled, 10 on PostgreSQL) sets the number of trials. The
//! figures are printed (`cargo test --test it crash:: -- --nocapture`).

use crate::common::*;
use paycred::store::Store;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLIENTS: usize = 8;
const USAGE_LIMIT: u32 = 3;

/// A Luhn-valid 16-digit Visa-range number, random in the middle.
pub(crate) fn card_number(rng: &mut impl Rng) -> String {
    let mut digits: Vec<u32> = vec![4, 2, 4, 2];
    digits.extend((0..11).map(|_| rng.gen_range(0..10)));
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 0 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                *d
            }
        })
        .sum();
    digits.push((10 - sum % 10) % 10);
    digits
        .iter()
        .map(|d| char::from_digit(*d, 10).unwrap())
        .collect()
}

#[derive(Debug, Clone)]
struct AckedPm {
    entity: String,
    id: String,
    details: Value,
}

#[derive(Debug, Clone)]
struct AckedIntent {
    entity: String,
    id: String,
    card: Value,
    uses: u32,
}

#[derive(Default)]
struct Acked {
    pms: Vec<AckedPm>,
    intents: HashMap<String, AckedIntent>,
}

/// POST with a token; `None` on any transport error (the server died: not acknowledged) and
/// on 503 (the store was down: not acknowledged either).
fn post(
    agent: &ureq::Agent,
    base: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> Option<(u16, Value)> {
    let r = agent
        .post(&format!("{base}{path}"))
        .set("Authorization", &format!("Bearer {token}"))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string());
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(_) => return None,
    };
    let status = resp.status();
    if status == 503 {
        return None;
    }
    let text = resp.into_string().ok()?;
    let json = serde_json::from_str(&text).ok()?;
    Some((status, json))
}

/// One client's work until the server dies (or `stop`).
fn client(base: String, entity: String, acked: Arc<Mutex<Acked>>, stop: Arc<AtomicBool>) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let token = token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        PROJECT,
        &entity,
        "private",
        600,
    );
    let mut rng = rand::thread_rng();
    while !stop.load(Ordering::Relaxed) {
        let number = card_number(&mut rng);
        let Some((status, pm)) = post(
            &agent,
            &base,
            &format!("/projects/{PROJECT}/payment-methods"),
            &token,
            &card_body(&entity, &number, CVC),
        ) else {
            return;
        };
        assert!(status == 201 || status == 200, "create pm {status}: {pm}");
        let pm_id = pm["id"].as_str().unwrap().to_string();
        acked.lock().unwrap().pms.push(AckedPm {
            entity: entity.clone(),
            id: pm_id.clone(),
            details: pm["card"]["details"].clone(),
        });
        let Some((status, pi)) = post(
            &agent,
            &base,
            &format!("/projects/{PROJECT}/purchase-intents"),
            &token,
            &json!({"entityId": entity, "credentialType": "virtual-card", "paymentMethodId": pm_id,
                    "mandates": [
                        {"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
                        {"type": "usageLimit", "value": USAGE_LIMIT.to_string(), "details": {"count": USAGE_LIMIT}}]}),
        ) else {
            return;
        };
        assert_eq!(status, 201, "create pi: {pi}");
        let pi_id = pi["id"].as_str().unwrap().to_string();
        acked.lock().unwrap().intents.insert(
            pi_id.clone(),
            AckedIntent {
                entity: entity.clone(),
                id: pi_id.clone(),
                card: pi["card"].clone(),
                uses: 0,
            },
        );
        let mut charge = pi["card"].clone();
        charge["amount"] = json!("1.00");
        charge["currency"] = json!("USD");
        charge["mcc"] = json!("5411");
        for _ in 0..rng.gen_range(0..=USAGE_LIMIT) {
            let Some((status, auth)) = post(
                &agent,
                &base,
                &format!("/projects/{PROJECT}/sandbox/authorizations"),
                &token,
                &charge,
            ) else {
                return;
            };
            assert_eq!(status, 200, "authorize: {auth}");
            assert_eq!(auth["approved"], true, "authorize: {auth}");
            if let Some(i) = acked.lock().unwrap().intents.get_mut(&pi_id) {
                i.uses += 1;
            }
        }
    }
}

fn get(server: &Server, entity: &str, path: &str) -> Reply {
    let t = token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        PROJECT,
        entity,
        "private",
        600,
    );
    server.call("GET", path, Some(&t), None)
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    crash_trials(None);
}

#[test]
fn acknowledged_writes_survive_sigkill_and_postgresql_restarts() {
    let cluster = paycred::store::postgres::test_cluster::Cluster::start().unwrap();
    crash_trials(Some(&cluster));
}

/// The trials on sled, or on a database of `cluster`, which they also restart.
fn crash_trials(cluster: Option<&paycred::store::postgres::test_cluster::Cluster>) {
    let trials: usize = std::env::var("CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cluster.is_some() { 10 } else { 20 });
    let backend = match cluster {
        Some(c) => Backend::Database(
            paycred::store::postgres::test_cluster::database_on(&c.url()).unwrap(),
        ),
        None => Backend::Sled,
    };
    let mut server = Server::start_with(Options::on(backend));
    let mut restarts = 0usize;
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut rng = rand::thread_rng();
    let mut lost = 0usize;
    let mut corrupted = 0usize;
    let mut backwards = 0usize;
    for trial in 0..trials {
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (base, acked, stop) = (server.base.clone(), acked.clone(), stop.clone());
                let entity = format!("crash_{trial}_{c}");
                std::thread::spawn(move || client(base, entity, acked, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..600)));
        match cluster {
            Some(c) if trial % 2 == 1 => {
                c.down("fast").unwrap();
                stop.store(true, Ordering::Relaxed);
                for h in handles {
                    h.join().expect("a client failed an assertion");
                }
                c.up().unwrap();
                restarts += 1;
                assert!(
                    eventually(Duration::from_secs(20), || server
                        .call("GET", "/ready", None, None)
                        .status
                        == 200),
                    "the instance did not recover once PostgreSQL was back"
                );
            }
            _ => {
                server.stop(true);
                stop.store(true, Ordering::Relaxed);
                for h in handles {
                    h.join().expect("a client failed an assertion");
                }
                server.restart();
            }
        }

        let snapshot = {
            let a = acked.lock().unwrap();
            (
                a.pms.clone(),
                a.intents.values().cloned().collect::<Vec<_>>(),
            )
        };
        for pm in &snapshot.0 {
            let r = get(
                &server,
                &pm.entity,
                &format!("/projects/{PROJECT}/payment-methods/{}", pm.id),
            );
            match r.status {
                200 if r.json["card"]["details"] == pm.details => {}
                200 => corrupted += 1,
                _ => lost += 1,
            }
        }
        for pi in &snapshot.1 {
            let r = get(
                &server,
                &pi.entity,
                &format!("/projects/{PROJECT}/purchase-intents/{}", pi.id),
            );
            if r.status != 200 {
                lost += 1;
                continue;
            }
            match r.json["status"].as_str() {
                // The usage limit is used up: the stored count is at least the acknowledged one.
                Some("expired") => {}
                Some("active") if pi.uses >= USAGE_LIMIT => backwards += 1,
                Some("active") if r.json["card"] != pi.card => corrupted += 1,
                Some("active") => {}
                _ => corrupted += 1,
            }
        }
        eprintln!(
            "trial {trial}: {} payment methods, {} intents acknowledged so far",
            snapshot.0.len(),
            snapshot.1.len()
        );
    }
    server.stop(false);

    // The exact usage counts, read from the store itself.
    let store: Box<dyn Store> = match &server.database_url {
        Some(url) => Box::new(
            paycred::store::PgStore::open(
                &paycred::config::store::PostgresConfig {
                    url: paycred::config::store::DatabaseUrl::parse(url).unwrap(),
                    pool_size: 2,
                    ca_file: None,
                    cache_ttl: paycred::store::postgres::CACHE_TTL,
                },
                Default::default(),
            )
            .unwrap(),
        ),
        None => Box::new(
            paycred::store::SledStore::open(&server.dir.path().join("data"), Default::default())
                .unwrap(),
        ),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = acked.lock().unwrap();
    for pi in a.intents.values() {
        let scope = paycred::store::Scope {
            project: PROJECT,
            entity: &pi.entity,
        };
        match rt.block_on(store.get_intent(scope, &pi.id)) {
            Ok(Some(rec)) if rec.uses >= pi.uses => {}
            Ok(Some(_)) => backwards += 1,
            _ => lost += 1,
        }
    }
    // Every acknowledged create has its audit entry, in one unbroken chain: the outbox
    // carried each event across the SIGKILLs.
    let log = store.audit_log().unwrap();
    paycred::audit::verify(&log).unwrap();
    paycred::audit::verify_head(&log, store.audit_head().unwrap().as_ref()).unwrap();
    let audited: std::collections::HashSet<(&str, &str)> = log
        .iter()
        .map(|e| (e.event.action.as_str(), e.event.resource.as_str()))
        .collect();
    let unaudited = a
        .pms
        .iter()
        .filter(|pm| !audited.contains(&("paymentMethod.create", pm.id.as_str())))
        .count()
        + a.intents
            .values()
            .filter(|pi| !audited.contains(&("purchaseIntent.create", pi.id.as_str())))
            .count();
    let writes =
        a.pms.len() + a.intents.len() + a.intents.values().map(|i| i.uses as usize).sum::<usize>();
    eprintln!(
        "crash test ({}): {trials} trials ({restarts} of them PostgreSQL restarts, the rest SIGKILLs), {} payment methods + {} purchase intents + {} uses \
         acknowledged ({writes} writes): {lost} lost, {corrupted} corrupted, {backwards} usage counts \
         gone backwards, {unaudited} creates without their audit entry ({} entries)",
        if cluster.is_some() { "postgres" } else { "sled" },
        a.pms.len(),
        a.intents.len(),
        a.intents.values().map(|i| i.uses as usize).sum::<usize>(),
        log.len(),
    );
    assert!(a.pms.len() >= trials, "too little load to prove anything");
    assert_eq!((lost, corrupted, backwards, unaudited), (0, 0, 0, 0));
}
