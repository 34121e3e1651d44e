//! The shared state handed to handlers and the proxy ([`App`]), and [`InFlight`]: the set of
//! operations running now that must not run twice at once.
//!
//! May import: `auth`, `config`, `store`, `vault`, `domain`, `ops`, `clock`.

use crate::auth::Authenticator;
use crate::clock::Clock;
use crate::config::Config;
use crate::domain::issuer::{Issuer, Sandbox};
use crate::ops::metrics::Metrics;
use crate::store::Store;
use crate::vault::Vault;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

/// Everything a handler can reach.
pub struct App {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub vault: Arc<Vault>,
    pub auth: Authenticator,
    pub clock: Arc<dyn Clock>,
    /// Shared by every configuration this process runs (see [`App::reconfigured`]).
    pub metrics: Arc<Metrics>,
    /// Where purchase-intent credentials come from (the sandbox issuer by default).
    pub issuer: Arc<dyn Issuer>,
    /// Purchase intents whose verification is running (a second one at once is 409).
    pub verifying: InFlight<String>,
}

impl App {
    /// The state of a server with `config`, its store and vault, reading time from `clock`:
    /// the sandbox issuer keyed by the secret the vault keeps (so its cryptograms survive
    /// restarts and master-key rotations), authentication of the config's projects.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        vault: Arc<Vault>,
        clock: Arc<dyn Clock>,
    ) -> App {
        let issuer = Arc::new(Sandbox::new(vault.sandbox_secret()));
        App {
            auth: Authenticator::new(config.projects.clone()),
            config: Arc::new(config),
            store,
            vault,
            clock,
            metrics: Arc::default(),
            issuer,
            verifying: InFlight::default(),
        }
    }

    /// The state of this server under a new `config`: the same store, keys, issuer, metrics
    /// and running verifications; the projects (their keys, proxy rules, limits) of `config`.
    /// A reload swaps it in whole, so a request runs under one configuration from start to
    /// end.
    pub fn reconfigured(&self, config: Config) -> App {
        App {
            auth: Authenticator::new(config.projects.clone()),
            config: Arc::new(config),
            store: self.store.clone(),
            vault: self.vault.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
            issuer: self.issuer.clone(),
            verifying: self.verifying.clone(),
        }
    }

    /// Unix seconds now.
    pub fn now_secs(&self) -> u64 {
        u64::try_from(self.clock.now().unix_timestamp()).unwrap_or(0)
    }

    /// Unix microseconds now (how records keep time).
    pub fn now_micros(&self) -> i64 {
        i64::try_from(self.clock.now().unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
    }
}

/// Keys of operations running now. [`InFlight::enter`] takes a key for as long as its
/// [`Held`] lives.
#[derive(Debug)]
pub struct InFlight<K> {
    keys: Arc<Mutex<HashSet<K>>>,
}

impl<K> Default for InFlight<K> {
    fn default() -> Self {
        Self {
            keys: Arc::default(),
        }
    }
}

impl<K> Clone for InFlight<K> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
        }
    }
}

/// A key taken in an [`InFlight`]; released on drop, however the operation ends.
#[derive(Debug)]
pub struct Held<K: Eq + Hash> {
    keys: Arc<Mutex<HashSet<K>>>,
    key: Option<K>,
}

impl<K: Eq + Hash + Clone> InFlight<K> {
    /// Takes `key`, or `None` while another holder has it.
    pub fn enter(&self, key: K) -> Option<Held<K>> {
        self.keys.lock().insert(key.clone()).then(|| Held {
            keys: self.keys.clone(),
            key: Some(key),
        })
    }
}

impl<K: Eq + Hash> Drop for Held<K> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.keys.lock().remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_once_until_released() {
        let set = InFlight::default();
        let held = set.enter("a".to_string());
        assert!(held.is_some());
        assert!(set.enter("a".to_string()).is_none());
        assert!(set.clone().enter("b".to_string()).is_some());
        drop(held);
        assert!(set.enter("a".to_string()).is_some());
    }
}
