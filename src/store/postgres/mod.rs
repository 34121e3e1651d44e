//! The PostgreSQL backend: one database shared by any number of paycred instances.
//!
//! Records keep the sealed forms of [`crate::store::records`] (JSON in `jsonb` columns); the
//! fields the store queries are typed columns beside them (scope, ids, status, uses, times,
//! fingerprint). The schema is versioned ([`migrations`]) and applied at every start under an
//! advisory lock.
//!
//! - Dedup: a UNIQUE index on (project, entity, fingerprint); a create that hits it refreshes
//!   the stored method (`INSERT … ON CONFLICT DO NOTHING`, then the refresh under `FOR UPDATE`).
//! - Mandate usage: one conditional `UPDATE … SET uses = uses + 1 WHERE … RETURNING uses`;
//!   the use that reaches the limit ends its intent in that transaction.
//! - Read-modify-write of a record (verification, cancel on delete): `SELECT … FOR UPDATE` in
//!   the transaction that writes it back.
//! - Audit: a change writes its event into `audit_outbox` in its own transaction; the audit
//!   writer ([`audit::PgSink`]) chains outbox events and its own into `audit_log` and
//!   `audit_head` in one transaction under an advisory lock, so every instance appends to one
//!   order.
//! - Caches ([`cache`], [`listen`](mod@listen)): payment-method records and the newest
//!   active intent of a payment method are kept per instance
//!   ([`RecordCache`](crate::store::pm_cache::RecordCache)), and so are key rows. Every write
//!   that changes one announces it with `pg_notify` in its own transaction
//!   ([`PgStore::commit`]), so the message goes out exactly when the change commits; each
//!   instance LISTENs on a connection of its own and drops what a message names. While that
//!   connection is down the record caches serve nothing, and when it is back they start
//!   empty. Every entry has a hard time to live, [`CACHE_TTL`], so a message lost anyway is
//!   outlived by no entry. The caches never decide a use: mandate usage is the conditional
//!   `UPDATE` above.
//! - Keyrings and client keys are read ahead: all of them at open, again every
//!   [`CACHE_TTL`] / 2 by the listener and at once on a message, and from the database on a
//!   miss; the [`KeyringStore`](crate::store::KeyringStore) methods are synchronous (the
//!   vault keeps them in its own cache), and a write or a miss waits for the database on the
//!   store's runtime ([`PgStore::blocking`]).
//!
//! Each resource's trait is implemented in the file of its name ([`payment_methods`],
//! [`intents`], [`idempotency`], [`keyrings`], [`card_tokens`], [`webhooks`], [`passkeys`],
//! [`browser_sessions`], [`events`], [`retention`], [`audit`], [`rate_limits`]: the shared
//! rate-limit buckets); this file opens the store and holds the pool, the runtime and what
//! those files share (a commit that announces its changes, the timeouts, JSON).
//!
//! The connections live on the store's own small runtime, so they outlive any caller's
//! runtime; every operation is bounded by [`OP_TIMEOUT`] and fails as
//! [`StoreError::Unavailable`] (`503 storeUnavailable`) when the database does not answer.

pub mod audit;
pub mod browser_sessions;
pub mod cache;
pub mod card_tokens;
pub mod copy;
pub mod events;
pub mod idempotency;
pub mod intents;
pub mod keyrings;
pub mod listen;
pub mod migrations;
pub mod passkeys;
pub mod payment_methods;
pub mod rate_limits;
pub mod retention;
#[cfg(any(test, feature = "test-support"))]
pub mod test_cluster;
pub mod webhooks;

use crate::audit::chain::HashFunction;
use crate::audit::head_mac::HeadKeys;
use crate::audit::writer::AuditBatcher;
use crate::audit::AuditEvent;
use crate::config::store::PostgresConfig;
use crate::store::{corrupt, StoreError, StoreHealth, StoreResult, StoreStats};
use async_trait::async_trait;
use cache::Caches;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use listen::{listen, read_keys_ahead, CHANNEL};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::ToSql;

pub use cache::Change;
pub use listen::LISTENER_NAME;

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

/// PostgreSQL-backed [`Store`](crate::store::Store).
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
        store
            .handle
            .spawn(rate_limits::purge_full_buckets(store.pool.clone()));
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

/// The connection settings of `config`. Unless the URL names a `connect_timeout`, each of its
/// hosts gets an equal share of [`OP_TIMEOUT`] to connect in: a host that does not answer (a
/// primary lost with its machine) leaves time to try the next within one operation's bound.
fn listen_config(config: &PostgresConfig) -> tokio_postgres::Config {
    let mut pg_config = config.url.config().clone();
    if pg_config.get_connect_timeout().is_none() {
        let hosts = u32::try_from(pg_config.get_hosts().len()).unwrap_or(u32::MAX);
        pg_config.connect_timeout(OP_TIMEOUT / hosts.max(1));
    }
    pg_config
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

/// An event's or a delivery's number as its column holds it.
fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
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

const OUTBOX: &str = "INSERT INTO audit_outbox (event) VALUES ($1)";

#[async_trait]
impl StoreHealth for PgStore {
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
    fn a_host_that_does_not_answer_leaves_time_for_the_next() {
        // A listener whose queue is full: the kernel drops further connection attempts, as
        // a lost machine leaves them unanswered.
        let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = hole.local_addr().unwrap();
        let mut queued = Vec::new();
        let attempt = || std::net::TcpStream::connect_timeout(&at, Duration::from_millis(200));
        while let Ok(s) = attempt() {
            queued.push(s);
            assert!(queued.len() < 10_000, "the queue never filled");
        }
        // The silent host first, then the test server.
        let url = test_cluster::fresh_database().unwrap();
        let (user, rest) = url.split_once('@').unwrap();
        let config = PostgresConfig {
            url: crate::config::store::DatabaseUrl::parse(&format!(
                "{user}@127.0.0.1:{},{rest}",
                at.port()
            ))
            .unwrap(),
            pool_size: 2,
            ca_file: None,
            cache_ttl: CACHE_TTL,
        };
        assert_eq!(
            listen_config(&config).get_connect_timeout(),
            Some(&(OP_TIMEOUT / 2))
        );
        let started = std::time::Instant::now();
        let store = PgStore::open(&config, HashFunction::Sha256).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(store.ready()).unwrap();
        println!("opened past a silent host in {:?}", started.elapsed());
        assert!(
            started.elapsed() < OP_TIMEOUT * 2,
            "{:?}",
            started.elapsed()
        );
        drop(queued);
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
}
