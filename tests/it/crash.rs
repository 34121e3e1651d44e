//! Crash safety: many clients create payment methods and purchase intents and
//! charge them at the sandbox, the server is SIGKILLed at a random moment, restarted, and
//! every acknowledged (2xx) write must be back and intact; usage counts never go backwards.
//!
//! On PostgreSQL the trials alternate: the instance SIGKILLed, and PostgreSQL restarted
//! (fast shutdown) under the writers, with the instance left running to recover by itself.
//!
//! Failover: three instances on a primary and its synchronous standby (a multi-host URL with
//! `target_session_attrs=read-write`), writers on all three, the primary stopped at once and
//! the standby promoted two seconds later. Every acknowledged write is read back from every instance, the
//! outage answers 503 (never another error, never no answer), each instance writes again
//! within seconds of the promotion, and the change listeners follow the new primary.
//!
//! `CRASH_TRIALS` (default 20 on sled, 10 on PostgreSQL) sets the number of trials. The
//! figures are printed (`cargo test --test it crash:: -- --nocapture`).

use crate::common::*;
use paycred::store::Store;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// What writers do with a write that is not acknowledged, and how many they saw.
#[derive(Default)]
struct Refusals {
    /// Write on after one (the instance stays up through a failover), rather than end the
    /// writer (its server died).
    keep_on: bool,
    /// Answered 503 (the store was down).
    unavailable: AtomicUsize,
    /// No answer within the client's timeout, or the connection broke.
    no_answer: AtomicUsize,
}

/// The client's bound on one request: past it the request counts as no answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A token of `entity` in project A.
fn entity_token(entity: &str) -> String {
    token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        PROJECT,
        entity,
        "private",
        600,
    )
}

/// One client of one server, writing as one entity.
struct Writer<'a> {
    agent: ureq::Agent,
    base: &'a str,
    entity: String,
    token: String,
    refusals: &'a Refusals,
}

impl<'a> Writer<'a> {
    fn new(base: &'a str, entity: String, refusals: &'a Refusals) -> Self {
        Self {
            agent: ureq::AgentBuilder::new().timeout(CLIENT_TIMEOUT).build(),
            base,
            token: entity_token(&entity),
            entity,
            refusals,
        }
    }

    /// POSTs `body`; `None` on any transport error (the server died, or did not answer in
    /// time: not acknowledged) and on 503 (the store was down: not acknowledged either),
    /// each counted in the refusals.
    fn post(&self, path: &str, body: &Value) -> Option<(u16, Value)> {
        let r = self
            .agent
            .post(&format!("{}{path}", self.base))
            .set("Authorization", &format!("Bearer {}", self.token))
            .set("Content-Type", "application/json")
            .send_string(&body.to_string());
        let resp = match r {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(_) => {
                self.refusals.no_answer.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let status = resp.status();
        if status == 503 {
            self.refusals.unavailable.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let Ok(text) = resp.into_string() else {
            self.refusals.no_answer.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Some((status, json))
    }

    /// A new payment method, recorded in `acked` when acknowledged; its id.
    fn add_pm(&self, acked: &Mutex<Acked>, rng: &mut impl Rng) -> Option<String> {
        let (status, pm) = self.post(
            &format!("/projects/{PROJECT}/payment-methods"),
            &card_body(&self.entity, &card_number(rng), CVC),
        )?;
        assert!(status == 201 || status == 200, "create pm {status}: {pm}");
        let pm_id = pm["id"].as_str().unwrap().to_string();
        acked.lock().unwrap().pms.push(AckedPm {
            entity: self.entity.clone(),
            id: pm_id.clone(),
            details: pm["card"]["details"].clone(),
        });
        Some(pm_id)
    }

    /// A payment method, an intent of it and some of its uses, each recorded in `acked` when
    /// acknowledged; `None` at the first write that is not.
    fn write_once(&self, acked: &Mutex<Acked>, rng: &mut impl Rng) -> Option<()> {
        let entity = &self.entity;
        let pm_id = self.add_pm(acked, rng)?;
        let (status, pi) = self.post(
            &format!("/projects/{PROJECT}/purchase-intents"),
            &json!({"entityId": entity, "credentialType": "virtual-card", "paymentMethodId": pm_id,
                    "mandates": [
                        {"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}},
                        {"type": "usageLimit", "value": USAGE_LIMIT.to_string(), "details": {"count": USAGE_LIMIT}}]}),
        )?;
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
            // A use not acknowledged may have counted: the intent is used no more.
            let (status, auth) = self.post(
                &format!("/projects/{PROJECT}/sandbox/authorizations"),
                &charge,
            )?;
            assert_eq!(status, 200, "authorize: {auth}");
            assert_eq!(auth["approved"], true, "authorize: {auth}");
            if let Some(i) = acked.lock().unwrap().intents.get_mut(&pi_id) {
                i.uses += 1;
            }
        }
        Some(())
    }
}

/// One client's work until `stop`, or until a write is not acknowledged (unless `refusals`
/// says to write on).
fn client(
    base: String,
    entity: String,
    acked: Arc<Mutex<Acked>>,
    stop: Arc<AtomicBool>,
    refusals: Arc<Refusals>,
) {
    let writer = Writer::new(&base, entity, &refusals);
    let mut rng = rand::thread_rng();
    while !stop.load(Ordering::Relaxed) {
        if writer.write_once(&acked, &mut rng).is_none() {
            if !refusals.keep_on {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn get(server: &Server, entity: &str, path: &str) -> Reply {
    server.call("GET", path, Some(&entity_token(entity)), None)
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
                let refusals = Arc::new(Refusals::default());
                std::thread::spawn(move || client(base, entity, acked, stop, refusals))
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

        let found = read_back(&server, &acked.lock().unwrap());
        (lost, corrupted, backwards) = (
            lost + found.lost,
            corrupted + found.corrupted,
            backwards + found.backwards,
        );
        let snapshot = {
            let a = acked.lock().unwrap();
            (a.pms.len(), a.intents.len())
        };
        eprintln!(
            "trial {trial}: {} payment methods, {} intents acknowledged so far",
            snapshot.0, snapshot.1
        );
    }
    server.stop(false);
    let a = acked.lock().unwrap();
    let stored = check_store(&server, &a);
    backwards += stored.backwards;
    lost += stored.lost;
    let writes =
        a.pms.len() + a.intents.len() + a.intents.values().map(|i| i.uses as usize).sum::<usize>();
    eprintln!(
        "crash test ({}): {trials} trials ({restarts} of them PostgreSQL restarts, the rest SIGKILLs), {} payment methods + {} purchase intents + {} uses \
         acknowledged ({writes} writes): {lost} lost, {corrupted} corrupted, {backwards} usage counts \
         gone backwards, {} creates without their audit entry ({} entries)",
        if cluster.is_some() { "postgres" } else { "sled" },
        a.pms.len(),
        a.intents.len(),
        a.intents.values().map(|i| i.uses as usize).sum::<usize>(),
        stored.unaudited,
        stored.entries,
    );
    assert!(a.pms.len() >= trials, "too little load to prove anything");
    assert_eq!((lost, corrupted, backwards, stored.unaudited), (0, 0, 0, 0));
}

/// What reading the acknowledged writes back found wrong.
#[derive(Default, Debug)]
struct Found {
    /// Not found.
    lost: usize,
    /// Found with other details, or an intent in a state no use leads to.
    corrupted: usize,
    /// An intent with fewer uses than were acknowledged.
    backwards: usize,
    /// Acknowledged creates without their audit entry (the store's check).
    unaudited: usize,
    /// Entries in the audit log (the store's check).
    entries: usize,
}

/// Reads every acknowledged payment method and intent back through `server`.
fn read_back(server: &Server, acked: &Acked) -> Found {
    let mut found = Found::default();
    for pm in &acked.pms {
        let r = get(
            server,
            &pm.entity,
            &format!("/projects/{PROJECT}/payment-methods/{}", pm.id),
        );
        match r.status {
            200 if r.json["card"]["details"] == pm.details => {}
            200 => found.corrupted += 1,
            _ => found.lost += 1,
        }
    }
    for pi in acked.intents.values() {
        let r = get(
            server,
            &pi.entity,
            &format!("/projects/{PROJECT}/purchase-intents/{}", pi.id),
        );
        if r.status != 200 {
            found.lost += 1;
            continue;
        }
        match r.json["status"].as_str() {
            // The usage limit is used up: the stored count is at least the acknowledged one.
            Some("expired") => {}
            Some("active") if pi.uses >= USAGE_LIMIT => found.backwards += 1,
            Some("active") if r.json["card"] != pi.card => found.corrupted += 1,
            Some("active") => {}
            _ => found.corrupted += 1,
        }
    }
    found
}

/// The exact usage counts of the acknowledged intents, read from the store of `server` itself
/// (stopped, when it is sled), and the audit log: one unbroken chain holding every
/// acknowledged create (the outbox carried each event across the crashes).
fn check_store(server: &Server, a: &Acked) -> Found {
    let mut found = Found::default();
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
    for pi in a.intents.values() {
        let scope = paycred::store::Scope {
            project: PROJECT,
            entity: &pi.entity,
        };
        match rt.block_on(store.get_intent(scope, &pi.id)) {
            Ok(Some(rec)) if rec.uses >= pi.uses => {}
            Ok(Some(_)) => found.backwards += 1,
            _ => found.lost += 1,
        }
    }
    let log = store.audit_log().unwrap();
    paycred::audit::verify(&log).unwrap();
    paycred::audit::verify_head(&log, store.audit_head().unwrap().as_ref()).unwrap();
    let audited: std::collections::HashSet<(&str, &str)> = log
        .iter()
        .map(|e| (e.event.action.as_str(), e.event.resource.as_str()))
        .collect();
    found.unaudited = a
        .pms
        .iter()
        .filter(|pm| !audited.contains(&("paymentMethod.create", pm.id.as_str())))
        .count()
        + a.intents
            .values()
            .filter(|pi| !audited.contains(&("purchaseIntent.create", pi.id.as_str())))
            .count();
    found.entries = log.len();
    found
}

/// Writers per instance in the failover test.
const FAILOVER_WRITERS: usize = 3;

#[test]
fn acknowledged_writes_survive_a_postgresql_failover_to_a_synchronous_standby() {
    use paycred::store::postgres::test_cluster::{database_on, Cluster};
    let primary = Cluster::start().unwrap();
    let standby = primary.standby("paycred_standby").unwrap();
    let (p1, p2) = (primary.port(), standby.port());
    let url = database_on(&primary.url()).unwrap().replacen(
        &format!("127.0.0.1:{p1}/"),
        &format!("127.0.0.1:{p1},127.0.0.1:{p2}/"),
        1,
    ) + "?target_session_attrs=read-write";
    let servers = crate::postgres::three_instances_on(Backend::Database(url));

    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let refusals = Arc::new(Refusals {
        keep_on: true,
        ..Refusals::default()
    });
    let writers: Vec<_> = servers
        .iter()
        .enumerate()
        .flat_map(|(i, server)| (0..FAILOVER_WRITERS).map(move |w| (i, w, server.base.clone())))
        .map(|(i, w, base)| {
            let (acked, stop, refusals) = (acked.clone(), stop.clone(), refusals.clone());
            std::thread::spawn(move || {
                client(base, format!("failover_{i}_{w}"), acked, stop, refusals)
            })
        })
        .collect();
    // The writers stop however this ends (a failed check included).
    let stopping = crate::postgres::StopOnDrop(&stop);
    std::thread::sleep(Duration::from_millis(1500));
    let before = acked.lock().unwrap().pms.len();
    primary.down("immediate").unwrap();
    // The outage: no primary until a failover manager would have promoted the standby (long
    // enough for the change listeners to back off past a second).
    std::thread::sleep(Duration::from_secs(2));
    for server in &servers {
        let ready = server.call("GET", "/ready", None, None);
        assert_eq!(ready.status, 503, "ready without a primary: {}", ready.text);
    }
    let refused_before = refusals.unavailable.load(Ordering::Relaxed);
    standby.promote().unwrap();
    let promoted = std::time::Instant::now();
    // Each instance's first acknowledged write after the promotion, timed.
    let serving_again: Vec<Duration> = std::thread::scope(|s| {
        let probes: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(i, server)| {
                let (acked, refusals) = (&acked, &refusals);
                s.spawn(move || {
                    let writer = Writer::new(&server.base, format!("failover_probe_{i}"), refusals);
                    let mut rng = rand::thread_rng();
                    while promoted.elapsed() < Duration::from_secs(30) {
                        if writer.add_pm(acked, &mut rng).is_some() {
                            return promoted.elapsed();
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    panic!("instance {i} wrote nothing within 30 s of the promotion");
                })
            })
            .collect();
        probes.into_iter().map(|p| p.join().unwrap()).collect()
    });
    std::thread::sleep(Duration::from_secs(1));
    drop(stopping);
    for w in writers {
        w.join().expect("a writer failed an assertion");
    }
    let a = acked.lock().unwrap();
    assert!(
        a.pms.len() > before,
        "no write acknowledged after the promotion"
    );

    // The change listeners follow the new primary: a payment method served from an
    // instance's cache and deleted on another is refused at once everywhere.
    let t = servers[0].token("user_1", "private");
    let pm = servers[0].add_card(&t, "user_1", VISA);
    crate::postgres::deleted_everywhere_at_once(&servers, &t, &pm);

    let mut found = Found::default();
    for server in &servers {
        let read = read_back(server, &a);
        found.lost += read.lost;
        found.corrupted += read.corrupted;
        found.backwards += read.backwards;
    }
    let stored = check_store(&servers[0], &a);
    let uses: usize = a.intents.values().map(|i| i.uses as usize).sum();
    let (unavailable, no_answer) = (
        refusals.unavailable.load(Ordering::Relaxed),
        refusals.no_answer.load(Ordering::Relaxed),
    );
    eprintln!(
        "failover: {} payment methods + {} purchase intents + {uses} uses acknowledged ({} writes) \
         on 3 instances, read back from each: {} lost, {} corrupted, {} usage counts gone \
         backwards, {} creates without their audit entry; {unavailable} answered 503 \
         ({refused_before} before the promotion), {no_answer} without an answer in {CLIENT_TIMEOUT:?}, \
         none any other error; writing again {serving_again:?} after the promotion",
        a.pms.len(),
        a.intents.len(),
        a.pms.len() + a.intents.len() + uses,
        found.lost + stored.lost,
        found.corrupted,
        found.backwards + stored.backwards,
        stored.unaudited,
    );
    assert!(refused_before > 0, "no write met the outage");
    assert_eq!(no_answer, 0, "a request hung or its connection broke");
    assert_eq!(
        (
            found.lost + stored.lost,
            found.corrupted,
            found.backwards + stored.backwards,
            stored.unaudited
        ),
        (0, 0, 0, 0)
    );
    for took in serving_again {
        assert!(took < Duration::from_secs(5), "{took:?} to write again");
    }
}
