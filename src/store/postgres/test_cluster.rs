//! A real PostgreSQL for tests: the server `PAYCRED_TEST_DATABASE_URL` names, else a throwaway
//! cluster this process starts once (Debian's `postgresql`: `initdb` and `pg_ctl` in a temp
//! dir on a free port, run as the `postgres` user through `runuser` when the tests run as
//! root, since PostgreSQL refuses root). A watcher stops the cluster and removes its
//! directory when the test process ends. Each test gets its own database
//! ([`fresh_database`]), so tests run in parallel.

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
        };
        run(
            as_postgres(&cluster.bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
                .arg(cluster.data()),
            "initdb",
        )?;
        cluster.up()?;
        // The watcher: when this process ends, the cluster stops and its directory goes.
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

    /// The admin URL (database `postgres`).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again), on the same port; waits until it accepts connections.
    pub fn up(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400 -c shared_buffers=32MB",
            self.port,
            self.dir.display()
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
    let admin = admin.to_string();
    std::thread::spawn(move || -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .map_err(|e| {
                    format!(
                        "test server: {}",
                        e.as_db_error()
                            .map_or(e.to_string(), |d| d.message().to_string())
                    )
                })?;
            tokio::spawn(connection);
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .map_err(|e| format!("CREATE DATABASE: {e}"))
        })
    })
    .join()
    .map_err(|_| "CREATE DATABASE panicked".to_string())??;
    Ok(url)
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
