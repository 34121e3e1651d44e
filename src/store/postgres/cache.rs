//! What an instance keeps in memory (`Caches`): payment-method records and the newest
//! active intent of a payment method ([`RecordCache`]), and the key rows; and the changes
//! that make other instances drop an entry ([`Change`], announced on commit:
//! `PgStore::commit`, heard by [`listen`](mod@super::listen)).

use crate::domain::issuer::CredentialType;
use crate::store::pm_cache::RecordCache;
use crate::store::{IntentRecord, PaymentMethodRecord, Scope};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Key rows by project, with when they were read.
pub(super) type KeyCache = RwLock<HashMap<String, (Vec<u8>, std::time::Instant)>>;

/// What an instance keeps in memory, shared with its listener ([`listen`](mod@super::listen)).
#[derive(Default)]
pub(super) struct Caches {
    pub(super) pms: RecordCache<PaymentMethodRecord>,
    /// The newest active intent by payment method and credential type ([`newest_key`]).
    pub(super) newest: RecordCache<Option<IntentRecord>>,
    pub(super) keyrings: KeyCache,
    pub(super) client_keys: KeyCache,
    /// Messages applied so far.
    pub(super) heard: AtomicU64,
}

impl Caches {
    /// Record caches whose entries are served for at most `ttl`.
    pub(super) fn new(ttl: Duration) -> Self {
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
    pub(super) fn forget(&self, change: &Change) {
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
    pub(super) fn listening(&self, on: bool) {
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

/// A change other instances' caches must drop, as announced on
/// `CHANNEL` ([`listen`](mod@super::listen)) (a JSON object with its `kind`).
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
pub(super) fn pm_key(project: &str, entity: &str, id: &str) -> Vec<u8> {
    [project, entity, id].join("\0").into_bytes()
}

/// The cache key of a payment method's newest active intent of `kind`.
pub(super) fn newest_key(pm_key: &[u8], kind: CredentialType) -> Vec<u8> {
    let mut key = pm_key.to_vec();
    key.push(0);
    key.extend_from_slice(kind.as_str().as_bytes());
    key
}
