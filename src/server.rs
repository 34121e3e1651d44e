//! Start-up: opens the store and the keys, builds the shared [`App`] and the pingora server
//! with paycred's listener, the metrics listener and the reload on SIGHUP. Tests and benches
//! build the same server.

use crate::app::App;
use crate::config::Config;
use crate::edge::idle::IdleWait;
use crate::edge::live::{Live, Reloader};
use crate::edge::metrics::MetricsPage;
use crate::edge::tls::listener::TlsListener;
use crate::edge::tls::{server_config, TlsAccept};
use crate::proxy::Proxy;
use arc_swap::ArcSwap;
use pingora::apps::ServerApp;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::listening::Service;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Vault(#[from] crate::vault::VaultError),
    /// The store did not open (the message names the directory or the database).
    #[error("store: {0}")]
    Store(String),
    #[error("listener: {0}")]
    Listener(String),
}

/// The master key of `config`, holding the previous one too when `previous_master_key` names
/// one (a rotation under way: docs/operations.md). With a `pkcs11` or `aws_kms` provider this
/// is the one call to the HSM or KMS ([`crate::vault::provider`]).
pub fn master_key(config: &Config) -> Result<crate::vault::master::MasterKey, StartError> {
    use crate::vault::provider::{load, Which};
    let from_env = std::env::var_os(crate::vault::master::MASTER_KEY_ENV).is_some();
    crate::config::private::key_files("master_key", &config.master_key, from_env)?;
    let master = load(Which::Current, &config.master_key)?;
    Ok(match &config.previous_master_key {
        Some(previous) => {
            crate::config::private::key_files("previous_master_key", previous, false)?;
            master.with_previous(load(Which::Previous, previous)?)
        }
        None => master,
    })
}

/// Opens the store and keys and builds the shared application state. The data directory and
/// master key file must be their owner's alone ([`crate::config::private`]).
pub fn build_app(config: Config) -> Result<Arc<App>, StartError> {
    crate::config::private::before_start();
    let master = master_key(&config)?;
    build_app_with(config, master)
}

/// [`build_app`] with the master key opened already.
fn build_app_with(
    config: Config,
    master: crate::vault::master::MasterKey,
) -> Result<Arc<App>, StartError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| StartError::Store(format!("data_dir {}: {e}", config.data_dir.display())))?;
    if matches!(config.store, crate::config::store::StoreConfig::Sled) {
        crate::config::private::data_dir(&config.data_dir)?;
    }
    let store = crate::store::open_with(&config, master.head_keys()).map_err(StartError::Store)?;
    let vault = Arc::new(crate::vault::Vault::new(
        master,
        store.clone(),
        config.cvc_retention,
    ));
    vault.check_master_key(config.projects.keys().map(String::as_str))?;
    let now = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap_or(0);
    vault.attach_cvc_ratchet(now)?;
    vault.attach_sandbox_secret()?;
    spawn_cvc_sweeper(Arc::downgrade(&vault));
    crate::edge::idempotency::spawn_sweeper(Arc::downgrade(&store));
    let clock = Arc::new(crate::clock::SystemClock);
    let app = Arc::new(App::new(config, store, vault, clock));
    crate::service::intents::spawn_finalizer(Arc::downgrade(&app));
    crate::service::retention::spawn_pruner(Arc::downgrade(&app));
    Ok(app)
}

/// How long an upgrading server waits for the server it replaces to let the store go (that
/// one drains its requests first: `server.grace_period` and `graceful_shutdown_timeout`).
const UPGRADE_STORE_WAIT: Duration = Duration::from_secs(120);

/// [`build_app`], retried while the store cannot be opened (the embedded store is locked by
/// the process being replaced until it exits), for at most `wait`.
/// The master key is opened once (an HSM or KMS is asked once).
fn build_app_after(config: Config, wait: Duration) -> Result<Arc<App>, StartError> {
    crate::config::private::before_start();
    let master = master_key(&config)?;
    let deadline = std::time::Instant::now() + wait;
    let mut logged = false;
    loop {
        match build_app_with(config.clone(), master.clone()) {
            Err(StartError::Store(why)) if std::time::Instant::now() < deadline => {
                if !logged {
                    tracing::info!(
                        "upgrade: waiting for the running server to release the store ({why})"
                    );
                    logged = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            built => return built,
        }
    }
}

/// Destroys expired CVC keys even when no request touches them.
fn spawn_cvc_sweeper(vault: std::sync::Weak<crate::vault::Vault>) {
    let _ = std::thread::Builder::new()
        .name("paycred-cvc-sweep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            let Some(vault) = vault.upgrade() else { return };
            let now = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap_or(0);
            vault.sweep_cvc_keys(now);
        });
}

/// Builds the pingora server with paycred's listener (and the metrics listener, if
/// configured); SIGHUP reloads `config_path` from then on. Call `run` on it; once it returns,
/// `close` the store it gives too (background work may still hold it as the process ends).
///
/// With `upgrade`, the listening sockets come from the running server being replaced (pingora's
/// hand-over: it sends them when it gets SIGQUIT, within 5 s of this start), and the store is
/// opened once that server has let it go: connections wait in the sockets' backlog meanwhile
/// instead of being refused.
pub fn build_server(
    config: Config,
    config_path: &Path,
    upgrade: bool,
) -> Result<(Server, Arc<dyn crate::store::Store>), StartError> {
    let server_conf = ServerConf {
        threads: config.server.threads,
        grace_period_seconds: Some(config.server.grace_period.as_secs()),
        graceful_shutdown_timeout_seconds: Some(config.server.graceful_shutdown_timeout.as_secs()),
        upstream_keepalive_pool_size: config.server.upstream_keepalive_pool_size,
        // One worker thread has nobody to steal from; without stealing, pingora runs it as a
        // current-thread runtime, which runs woken tasks in order: an HTTP/2 connection's task
        // then runs after the stream tasks that are ready, and sends their answers in one
        // write instead of one each (docs/performance.md).
        work_stealing: config.server.threads > 1,
        pid_file: pid_file(&config).display().to_string(),
        upgrade_sock: config
            .data_dir
            .join("paycred-upgrade.sock")
            .display()
            .to_string(),
        ..ServerConf::default()
    };
    let listen = config.listen;
    let tls = config.tls.clone();
    let metrics_listen = config.metrics.listen;
    let head_read_timeout = config.server.head_read_timeout;
    let pid_file = pid_file(&config);
    let opt = pingora::server::configuration::Opt {
        upgrade,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(Some(opt), server_conf);
    server.bootstrap();
    let app = if upgrade {
        build_app_after(config, UPGRADE_STORE_WAIT)?
    } else {
        build_app(config)?
    };
    // The proxy lives as long as the server: a reload keeps its connections.
    let proxy = Proxy::new(&app.config.server);
    let page = Arc::new(MetricsPage {
        metrics: app.metrics.clone(),
        store: app.store.clone(),
        proxy: proxy.stats(),
    });
    let live = Arc::new(ArcSwap::from_pointee(
        Live::new(app).map_err(StartError::Listener)?,
    ));
    if let Some(browser) = app_browser_proxy(&live)? {
        server.add_service(browser);
    }
    let running = Arc::downgrade(&live);
    crate::delivery::spawn(Box::new(move || {
        let live = running.upgrade()?.load_full();
        Some((live.app.clone(), live.ca_roots.clone()))
    }));
    Reloader::new(config_path.to_path_buf(), &live)
        .on_hangup()
        .map_err(|e| StartError::Listener(format!("SIGHUP handler: {e}")))?;
    std::fs::write(&pid_file, format!("{}\n", std::process::id()))
        .map_err(|e| StartError::Listener(format!("{}: {e}", pid_file.display())))?;
    let mut proxy = pingora::proxy::http_proxy(
        &server.configuration,
        crate::edge::gateway::Gateway::new(live, page.clone(), proxy),
    );
    proxy.h2_options = Some(h2_options());
    let app = IdleWait::new(proxy, head_read_timeout);
    // TLS has a listener of its own (edge::tls::listener). The plain one is pingora's, with
    // no L4 read buffer (pingora's default is 64 KiB per connection, kept while it idles):
    // the HTTP/1 reader has a header buffer of its own.
    match tls {
        Some(tls) => {
            let config = server_config(&tls.cert_file, &tls.key_file, tls.http2)
                .map_err(StartError::Listener)?;
            let accept = TlsAccept::new(config, app, page.metrics.clone());
            server.add_service(TlsListener::new(listen, accept));
        }
        None => {
            let buffers = L4BufferSettings::default().read(0);
            let listener = ListenerConfig::tcp(listen.to_string()).l4_buffer(buffers);
            server.add_service(listening(app, listener));
        }
    }
    if let Some(addr) = metrics_listen {
        let mut metrics = Service::new("paycred-metrics".to_string(), (*page).clone());
        metrics.add_tcp(&addr.to_string());
        server.add_service(metrics);
    }
    Ok((server, page.store.clone()))
}

/// The browser proxy of `browser_proxy:`, if configured: its CA loaded and checked (an error
/// names the file), serving under whatever configuration `live` holds.
fn app_browser_proxy(
    live: &Arc<ArcSwap<Live>>,
) -> Result<Option<crate::browser::forward::BrowserProxy>, StartError> {
    let app = live.load().app.clone();
    let Some(browser) = app.config.browser_proxy.clone() else {
        return Ok(None);
    };
    let interceptor = crate::browser::ca::Ca::load(&browser.ca_cert_file, &browser.ca_key_file)
        .and_then(|ca| crate::browser::ca::Interceptor::new(ca, app.clock.clone()))
        .map_err(|e| StartError::Listener(format!("browser_proxy.ca: {e}")))?;
    let running = Arc::downgrade(live);
    let current = Box::new(move || {
        let live = running.upgrade()?.load_full();
        Some((live.app.clone(), live.ca_roots.clone()))
    });
    Ok(Some(crate::browser::forward::BrowserProxy::new(
        browser.listen,
        interceptor,
        current,
    )))
}

/// HTTP/2 flow-control windows for callers' uploads: a stream may have [`H2_STREAM_WINDOW`]
/// bytes in flight and a connection [`H2_CONNECTION_WINDOW`], so a 1 MiB body on each of a
/// connection's streams is not paced by round trips as it is under HTTP/2's 64 KiB defaults.
/// Window credit is given back only as paycred reads a body, so a connection buffers at most
/// its window, however slowly its bodies are forwarded. Every other setting is pingora's
/// (100 streams a connection, 64 KiB of headers).
fn h2_options() -> pingora::protocols::http::v2::server::H2Options {
    let mut options = pingora::protocols::http::v2::server::default_h2_options();
    options
        .initial_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW);
    options
}

/// A caller's HTTP/2 stream window: 256 KiB.
const H2_STREAM_WINDOW: u32 = 256 * 1024;
/// A caller's HTTP/2 connection window, all its streams together: 1 MiB.
const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;

/// paycred's service: `app` on `listener`.
fn listening<A: ServerApp + Send + Sync + 'static>(app: A, listener: ListenerConfig) -> Service<A> {
    let mut service = Service::new("paycred".to_string(), app);
    service.add_listener(listener);
    service
}

/// The file holding the running server's process id (`paycred reload` signals it).
pub fn pid_file(config: &Config) -> PathBuf {
    config.data_dir.join("paycred.pid")
}
