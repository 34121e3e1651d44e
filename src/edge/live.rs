//! The configuration a request runs under, and its reload without downtime.
//!
//! [`Live`] is everything that follows the config file: the [`App`] of the current config
//! (projects, their JWT keys, proxy rules and limits), the rate limiters and the proxy's CA
//! roots. The gateway takes one `Arc<Live>` when a request starts and keeps it to the end, so
//! a request in flight finishes under the configuration it started with.
//!
//! [`Reloader::reload`] (on SIGHUP, which `paycred reload` sends) reads the file again, checks
//! it as `paycred check` and a start do, and swaps a new [`Live`] in whole; a file that fails
//! keeps the running configuration, and the log says why. What a running process cannot change
//! (listeners, TLS, the store, the master key, worker threads) keeps its
//! running value, and the log names each such key that differs in the file.

use super::ratelimit::sync::SharedLimits;
use super::ratelimit::Limiter;
use crate::app::App;
use crate::config::Config;
use crate::proxy::CaRoots;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

/// The state of one configuration.
pub struct Live {
    pub app: Arc<App>,
    pub limits: Limiter,
    pub ca_roots: CaRoots,
}

impl Live {
    /// The state of `app`'s configuration, with fresh rate-limit buckets (shared with the
    /// other instances when the store shares them).
    pub fn new(app: Arc<App>) -> Result<Live, String> {
        let ca_roots = crate::proxy::load_ca_roots(&app.config.projects)?;
        let shared = match app.store.shares_rate_limits() {
            true => Some(
                SharedLimits::start(&app.store).map_err(|e| format!("shared rate limits: {e}"))?,
            ),
            false => None,
        };
        Ok(Live {
            limits: Limiter::with_shared(&app.config.projects, shared),
            ca_roots,
            app,
        })
    }
}

/// `file` with the running values of the settings a reload cannot change (listeners, TLS,
/// the store, the master key, worker threads, ...), and the config keys of those whose value
/// in the file differs.
fn keep_restart_only(running: &Config, mut file: Config) -> (Config, Vec<&'static str>) {
    let mut changed = Vec::new();
    let mut keep = |key: &'static str, differs: bool| {
        if differs {
            changed.push(key);
        }
        differs
    };
    if keep("listen", running.listen != file.listen) {
        file.listen = running.listen;
    }
    if keep("tls", running.tls != file.tls) {
        file.tls = running.tls.clone();
    }
    if keep("data_dir", running.data_dir != file.data_dir) {
        file.data_dir = running.data_dir.clone();
    }
    if keep("master_key", running.master_key != file.master_key) {
        file.master_key = running.master_key.clone();
    }
    if keep(
        "previous_master_key",
        running.previous_master_key != file.previous_master_key,
    ) {
        file.previous_master_key = running.previous_master_key.clone();
    }
    if keep("cvc_retention", running.cvc_retention != file.cvc_retention) {
        file.cvc_retention = running.cvc_retention;
    }
    // The pruner runs with the configuration the server started with.
    if keep("retention", running.retention != file.retention) {
        file.retention = running.retention;
    }
    if keep("audit_hash", running.audit_hash != file.audit_hash) {
        file.audit_hash = running.audit_hash;
    }
    if keep("server", running.server != file.server) {
        file.server = running.server.clone();
    }
    if keep(
        "metrics.listen",
        running.metrics.listen != file.metrics.listen,
    ) {
        file.metrics.listen = running.metrics.listen;
    }
    // Debug names the backend, host, database and pool, never the password; a changed
    // password alone is not named, and the running store is kept all the same.
    keep(
        "store",
        format!("{:?}", running.store) != format!("{:?}", file.store),
    );
    file.store = running.store.clone();
    (file, changed)
}

/// What a reload changed.
#[derive(Debug, PartialEq, Eq)]
pub struct Reloaded {
    pub projects: usize,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Keys that differ in the file but keep their running value until a restart.
    pub need_restart: Vec<&'static str>,
}

/// Swaps in the configuration of a file.
pub struct Reloader {
    path: PathBuf,
    /// Weak: the server's end drops the store (and so flushes what it keeps in memory),
    /// which a reloader waiting for a signal must not prevent.
    live: Weak<ArcSwap<Live>>,
    /// One reload at a time: two at once would each start from the same running state.
    running: Mutex<()>,
}

impl Reloader {
    pub fn new(path: PathBuf, live: &Arc<ArcSwap<Live>>) -> Self {
        Self {
            path,
            live: Arc::downgrade(live),
            running: Mutex::new(()),
        }
    }

    /// Reads and checks the file and swaps its configuration in; on any error the running
    /// configuration stays.
    pub fn reload(&self) -> Result<Reloaded, String> {
        let _one = self.running.lock();
        let file = Config::load(&self.path).map_err(|e| e.to_string())?;
        let live = self.live.upgrade().ok_or("the server is stopping")?;
        let current = live.load_full();
        let running = &current.app.config;
        let (config, need_restart) = keep_restart_only(running, file);
        let added: Vec<String> = config
            .projects
            .keys()
            .filter(|id| !running.projects.contains_key(*id))
            .cloned()
            .collect();
        let removed: Vec<String> = running
            .projects
            .keys()
            .filter(|id| !config.projects.contains_key(*id))
            .cloned()
            .collect();
        // A project added back whose stored keys the master key cannot open is refused here,
        // as at start.
        current
            .app
            .vault
            .check_master_key(added.iter().map(String::as_str))
            .map_err(|e| e.to_string())?;
        let app = Arc::new(current.app.reconfigured(config));
        let next = Live {
            ca_roots: crate::proxy::load_ca_roots(&app.config.projects)?,
            limits: current.limits.reconfigured(&app.config.projects),
            app,
        };
        let projects = next.app.config.projects.len();
        live.store(Arc::new(next));
        Ok(Reloaded {
            projects,
            added,
            removed,
            need_restart,
        })
    }

    /// [`Self::reload`], its outcome logged.
    pub fn reload_and_log(&self) {
        match self.reload() {
            Ok(r) => tracing::info!(
                projects = r.projects,
                added = ?r.added,
                removed = ?r.removed,
                needs_restart = ?r.need_restart,
                "configuration reloaded from {}",
                self.path.display()
            ),
            Err(e) => tracing::error!(
                "configuration not reloaded, the running one stays: {}: {e}",
                self.path.display()
            ),
        }
    }

    /// Reloads on every SIGHUP, from a thread of its own. The handler is installed before this
    /// returns: from then on SIGHUP no longer ends the process.
    pub fn on_hangup(self) -> std::io::Result<()> {
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
        std::thread::Builder::new()
            .name("paycred-reload".into())
            .spawn(move || {
                for _ in signals.forever() {
                    self.reload_and_log();
                }
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "listen: 127.0.0.1:8080\nmaster_key_file: /k\n";

    fn config(extra: &str) -> Config {
        Config::from_yaml(&format!("{BASE}{extra}")).unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn settings_a_reload_cannot_change_keep_their_running_values_and_are_named() {
        let running = config("server: {threads: 2}\n");
        let file = config("server: {threads: 4}\ncvc_retention: 5m\nrest_max_body: 4096\n");
        let (kept, changed) = keep_restart_only(&running, file);
        assert_eq!(changed, ["cvc_retention", "server"]);
        assert_eq!(kept.server.threads, 2);
        assert_eq!(kept.cvc_retention, running.cvc_retention);
        assert_eq!(kept.rest_max_body, 4096);
        assert!(
            keep_restart_only(&running, config("server: {threads: 2}\n"))
                .1
                .is_empty()
        );
    }
}
