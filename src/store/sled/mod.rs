//! The embedded backend: sled trees laid out as in [`keys`], multi-tree transactions for
//! every write that touches more than one key, and group commit ([`group_commit`]) for
//! durability. The audit log's outbox lives here too ([`audit_outbox`]).

pub mod audit_outbox;
pub mod card_tokens;
pub mod deliveries;
pub mod events;
pub mod group_commit;
pub mod idempotency;
mod intent_end;
pub mod key_file;
pub mod keys;
pub mod passkeys;

use crate::audit::chain::HashFunction;
use crate::audit::head_mac::HeadKeys;
use crate::audit::writer::AuditBatcher;
use crate::audit::{AuditEntry, AuditEvent, AuditHead};
use crate::domain::issuer::CredentialType;
use crate::store::events::{self as event, EventQuery, EventRecord};
use crate::store::pm_cache::RecordCache;
use crate::store::{
    corrupt, unavailable, use_refused, DueEnd, Inserted, IntentEnd, IntentRecord, IntentStatus,
    Page, PaymentMethodRecord, Refresh, Scope, Store, StoreError, StoreResult, StoreStats,
    UseOutcome, VerificationAttempt,
};
use async_trait::async_trait;
use audit_outbox::{self as audit_log, to_outbox, LogSink};
use group_commit::GroupCommit;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::path::Path;
use std::sync::Arc;

/// sled-backed [`Store`].
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
    /// Live intents by when they end ([`intent_end`]).
    pi_due: sled::Tree,
    /// The wrapped keys of live intents' credentials, outside sled's log ([`key_file`]).
    key_file: key_file::KeyFile,
    keyrings: sled::Tree,
    /// Audit events of committed changes, on their way into the log ([`audit_log`]).
    outbox: sled::Tree,
    meta: sled::Tree,
    /// The audit log's file.
    audit_path: std::path::PathBuf,
    card_tokens: sled::Tree,
    client_keys: sled::Tree,
    commit: Arc<GroupCommit>,
    audit_writer: AuditBatcher,
    /// What MACs the recorded audit head ([`Store::remac_audit_head`]).
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
    /// Webhook deliveries ([`deliveries`]).
    deliveries: deliveries::Deliveries,
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
        let (meta, outbox) = (tree("meta")?, tree(audit_log::OUTBOX)?);
        audit_log::move_tree_into_file(&db, dir, &meta)?;
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
            key_file: key_file::KeyFile::open(dir)?,
            keyrings: tree("keyrings")?,
            outbox,
            meta,
            audit_path: audit_log::path(dir),
            card_tokens: tree("card_tokens")?,
            client_keys: tree("client_keys")?,
            events: tree(events::TREE)?,
            webhooks: tree("webhooks")?,
            passkeys: tree("passkeys")?,
            webauthn_states: tree("webauthn_states")?,
            deliveries: deliveries::Deliveries::open(&db)?,
            audit_writer: AuditBatcher::start(sink).map_err(unavailable)?,
            head_keys: keys_kept,
            commit,
            db,
            pm_cache: RecordCache::default(),
        };
        store.index_live_intents()?;
        store.erase_orphan_keys()?;
        Ok(store)
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

    /// The audit log (read with the server stopped: sled locks the directory) and the head
    /// recorded apart from it, without checking one against the other (`paycred audit`).
    /// Events of committed changes still in the outbox are moved into the log first, as a
    /// start would (hashed with `audit_hash`), unless the log is damaged or its head is refused
    /// (then it is only read), or the head is MACed and `head_keys` holds no key.
    pub fn read_audit(
        dir: &Path,
        audit_hash: HashFunction,
        head_keys: HeadKeys,
    ) -> StoreResult<(Vec<AuditEntry>, Option<AuditHead>)> {
        let db = sled::Config::new().path(dir).open().map_err(unavailable)?;
        let meta = db.open_tree("meta").map_err(unavailable)?;
        let outbox = db.open_tree(audit_log::OUTBOX).map_err(unavailable)?;
        audit_log::move_tree_into_file(&db, dir, &meta)?;
        // Without the master key, a MACed head is not recorded over (it would lose its MAC).
        let head = audit_log::recorded_head(&meta)?.unwrap_or_default();
        if !outbox.is_empty() && head_keys.may_record_over(&head) {
            let commit = Arc::new(GroupCommit::start(db.clone()).map_err(unavailable)?);
            if let Ok(mut sink) =
                LogSink::open(dir, meta.clone(), outbox, commit, audit_hash, head_keys)
            {
                sink.drain().map_err(StoreError::Unavailable)?;
            }
        }
        let entries = crate::audit::file::read_entries(&audit_log::path(dir)).map_err(corrupt)?;
        Ok((entries, audit_log::recorded_head(&meta)?))
    }

    /// `paycred audit accept-head` on the store in `dir` (the server stopped): see
    /// [`audit_log::accept_head`].
    pub fn accept_audit_head(
        dir: &Path,
        keys: &HeadKeys,
        check: impl FnOnce(&[AuditEntry], &AuditHead) -> Result<String, String>,
    ) -> Result<Option<(AuditHead, String)>, String> {
        audit_log::accept_head(dir, keys, check)
    }

    /// Everything the store holds, for `paycred store copy` (records still sealed, keys still
    /// wrapped; the audit log as [`Store::audit_log`] reads it).
    pub fn export(&self) -> StoreResult<crate::store::copy::Export> {
        use crate::store::copy::Scoped;
        let scoped = |tree: &sled::Tree| -> StoreResult<Vec<Scoped>> {
            tree.iter()
                .map(|item| {
                    let (k, v) = item.map_err(unavailable)?;
                    let mut parts = k.splitn(3, |b| *b == 0);
                    let mut part = || {
                        parts
                            .next()
                            .and_then(|p| std::str::from_utf8(p).ok())
                            .map(str::to_string)
                            .ok_or_else(|| corrupt("bad scoped key"))
                    };
                    Ok(Scoped {
                        project: part()?,
                        entity: part()?,
                        id: part()?,
                        value: serde_json::from_slice(&v).map_err(corrupt)?,
                    })
                })
                .collect()
        };
        let by_project = |tree: &sled::Tree| -> StoreResult<Vec<(String, Vec<u8>)>> {
            tree.iter()
                .map(|item| {
                    let (k, v) = item.map_err(unavailable)?;
                    Ok((String::from_utf8_lossy(&k).into_owned(), v.to_vec()))
                })
                .collect()
        };
        let mut payment_methods = Vec::new();
        for item in self.pm.iter() {
            let (k, v) = item.map_err(unavailable)?;
            let pm = Self::decode_pm(&v)?;
            let verified = self.pm_verified.contains_key(&k).map_err(unavailable)?;
            payment_methods.push((pm, verified));
        }
        let intents = self
            .pi
            .iter()
            .map(|item| {
                let (k, v) = item.map_err(unavailable)?;
                self.with_key(&k, Self::decode_pi(&v)?)
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let audit = Store::audit_log(self)?;
        let webhook_endpoints = self
            .webhooks
            .iter()
            .values()
            .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        let passkeys = self
            .passkeys
            .iter()
            .values()
            .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(crate::store::copy::Export {
            passkeys,
            webhook_endpoints,
            events: events::all(&self.events)?,
            payment_methods,
            intents,
            card_tokens: scoped(&self.card_tokens)?,
            idempotency: scoped(&self.idem)?,
            keyrings: by_project(&self.keyrings)?,
            client_keys: by_project(&self.client_keys)?,
            audit,
        })
    }

    fn decode_pm(bytes: &[u8]) -> StoreResult<PaymentMethodRecord> {
        serde_json::from_slice(bytes).map_err(corrupt)
    }

    fn decode_pi(bytes: &[u8]) -> StoreResult<IntentRecord> {
        serde_json::from_slice(bytes).map_err(corrupt)
    }

    /// Ids of a payment method's intents, newest first (read outside a transaction; the
    /// `pi_pm_n` counter tells a transaction whether the list is still complete).
    fn intent_ids_of(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<Vec<String>> {
        let prefix = keys::pi_by_pm_prefix(scope, pm_id);
        self.pi_by_pm
            .scan_prefix(&prefix)
            .keys()
            .map(|k| {
                let k = k.map_err(unavailable)?;
                keys::id_from_pm_time(prefix.len(), &k)
                    .map(str::to_string)
                    .ok_or_else(|| corrupt("bad pi_by_pm key"))
            })
            .collect()
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

    /// Reads, changes and writes back one intent in a transaction; `None` when absent.
    fn update_intent<T>(
        &self,
        scope: Scope<'_>,
        id: &str,
        change: impl Fn(&mut IntentRecord) -> (bool, T),
    ) -> StoreResult<Option<(IntentRecord, T, bool)>> {
        let key = keys::pi(scope, id);
        self.pi
            .transaction(|t_pi| {
                let Some(bytes) = t_pi.get(&key)? else {
                    return Ok(None);
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                let (changed, out) = change(&mut rec);
                if changed {
                    let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                    t_pi.insert(key.as_slice(), value)?;
                }
                Ok(Some((rec, out, changed)))
            })
            .map_err(tx_error)
    }
}

fn micros(t: time::OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn count_value(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn read_count(v: Option<sled::IVec>) -> u64 {
    v.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// Why a delete transaction must be run again.
const RETRY_DELETE: &str = "intent index changed during delete";

#[async_trait]
impl Store for SledStore {
    async fn insert_payment_method(
        &self,
        pm: &PaymentMethodRecord,
        audit: AuditEvent,
        refresh: Refresh<'_>,
    ) -> StoreResult<Inserted> {
        let scope = Scope {
            project: &pm.project,
            entity: &pm.entity,
        };
        let pm_key = keys::pm(scope, &pm.id);
        let time_key = keys::pm_time(scope, pm.created_micros, &pm.id);
        let fp_key = keys::pm_fingerprint(scope, &pm.fingerprint);
        let value = serde_json::to_vec(pm).map_err(corrupt)?;
        let created = [event::pm_created(pm)];
        let outcome = (
            &self.pm,
            &self.pm_time,
            &self.pm_fp,
            &self.outbox,
            &self.events,
        )
            .transaction(|(t_pm, t_time, t_fp, t_outbox, t_events)| {
                if let Some(existing_id) = t_fp.get(&fp_key)? {
                    let existing_id = std::str::from_utf8(&existing_id)
                        .map_err(|e| abort(corrupt(e)))?
                        .to_string();
                    let existing_key = keys::pm(scope, &existing_id);
                    if let Some(bytes) = t_pm.get(&existing_key)? {
                        let existing = Self::decode_pm(&bytes).map_err(abort)?;
                        let (refreshed, audit) = refresh(&existing);
                        let value =
                            serde_json::to_vec(&refreshed).map_err(|e| abort(corrupt(e)))?;
                        t_pm.insert(existing_key, value)?;
                        to_outbox(t_outbox, &audit)?;
                        return Ok(Inserted::Existing(Box::new(refreshed)));
                    }
                }
                t_pm.insert(pm_key.as_slice(), value.as_slice())?;
                t_time.insert(time_key.as_slice(), &[] as &[u8])?;
                t_fp.insert(fp_key.as_slice(), pm.id.as_bytes())?;
                to_outbox(t_outbox, &audit)?;
                events::write(t_events, &created)?;
                Ok(Inserted::Created)
            })
            .map_err(tx_error)?;
        if let Inserted::Existing(refreshed) = &outcome {
            self.pm_cache.invalidate(&keys::pm(scope, &refreshed.id));
        }
        self.durable_audited().await?;
        Ok(outcome)
    }

    async fn get_payment_method(
        &self,
        scope: Scope<'_>,
        id: &str,
    ) -> StoreResult<Option<Arc<PaymentMethodRecord>>> {
        let key = keys::pm(scope, id);
        if let Some(record) = self.pm_cache.get(&key) {
            return Ok(Some(record));
        }
        let read_at = self.pm_cache.generation();
        match self.pm.get(&key).map_err(unavailable)? {
            Some(bytes) => {
                let record = Arc::new(Self::decode_pm(&bytes)?);
                self.pm_cache.fill(&key, &record, read_at);
                Ok(Some(record))
            }
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
        let ref_key = keys::pm_ref(scope, id);
        // sled transactions cannot scan, so the intents are listed first and the transaction
        // checks the per-method counter: an intent created in between makes it run again.
        let mut attempts = 0;
        let deleted = loop {
            let intent_ids = self.intent_ids_of(scope, id)?;
            let outcome = (
                &self.pm,
                &self.pm_time,
                &self.pm_fp,
                &self.outbox,
                &self.pi,
                &self.pi_pm_n,
                &self.pm_verified,
                &self.pi_due,
                &self.events,
            )
                .transaction(
                    |(t_pm, t_time, t_fp, t_outbox, t_pi, t_n, t_verified, t_due, t_events)| {
                        let Some(bytes) = t_pm.remove(pm_key.as_slice())? else {
                            return Ok(None);
                        };
                        if read_count(t_n.get(&ref_key)?) != intent_ids.len() as u64 {
                            return Err(abort(StoreError::Unavailable(RETRY_DELETE.into())));
                        }
                        let rec = Self::decode_pm(&bytes).map_err(abort)?;
                        events::write(t_events, &[event::pm_deleted(&rec, audit.at_micros)])?;
                        let mut slots = Vec::new();
                        for intent_id in &intent_ids {
                            let key = keys::pi(scope, intent_id);
                            let Some(bytes) = t_pi.get(&key)? else {
                                continue;
                            };
                            let mut intent = Self::decode_pi(&bytes).map_err(abort)?;
                            if intent.ends_with(IntentEnd::Canceled, 0) {
                                let t = intent_end::EndTrees {
                                    pi: t_pi,
                                    due: t_due,
                                    events: t_events,
                                    at_micros: audit.at_micros,
                                };
                                let end = IntentEnd::Canceled;
                                slots.extend(intent_end::end_in(&t, &key, &mut intent, end)?);
                            }
                        }
                        t_n.remove(ref_key.as_slice())?;
                        t_verified.remove(ref_key.as_slice())?;
                        t_time.remove(keys::pm_time(scope, rec.created_micros, &rec.id))?;
                        t_fp.remove(keys::pm_fingerprint(scope, &rec.fingerprint))?;
                        to_outbox(t_outbox, &audit)?;
                        Ok(Some(slots))
                    },
                );
            match outcome {
                Err(TransactionError::Abort(StoreError::Unavailable(m)))
                    if m == RETRY_DELETE && attempts < 16 =>
                {
                    attempts += 1;
                }
                other => break other.map_err(tx_error)?,
            }
        };
        let Some(slots) = deleted else {
            return Ok(false);
        };
        self.pm_cache.invalidate(&pm_key);
        self.durable_audited().await?;
        self.erase_keys(slots);
        Ok(true)
    }

    async fn insert_intent(&self, intent: &IntentRecord, audit: AuditEvent) -> StoreResult<bool> {
        let scope = Scope {
            project: &intent.project,
            entity: &intent.entity,
        };
        let pm_key = keys::pm(scope, &intent.payment_method_id);
        let ref_key = keys::pm_ref(scope, &intent.payment_method_id);
        let pi_key = keys::pi(scope, &intent.id);
        let index_key = keys::pi_by_pm(
            scope,
            &intent.payment_method_id,
            intent.created_micros,
            &intent.id,
        );
        let slot = match &intent.credential_key {
            Some(key) => Some(self.key_file.write(&pi_key, key.to_stored().as_bytes())?),
            None => None,
        };
        let stored = IntentRecord {
            key_slot: slot,
            ..intent.clone()
        };
        let value = serde_json::to_vec(&stored).map_err(corrupt)?;
        let created = event::intent_created(intent);
        let due_key = keys::pi_due(intent.expires_micros, &pi_key);
        let inserted = (
            &self.pm,
            &self.pi,
            &self.pi_by_pm,
            &self.pi_pm_n,
            &self.outbox,
            &self.pi_due,
            &self.events,
        )
            .transaction(|(t_pm, t_pi, t_index, t_n, t_outbox, t_due, t_events)| {
                if t_pm.get(&pm_key)?.is_none() {
                    return Ok(false);
                }
                let n = read_count(t_n.get(&ref_key)?);
                t_n.insert(ref_key.as_slice(), &count_value(n + 1))?;
                t_pi.insert(pi_key.as_slice(), value.as_slice())?;
                t_index.insert(index_key.as_slice(), &[] as &[u8])?;
                if intent.is_live_stored() {
                    t_due.insert(due_key.as_slice(), &[] as &[u8])?;
                }
                to_outbox(t_outbox, &audit)?;
                events::write(t_events, &created)?;
                Ok(true)
            })
            .map_err(tx_error);
        if !matches!(inserted, Ok(true)) {
            self.erase_keys(slot);
        }
        if inserted? {
            self.durable_audited().await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn get_intent(&self, scope: Scope<'_>, id: &str) -> StoreResult<Option<IntentRecord>> {
        let key = keys::pi(scope, id);
        match self.pi.get(&key).map_err(unavailable)? {
            Some(bytes) => Ok(Some(self.with_key(&key, Self::decode_pi(&bytes)?)?)),
            None => Ok(None),
        }
    }

    async fn list_intents(&self, scope: Scope<'_>) -> StoreResult<Vec<IntentRecord>> {
        self.pi
            .scan_prefix(keys::scope_prefix(scope))
            .map(|item| {
                let (k, v) = item.map_err(unavailable)?;
                self.with_key(&k, Self::decode_pi(&v)?)
            })
            .collect()
    }

    async fn set_intent_status(
        &self,
        scope: Scope<'_>,
        id: &str,
        status: IntentStatus,
    ) -> StoreResult<Option<IntentRecord>> {
        let updated = self.update_intent(scope, id, |rec| {
            let changed = rec.status != status;
            rec.status = status;
            (changed, ())
        })?;
        if updated.as_ref().is_some_and(|(_, _, changed)| *changed) {
            self.durable().await?;
        }
        Ok(updated.map(|(rec, _, _)| rec))
    }

    async fn record_verification(
        &self,
        scope: Scope<'_>,
        id: &str,
        attempt: VerificationAttempt,
        audit: AuditEvent,
    ) -> StoreResult<Option<IntentRecord>> {
        let key = keys::pi(scope, id);
        let updated = (&self.pi, &self.pm_verified, &self.outbox, &self.events)
            .transaction(|(t_pi, t_verified, t_outbox, t_events)| {
                let Some(bytes) = t_pi.get(&key)? else {
                    return Ok(None);
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                if rec.status != IntentStatus::Verify {
                    return Ok(Some(rec));
                }
                match attempt {
                    VerificationAttempt::Passed => {
                        rec.status = IntentStatus::Active;
                        t_verified
                            .insert(keys::pm_ref(scope, &rec.payment_method_id), &[] as &[u8])?;
                        to_outbox(t_outbox, &audit)?;
                        events::write(t_events, &[event::intent_activated(&rec, audit.at_micros)])?;
                    }
                    VerificationAttempt::Failed => {
                        rec.failed_verifications = rec.failed_verifications.saturating_add(1);
                    }
                    VerificationAttempt::OtpMethod(method) => rec.otp_method = method,
                }
                let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                t_pi.insert(key.as_slice(), value)?;
                Ok(Some(rec))
            })
            .map_err(tx_error)?;
        if updated.is_some() {
            self.durable_audited().await?;
        }
        Ok(updated)
    }

    async fn payment_method_verified(&self, scope: Scope<'_>, pm_id: &str) -> StoreResult<bool> {
        self.pm_verified
            .contains_key(keys::pm_ref(scope, pm_id))
            .map_err(unavailable)
    }

    async fn record_use(
        &self,
        scope: Scope<'_>,
        id: &str,
        now: time::OffsetDateTime,
    ) -> StoreResult<UseOutcome> {
        let now = micros(now);
        let key = keys::pi(scope, id);
        let (outcome, changed, slot) = (&self.pi, &self.pi_due, &self.events)
            .transaction(|(t_pi, t_due, t_events)| {
                let Some(bytes) = t_pi.get(&key)? else {
                    return Ok((UseOutcome::NotFound, false, None));
                };
                let mut rec = Self::decode_pi(&bytes).map_err(abort)?;
                let limit = rec.mandates.usage_limit;
                if let Some(refused) =
                    use_refused(rec.status, rec.expires_micros, limit, rec.uses, now)
                {
                    return Ok((refused, false, None));
                }
                rec.uses = rec.uses.saturating_add(1);
                events::write(t_events, &[event::intent_used(&rec, now)])?;
                let mut slot = None;
                if rec.ends_with(IntentEnd::UsedUp, now) {
                    // The use that reaches the limit ends the intent in its transaction.
                    let t = intent_end::EndTrees {
                        pi: t_pi,
                        due: t_due,
                        events: t_events,
                        at_micros: now,
                    };
                    slot = intent_end::end_in(&t, &key, &mut rec, IntentEnd::UsedUp)?;
                } else {
                    let value = serde_json::to_vec(&rec).map_err(|e| abort(corrupt(e)))?;
                    t_pi.insert(key.as_slice(), value)?;
                }
                Ok((UseOutcome::Recorded(rec.uses), true, slot))
            })
            .map_err(tx_error)?;
        if changed {
            self.durable().await?;
            self.erase_keys(slot);
        }
        Ok(outcome)
    }

    async fn newest_active_intent(
        &self,
        scope: Scope<'_>,
        pm_id: &str,
        kind: CredentialType,
        now: time::OffsetDateTime,
    ) -> StoreResult<Option<IntentRecord>> {
        let now = micros(now);
        for id in self.intent_ids_of(scope, pm_id)? {
            let key = keys::pi(scope, &id);
            let Some(bytes) = self.pi.get(&key).map_err(unavailable)? else {
                continue;
            };
            let rec = Self::decode_pi(&bytes)?;
            if rec.credential_type == kind && rec.status_at(now) == IntentStatus::Active {
                return Ok(Some(self.with_key(&key, rec)?));
            }
        }
        Ok(None)
    }

    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()> {
        self.audit_writer
            .append(audit)
            .await
            .map_err(StoreError::Unavailable)
    }

    fn append_audit_nowait(&self, audit: AuditEvent) {
        self.audit_writer.append_nowait(audit);
    }

    fn count_audit(&self, audit: AuditEvent) {
        self.audit_writer.count(audit);
    }

    async fn get_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<crate::store::IdempotentRecord>> {
        idempotency::get(&self.idem, scope, key, now_micros)
    }

    async fn put_idempotent(
        &self,
        scope: Scope<'_>,
        key: &str,
        record: &crate::store::IdempotentRecord,
    ) -> StoreResult<()> {
        idempotency::put(&self.idem, scope, key, record)?;
        self.durable().await
    }

    fn sweep_idempotent(&self, now_micros: i64) -> StoreResult<usize> {
        idempotency::sweep(&self.idem, now_micros)
    }

    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>> {
        self.audit_writer
            .settle()
            .map_err(StoreError::Unavailable)?;
        crate::audit::file::read_entries(&self.audit_path).map_err(corrupt)
    }

    fn audit_head(&self) -> StoreResult<Option<AuditHead>> {
        audit_log::recorded_head(&self.meta)
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

    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool> {
        let swapped = card_tokens::swap(&self.keyrings, project, Some(expected), keyring)?;
        // Durable now: values sealed from here on name the new key.
        self.db.flush().map_err(unavailable)?;
        Ok(swapped)
    }

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

    async fn insert_card_token(
        &self,
        scope: Scope<'_>,
        token: &crate::store::CardTokenRecord,
    ) -> StoreResult<()> {
        card_tokens::insert(&self.card_tokens, scope, token)?;
        self.durable().await
    }

    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<crate::store::TokenTake> {
        let taken = card_tokens::take(&self.card_tokens, scope, id, now_micros)?;
        self.durable().await?;
        Ok(taken)
    }

    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self
            .client_keys
            .get(project)
            .map_err(unavailable)?
            .map(|v| v.to_vec()))
    }

    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool> {
        let swapped = card_tokens::swap(&self.client_keys, project, expected, keyset)?;
        // Durable now: the keys encrypt what browsers send from here on.
        self.db.flush().map_err(unavailable)?;
        Ok(swapped)
    }

    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>> {
        events::list(&self.events, query)
    }

    async fn put_webhook_endpoint(
        &self,
        endpoint: &crate::store::WebhookEndpointRecord,
        replace: bool,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let key = keys::webhook(&endpoint.project, &endpoint.id);
        let value = serde_json::to_vec(endpoint).map_err(corrupt)?;
        self.change_audited(&self.webhooks, &key, Some((&value, replace)), Some(&audit))
            .await
    }

    async fn get_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
    ) -> StoreResult<Option<crate::store::WebhookEndpointRecord>> {
        self.webhooks
            .get(keys::webhook(project, id))
            .map_err(unavailable)?
            .map(|v| serde_json::from_slice(&v).map_err(corrupt))
            .transpose()
    }

    async fn list_webhook_endpoints(
        &self,
        project: &str,
    ) -> StoreResult<Vec<crate::store::WebhookEndpointRecord>> {
        endpoints_of(&self.webhooks, project)
    }

    async fn delete_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let key = keys::webhook(project, id);
        self.change_audited(&self.webhooks, &key, None, Some(&audit))
            .await
    }

    async fn end_intent(
        &self,
        scope: Scope<'_>,
        id: &str,
        end: IntentEnd,
        now_micros: i64,
    ) -> StoreResult<Option<IntentRecord>> {
        let Some((ended, slot)) = self.end_one(&keys::pi(scope, id), end, now_micros)? else {
            return Ok(None);
        };
        self.durable().await?;
        self.erase_keys(slot);
        Ok(Some(ended))
    }

    async fn intents_due_to_end(&self, now_micros: i64, limit: usize) -> StoreResult<Vec<DueEnd>> {
        self.due_to_end(now_micros, limit)
    }

    fn remac_audit_head(&self) -> StoreResult<bool> {
        // The writer has written everything queued: it records no head meanwhile (a head it
        // records later is MACed with the same first key).
        self.audit_writer
            .settle()
            .map_err(StoreError::Unavailable)?;
        let changed = audit_log::remac_head(&self.meta, &self.head_keys)?;
        self.db.flush().map_err(unavailable)?;
        Ok(changed)
    }

    async fn put_passkey(
        &self,
        passkey: &crate::store::PasskeyRecord,
        audit: Option<AuditEvent>,
    ) -> StoreResult<bool> {
        let scope = Scope {
            project: &passkey.project,
            entity: &passkey.entity,
        };
        let key = keys::pm(scope, &passkey.id);
        let value = serde_json::to_vec(passkey).map_err(corrupt)?;
        let replace = audit.is_none();
        self.change_audited(
            &self.passkeys,
            &key,
            Some((&value, replace)),
            audit.as_ref(),
        )
        .await
    }

    async fn list_passkeys(
        &self,
        scope: Scope<'_>,
    ) -> StoreResult<Vec<crate::store::PasskeyRecord>> {
        let mut all = self
            .passkeys
            .scan_prefix(keys::scope_prefix(scope))
            .values()
            .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
            .collect::<StoreResult<Vec<crate::store::PasskeyRecord>>>()?;
        all.sort_by(|a, b| (a.created_micros, &a.id).cmp(&(b.created_micros, &b.id)));
        Ok(all)
    }

    async fn delete_passkey(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let key = keys::pm(scope, id);
        self.change_audited(&self.passkeys, &key, None, Some(&audit))
            .await
    }

    async fn put_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        state: &crate::store::WebauthnStateRecord,
        now_micros: i64,
    ) -> StoreResult<()> {
        passkeys::put_state(&self.webauthn_states, scope, key, state, now_micros)?;
        self.durable().await
    }

    async fn take_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<crate::store::WebauthnStateRecord>> {
        let taken = passkeys::take_state(&self.webauthn_states, scope, key, now_micros)?;
        self.durable().await?;
        Ok(taken)
    }

    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>> {
        events::get(&self.events, project, seq)
    }

    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize> {
        let webhooks = &self.webhooks;
        let n = self.deliveries.fan_out(
            &self.events,
            |project| endpoints_of(webhooks, project),
            now_micros,
            limit,
        )?;
        if n > 0 {
            self.durable().await?;
        }
        Ok(n)
    }

    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<()> {
        self.deliveries.queue(project, seq, endpoints, now_micros)?;
        self.durable().await
    }

    async fn claim_deliveries(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<crate::store::DeliveryRecord>> {
        self.deliveries
            .claim(now_micros, lease_until_micros, skip, limit)
    }

    async fn record_delivery(
        &self,
        delivery: &crate::store::DeliveryRecord,
        claimed_until_micros: i64,
    ) -> StoreResult<bool> {
        let recorded = self.deliveries.record(delivery, claimed_until_micros)?;
        self.durable().await?;
        Ok(recorded)
    }

    async fn list_deliveries(
        &self,
        project: &str,
        seq: u64,
    ) -> StoreResult<Vec<crate::store::DeliveryRecord>> {
        self.deliveries.of_event(project, seq)
    }

    async fn deliveries_pending(&self) -> StoreResult<u64> {
        Ok(self.deliveries.pending())
    }
}

/// The project's webhook endpoints in `tree`, newest first.
fn endpoints_of(
    tree: &sled::Tree,
    project: &str,
) -> StoreResult<Vec<crate::store::WebhookEndpointRecord>> {
    let mut all = tree
        .scan_prefix(keys::webhook(project, ""))
        .values()
        .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
        .collect::<StoreResult<Vec<crate::store::WebhookEndpointRecord>>>()?;
    all.sort_by(|a, b| (b.created_micros, &b.id).cmp(&(a.created_micros, &a.id)));
    Ok(all)
}

impl Drop for SledStore {
    fn drop(&mut self) {
        let _ = self.db.flush();
    }
}
