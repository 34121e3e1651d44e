//! The embedded backend: sled trees laid out as in [`keys`], multi-tree transactions for
//! every write that touches more than one key, and group commit ([`group_commit`]) for
//! durability. Each resource's trait is implemented in the file of its name
//! ([`payment_methods`], [`intents`], [`idempotency`], [`keyrings`], [`card_tokens`],
//! [`webhooks`], [`passkeys`], [`browser_sessions`], [`events`], [`retention`], [`audit`]:
//! the audit log's outbox and file; [`rate_limits`]: none shared); this
//! file opens the store and holds the tree handles and what those files share.

pub mod ahead;
pub mod audit;
pub mod browser_sessions;
pub mod card_tokens;
pub mod copy;
pub mod events;
pub mod group_commit;
pub mod idempotency;
pub mod intents;
pub mod key_file;
pub mod keyrings;
pub mod keys;
pub mod passkeys;
pub mod payment_methods;
pub mod rate_limits;
pub mod retention;
pub mod webhooks;

use crate::audit::chain::HashFunction;
use crate::audit::head_mac::HeadKeys;
use crate::audit::writer::AuditBatcher;
use crate::audit::AuditEvent;
use crate::store::pm_cache::RecordCache;
use crate::store::{
    corrupt, unavailable, IntentRecord, PaymentMethodRecord, Scope, StoreError, StoreHealth,
    StoreResult, StoreStats,
};
use async_trait::async_trait;
use audit::{to_outbox, LogSink};
use group_commit::GroupCommit;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::path::Path;
use std::sync::Arc;

/// sled-backed [`Store`](crate::store::Store).
#[derive(Debug)]
pub struct SledStore {
    db: sled::Db,
    pm: sled::Tree,
    /// Stored responses of `Idempotency-Key` requests.
    idem: sled::Tree,
    pm_time: sled::Tree,
    pm_fp: sled::Tree,
    pm_verified: sled::Tree,
    pi: sled::Tree,
    pi_by_pm: sled::Tree,
    pi_pm_n: sled::Tree,
    /// Live intents by when they end ([`intents`]).
    pi_due: sled::Tree,
    /// Ended intents by when they ended ([`retention`]).
    pi_ended: sled::Tree,
    /// The intents whose records hold uses reserved ahead ([`ahead`]).
    pi_ahead: sled::Tree,
    /// The last reservation of uses this process made ([`ahead::Ahead::lease`]).
    leases: std::sync::atomic::AtomicU64,
    /// The wrapped keys of live intents' credentials, outside sled's log ([`key_file`]).
    key_file: key_file::KeyFile,
    keyrings: sled::Tree,
    /// Audit events of committed changes, on their way into the log ([`audit`]).
    outbox: sled::Tree,
    meta: sled::Tree,
    /// The audit log's file.
    audit_path: std::path::PathBuf,
    card_tokens: sled::Tree,
    client_keys: sled::Tree,
    commit: Arc<GroupCommit>,
    audit_writer: AuditBatcher,
    /// What MACs the recorded audit head ([`AuditStore::remac_audit_head`](crate::store::AuditStore::remac_audit_head)).
    head_keys: HeadKeys,
    /// Decoded `pm` records (the proxy reads one per request).
    pm_cache: RecordCache,
    /// Events of committed changes ([`events`]).
    events: sled::Tree,
    /// Webhook endpoints: `project \0 id` → record (JSON).
    webhooks: sled::Tree,
    /// Passkeys and WebAuthn ceremony states ([`passkeys`]).
    passkeys: sled::Tree,
    webauthn_states: sled::Tree,
    /// Webhook deliveries ([`webhooks`]).
    deliveries: webhooks::Deliveries,
    /// Browser sessions ([`browser_sessions`]).
    browser: browser_sessions::Trees,
    /// Where the walk through old events stopped ([`retention`]).
    prune_cursor: parking_lot::Mutex<Vec<u8>>,
}

fn tx_error(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => unavailable(e),
    }
}

fn abort(e: StoreError) -> ConflictableTransactionError<StoreError> {
    ConflictableTransactionError::Abort(e)
}

impl SledStore {
    /// Opens (or creates) the store in `dir`; new audit entries are hashed with
    /// `audit_hash`.
    pub fn open(dir: &Path, audit_hash: HashFunction) -> StoreResult<Self> {
        Self::open_with(dir, audit_hash, HeadKeys::default())
    }

    /// [`Self::open`], recording audit heads MACed with `head_keys` (their first key) and
    /// refusing a recorded head whose MAC does not verify under them (none: not checked).
    pub fn open_with(
        dir: &Path,
        audit_hash: HashFunction,
        head_keys: HeadKeys,
    ) -> StoreResult<Self> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            // No timer-driven flushes: every write that must be durable waits for a group
            // commit (`durable`), and a timer would only add background work whose amount
            // depends on wall time.
            .flush_every_ms(None)
            .open()
            .map_err(unavailable)?;
        let tree = |name: &str| db.open_tree(name).map_err(unavailable);
        let commit = Arc::new(GroupCommit::start(db.clone()).map_err(unavailable)?);
        let (meta, outbox) = (tree("meta")?, tree(audit::OUTBOX)?);
        audit::move_tree_into_file(&db, dir, &meta)?;
        let sink = LogSink::open(
            dir,
            meta.clone(),
            outbox.clone(),
            commit.clone(),
            audit_hash,
            head_keys.clone(),
        )?;
        let keys_kept = head_keys;
        let store = Self {
            pm: tree("pm")?,
            idem: tree("idem")?,
            pm_time: tree("pm_time")?,
            pm_fp: tree("pm_fp")?,
            pm_verified: tree("pm_verified")?,
            pi: tree("pi")?,
            pi_by_pm: tree("pi_by_pm")?,
            pi_pm_n: tree("pi_pm_n")?,
            pi_due: tree("pi_due")?,
            pi_ended: tree("pi_ended")?,
            pi_ahead: tree(ahead::TREE)?,
            leases: Default::default(),
            key_file: key_file::KeyFile::open(dir)?,
            keyrings: tree("keyrings")?,
            outbox,
            meta,
            audit_path: audit::path(dir),
            card_tokens: tree("card_tokens")?,
            client_keys: tree("client_keys")?,
            events: tree(events::TREE)?,
            webhooks: tree("webhooks")?,
            passkeys: tree("passkeys")?,
            webauthn_states: tree("webauthn_states")?,
            deliveries: webhooks::Deliveries::open(&db)?,
            browser: browser_sessions::Trees::open(&db)?,
            audit_writer: AuditBatcher::start(sink).map_err(unavailable)?,
            head_keys: keys_kept,
            commit,
            db,
            pm_cache: RecordCache::default(),
            prune_cursor: Default::default(),
        };
        store.index_live_intents()?;
        store.index_ended_intents()?;
        store.index_finished_deliveries()?;
        store.count_uses_held()?;
        store.erase_orphan_keys()?;
        Ok(store)
    }

    /// Runs `build` unless `meta` holds `marker`, then records `marker`: an index built from
    /// the stored records once, on the first start that has it.
    fn build_once(
        &self,
        marker: &[u8],
        build: impl FnOnce() -> StoreResult<()>,
    ) -> StoreResult<()> {
        if self.meta.contains_key(marker).map_err(unavailable)? {
            return Ok(());
        }
        build()?;
        self.meta
            .insert(marker, &[] as &[u8])
            .map_err(unavailable)?;
        Ok(())
    }

    async fn durable(&self) -> StoreResult<()> {
        self.commit.durable().await.map_err(StoreError::Unavailable)
    }

    /// [`Self::durable`] for a change that wrote an event into the outbox: then the audit
    /// writer moves it into the log.
    async fn durable_audited(&self) -> StoreResult<()> {
        let durable = self.durable().await;
        self.audit_writer.wake();
        durable
    }

    fn decode_pm(bytes: &[u8]) -> StoreResult<PaymentMethodRecord> {
        serde_json::from_slice(bytes).map_err(corrupt)
    }

    fn decode_pi(bytes: &[u8]) -> StoreResult<IntentRecord> {
        serde_json::from_slice(bytes).map_err(corrupt)
    }

    /// Stores `value` at `key` of `tree` (only while a value is there with `replace`, only
    /// while none is without) or, with no `value`, removes the one there; with `audit` (if
    /// any) in the same transaction, durable. Whether it changed.
    async fn change_audited(
        &self,
        tree: &sled::Tree,
        key: &[u8],
        value: Option<(&[u8], bool)>,
        audit: Option<&AuditEvent>,
    ) -> StoreResult<bool> {
        let changed = (tree, &self.outbox)
            .transaction(|(t_tree, t_outbox)| {
                let done = match value {
                    Some((value, replace)) => {
                        if t_tree.get(key)?.is_some() != replace {
                            return Ok(false);
                        }
                        t_tree.insert(key, value)?;
                        true
                    }
                    None => t_tree.remove(key)?.is_some(),
                };
                if done {
                    if let Some(audit) = audit {
                        to_outbox(t_outbox, audit)?;
                    }
                }
                Ok(done)
            })
            .map_err(tx_error)?;
        if changed {
            self.durable_audited().await?;
        }
        Ok(changed)
    }
}

fn count_value(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn read_count(v: Option<sled::IVec>) -> u64 {
    v.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

#[async_trait]
impl StoreHealth for SledStore {
    async fn ready(&self) -> StoreResult<()> {
        self.meta.get(b"ready").map(|_| ()).map_err(unavailable)
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            durable_writes: self.commit.waits(),
            flushes: self.commit.flushes(),
            cache_hits: self.pm_cache.hits(),
            changes_heard: 0,
        }
    }

    fn close(&self) {
        if let Err(e) = self.hand_back_uses() {
            tracing::warn!(error = %e, "uses reserved ahead not handed back: the next start counts them used");
        }
        let _ = self.db.flush();
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // No use is in flight once the store is dropped: what is held was not taken.
        self.close();
    }
}
