//! A real PostgreSQL for tests: the server `PAYCRED_TEST_DATABASE_URL` names, else a throwaway
//! cluster this process starts once (Debian's `postgresql`: `initdb` and `pg_ctl` in a temp
//! dir on a free port, run as the `postgres` user through `runuser` when the tests run as
//! root, since PostgreSQL refuses root). A watcher stops the cluster and removes its
//! directory when the test process ends. Each test gets its own database
//! ([`fresh_database`]), so tests run in parallel. A test that fails over starts a
//! [`Cluster`] of its own and a synchronous standby of it ([`Cluster::standby`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Names a server to use instead of a throwaway cluster (`postgres://user@host:port/db`; the
/// user may create databases).
pub const URL_ENV: &str = "PAYCRED_TEST_DATABASE_URL";

/// The server's admin URL (ending in `/postgres`), or why there is none.
fn server() -> Result<&'static str, String> {
    static SERVER: OnceLock<Result<String, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| match std::env::var(URL_ENV) {
            Ok(url) => Ok(url),
            Err(_) => start_cluster(),
        })
        .as_deref()
        .map_err(Clone::clone)
}

/// The directory of PostgreSQL's server programs (Debian keeps them out of `PATH`).
fn bin_dir() -> Result<PathBuf, String> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL is not installed (scripts/setup installs it)".to_string())?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .ok_or_else(|| "no initdb under /usr/lib/postgresql (scripts/setup installs it)".into())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `program args` as the `postgres` user when root, else as is.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn start_cluster() -> Result<String, String> {
    let cluster = Cluster::start()?;
    let url = cluster.url();
    // The shared cluster lives as long as the process; its watcher stops it then.
    std::mem::forget(cluster);
    Ok(url)
}

/// A throwaway cluster of its own (a test that stops and starts PostgreSQL); stopped and
/// removed on drop, or by its watcher when the process ends first.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// `cluster_name`: the `application_name` a standby streams under.
    name: String,
}

fn run(c: &mut Command, what: &str) -> Result<(), String> {
    let out = c.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

impl Cluster {
    /// initdb, and the server started on a free port.
    pub fn start() -> Result<Self, String> {
        let cluster = Self::watched("paycred_primary")?;
        run(
            as_postgres(&cluster.bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
                .arg(cluster.data()),
            "initdb",
        )?;
        cluster.up()?;
        Ok(cluster)
    }

    /// A hot standby of this cluster, named `name`, streaming from it (`pg_basebackup -R`
    /// over loopback: initdb's trust rules admit replication from 127.0.0.1), made its
    /// synchronous standby: `synchronous_standby_names` names it, and a commit here returns
    /// once the standby has flushed it (`synchronous_commit = on`).
    pub fn standby(&self, name: &str) -> Result<Self, String> {
        let standby = Self::watched(name)?;
        run(
            as_postgres(&self.bin.join("pg_basebackup"))
                .args(["-R", "-X", "stream", "--no-sync", "-h", "127.0.0.1", "-U"])
                .args(["postgres", "-p", &self.port.to_string(), "-D"])
                .arg(standby.data()),
            "pg_basebackup",
        )?;
        standby.up()?;
        let streaming =
            format!("SELECT state FROM pg_stat_replication WHERE application_name = '{name}'");
        self.until(&streaming, "streaming")?;
        // One statement a query: ALTER SYSTEM runs outside any transaction.
        for sql in [
            format!("ALTER SYSTEM SET synchronous_standby_names = '\"{name}\"'"),
            "ALTER SYSTEM SET synchronous_commit = on".into(),
            "SELECT pg_reload_conf()".into(),
        ] {
            simple_query(&self.url(), &sql)?;
        }
        let sync =
            format!("SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'");
        self.until(&sync, "sync")?;
        Ok(standby)
    }

    /// Waits (at most 20 s) until `sql`'s first value is `value`.
    fn until(&self, sql: &str, value: &str) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let got = simple_query(&self.url(), sql)?;
            if got.first().is_some_and(|v| v == value) {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("{sql}: {got:?}, not {value} within 20 s"));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Promotes this standby to a primary (`pg_ctl promote`); returns once it accepts writes.
    pub fn promote(&self) -> Result<(), String> {
        run(
            as_postgres(&self.bin.join("pg_ctl"))
                .args(["-w", "-s", "-D"])
                .arg(self.data())
                .arg("promote"),
            "pg_ctl promote",
        )
    }

    /// A new directory for a cluster named `name` on a free port, with the watcher that
    /// stops the cluster and removes the directory when this process ends.
    fn watched(name: &str) -> Result<Self, String> {
        let bin = bin_dir()?;
        let dir = std::env::temp_dir().join(format!(
            "paycred-pg-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if is_root() {
            run(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&dir),
                "chown of the cluster directory",
            )?;
        }
        let cluster = Self {
            bin,
            dir,
            port: free_port()?,
            name: name.to_string(),
        };
        let watch = format!(
            "while [ -d /proc/{pid} ]; do sleep 1; done; \
             {pg_ctl} -D {data} -m immediate -s stop; rm -rf {dir}",
            pid = std::process::id(),
            pg_ctl = cluster.bin.join("pg_ctl").display(),
            data = cluster.data().display(),
            dir = cluster.dir.display(),
        );
        as_postgres(Path::new("sh"))
            .args(["-c", &watch])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cluster watcher: {e}"))?;
        Ok(cluster)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The admin URL (database `postgres`).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again), on the same port; waits until it accepts connections.
    pub fn up(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400 -c shared_buffers=32MB -c cluster_name={}",
            self.port,
            self.dir.display(),
            self.name,
        );
        run(
            as_postgres(&self.bin.join("pg_ctl"))
                .args(["-w", "-s", "-l"])
                .arg(self.dir.join("log"))
                .arg("-D")
                .arg(self.data())
                .args(["-o", &options, "start"]),
            "pg_ctl start",
        )
    }

    /// Stops the server: `fast` (connections closed, a clean shutdown) or `immediate`.
    pub fn down(&self, mode: &str) -> Result<(), String> {
        run(
            as_postgres(&self.bin.join("pg_ctl"))
                .args(["-w", "-s", "-m", mode, "-D"])
                .arg(self.data())
                .arg("stop"),
            "pg_ctl stop",
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.down("immediate");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new empty database on the test server; its URL. `Err` says why there is no server.
pub fn fresh_database() -> Result<String, String> {
    database_on(server()?)
}

/// A new empty database on the server of `admin` (an admin URL); its URL.
pub fn database_on(admin: &str) -> Result<String, String> {
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let url = admin
        .rsplit_once('/')
        .map(|(base, _)| format!("{base}/{name}"))
        .ok_or("bad server url")?;
    simple_query(admin, &format!("CREATE DATABASE {name}"))?;
    Ok(url)
}

/// Runs `sql` (statements separated by `;`) on the server of `url`, on a thread and runtime
/// of its own; the first column of each row the statements return.
fn simple_query(url: &str, sql: &str) -> Result<Vec<String>, String> {
    let (url, sql) = (url.to_string(), sql.to_string());
    std::thread::spawn(move || -> Result<Vec<String>, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| {
                format!(
                    "test server: {}",
                    e.as_db_error()
                        .map_or(e.to_string(), |d| d.message().to_string())
                )
            })?;
            tokio::spawn(connection);
            let messages = client
                .simple_query(&sql)
                .await
                .map_err(|e| format!("{sql}: {e}"))?;
            Ok(messages
                .iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some(row.get(0).unwrap_or_default().to_string())
                    }
                    _ => None,
                })
                .collect())
        })
    })
    .join()
    .map_err(|_| "the test server's query panicked".to_string())?
}

/// [`fresh_database`] as a store config with `pool_size`.
pub fn fresh_config(pool_size: usize) -> Result<crate::config::store::PostgresConfig, String> {
    let url = fresh_database()?;
    Ok(crate::config::store::PostgresConfig {
        cache_ttl: super::CACHE_TTL,
        url: crate::config::store::DatabaseUrl::parse(&url)?,
        pool_size,
        ca_file: None,
    })
}
