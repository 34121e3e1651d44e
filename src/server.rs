//! Start-up: opens the store and the keys, builds the shared [`App`] and the pingora server
//! with paycred's listener. Tests and benches build the same server.

use crate::app::App;
use crate::config::Config;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
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

/// Opens the store and keys and builds the shared application state.
pub fn build_app(config: Config) -> Result<Arc<App>, StartError> {
    let master = crate::vault::master::MasterKey::load(&config.master_key_file)?;
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| StartError::Store(format!("data_dir {}: {e}", config.data_dir.display())))?;
    let store = crate::store::open(&config).map_err(StartError::Store)?;
    let vault = Arc::new(crate::vault::Vault::new(
        master,
        store.clone(),
        config.cvc_retention,
    ));
    vault.check_master_key(config.projects.keys().map(String::as_str))?;
    let now = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap_or(0);
    vault.attach_cvc_ratchet(now)?;
    spawn_cvc_sweeper(Arc::downgrade(&vault));
    crate::edge::idempotency::spawn_sweeper(Arc::downgrade(&store));
    let clock = Arc::new(crate::clock::SystemClock);
    Ok(Arc::new(App::new(config, store, vault, clock)))
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

/// Builds the pingora server with paycred's one listener. Call `run` (or `run_forever`) on it.
pub fn build_server(config: Config) -> Result<Server, StartError> {
    let server_conf = ServerConf {
        threads: config.server.threads,
        grace_period_seconds: Some(config.server.grace_period.as_secs()),
        graceful_shutdown_timeout_seconds: Some(config.server.graceful_shutdown_timeout.as_secs()),
        upstream_keepalive_pool_size: config.server.upstream_keepalive_pool_size,
        pid_file: config.data_dir.join("paycred.pid").display().to_string(),
        upgrade_sock: config
            .data_dir
            .join("paycred-upgrade.sock")
            .display()
            .to_string(),
        ..ServerConf::default()
    };
    let listen = config.listen.to_string();
    let tls = config.tls.clone();
    let app = build_app(config)?;
    let ca_roots =
        crate::proxy::load_ca_roots(&app.config.projects).map_err(StartError::Listener)?;
    let mut server = Server::new_with_opt_and_conf(None, server_conf);
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service_with_name(
        &server.configuration,
        crate::edge::gateway::Gateway::new(app, ca_roots),
        "paycred",
    );
    match tls {
        Some(tls) => service
            .add_tls(
                &listen,
                &tls.cert_file.display().to_string(),
                &tls.key_file.display().to_string(),
            )
            .map_err(|e| StartError::Listener(e.to_string()))?,
        None => service.add_tcp(&listen),
    }
    server.add_service(service);
    Ok(server)
}
