//! The `paycred` command line: `serve` runs the server ([`crate::server`]); the other
//! commands work on the config, the keys and the store of a deployment.
//!
//! - [`keys`]: `data-key`, `client-key`, `master-key [create | rotate]`.
//! - [`audit`]: `audit [--verify [--head FILE]]`, `audit head`, `audit accept-head`.
//! - [`ca`]: `ca --out DIR`, the browser proxy's interception CA.
//!
//! May import anything below it; nothing imports it but `main.rs`.

pub mod audit;
pub mod ca;
pub mod keys;

use crate::config::Config;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "paycred", version, about = "Payment credential service")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service.
    Serve {
        /// Configuration file.
        #[arg(short = 'c', long = "config", conflicts_with = "dev")]
        config: Option<PathBuf>,
        /// A ready local setup in ./paycred-dev (keys, project `dev`, localhost targets).
        #[arg(long)]
        dev: bool,
        /// Directory of the --dev setup.
        #[arg(long, default_value = "./paycred-dev", requires = "dev")]
        dev_dir: PathBuf,
        /// Listen address for --dev: loopback only, since the dev setup serves the demo,
        /// whose session route hands out tokens.
        #[arg(long, default_value = "127.0.0.1:8080", requires = "dev")]
        listen: SocketAddr,
        /// Take over from the server running with the same config: start this, then send the
        /// old one SIGQUIT (within 5 s); it hands over its listening sockets and drains, and
        /// this one serves once the old one has released the store.
        #[arg(long, conflicts_with = "dev")]
        upgrade: bool,
        /// For --dev: an origin (`http://localhost:5173`) whose pages may call the public
        /// role's routes; repeat for more. Default: the Vite dev server's.
        #[arg(long = "allow-origin", value_name = "ORIGIN", requires = "dev")]
        allow_origins: Vec<String>,
        /// For --dev: the browser checkout proxy's address, loopback only. Default: the
        /// --listen port's next one (127.0.0.1:8081).
        #[arg(long, value_name = "ADDR", requires = "dev")]
        browser_proxy_listen: Option<SocketAddr>,
    },
    /// Mint a development JWT signed with a private key.
    Jwt {
        /// PEM private key (RSA → RS256, P-256 → ES256, Ed25519 → EdDSA): PKCS#8, or the
        /// traditional RSA PRIVATE KEY or EC PRIVATE KEY that `openssl` writes.
        #[arg(long)]
        key: PathBuf,
        /// Key id for the token header.
        #[arg(long)]
        kid: Option<String>,
        /// Project id (`iss`).
        #[arg(long)]
        project: String,
        /// Entity id (`sub`).
        #[arg(long)]
        sub: String,
        /// `private` or `public`.
        #[arg(long, value_parser = ["private", "public"])]
        role: String,
        /// Lifetime, e.g. 5m.
        #[arg(long, default_value = "5m")]
        ttl: humantime::Duration,
    },
    /// Make an interception CA for the browser proxy: writes DIR/ca.pem and DIR/ca-key.pem
    /// (0600), never over an existing file, and prints how to configure and trust it.
    Ca {
        /// Directory to write into (made if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Validate a configuration file (the same checks as `serve`).
    Check {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Make the running server re-read its configuration file: checks the file, then sends
    /// the server SIGHUP (its log says what the reload changed).
    Reload {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Apply the PostgreSQL schema migrations the database lacks, and exit (`serve` applies
    /// them at start too, under the same advisory lock).
    Migrate {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Move a deployment between stores.
    Store {
        #[command(subcommand)]
        action: StoreAction,
    },
    /// Print the audit log (one JSON entry a line); --verify proves its hash chain and its
    /// head's MAC; `head` prints the head to keep elsewhere. On sled, run with the server
    /// stopped; on PostgreSQL, while the servers run.
    #[command(args_conflicts_with_subcommands = true)]
    Audit {
        #[command(subcommand)]
        action: Option<AuditAction>,
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
        /// Check every link of the chain and the recorded head's MAC; exit 1 naming the first
        /// broken entry's seq, or the head as forged or unauthenticated.
        #[arg(long)]
        verify: bool,
        /// With --verify: a head printed by `paycred audit head` earlier, which the log must
        /// still hold (a log rolled back before it, or rewritten, is named as such).
        #[arg(long = "head", value_name = "FILE", requires = "verify")]
        head: Option<PathBuf>,
    },
    /// Client encryption keys (`encryptedCard`): list, rotate, retire. On sled, run with the
    /// server stopped; on PostgreSQL, running servers take a change up when they restart.
    ClientKey {
        #[command(subcommand)]
        action: ClientKeyAction,
        #[arg(short = 'c', long = "config", global = true)]
        config: Option<PathBuf>,
        /// Project id.
        #[arg(long, global = true)]
        project: Option<String>,
    },
    /// Data keys (they seal card numbers and credentials): list, rotate. On sled, run with the
    /// server stopped; on PostgreSQL, running servers take a change up when they restart.
    DataKey {
        #[command(subcommand)]
        action: DataKeyAction,
        #[arg(short = 'c', long = "config", global = true)]
        config: Option<PathBuf>,
        /// Project id.
        #[arg(long, global = true)]
        project: Option<String>,
    },
    /// Print a new random master key (64 hex characters), or write it to a new file that only
    /// its owner can read; `create` makes the key a config names (a file, or a root key
    /// wrapped by an HSM or KMS); `rotate` wraps every stored key by a new master key.
    #[command(args_conflicts_with_subcommands = true)]
    MasterKey {
        #[command(subcommand)]
        action: Option<MasterKeyAction>,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum AuditAction {
    /// Print the recorded head (seq, hash, MAC) as one JSON line, to keep apart from the
    /// deployment and give to `paycred audit --verify --head FILE` later.
    Head {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Accept the recorded head the server refuses at start (it carries no MAC, or one that
    /// does not verify) once you have checked the log (`paycred audit --verify --head FILE`):
    /// proves the chain and that it holds the head, then MACs the head under the master key.
    /// On sled, run with the server stopped.
    AcceptHead {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum MasterKeyAction {
    /// Make the master key the config's `master_key` names, for a new deployment or the new
    /// key of a rotation: a new key file (`provider: file`), or a new root key wrapped by the
    /// HSM or KMS in `wrapped_key_file` (`pkcs11`, `aws_kms`). Never replaces a file.
    Create {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Wrap every key the store keeps (data, fingerprint and client-encryption keys, the CVC
    /// ratchet, the sandbox issuer's secret) and the audit head's MAC by a new master key;
    /// card data is not re-encrypted. Safe to run again after a crash. On sled, run with the
    /// server stopped; on PostgreSQL, while the servers run (docs/operations.md).
    Rotate {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// The new master key's file. Without it, the config's `master_key` is the new key
        /// and its `previous_master_key` the old one (of any providers: docs/operations.md).
        #[arg(long = "new-key")]
        new_key: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum StoreAction {
    /// Copy everything of a sled store (server stopped) into a PostgreSQL database, still
    /// sealed; safe to run again; checks the rows and the audit chain at the end.
    Copy {
        /// Config of the sled deployment.
        #[arg(long)]
        from: PathBuf,
        /// Config of the PostgreSQL deployment (the same master key).
        #[arg(long)]
        to: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum DataKeyAction {
    /// List the project's data keys: the current one seals, the others still open.
    List,
    /// Add a data key and make it current; values sealed before keep opening with theirs.
    Rotate,
}

#[derive(Subcommand)]
pub enum ClientKeyAction {
    /// List the project's keys (current, still decrypting, retired).
    List,
    /// Add a key and make it current; older keys keep decrypting until retired.
    Rotate,
    /// Refuse `encryptedCard`s made with this key from now on.
    Retire {
        #[arg(long)]
        kid: String,
    },
}

/// The loaded config and the project of a key command, which needs both `-c` and
/// `--project`; or the failure to exit with.
fn project_config(
    command: &str,
    config: Option<PathBuf>,
    project: Option<String>,
) -> Result<(Config, String), ExitCode> {
    let (Some(path), Some(project)) = (config, project) else {
        return Err(fail(format!("{command} needs -c FILE and --project P")));
    };
    match Config::load(&path) {
        Ok(config) => Ok((config, project)),
        Err(e) => Err(fail(format!("{}: {e}", path.display()))),
    }
}

/// Prints a command's lines, or fails with its message.
fn print_lines(result: Result<Vec<String>, String>) -> ExitCode {
    match result {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("paycred: {message}");
    ExitCode::FAILURE
}

/// `paycred migrate`: the lines to print.
fn migrate(config: &Config) -> Result<Vec<String>, String> {
    let crate::config::store::StoreConfig::Postgres(pg) = &config.store else {
        return Err("store kind sled has no schema to migrate".into());
    };
    let applied = crate::store::PgStore::migrate(pg).map_err(|e| e.to_string())?;
    let latest = crate::store::postgres::migrations::MIGRATIONS
        .last()
        .map_or(0, |(v, _, _)| *v);
    Ok(vec![if applied.is_empty() {
        format!(
            "{}: schema at version {latest}, nothing to apply",
            pg.url.describe()
        )
    } else {
        format!(
            "{}: applied {applied:?}, schema at version {latest}",
            pg.url.describe()
        )
    }])
}

/// Loads the browser proxy's CA, when the config has one, as `serve` will.
fn browser_ca(config: &Config) -> Result<(), String> {
    match &config.browser_proxy {
        Some(b) => crate::browser::ca::Ca::load(&b.ca_cert_file, &b.ca_key_file)
            .map(drop)
            .map_err(|e| format!("browser_proxy.ca: {e}")),
        None => Ok(()),
    }
}

/// The `serve --dev` flags.
struct Dev {
    dir: PathBuf,
    listen: SocketAddr,
    browser_proxy: Option<SocketAddr>,
    allow_origins: Vec<String>,
}

/// Runs the server until it is stopped (SIGTERM: gracefully; SIGINT: at once).
fn serve(config: Option<PathBuf>, dev: Option<Dev>, upgrade: bool) -> Result<(), String> {
    let path = match dev {
        Some(dev) => dev_setup(&dev)?,
        None => config.ok_or("give -c FILE, or --dev for a local setup")?,
    };
    let config = Config::load(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (server, store) = crate::build_server(config, &path, upgrade).map_err(|e| e.to_string())?;
    server.run(pingora::server::RunArgs::default());
    // Background work may still hold the store as the process ends: close it here.
    store.close();
    Ok(())
}

/// Prepares the `--dev` setup (with the browser proxy's CA, made on the first run), prints
/// how to use it, and gives its config file.
fn dev_setup(dev: &Dev) -> Result<PathBuf, String> {
    let loopback = |a: SocketAddr, flag: &str| match a.ip().is_loopback() {
        true => Ok(a),
        false => Err(format!(
            "{flag} {a}: the dev setup listens on loopback only"
        )),
    };
    let listen = loopback(dev.listen, "--listen")?;
    let browser_proxy = match dev.browser_proxy {
        Some(a) => a,
        None => match dev.listen.port().checked_add(1) {
            Some(port) => SocketAddr::new(dev.listen.ip(), port),
            None => return Err("give --browser-proxy-listen: --listen has the last port".into()),
        },
    };
    let browser_proxy = loopback(browser_proxy, "--browser-proxy-listen")?;
    if browser_proxy == listen {
        return Err("--browser-proxy-listen must differ from --listen".into());
    }
    let ca_dir = dev.dir.join(crate::dev::BROWSER_CA_DIR);
    let ca_cert = ca_dir.join(crate::browser::ca::CERT_FILE);
    if !ca_cert.exists() {
        ca::make(&ca_dir).map_err(|e| format!("--dev setup: {e}"))?;
    }
    let setup = crate::dev::prepare(&dev.dir, listen, browser_proxy, &dev.allow_origins)
        .map_err(|e| format!("--dev setup: {e}"))?;
    println!("{}", crate::dev::banner(&setup, listen));
    println!(
        "Browser checkout proxy on http://{browser_proxy} (sessions for hosts of `localhost`):"
    );
    for line in ca::trust_in_browser(&ca_cert.display().to_string(), browser_proxy) {
        println!("{line}");
    }
    Ok(setup.config_file)
}

/// Sends SIGHUP to the server running with `path`: the process named in its data dir's pid
/// file, if that process is paycred (a stale file may name a pid reused by another program).
fn reload(path: &std::path::Path) -> Result<i32, String> {
    let config = Config::load(path)
        .map_err(|e| format!("{e} (the server was not signalled: it would refuse this file)"))?;
    let pid_file = crate::server::pid_file(&config);
    let text = std::fs::read_to_string(&pid_file)
        .map_err(|e| format!("{}: {e} (is the server running?)", pid_file.display()))?;
    let pid: i32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{}: not a process id", pid_file.display()))?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    if !exe
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("paycred"))
    {
        return Err(format!(
            "{}: process {pid} is not a running paycred",
            pid_file.display()
        ));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .map_err(|e| format!("SIGHUP to {pid}: {e}"))?;
    Ok(pid)
}

/// Runs the command line of `std::env::args`.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config,
            dev,
            dev_dir,
            listen,
            upgrade,
            allow_origins,
            browser_proxy_listen,
        } => {
            let log = crate::ops::logging::init();
            let dev = dev.then_some(Dev {
                dir: dev_dir,
                listen,
                browser_proxy: browser_proxy_listen,
                allow_origins,
            });
            let served = serve(config, dev, upgrade);
            // Written before the error below, and before the process ends.
            drop(log);
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::Jwt {
            key,
            kid,
            project,
            sub,
            role,
            ttl,
        } => {
            let pem = match std::fs::read(&key) {
                Ok(p) => zeroize::Zeroizing::new(p),
                Err(e) => return fail(format!("{}: {e}", key.display())),
            };
            let now = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap_or(0);
            match crate::auth::mint::mint(
                &pem,
                kid.as_deref(),
                &project,
                &sub,
                &role,
                ttl.into(),
                now,
            ) {
                Ok(token) => {
                    println!("{token}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("{}: {e}", key.display())),
            }
        }
        Command::Ca { out } => print_lines(ca::run(&out)),
        Command::Check { config } => match Config::load(&config) {
            Ok(c) => match crate::server::master_key(&c)
                .map_err(|e| e.to_string())
                .and_then(|_| browser_ca(&c))
            {
                Ok(()) => {
                    let store = match &c.store {
                        crate::config::store::StoreConfig::Sled => "sled".to_string(),
                        crate::config::store::StoreConfig::Postgres(pg) => {
                            format!("postgres {}", pg.url.describe())
                        }
                    };
                    println!(
                        "{}: ok ({} projects, store {store})",
                        config.display(),
                        c.projects.len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("{}: {e}", config.display())),
            },
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::Reload { config } => match reload(&config) {
            Ok(pid) => {
                println!("sent SIGHUP to paycred (pid {pid}); its log says how the reload went");
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::ClientKey {
            action,
            config,
            project,
        } => {
            let (config, project) = match project_config("client-key", config, project) {
                Ok(found) => found,
                Err(code) => return code,
            };
            print_lines(keys::client_key(&config, &project, action))
        }
        Command::DataKey {
            action,
            config,
            project,
        } => {
            let (config, project) = match project_config("data-key", config, project) {
                Ok(found) => found,
                Err(code) => return code,
            };
            print_lines(keys::data_key(&config, &project, action))
        }
        Command::Store {
            action: StoreAction::Copy { from, to },
        } => {
            let load =
                |path: &PathBuf| Config::load(path).map_err(|e| format!("{}: {e}", path.display()));
            print_lines(
                load(&from)
                    .and_then(|f| Ok((f, load(&to)?)))
                    .and_then(|(f, t)| {
                        // The same master key on both sides: the copied head is MACed by it.
                        let master = crate::server::master_key(&t).map_err(|e| e.to_string())?;
                        crate::store::copy::run(&f, &t, master.head_keys())
                    }),
            )
        }
        Command::Migrate { config } => match Config::load(&config) {
            Ok(c) => print_lines(migrate(&c)),
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::Audit {
            action: Some(AuditAction::Head { config }),
            ..
        } => match Config::load(&config) {
            Ok(c) => match audit::head(&c, &mut std::io::stdout().lock()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            },
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::Audit {
            action: Some(AuditAction::AcceptHead { config }),
            ..
        } => match Config::load(&config) {
            Ok(c) => match audit::accept_head(&c, &mut std::io::stdout().lock()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            },
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::Audit {
            action: None,
            config,
            verify,
            head,
        } => {
            let Some(config) = config else {
                return fail("audit needs -c FILE");
            };
            match Config::load(&config) {
                Ok(c) => {
                    let out = &mut std::io::stdout().lock();
                    match audit::run(&c, verify, head.as_deref(), out) {
                        Ok(()) => ExitCode::SUCCESS,
                        Err(e) => fail(e),
                    }
                }
                Err(e) => fail(format!("{}: {e}", config.display())),
            }
        }
        Command::MasterKey {
            action: Some(MasterKeyAction::Rotate { config, new_key }),
            ..
        } => match Config::load(&config) {
            Ok(c) => print_lines(keys::rotate_master_key(&c, new_key.as_deref())),
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::MasterKey {
            action: Some(MasterKeyAction::Create { config }),
            ..
        } => match Config::load(&config) {
            Ok(c) => print_lines(keys::create_master_key(&c)),
            Err(e) => fail(format!("{}: {e}", config.display())),
        },
        Command::MasterKey { action: None, out } => {
            let key = crate::vault::master::MasterKey::generate_hex();
            match out {
                Some(path) => match crate::dev::write_private(&path, key.as_bytes()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(format!("{}: {e}", path.display())),
                },
                None => {
                    println!("{}", key.as_str());
                    ExitCode::SUCCESS
                }
            }
        }
    }
}
