//! The embedded backend: sled trees laid out as in [`super::keys`], multi-tree
//! transactions for every write that touches more than one key, and group commit
//! ([`super::group_commit`]) for durability.

use super::group_commit::GroupCommit;
use super::keys;
use super::{
    AuditEntry, AuditEvent, Inserted, Page, PaymentMethodRecord, Scope, Store, StoreError,
    StoreResult, StoreStats,
};
use async_trait::async_trait;
use sha2::{Digest, Sha256};
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::Transactional;
use std::path::Path;

const AUDIT_HEAD: &[u8] = b"audit_head";

/// sled-backed [`Store`].
#[derive(Debug)]
pub struct SledStore {
    db: sled::Db,
    pm: sled::Tree,
    pm_time: sled::Tree,
    pm_fp: sled::Tree,
    keyrings: sled::Tree,
    audit: sled::Tree,
    meta: sled::Tree,
    commit: GroupCommit,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
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
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> StoreResult<Self> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(unavailable)?;
        let tree = |name: &str| db.open_tree(name).map_err(unavailable);
        Ok(Self {
            pm: tree("pm")?,
            pm_time: tree("pm_time")?,
            pm_fp: tree("pm_fp")?,
            keyrings: tree("keyrings")?,
            audit: tree("audit")?,
            meta: tree("meta")?,
            commit: GroupCommit::start(db.clone()).map_err(unavailable)?,
            db,
        })
    }

    async fn durable(&self) -> StoreResult<()> {
        self.commit.durable().await.map_err(StoreError::Unavailable)
    }

    fn decode_pm(bytes: &[u8]) -> StoreResult<PaymentMethodRecord> {
        serde_json::from_slice(bytes).map_err(corrupt)
    }
}

/// Appends `event` to the hash-chained audit log inside a transaction.
fn append_audit_tx(
    audit: &TransactionalTree,
    meta: &TransactionalTree,
    event: &AuditEvent,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    let (seq, prev_hash) = match meta.get(AUDIT_HEAD)? {
        Some(head) => {
            let head: AuditEntry = serde_json::from_slice(&head).map_err(|e| abort(corrupt(e)))?;
            (head.seq + 1, head.hash)
        }
        None => (1, String::new()),
    };
    let event_json = serde_json::to_vec(event).map_err(|e| abort(corrupt(e)))?;
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(&event_json);
    let entry = AuditEntry {
        seq,
        event: event.clone(),
        prev_hash,
        hash: hex::encode(h.finalize()),
    };
    let bytes = serde_json::to_vec(&entry).map_err(|e| abort(corrupt(e)))?;
    audit.insert(&seq.to_be_bytes(), bytes.as_slice())?;
    meta.insert(AUDIT_HEAD, bytes)?;
    Ok(())
}

/// The hash an audit entry must carry.
pub fn audit_hash(prev_hash: &str, event: &AuditEvent) -> Option<String> {
    let event_json = serde_json::to_vec(event).ok()?;
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(&event_json);
    Some(hex::encode(h.finalize()))
}

#[async_trait]
impl Store for SledStore {
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
    ) -> StoreResult<Inserted> {
        let scope = Scope {
            project: &pm.project,
            entity: &pm.entity,
        };
        let pm_key = keys::pm(scope, &pm.id);
        let time_key = keys::pm_time(scope, pm.created_micros, &pm.id);
        let fp_key = keys::pm_fingerprint(scope, &pm.fingerprint);
        let value = serde_json::to_vec(pm).map_err(corrupt)?;
        let outcome = (
            &self.pm,
            &self.pm_time,
            &self.pm_fp,
            &self.audit,
            &self.meta,
        )
            .transaction(|(t_pm, t_time, t_fp, t_audit, t_meta)| {
                if let Some(existing_id) = t_fp.get(&fp_key)? {
                    let existing_id = std::str::from_utf8(&existing_id)
                        .map_err(|e| abort(corrupt(e)))?
                        .to_string();
                    if let Some(bytes) = t_pm.get(keys::pm(scope, &existing_id))? {
                        let rec = Self::decode_pm(&bytes).map_err(abort)?;
                        return Ok(Inserted::Existing(Box::new(rec)));
                    }
                }
                t_pm.insert(pm_key.as_slice(), value.as_slice())?;
                t_time.insert(time_key.as_slice(), &[] as &[u8])?;
                t_fp.insert(fp_key.as_slice(), pm.id.as_bytes())?;
                append_audit_tx(t_audit, t_meta, &audit)?;
                Ok(Inserted::Created)
            })
            .map_err(tx_error)?;
        if outcome == Inserted::Created {
            self.durable().await?;
        }
        Ok(outcome)
    }

    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<PaymentMethodRecord>> {
        match self.pm.get(keys::pm(scope, id)).map_err(unavailable)? {
            Some(bytes) => Ok(Some(Self::decode_pm(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn list_payment_methods(
        &self,
        scope: Scope<'_>,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Page<PaymentMethodRecord>> {
        let prefix = keys::scope_prefix(scope);
        let mut items = Vec::new();
        let mut total = 0;
        for entry in self.pm_time.scan_prefix(&prefix).keys() {
            let key = entry.map_err(unavailable)?;
            total += 1;
            if total <= offset || items.len() >= limit {
                continue;
            }
            let id = keys::id_from_pm_time(prefix.len(), &key)
                .ok_or_else(|| corrupt("bad pm_time key"))?;
            if let Some(bytes) = self.pm.get(keys::pm(scope, id)).map_err(unavailable)? {
                items.push(Self::decode_pm(&bytes)?);
            }
        }
        Ok(Page { items, total })
    }

    async fn delete_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let pm_key = keys::pm(scope, id);
        let deleted = (
            &self.pm,
            &self.pm_time,
            &self.pm_fp,
            &self.audit,
            &self.meta,
        )
            .transaction(|(t_pm, t_time, t_fp, t_audit, t_meta)| {
                let Some(bytes) = t_pm.remove(pm_key.as_slice())? else {
                    return Ok(false);
                };
                let rec = Self::decode_pm(&bytes).map_err(abort)?;
                t_time.remove(keys::pm_time(scope, rec.created_micros, &rec.id))?;
                t_fp.remove(keys::pm_fingerprint(scope, &rec.fingerprint))?;
                append_audit_tx(t_audit, t_meta, &audit)?;
                Ok(true)
            })
            .map_err(tx_error)?;
        if deleted {
            self.durable().await?;
        }
        Ok(deleted)
    }

    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()> {
        (&self.audit, &self.meta)
            .transaction(|(t_audit, t_meta)| append_audit_tx(t_audit, t_meta, &audit))
            .map_err(tx_error)?;
        self.durable().await
    }

    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>> {
        self.audit
            .iter()
            .values()
            .map(|v| {
                let v = v.map_err(unavailable)?;
                serde_json::from_slice(&v).map_err(corrupt)
            })
            .collect()
    }

    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self
            .keyrings
            .get(project)
            .map_err(unavailable)?
            .map(|v| v.to_vec()))
    }

    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>> {
        match self
            .keyrings
            .compare_and_swap(project, None as Option<&[u8]>, Some(keyring))
            .map_err(unavailable)?
        {
            Ok(()) => {
                // Made durable by the flush of the write that first uses it.
                Ok(keyring.to_vec())
            }
            Err(current) => Ok(current.current.map(|v| v.to_vec()).unwrap_or_default()),
        }
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            durable_writes: self.commit.waits(),
            flushes: self.commit.flushes(),
        }
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        let _ = self.db.flush();
    }
}
