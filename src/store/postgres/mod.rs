//! The PostgreSQL backend: one database shared by any number of paycred instances.
//!
//! Records keep the sealed forms of [`crate::store::records`] (JSON in `jsonb` columns); the
//! fields the store queries are typed columns beside them (scope, ids, status, uses, times,
//! fingerprint). The schema is versioned ([`migrations`]) and applied at every start under an
//! advisory lock.
//!
//! - Dedup: a UNIQUE index on (project, entity, fingerprint); a create that hits it refreshes
//!   the stored method (`INSERT … ON CONFLICT DO NOTHING`, then the refresh under `FOR UPDATE`).
//! - Mandate usage: one conditional `UPDATE … SET uses = uses + 1 WHERE … RETURNING uses`.
//! - Read-modify-write of a record (verification, cancel on delete): `SELECT … FOR UPDATE` in
//!   the transaction that writes it back.
//! - Audit: a change writes its event into `audit_outbox` in its own transaction; the audit
//!   writer ([`audit::PgSink`]) chains outbox events and its own into `audit_log` and
//!   `audit_head` in one transaction under an advisory lock, so every instance appends to one
//!   order.
//! - Caches ([`listen`]): payment-method records and the newest active intent of a payment
//!   method are kept per instance ([`RecordCache`]), and so are key rows. Every write that
//!   changes one announces it with `pg_notify` in its own transaction ([`PgStore::commit`]),
//!   so the message goes out exactly when the change commits; each instance LISTENs on a
//!   connection of its own and drops what a message names. While that connection is down
//!   the record caches serve nothing, and when it is back they start empty. Every entry has
//!   a hard time to live, [`CACHE_TTL`], so a message lost anyway is outlived by no entry.
//!   The caches never decide a use: mandate usage is the conditional `UPDATE` below.
//! - Keyrings and client keys are read ahead: all of them at open, again every
//!   [`CACHE_TTL`] / 2 by the listener and at once on a message, and from the database on a
//!   miss; the [`Store`] methods for them are synchronous (the vault keeps them in its own
//!   cache), and a write or a miss waits for the database on the store's runtime
//!   ([`PgStore::blocking`]).
//!
//! The connections live on the store's own small runtime, so they outlive any caller's
//! runtime; every operation is bounded by [`OP_TIMEOUT`] and fails as
//! [`StoreError::Unavailable`] (`503 storeUnavailable`) when the database does not answer.

pub mod audit;
mod deliveries;
mod intent_end;
pub mod migrations;
#[cfg(any(test, feature = "test-support"))]
pub mod test_cluster;

use crate::audit::chain::HashFunction;
use crate::audit::head_mac::HeadKeys;
use crate::audit::writer::AuditBatcher;
use crate::audit::{AuditEntry, AuditEvent, AuditHead};
use crate::config::store::PostgresConfig;
use crate::domain::issuer::CredentialType;
use crate::store::events::{self as event, EventQuery, EventRecord, NewEvent};
use crate::store::pm_cache::RecordCache;
use crate::store::{
    corrupt, CardTokenRecord, DueEnd, IdempotentRecord, Inserted, IntentEnd, IntentRecord,
    IntentStatus, Page, PaymentMethodRecord, Refresh, Scope, Store, StoreError, StoreResult,
    StoreStats, TokenTake, UseOutcome, VerificationAttempt, WebhookEndpointRecord,
};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use parking_lot::RwLock;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::ToSql;

/// Longest wait for the database in one store operation (a connection from the pool, and each
/// query); past it the operation fails as unavailable.
pub const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// A database error as [`StoreError::Unavailable`]: its text names the failure (connection
/// refused, statement, constraint), never a value the statement carried.
fn pg(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("postgres: {e}"))
}

/// The longest an instance serves a cached key row after reading it, and by default a cached
/// record (`store.cache_ttl`): a change whose message was lost is seen by then at the latest.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// The channel changes are announced on.
const CHANNEL: &str = "paycred_changes";

/// The `application_name` of each instance's listening connection.
pub const LISTENER_NAME: &str = "paycred-listen";

/// Key rows by project, with when they were read.
type KeyCache = RwLock<HashMap<String, (Vec<u8>, std::time::Instant)>>;

/// What an instance keeps in memory, shared with its listener ([`listen`]).
#[derive(Default)]
struct Caches {
    pms: RecordCache<PaymentMethodRecord>,
    /// The newest active intent by payment method and credential type ([`newest_key`]).
    newest: RecordCache<Option<IntentRecord>>,
    keyrings: KeyCache,
    client_keys: KeyCache,
    /// Messages applied so far.
    heard: AtomicU64,
}

impl Caches {
    /// Record caches whose entries are served for at most `ttl`.
    fn new(ttl: Duration) -> Self {
        let caches = Self {
            pms: RecordCache::with_ttl(ttl),
            newest: RecordCache::with_ttl(ttl),
            ..Self::default()
        };
        // Nothing is served before the listener is listening.
        caches.pms.pause();
        caches.newest.pause();
        caches
    }

    /// Drops what `change` names from this instance's caches.
    fn forget(&self, change: &Change) {
        match change {
            Change::PaymentMethod {
                project,
                entity,
                id,
            } => {
                let key = pm_key(project, entity, id);
                self.pms.invalidate(&key);
                for kind in CredentialType::ALL {
                    self.newest.invalidate(&newest_key(&key, kind));
                }
            }
            Change::Keyring { project } => drop(self.keyrings.write().remove(project)),
            Change::ClientKeys { project } => drop(self.client_keys.write().remove(project)),
        }
    }

    /// Record caches off (their changes may go unannounced now) or on again, empty.
    fn listening(&self, on: bool) {
        for cache in [&self.pms as &dyn Pausable, &self.newest] {
            if on {
                cache.resume_serving();
            } else {
                cache.pause_serving();
            }
        }
    }
}

/// [`RecordCache::pause`] and [`RecordCache::resume`] whatever the record type.
trait Pausable {
    fn pause_serving(&self);
    fn resume_serving(&self);
}

impl<V> Pausable for RecordCache<V> {
    fn pause_serving(&self) {
        self.pause();
    }
    fn resume_serving(&self) {
        self.resume();
    }
}

/// A change other instances' caches must drop, as announced on [`CHANNEL`] (a JSON object
/// with its `kind`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind")]
pub enum Change {
    /// A payment method's record, or the set of its intents or their statuses.
    #[serde(rename = "pm")]
    PaymentMethod {
        project: String,
        entity: String,
        id: String,
    },
    #[serde(rename = "keyring")]
    Keyring { project: String },
    #[serde(rename = "client_keys")]
    ClientKeys { project: String },
}

impl Change {
    /// A change of the payment method `id` of `scope` or of its intents.
    pub fn payment_method(scope: Scope<'_>, id: &str) -> Self {
        Change::PaymentMethod {
            project: scope.project.to_string(),
            entity: scope.entity.to_string(),
            id: id.to_string(),
        }
    }
}

/// The cache key of a payment method.
fn pm_key(project: &str, entity: &str, id: &str) -> Vec<u8> {
    [project, entity, id].join("\0").into_bytes()
}

/// The cache key of a payment method's newest active intent of `kind`.
fn newest_key(pm_key: &[u8], kind: CredentialType) -> Vec<u8> {
    let mut key = pm_key.to_vec();
    key.push(0);
    key.extend_from_slice(kind.as_str().as_bytes());
    key
}

/// PostgreSQL-backed [`Store`].
pub struct PgStore {
    pool: Pool,
    /// Where the connections run and the synchronous methods wait; shut down on drop.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    caches: Arc<Caches>,
    /// A test's way to lose every message this instance sends.
    quiet: std::sync::atomic::AtomicBool,
    audit_writer: Option<AuditBatcher>,
    writes: AtomicU64,
    /// `user@host:port/db`, for messages.
    describe: String,
    /// What MACs the recorded audit head.
    head_keys: HeadKeys,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("database", &self.describe)
            .finish()
    }
}

/// Opens connections on the store's runtime (the pool's `Connect`), so that a connection's
/// socket and task belong to that runtime whichever runtime asked for it.
struct ConnectOn {
    tls: postgres_openssl::MakeTlsConnector,
    handle: tokio::runtime::Handle,
}

type Connected =
    Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>;

impl deadpool_postgres::Connect for ConnectOn {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> Pin<Box<dyn Future<Output = Connected> + Send + '_>> {
        let (tls, config, handle) = (self.tls.clone(), pg_config.clone(), self.handle.clone());
        Box::pin(async move {
            let opened = handle.spawn(async move {
                let (client, connection) = config.connect(tls).await?;
                let task = tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::warn!(error = %e, "postgres connection closed");
                    }
                });
                Ok((client, task))
            });
            match opened.await {
                Ok(done) => done,
                Err(_) => Err(tokio_postgres::Error::__private_api_timeout()),
            }
        })
    }
}

/// TLS as the URL's `sslmode` asks, verified with `ca_file` (else the system's roots).
fn tls(config: &PostgresConfig) -> StoreResult<postgres_openssl::MakeTlsConnector> {
    let mut builder = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls())
        .map_err(|e| StoreError::Unavailable(format!("tls: {e}")))?;
    if let Some(ca) = &config.ca_file {
        builder
            .set_ca_file(ca)
            .map_err(|e| StoreError::Unavailable(format!("store.tls.ca_file: {e}")))?;
    }
    Ok(postgres_openssl::MakeTlsConnector::new(builder.build()))
}

impl PgStore {
    /// Connects, applies the migrations (under the advisory lock) and reads the keys ahead.
    /// An unreachable database fails here, naming the host (never the password).
    pub fn open(config: &PostgresConfig, audit_hash: HashFunction) -> StoreResult<Self> {
        Self::open_with(config, audit_hash, HeadKeys::default())
    }

    /// [`Self::open`], recording audit heads MACed with `head_keys` (their first key).
    pub fn open_with(
        config: &PostgresConfig,
        audit_hash: HashFunction,
        head_keys: HeadKeys,
    ) -> StoreResult<Self> {
        let (runtime, pool) = connect(config)?;
        let handle = runtime.handle().clone();
        let describe = config.url.describe();
        let mut store = Self {
            pool,
            runtime: Some(runtime),
            handle,
            caches: Arc::new(Caches::new(config.cache_ttl)),
            quiet: std::sync::atomic::AtomicBool::new(false),
            audit_writer: None,
            writes: AtomicU64::new(0),
            describe: describe.clone(),
            head_keys: head_keys.clone(),
        };
        let at = |e: StoreError| StoreError::Unavailable(format!("database {describe}: {e}"));
        let pool = store.pool.clone();
        store
            .blocking(async move { migrations::apply(&pool).await })
            .map_err(at)?;
        let (pool, caches) = (store.pool.clone(), store.caches.clone());
        store
            .blocking(async move { read_keys_ahead(&pool, &caches).await })
            .map_err(at)?;
        let pool = store.pool.clone();
        let recorded = store
            .blocking(async move { audit::read_head(&pool).await })
            .map_err(at)?;
        if let Some(problem) = recorded
            .filter(|head| head.seq > 0 && head_keys.held())
            .and_then(|head| head_keys.check(&head).refused())
        {
            return Err(StoreError::Corrupt(format!(
                "database {describe}: {problem}"
            )));
        }
        let mut listen_config = listen_config(config);
        listen_config.application_name(LISTENER_NAME);
        store.handle.spawn(listen(
            listen_config,
            tls(config)?,
            store.pool.clone(),
            store.caches.clone(),
        ));
        let sink = audit::PgSink::new(
            store.pool.clone(),
            store.handle.clone(),
            audit_hash,
            head_keys,
        );
        store.audit_writer = Some(
            AuditBatcher::start(sink).map_err(|e| at(StoreError::Unavailable(e.to_string())))?,
        );
        Ok(store)
    }

    /// Applies the migrations the database lacks (`paycred migrate`); the versions applied.
    pub fn migrate(config: &PostgresConfig) -> StoreResult<Vec<i64>> {
        let (runtime, pool) = connect(config)?;
        let applied = run_blocking(
            runtime.handle(),
            async move { migrations::apply(&pool).await },
        )
        .map_err(|e| StoreError::Unavailable(format!("database {}: {e}", config.url.describe())));
        runtime.shutdown_background();
        applied
    }

    /// `user@host:port/db` of the database.
    pub fn database(&self) -> &str {
        &self.describe
    }

    /// Runs `work` on the store's runtime and waits for it on this thread (the synchronous
    /// methods; a plain thread, or rarely a caller on a runtime: a keyring miss).
    fn blocking<T: Send + 'static>(
        &self,
        work: impl Future<Output = StoreResult<T>> + Send + 'static,
    ) -> StoreResult<T> {
        run_blocking(&self.handle, work)
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        client(&self.pool).await
    }

    fn writer(&self) -> StoreResult<&AuditBatcher> {
        self.audit_writer
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("audit writer stopped".into()))
    }

    /// Commits `tx` with `changes` announced: `pg_notify` in the transaction, so every
    /// instance's listener hears of them exactly when they commit, and this instance's caches
    /// drop them before it returns. Every write that changes a cached record (a payment
    /// method, the set or status of its intents, a key row) commits through it.
    pub(crate) async fn commit(
        &self,
        tx: deadpool_postgres::Transaction<'_>,
        changes: &[Change],
    ) -> StoreResult<()> {
        let committed = commit_announced(tx, changes, self.announcing()).await;
        for change in changes {
            self.caches.forget(change);
        }
        committed
    }

    /// Whether changes are announced (always, but in a test that loses them).
    fn announcing(&self) -> bool {
        !self.quiet.load(Ordering::SeqCst)
    }

    /// From now on this instance announces nothing (a test's lost messages).
    #[cfg(any(test, feature = "test-support"))]
    pub fn lose_announcements(&self) {
        self.quiet.store(true, Ordering::SeqCst);
    }

    /// After a commit that wrote into the outbox: the writer moves it into the log.
    fn audited(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = &self.audit_writer {
            w.wake();
        }
    }

    /// Runs `sql` (an insert, update or delete of one row) and, when it changed a row, writes
    /// `audit` (if any) in the same transaction; whether it changed one.
    async fn change_audited(
        &self,
        sql: &str,
        args: &[&(dyn ToSql + Sync)],
        audit: Option<&AuditEvent>,
    ) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        if timed(tx.execute(sql, args)).await? == 0 {
            return Ok(false);
        }
        if let Some(audit) = audit {
            timed(tx.execute(OUTBOX, &[&json(audit)?])).await?;
        }
        timed(tx.commit()).await?;
        if audit.is_some() {
            self.audited();
        }
        Ok(true)
    }
}

/// The store's runtime and its pool of connections (none opened yet).
fn connect(config: &PostgresConfig) -> StoreResult<(tokio::runtime::Runtime, Pool)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("paycred-pg")
        .enable_all()
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let manager = Manager::from_connect(
        listen_config(config),
        ConnectOn {
            tls: tls(config)?,
            handle: runtime.handle().clone(),
        },
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(OP_TIMEOUT))
        .create_timeout(Some(OP_TIMEOUT))
        .recycle_timeout(Some(OP_TIMEOUT))
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    Ok((runtime, pool))
}

/// [`PgStore::commit`] without the caches: `pg_notify` for each of `changes` (unless not
/// `announce`), then the commit.
async fn commit_announced(
    tx: deadpool_postgres::Transaction<'_>,
    changes: &[Change],
    announce: bool,
) -> StoreResult<()> {
    if announce {
        for change in changes {
            timed(tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &json_text(change)?])).await?;
        }
    }
    timed(tx.commit()).await
}

/// The connection settings of `config`, with [`OP_TIMEOUT`] to connect unless it names one.
fn listen_config(config: &PostgresConfig) -> tokio_postgres::Config {
    let mut pg_config = config.url.config().clone();
    if pg_config.get_connect_timeout().is_none() {
        pg_config.connect_timeout(OP_TIMEOUT);
    }
    pg_config
}

/// Every key row, into the caches.
async fn read_keys_ahead(pool: &Pool, caches: &Caches) -> StoreResult<()> {
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
async fn listen(
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

/// [`PgStore::blocking`] on `handle`.
pub(crate) fn run_blocking<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    work: impl Future<Output = StoreResult<T>> + Send + 'static,
) -> StoreResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv_timeout(OP_TIMEOUT * 3)
        .map_err(|_| StoreError::Unavailable("postgres: no answer in time".into()))?
}

/// A pooled connection within [`OP_TIMEOUT`].
pub(crate) async fn client(pool: &Pool) -> StoreResult<deadpool_postgres::Object> {
    pool.get().await.map_err(pg)
}

/// A query within [`OP_TIMEOUT`].
pub(crate) async fn timed<T>(
    query: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> StoreResult<T> {
    match tokio::time::timeout(OP_TIMEOUT, query).await {
        Ok(result) => result.map_err(pg),
        Err(_) => Err(StoreError::Unavailable("postgres: query timed out".into())),
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // The writer's last sync needs the runtime: it stops first.
        drop(self.audit_writer.take());
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn i64_of(n: u32) -> i64 {
    i64::from(n)
}

fn u32_of(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

fn json<T: serde::Serialize>(value: &T) -> StoreResult<Value> {
    serde_json::to_value(value).map_err(corrupt)
}

fn json_text<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(corrupt)
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> StoreResult<T> {
    serde_json::from_value(value).map_err(corrupt)
}

fn status_of(text: &str) -> StoreResult<IntentStatus> {
    from_json(Value::String(text.to_string()))
}

/// An intent row (`status, uses, record`) as its record: the columns are authoritative.
fn intent_of(row: &tokio_postgres::Row) -> StoreResult<IntentRecord> {
    let mut rec: IntentRecord = from_json(row.get::<_, Value>("record"))?;
    rec.status = status_of(row.get::<_, &str>("status"))?;
    rec.uses = u32_of(row.get::<_, i64>("uses"));
    rec.credential_key = row
        .try_get::<_, Option<String>>("credential_key")
        .ok()
        .flatten()
        .map(|k| crate::store::Sealed::from_stored(&k));
    Ok(rec)
}

const OUTBOX: &str = "INSERT INTO audit_outbox (event) VALUES ($1)";

/// Writes `events` in order, inside the transaction of the change they record.
pub(super) async fn write_events(
    tx: &tokio_postgres::Transaction<'_>,
    events: &[NewEvent],
) -> StoreResult<()> {
    for e in events {
        timed(tx.execute(
            "WITH e AS (INSERT INTO events (project, type, event) VALUES ($1, $2, $3) \
             RETURNING seq) INSERT INTO webhook_fanout (seq) SELECT seq FROM e",
            &[&e.project, &e.kind, &json(e)?],
        ))
        .await?;
    }
    Ok(())
}

fn micros(t: time::OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for PgStore {
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
        refresh: Refresh<'_>,
    ) -> StoreResult<Inserted> {
        let record = json(pm)?;
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let inserted = timed(tx.execute(
            "INSERT INTO payment_methods (project, entity, id, created_micros, fingerprint, record) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (project, entity, fingerprint) DO NOTHING",
            &[&pm.project, &pm.entity, &pm.id, &pm.created_micros, &pm.fingerprint, &record],
        ))
        .await?;
        let outcome = if inserted == 1 {
            timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
            write_events(&tx, &[event::pm_created(pm)]).await?;
            Inserted::Created
        } else {
            let row = timed(tx.query_opt(
                "SELECT record FROM payment_methods WHERE project = $1 AND entity = $2 \
                 AND fingerprint = $3 FOR UPDATE",
                &[&pm.project, &pm.entity, &pm.fingerprint],
            ))
            .await?
            .ok_or_else(|| StoreError::Unavailable("payment method changed meanwhile".into()))?;
            let existing: PaymentMethodRecord = from_json(row.get(0))?;
            let (refreshed, audit) = refresh(&existing);
            timed(tx.execute(
                "UPDATE payment_methods SET record = $4 WHERE project = $1 AND entity = $2 AND id = $3",
                &[&pm.project, &pm.entity, &existing.id, &json(&refreshed)?],
            ))
            .await?;
            timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
            Inserted::Existing(Box::new(refreshed))
        };
        let changed = match &outcome {
            Inserted::Existing(refreshed) => vec![Change::payment_method(
                Scope {
                    project: &pm.project,
                    entity: &pm.entity,
                },
                &refreshed.id,
            )],
            Inserted::Created => Vec::new(),
        };
        self.commit(tx, &changed).await?;
        self.audited();
        Ok(outcome)
    }

    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<Arc<PaymentMethodRecord>>> {
        let key = pm_key(scope.project, scope.entity, id);
        if let Some(record) = self.caches.pms.get(&key) {
            return Ok(Some(record));
        }
        let read_at = self.caches.pms.generation();
        let c = self.client().await?;
        let st = timed(c.prepare_cached(
            "SELECT record FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3",
        ))
        .await?;
        match timed(c.query_opt(&st, &[&scope.project, &scope.entity, &id])).await? {
            Some(row) => {
                let record = Arc::new(from_json(row.get(0))?);
                self.caches.pms.fill(&key, &record, read_at);
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    async fn list_payment_methods(
        &self,
        scope: Scope<'_>,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Page<PaymentMethodRecord>> {
        let c = self.client().await?;
        let total: i64 = timed(c.query_one(
            "SELECT count(*) FROM payment_methods WHERE project = $1 AND entity = $2",
            &[&scope.project, &scope.entity],
        ))
        .await?
        .get(0);
        let (offset, limit) = (
            i64::try_from(offset).unwrap_or(i64::MAX),
            i64::try_from(limit).unwrap_or(i64::MAX),
        );
        let rows = timed(c.query(
            "SELECT record FROM payment_methods WHERE project = $1 AND entity = $2 \
             ORDER BY created_micros DESC, id OFFSET $3 LIMIT $4",
            &[&scope.project, &scope.entity, &offset, &limit],
        ))
        .await?;
        let items = rows
            .into_iter()
            .map(|r| from_json(r.get(0)))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Page {
            items,
            total: usize::try_from(total).unwrap_or(0),
        })
    }

    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(deleted) = timed(tx.query_opt(
            "DELETE FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3 \
             RETURNING record",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?
        else {
            return Ok(false);
        };
        let deleted: PaymentMethodRecord = from_json(deleted.get(0))?;
        write_events(&tx, &[event::pm_deleted(&deleted, audit.at_micros)]).await?;
        // The row lock of the delete makes an intent insert for it wait and then find it gone.
        let rows = timed(tx.query(
            "SELECT id, status, uses, record FROM intents WHERE project = $1 AND entity = $2 \
             AND payment_method_id = $3 AND status <> 'canceled' FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?;
        for row in rows {
            let mut rec = intent_of(&row)?;
            let (end, at) = (IntentEnd::Canceled, audit.at_micros);
            intent_end::end_row(&tx, scope, &mut rec, end, at).await?;
        }
        timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
        self.commit(tx, &[Change::payment_method(scope, id)])
            .await?;
        self.audited();
        Ok(true)
    }

    async fn insert_intent(&self, intent: &IntentRecord, audit: AuditEvent) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        // The payment method's row, locked against a concurrent delete until this commits.
        let exists = timed(tx.query_opt(
            "SELECT 1 FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3 FOR SHARE",
            &[&intent.project, &intent.entity, &intent.payment_method_id],
        ))
        .await?
        .is_some();
        if !exists {
            return Ok(false);
        }
        let usage_limit = intent.mandates.usage_limit.map(i64_of);
        timed(tx.execute(
            "INSERT INTO intents (project, entity, id, payment_method_id, status, created_micros, \
             expires_micros, usage_limit, uses, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &intent.project,
                &intent.entity,
                &intent.id,
                &intent.payment_method_id,
                &intent.status.as_str(),
                &intent.created_micros,
                &intent.expires_micros,
                &usage_limit,
                &i64_of(intent.uses),
                &json(intent)?,
            ],
        ))
        .await?;
        if let Some(key) = &intent.credential_key {
            intent_end::insert_key(&tx, intent, key).await?;
        }
        timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
        write_events(&tx, &event::intent_created(intent)).await?;
        let scope = Scope {
            project: &intent.project,
            entity: &intent.entity,
        };
        self.commit(
            tx,
            &[Change::payment_method(scope, &intent.payment_method_id)],
        )
        .await?;
        self.audited();
        Ok(true)
    }

    async fn get_intent(&self, scope: Scope<'_>, id: &str) -> StoreResult<Option<IntentRecord>> {
        let c = self.client().await?;
        let st = timed(c.prepare_cached(
            "SELECT status, uses, record, \
             (SELECT key FROM intent_keys k WHERE (k.project, k.entity, k.id) = \
             (intents.project, intents.entity, intents.id)) AS credential_key FROM intents WHERE project = $1 AND entity = $2 AND id = $3",
        ))
        .await?;
        match timed(c.query_opt(&st, &[&scope.project, &scope.entity, &id])).await? {
            Some(row) => Ok(Some(intent_of(&row)?)),
            None => Ok(None),
        }
    }

    async fn list_intents(&self, scope: Scope<'_>) -> StoreResult<Vec<IntentRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT status, uses, record, \
             (SELECT key FROM intent_keys k WHERE (k.project, k.entity, k.id) = \
             (intents.project, intents.entity, intents.id)) AS credential_key FROM intents WHERE project = $1 AND entity = $2",
            &[&scope.project, &scope.entity],
        ))
        .await?;
        rows.iter().map(intent_of).collect()
    }

    async fn set_intent_status(
        &self,
        scope: Scope<'_>,
        id: &str,
        status: IntentStatus,
    ) -> StoreResult<Option<IntentRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let row = timed(tx.query_opt(
            "UPDATE intents SET status = $4 WHERE project = $1 AND entity = $2 AND id = $3 RETURNING status, uses, record",
            &[&scope.project, &scope.entity, &id, &status.as_str()],
        ))
        .await?;
        let updated = row.as_ref().map(intent_of).transpose()?;
        let changed: Vec<Change> = updated
            .iter()
            .map(|rec| Change::payment_method(scope, &rec.payment_method_id))
            .collect();
        self.commit(tx, &changed).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(updated)
    }

    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(row) = timed(tx.query_opt(
            "SELECT status, uses, record FROM intents WHERE project = $1 AND entity = $2 AND id = $3 \
             FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?
        else {
            return Ok(None);
        };
        let mut rec = intent_of(&row)?;
        if rec.status != IntentStatus::Verify {
            return Ok(Some(rec));
        }
        match attempt {
            VerificationAttempt::Passed => {
                rec.status = IntentStatus::Active;
                timed(tx.execute(
                    "UPDATE payment_methods SET verified = true \
                     WHERE project = $1 AND entity = $2 AND id = $3",
                    &[&scope.project, &scope.entity, &rec.payment_method_id],
                ))
                .await?;
                timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
                write_events(&tx, &[event::intent_activated(&rec, audit.at_micros)]).await?;
            }
            VerificationAttempt::Failed => {
                rec.failed_verifications = rec.failed_verifications.saturating_add(1);
            }
            VerificationAttempt::OtpMethod(method) => rec.otp_method = method,
        }
        timed(tx.execute(
            "UPDATE intents SET status = $4, record = $5 WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id, &rec.status.as_str(), &json(&rec)?],
        ))
        .await?;
        let changed = match rec.status {
            IntentStatus::Active => vec![Change::payment_method(scope, &rec.payment_method_id)],
            _ => Vec::new(),
        };
        self.commit(tx, &changed).await?;
        self.audited();
        Ok(Some(rec))
    }

    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT verified FROM payment_methods WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &pm_id],
        ))
        .await?;
        Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
    }

    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome> {
        let now = micros(now);
        let mut c = self.client().await?;
        let st = timed(c.prepare_cached(
            "UPDATE intents SET uses = uses + 1 WHERE project = $1 AND entity = $2 AND id = $3 \
             AND status = 'active' AND expires_micros > $4 \
             AND (usage_limit IS NULL OR uses < usage_limit) \
             RETURNING status, uses, usage_limit, record",
        ))
        .await?;
        let tx = timed(c.transaction()).await?;
        if let Some(row) =
            timed(tx.query_opt(&st, &[&scope.project, &scope.entity, &id, &now])).await?
        {
            let rec = intent_of(&row)?;
            write_events(&tx, &[event::intent_used(&rec, now)]).await?;
            timed(tx.commit()).await?;
            self.writes.fetch_add(1, Ordering::Relaxed);
            let uses: i64 = row.get("uses");
            if row
                .get::<_, Option<i64>>("usage_limit")
                .is_some_and(|limit| uses >= limit)
            {
                // The use that reaches the limit ends the intent (the finalizer ends it if
                // this instance stops in between).
                drop(c);
                self.end_intent(scope, id, IntentEnd::UsedUp, now).await?;
            }
            return Ok(UseOutcome::Recorded(u32_of(uses)));
        }
        drop(tx);
        // Not counted: why (read after the refused update; the refusal itself was atomic).
        let row = timed(c.query_opt(
            "SELECT status, expires_micros, usage_limit, uses FROM intents \
             WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?;
        let Some(row) = row else {
            return Ok(UseOutcome::NotFound);
        };
        let status = status_of(row.get::<_, &str>(0))?;
        let limit = row.get::<_, Option<i64>>(2).map(u32_of);
        let uses = u32_of(row.get::<_, i64>(3));
        // Refused by the update: a use counted meanwhile reads as the limit reached.
        Ok(
            crate::store::use_refused(status, row.get(1), limit, uses, now)
                .unwrap_or(UseOutcome::UsageLimitReached),
        )
    }

    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>> {
        let now = micros(now);
        let key = newest_key(&pm_key(scope.project, scope.entity, pm_id), kind);
        if let Some(found) = self.caches.newest.get(&key) {
            match found.as_ref() {
                None => return Ok(None),
                Some(rec) if rec.status_at(now) == IntentStatus::Active => {
                    return Ok(Some(rec.clone()))
                }
                // Ended by time or use since it was read: read again.
                Some(_) => {}
            }
        }
        let read_at = self.caches.newest.generation();
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT status, uses, record, \
             (SELECT key FROM intent_keys k WHERE (k.project, k.entity, k.id) = \
             (intents.project, intents.entity, intents.id)) AS credential_key FROM intents WHERE project = $1 AND entity = $2 \
             AND payment_method_id = $3 AND status = 'active' AND expires_micros > $4 \
             ORDER BY created_micros DESC, id",
            &[&scope.project, &scope.entity, &pm_id, &now],
        ))
        .await?;
        let mut newest = None;
        for row in &rows {
            let rec = intent_of(row)?;
            if rec.credential_type == kind && rec.status_at(now) == IntentStatus::Active {
                newest = Some(rec);
                break;
            }
        }
        self.caches
            .newest
            .fill(&key, &Arc::new(newest.clone()), read_at);
        Ok(newest)
    }

    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()> {
        self.writer()?
            .append(audit)
            .await
            .map_err(StoreError::Unavailable)
    }

    fn append_audit_nowait(&self, audit: AuditEvent) {
        if let Some(w) = &self.audit_writer {
            w.append_nowait(audit);
        }
    }

    fn count_audit(&self, audit: AuditEvent) {
        if let Some(w) = &self.audit_writer {
            w.count(audit);
        }
    }

    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>> {
        self.writer()?.settle().map_err(StoreError::Unavailable)?;
        let pool = self.pool.clone();
        self.blocking(async move { audit::read_log(&pool).await })
    }

    fn audit_head(&self) -> StoreResult<Option<AuditHead>> {
        let pool = self.pool.clone();
        self.blocking(async move { audit::read_head(&pool).await })
    }

    async fn get_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<IdempotentRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT record FROM idempotency WHERE project = $1 AND entity = $2 AND key = $3 \
             AND expires_micros > $4",
            &[&scope.project, &scope.entity, &key, &now_micros],
        ))
        .await?;
        row.map(|r| from_json(r.get(0))).transpose()
    }

    async fn put_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        record: &IdempotentRecord,
    ) -> StoreResult<()> {
        let c = self.client().await?;
        timed(c.execute(
            "INSERT INTO idempotency (project, entity, key, expires_micros, record) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, entity, key) \
             DO UPDATE SET expires_micros = $4, record = $5",
            &[
                &scope.project,
                &scope.entity,
                &key,
                &record.expires_micros,
                &json(record)?,
            ],
        ))
        .await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn claim_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
        lease_until_micros: i64,
    ) -> StoreResult<bool> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "INSERT INTO idempotency_claims (project, entity, key, lease_until_micros) \
             VALUES ($1, $2, $3, $5) ON CONFLICT (project, entity, key) \
             DO UPDATE SET lease_until_micros = $5 \
             WHERE idempotency_claims.lease_until_micros <= $4 RETURNING 1",
            &[
                &scope.project,
                &scope.entity,
                &key,
                &now_micros,
                &lease_until_micros,
            ],
        ))
        .await?;
        Ok(row.is_some())
    }

    async fn release_idempotent(&self, scope: Scope<'_>, key: &str) -> StoreResult<()> {
        let c = self.client().await?;
        timed(c.execute(
            "DELETE FROM idempotency_claims WHERE project = $1 AND entity = $2 AND key = $3",
            &[&scope.project, &scope.entity, &key],
        ))
        .await
        .map(drop)
    }

    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize> {
        let pool = self.pool.clone();
        self.blocking(async move {
            let c = client(&pool).await?;
            let n = timed(c.execute(
                "DELETE FROM idempotency WHERE expires_micros <= $1",
                &[&now_micros],
            ))
            .await?;
            timed(c.execute(
                "DELETE FROM idempotency_claims WHERE lease_until_micros <= $1",
                &[&now_micros],
            ))
            .await?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read_key_row(
            &self.caches.keyrings,
            "SELECT keyring FROM keyrings WHERE project = $1",
            project,
        )
    }

    fn reload_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.caches.keyrings.write().remove(project);
        self.load_keyring(project)
    }

    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>> {
        let (pool, p, k) = (self.pool.clone(), project.to_string(), keyring.to_vec());
        let stored = self.blocking(async move {
            let c = client(&pool).await?;
            timed(c.execute(
                "INSERT INTO keyrings (project, keyring) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&p, &k],
            ))
            .await?;
            let row = timed(c.query_one("SELECT keyring FROM keyrings WHERE project = $1", &[&p]))
                .await?;
            Ok(row.get::<_, Vec<u8>>(0))
        })?;
        self.caches.keyrings.write().insert(
            project.to_string(),
            (stored.clone(), std::time::Instant::now()),
        );
        Ok(stored)
    }

    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool> {
        let change = Change::Keyring {
            project: project.to_string(),
        };
        self.swap_row("keyrings", "keyring", change, Some(expected), keyring)
    }

    async fn ready(&self) -> StoreResult<()> {
        let c = self.client().await?;
        timed(c.query_one("SELECT 1", &[])).await.map(drop)
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            durable_writes: self.writes.load(Ordering::Relaxed),
            flushes: 0,
            cache_hits: self.caches.pms.hits() + self.caches.newest.hits(),
            changes_heard: self.caches.heard.load(Ordering::Relaxed),
        }
    }

    async fn insert_card_token(
        &self,
        scope: Scope<'_>,
        token: &CardTokenRecord,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        // The scope's tidy-up, as the embedded store does it: expired tokens lose their sealed
        // data, tombstones past their keep go.
        let keep_until = token
            .created_micros
            .saturating_sub(crate::store::sled::card_tokens::TOMBSTONE_KEEP_MICROS);
        timed(tx.execute(
            "DELETE FROM card_tokens WHERE project = $1 AND entity = $2 AND expires_micros < $3",
            &[&scope.project, &scope.entity, &keep_until],
        ))
        .await?;
        timed(tx.execute(
            "UPDATE card_tokens SET record = record - 'number_sealed' - 'cvc_sealed' \
             WHERE project = $1 AND entity = $2 AND expires_micros <= $3 \
             AND (record ? 'number_sealed' OR record ? 'cvc_sealed')",
            &[&scope.project, &scope.entity, &token.created_micros],
        ))
        .await?;
        timed(tx.execute(
            "INSERT INTO card_tokens (project, entity, id, expires_micros, record) VALUES ($1, $2, $3, $4, $5)",
            &[&scope.project, &scope.entity, &token.id, &token.expires_micros, &json(token)?],
        ))
        .await?;
        timed(tx.commit()).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(row) = timed(tx.query_opt(
            "SELECT record FROM card_tokens WHERE project = $1 AND entity = $2 AND id = $3 FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?
        else {
            return Ok(TokenTake::Unknown);
        };
        let rec: CardTokenRecord = from_json(row.get(0))?;
        if rec.used {
            return Ok(TokenTake::Used);
        }
        let expired = now_micros >= rec.expires_micros;
        let tombstone = CardTokenRecord {
            number_sealed: None,
            cvc_sealed: None,
            used: !expired,
            ..rec.clone()
        };
        timed(tx.execute(
            "UPDATE card_tokens SET record = $4 WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id, &json(&tombstone)?],
        ))
        .await?;
        timed(tx.commit()).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(if expired {
            TokenTake::Expired
        } else {
            TokenTake::Taken(Box::new(rec))
        })
    }

    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read_key_row(
            &self.caches.client_keys,
            "SELECT keyset FROM client_keys WHERE project = $1",
            project,
        )
    }

    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool> {
        let change = Change::ClientKeys {
            project: project.to_string(),
        };
        self.swap_row("client_keys", "keyset", change, expected, keyset)
    }

    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>> {
        let c = self.client().await?;
        let before = query
            .before
            .map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = timed(c.query(
            "SELECT seq, event FROM events WHERE project = $1 AND seq < $2 \
             AND ($3::text IS NULL OR type = $3) ORDER BY seq DESC LIMIT $4",
            &[&query.project, &before, &query.kind, &limit],
        ))
        .await?;
        rows.iter()
            .map(|r| {
                Ok(EventRecord {
                    seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                    event: from_json(r.get(1))?,
                })
            })
            .collect()
    }

    async fn put_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        replace: bool,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let record = json(endpoint)?;
        let args: [&(dyn ToSql + Sync); 4] = [
            &endpoint.project,
            &endpoint.id,
            &endpoint.created_micros,
            &record,
        ];
        let sql = if replace {
            "UPDATE webhook_endpoints SET created_micros = $3, record = $4 \
             WHERE project = $1 AND id = $2"
        } else {
            "INSERT INTO webhook_endpoints (project, id, created_micros, record) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING"
        };
        self.change_audited(sql, &args, Some(&audit)).await
    }

    async fn get_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT record FROM webhook_endpoints WHERE project = $1 AND id = $2",
            &[&project, &id],
        ))
        .await?;
        row.map(|r| from_json(r.get(0))).transpose()
    }

    async fn list_webhook_endpoints(
        &self,
        project: &str,
    ) -> StoreResult<Vec<WebhookEndpointRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT record FROM webhook_endpoints WHERE project = $1 \
             ORDER BY created_micros DESC, id DESC",
            &[&project],
        ))
        .await?;
        rows.iter().map(|r| from_json(r.get(0))).collect()
    }

    async fn delete_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.change_audited(
            "DELETE FROM webhook_endpoints WHERE project = $1 AND id = $2",
            &[&project, &id],
            Some(&audit),
        )
        .await
    }

    async fn end_intent(
        &self,
        scope: Scope<'_>,
        id: &str,
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let row = timed(tx.query_opt(
            "SELECT status, uses, record FROM intents WHERE project = $1 AND entity = $2 AND id = $3 \
             FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?;
        let Some(row) = row else { return Ok(None) };
        let mut rec = intent_of(&row)?;
        if !rec.ends_with(end, now_micros) {
            return Ok(None);
        }
        intent_end::end_row(&tx, scope, &mut rec, end, now_micros).await?;
        // Other instances drop the intent from their caches with the commit.
        let ended = [Change::payment_method(scope, &rec.payment_method_id)];
        self.commit(tx, &ended).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(Some(rec))
    }

    async fn purge_erased_keys(&self) -> StoreResult<()> {
        let c = self.client().await?;
        intent_end::vacuum_keys(&c).await.map(|_| ())
    }

    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>> {
        let c = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = timed(c.query(intent_end::DUE, &[&now_micros, &limit])).await?;
        Ok(rows
            .iter()
            .map(|row| DueEnd {
                project: row.get(0),
                entity: row.get(1),
                id: row.get(2),
                end: if row.get::<_, &str>(3) == "expired" {
                    IntentEnd::Expired
                } else {
                    IntentEnd::UsedUp
                },
            })
            .collect())
    }

    fn remac_audit_head(&self) -> StoreResult<bool> {
        let (pool, keys) = (self.pool.clone(), self.head_keys.clone());
        self.blocking(async move { audit::remac_head(&pool, &keys).await })
    }

    async fn put_passkey(
        &self,
        passkey: &crate::store::PasskeyRecord,
        audit: Option<AuditEvent>,
    ) -> StoreResult<bool> {
        let record = json(passkey)?;
        let args: [&(dyn ToSql + Sync); 5] = [
            &passkey.project,
            &passkey.entity,
            &passkey.id,
            &passkey.created_micros,
            &record,
        ];
        let sql = match audit {
            None => {
                "UPDATE passkeys SET record = $5 \
                 WHERE project = $1 AND entity = $2 AND id = $3 AND created_micros = $4"
            }
            Some(_) => {
                "INSERT INTO passkeys (project, entity, id, created_micros, record) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
            }
        };
        self.change_audited(sql, &args, audit.as_ref()).await
    }

    async fn list_passkeys(
        &self,
        scope: Scope<'_>,
    ) -> StoreResult<Vec<crate::store::PasskeyRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT record FROM passkeys WHERE project = $1 AND entity = $2 \
             ORDER BY created_micros, id",
            &[&scope.project, &scope.entity],
        ))
        .await?;
        rows.iter().map(|r| from_json(r.get(0))).collect()
    }

    async fn delete_passkey(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.change_audited(
            "DELETE FROM passkeys WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id],
            Some(&audit),
        )
        .await
    }

    async fn put_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        state: &crate::store::WebauthnStateRecord,
        now_micros: i64,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        timed(tx.execute(
            "DELETE FROM webauthn_states \
             WHERE project = $1 AND entity = $2 AND expires_micros <= $3",
            &[&scope.project, &scope.entity, &now_micros],
        ))
        .await?;
        timed(tx.execute(
            "INSERT INTO webauthn_states (project, entity, key, expires_micros, record) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, entity, key) \
             DO UPDATE SET expires_micros = $4, record = $5",
            &[
                &scope.project,
                &scope.entity,
                &key,
                &state.expires_micros,
                &json(state)?,
            ],
        ))
        .await?;
        timed(tx.commit()).await?;
        Ok(())
    }

    async fn take_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<crate::store::WebauthnStateRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "DELETE FROM webauthn_states WHERE project = $1 AND entity = $2 AND key = $3 \
             RETURNING record",
            &[&scope.project, &scope.entity, &key],
        ))
        .await?;
        let state: Option<crate::store::WebauthnStateRecord> =
            row.map(|r| from_json(r.get(0))).transpose()?;
        Ok(state.filter(|s| s.expires_micros > now_micros))
    }

    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>> {
        deliveries::get_event(&self.pool, project, seq).await
    }

    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize> {
        deliveries::fan_out(&self.pool, now_micros, limit).await
    }

    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<()> {
        deliveries::queue(&self.pool, project, seq, endpoints, now_micros).await
    }

    async fn claim_deliveries(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<crate::store::DeliveryRecord>> {
        deliveries::claim(&self.pool, now_micros, lease_until_micros, skip, limit).await
    }

    async fn record_delivery(
        &self,
        delivery: &crate::store::DeliveryRecord,
        claimed_until_micros: i64,
    ) -> StoreResult<bool> {
        deliveries::record(&self.pool, delivery, claimed_until_micros).await
    }

    async fn list_deliveries(
        &self,
        project: &str,
        seq: u64,
    ) -> StoreResult<Vec<crate::store::DeliveryRecord>> {
        deliveries::of_event(&self.pool, project, seq).await
    }

    async fn deliveries_pending(&self) -> StoreResult<u64> {
        deliveries::pending(&self.pool).await
    }
}

impl PgStore {
    /// `paycred audit accept-head` on the database: see [`audit::accept_head`].
    pub fn accept_audit_head(
        &self,
        keys: &HeadKeys,
        check: impl FnOnce(&[AuditEntry], &AuditHead) -> Result<String, String> + Send + 'static,
    ) -> Result<Option<(AuditHead, String)>, String> {
        let (pool, keys) = (self.pool.clone(), keys.clone());
        self.blocking(async move { audit::accept_head(&pool, &keys, check).await })
            .map_err(|e| format!("database {}: {e}", self.describe))?
    }
}

impl PgStore {
    /// Writes `export` (`paycred store copy`) in one transaction, keeping rows already there;
    /// how many of the export's rows the tables lack afterwards (0 when all is well).
    pub fn import(&self, export: &crate::store::copy::Export) -> StoreResult<usize> {
        let (pool, export, keys) = (self.pool.clone(), export.clone(), self.head_keys.clone());
        self.blocking(async move {
            let mut c = client(&pool).await?;
            let tx = timed(c.transaction()).await?;
            timed(tx.execute("SELECT pg_advisory_xact_lock($1)", &[&audit::CHAIN_LOCK])).await?;
            for (pm, verified) in &export.payment_methods {
                timed(tx.execute(
                    "INSERT INTO payment_methods (project, entity, id, created_micros, fingerprint,                      verified, record) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
                    &[&pm.project, &pm.entity, &pm.id, &pm.created_micros, &pm.fingerprint, verified, &json(pm)?],
                ))
                .await?;
            }
            for pi in &export.intents {
                let usage_limit = pi.mandates.usage_limit.map(i64_of);
                timed(tx.execute(
                    "INSERT INTO intents (project, entity, id, payment_method_id, status, created_micros,                      expires_micros, usage_limit, uses, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)                      ON CONFLICT DO NOTHING",
                    &[&pi.project, &pi.entity, &pi.id, &pi.payment_method_id, &pi.status.as_str(),
                      &pi.created_micros, &pi.expires_micros, &usage_limit, &i64_of(pi.uses),
                      &json(&IntentRecord { key_slot: None, ..pi.clone() })?],
                ))
                .await?;
                if let Some(key) = pi.credential_key.as_ref().filter(|_| pi.is_live_stored()) {
                    intent_end::insert_key(&tx, pi, key).await?;
                }
            }
            for (table, column, rows) in [
                ("card_tokens", "id", &export.card_tokens),
                ("idempotency", "key", &export.idempotency),
            ] {
                let sql = format!(
                    "INSERT INTO {table} (project, entity, {column}, expires_micros, record)                      VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
                );
                for r in rows {
                    let expires = r.value.get("expires_micros").and_then(Value::as_i64).unwrap_or(0);
                    timed(tx.execute(sql.as_str(), &[&r.project, &r.entity, &r.id, &expires, &r.value])).await?;
                }
            }
            for (table, column, rows) in [
                ("keyrings", "keyring", &export.keyrings),
                ("client_keys", "keyset", &export.client_keys),
            ] {
                let sql = format!("INSERT INTO {table} (project, {column}) VALUES ($1, $2) ON CONFLICT DO NOTHING");
                for (project, bytes) in rows {
                    timed(tx.execute(sql.as_str(), &[project, bytes])).await?;
                }
            }
            for e in &export.audit {
                let seq = i64::try_from(e.seq).map_err(corrupt)?;
                timed(tx.execute(
                    "INSERT INTO audit_log (seq, event, prev_hash, hash) VALUES ($1, $2, $3, $4)                      ON CONFLICT DO NOTHING",
                    &[&seq, &json(&e.event)?, &e.prev_hash, &e.hash],
                ))
                .await?;
            }
            if let Some(last) = export.audit.last() {
                let seq = i64::try_from(last.seq).map_err(corrupt)?;
                let mac = keys.mac(&AuditHead {
                    seq: last.seq,
                    hash: last.hash.clone(),
                    ..AuditHead::default()
                });
                timed(tx.execute(
                    "INSERT INTO audit_head (one, seq, hash, mac) VALUES (true, $1, $2, $3) ON CONFLICT (one) \
                     DO UPDATE SET seq = $1, hash = $2, mac = $3 WHERE audit_head.seq < $1",
                    &[&seq, &last.hash, &mac],
                ))
                .await?;
            }
            for e in &export.webhook_endpoints {
                timed(tx.execute(
                    "INSERT INTO webhook_endpoints (project, id, created_micros, record) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&e.project, &e.id, &e.created_micros, &json(e)?],
                ))
                .await?;
            }
            for k in &export.passkeys {
                timed(tx.execute(
                    "INSERT INTO passkeys (project, entity, id, created_micros, record) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    &[&k.project, &k.entity, &k.id, &k.created_micros, &json(k)?],
                ))
                .await?;
            }
            for e in &export.events {
                let seq = i64::try_from(e.seq).map_err(corrupt)?;
                timed(tx.execute(
                    "INSERT INTO events (seq, project, type, event) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT DO NOTHING",
                    &[&seq, &e.event.project, &e.event.kind, &json(&e.event)?],
                ))
                .await?;
            }
            // Events written from now on number after the copied ones (their ids keep growing).
            timed(tx.execute(
                "SELECT setval(pg_get_serial_sequence('events', 'seq'), \
                 GREATEST((SELECT max(seq) FROM events), 1))",
                &[],
            ))
            .await?;
            let mut missing = 0usize;
            for (_, table, n) in export.counts() {
                let have: i64 = timed(tx.query_one(&format!("SELECT count(*) FROM {table}"), &[]))
                    .await?
                    .get(0);
                missing += n.saturating_sub(usize::try_from(have).unwrap_or(0));
            }
            timed(tx.commit()).await?;
            Ok(missing)
        })
    }

    /// One key row, from `cache` (read ahead at open) while younger than [`CACHE_TTL`],
    /// else from the database (`sql` selects the value by project), then kept in `cache`.
    /// (The vault keeps what it read: it asks again only for a project it has not loaded
    /// and for a value sealed under a key it does not know.)
    fn read_key_row(
        &self,
        cache: &KeyCache,
        sql: &'static str,
        project: &str,
    ) -> StoreResult<Option<Vec<u8>>> {
        if let Some((value, read)) = cache.read().get(project) {
            if read.elapsed() < CACHE_TTL {
                return Ok(Some(value.clone()));
            }
        }
        let (pool, p) = (self.pool.clone(), project.to_string());
        let found = self.blocking(async move {
            let c = client(&pool).await?;
            let row = timed(c.query_opt(sql, &[&p])).await?;
            Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
        })?;
        if let Some(value) = &found {
            cache.write().insert(
                project.to_string(),
                (value.clone(), std::time::Instant::now()),
            );
        }
        Ok(found)
    }

    /// Replaces the key row `change` names (`table`, value column `column`) if it is still
    /// `expected` (absent for `None`), announcing the change; `false` when it changed
    /// meanwhile.
    fn swap_row(
        &self,
        table: &'static str,
        column: &'static str,
        change: Change,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let (Change::Keyring { project } | Change::ClientKeys { project }) = &change else {
            return Err(corrupt("a key row change names no project"));
        };
        let (pool, p) = (self.pool.clone(), project.clone());
        let (expected, new) = (expected.map(<[u8]>::to_vec), new.to_vec());
        let (announce, changes) = (self.announcing(), [change.clone()]);
        let swapped = self.blocking(async move {
            let mut c = client(&pool).await?;
            let tx = timed(c.transaction()).await?;
            let n = match &expected {
                Some(old) => {
                    let sql = format!("UPDATE {table} SET {column} = $3 WHERE project = $1 AND {column} = $2");
                    let params: [&(dyn ToSql + Sync); 3] = [&p, old, &new];
                    timed(tx.execute(sql.as_str(), &params)).await?
                }
                None => {
                    let sql = format!(
                        "INSERT INTO {table} (project, {column}) VALUES ($1, $2) ON CONFLICT DO NOTHING"
                    );
                    timed(tx.execute(sql.as_str(), &[&p, &new])).await?
                }
            };
            commit_announced(tx, &changes, announce).await?;
            Ok(n == 1)
        });
        self.caches.forget(&change);
        swapped
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn an_unreachable_database_is_named_without_its_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let url = format!("postgres://paycred:s3cret-pw@127.0.0.1:{port}/pay");
        let config = PostgresConfig {
            url: crate::config::store::DatabaseUrl::parse(&url).unwrap(),
            pool_size: 2,
            ca_file: None,
            cache_ttl: CACHE_TTL,
        };
        let e = PgStore::open(&config, HashFunction::Sha256)
            .expect_err("opened a database that does not exist")
            .to_string();
        assert!(e.contains(&format!("paycred@127.0.0.1:{port}/pay")), "{e}");
        assert!(!e.contains("s3cret-pw"), "{e}");
    }

    #[test]
    fn migrations_apply_once_whoever_starts_first() {
        let config = test_cluster::fresh_config(2).unwrap();
        let starts: Vec<_> = (0..3)
            .map(|_| {
                let config = config.clone();
                std::thread::spawn(move || PgStore::migrate(&config).unwrap())
            })
            .collect();
        let applied: Vec<Vec<i64>> = starts.into_iter().map(|s| s.join().unwrap()).collect();
        assert_eq!(
            applied.iter().filter(|a| !a.is_empty()).count(),
            1,
            "{applied:?}"
        );
        assert!(PgStore::migrate(&config).unwrap().is_empty());
        let store = PgStore::open(&config, HashFunction::Sha256).unwrap();
        let counts = run_blocking(&store.handle.clone(), {
            let pool = store.pool.clone();
            async move {
                let c = client(&pool).await?;
                let n: i64 = timed(c.query_one("SELECT count(*) FROM paycred_migrations", &[]))
                    .await?
                    .get(0);
                Ok(n)
            }
        })
        .unwrap();
        assert_eq!(counts, i64::try_from(migrations::MIGRATIONS.len()).unwrap());
    }

    use crate::store::contract_tests::{ev, intent, keep, pm, SCOPE};

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
