//! The sled store's side of the audit log ([`crate::audit::file`]): the outbox, the recorded
//! head, and the [`Sink`] the audit writer writes through.
//!
//! A change the store commits (a payment method created, an intent verified, ...) writes its
//! event into the `audit_outbox` tree in the same sled transaction, so the change and its
//! event are durable together or not at all. The writer then moves outbox events into the
//! log: it makes them durable in sled first (so no entry names a change a crash undid),
//! appends them, syncs the file, and only then takes them out of the outbox, in the sled
//! transaction that records the new head. A crash in between leaves an event both in the
//! log (after the recorded head) and in the outbox: opening finds it there and does not
//! append it twice.
//!
//! Data dirs from before the log was a file kept it in the `audit` tree: opening moves it
//! into the file once, chain unchanged.

use super::group_commit::GroupCommit;
use super::SledStore;
use crate::audit::chain::HashFunction;
use crate::audit::file::{self as audit_file, AuditFile, AuditHead};
use crate::audit::head_mac::HeadKeys;
use crate::audit::writer::Sink;
use crate::audit::{AuditEntry, AuditEvent};
use crate::store::{corrupt, unavailable, AuditStore, StoreError, StoreResult};
use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use sled::Transactional;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// `meta` key of the recorded [`AuditHead`].
const HEAD_KEY: &[u8] = b"audit_file_head";

/// `meta` key of the head when the log was the `audit` tree.
const TREE_HEAD_KEY: &[u8] = b"audit_head";

/// The tree that held the log before it was a file.
const TREE_NAME: &str = "audit";

/// Name of the outbox tree.
pub const OUTBOX: &str = "audit_outbox";

/// Writes `event` into the outbox, inside the transaction of the change it records.
pub fn to_outbox(
    outbox: &TransactionalTree,
    event: &AuditEvent,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    let id = outbox.generate_id()?;
    let value =
        serde_json::to_vec(event).map_err(|e| ConflictableTransactionError::Abort(corrupt(e)))?;
    outbox.insert(&id.to_be_bytes(), value)?;
    Ok(())
}

/// The head recorded in `meta` (none: nothing synced yet).
pub fn recorded_head(meta: &sled::Tree) -> StoreResult<Option<AuditHead>> {
    meta.get(HEAD_KEY)
        .map_err(unavailable)?
        .map(|v| serde_json::from_slice(&v).map_err(corrupt))
        .transpose()
}

/// Records the head in `meta` again, MACed with the first of `keys`, when its MAC verifies
/// under one of them but is not that key's; whether it did. A head without a MAC is refused
/// as a forged one is (accepting one is [`accept_head`]'s).
pub fn remac_head(meta: &sled::Tree, keys: &HeadKeys) -> StoreResult<bool> {
    let Some(head) = recorded_head(meta)? else {
        return Ok(false);
    };
    if keys.is_current(&head) || !keys.held() {
        return Ok(false);
    }
    if let Some(problem) = keys.check(&head).refused() {
        return Err(StoreError::Corrupt(problem));
    }
    let value = serde_json::to_vec(&keys.sign(&head)).map_err(corrupt)?;
    meta.insert(HEAD_KEY, value).map_err(unavailable)?;
    Ok(true)
}

/// `paycred audit accept-head` on the store in `dir` (the server stopped): reads the log and
/// the recorded head without checking the head's MAC, lets `check` prove them (the chain, and
/// that the log holds the head), and then records the head MACed with the first of `keys`;
/// the head accepted (none: nothing recorded yet) and what `check` said.
pub fn accept_head(
    dir: &Path,
    keys: &HeadKeys,
    check: impl FnOnce(&[AuditEntry], &AuditHead) -> Result<String, String>,
) -> Result<Option<(AuditHead, String)>, String> {
    let at = |e: StoreError| format!("data_dir {}: {e}", dir.display());
    let db = sled::Config::new()
        .path(dir)
        .open()
        .map_err(|e| at(unavailable(e)))?;
    let meta = db.open_tree("meta").map_err(|e| at(unavailable(e)))?;
    move_tree_into_file(&db, dir, &meta).map_err(at)?;
    let Some(head) = recorded_head(&meta).map_err(at)?.filter(|h| h.seq > 0) else {
        return Ok(None);
    };
    let entries = audit_file::read_entries(&path(dir)).map_err(|e| at(corrupt(e)))?;
    let said = check(&entries, &head)?;
    let signed = keys.sign(&head);
    let value = serde_json::to_vec(&signed).map_err(|e| at(corrupt(e)))?;
    meta.insert(HEAD_KEY, value)
        .map_err(|e| at(unavailable(e)))?;
    db.flush().map_err(|e| at(unavailable(e)))?;
    Ok(Some((signed, said)))
}

/// The log file of the store in `dir`.
pub fn path(dir: &Path) -> std::path::PathBuf {
    dir.join(audit_file::FILE_NAME)
}

/// Moves a log kept in the `audit` tree (data dirs from before the log was a file) into the
/// file, once: the file is written beside and renamed into place, then the head is recorded,
/// then the tree dropped. A crash before the head is recorded does it again from the start.
pub fn move_tree_into_file(db: &sled::Db, dir: &Path, meta: &sled::Tree) -> StoreResult<()> {
    if !db
        .tree_names()
        .iter()
        .any(|n| n.as_ref() == TREE_NAME.as_bytes())
    {
        return Ok(());
    }
    let tree = db.open_tree(TREE_NAME).map_err(unavailable)?;
    // The head the tree's log was kept with (the whole last entry); its seq and hash.
    let tree_head = meta
        .get(TREE_HEAD_KEY)
        .map_err(unavailable)?
        .map(|v| serde_json::from_slice::<AuditHead>(&v).map_err(corrupt))
        .transpose()?;
    let moved = meta.contains_key(HEAD_KEY).map_err(unavailable)?;
    if moved || (tree.is_empty() && tree_head.is_none()) {
        // Moved before (or never used): only the tree is left to drop.
        db.drop_tree(TREE_NAME).map_err(unavailable)?;
        return db.flush().map(drop).map_err(unavailable);
    }
    let tmp = dir.join(format!("{}.tmp", audit_file::FILE_NAME));
    let mut file = std::io::BufWriter::new(audit_file::create(&tmp).map_err(unavailable)?);
    let mut head = AuditHead::default();
    let mut chained = true;
    for value in tree.iter().values() {
        let value = value.map_err(unavailable)?;
        // One or more entries, one JSON a line, each chained from the one before.
        for line in value.split(|&b| b == b'\n') {
            match audit_file::chained_after(&head, line) {
                Some(entry) => {
                    head.seq = entry.seq;
                    head.hash = entry.hash;
                }
                None => chained = false,
            }
        }
        file.write_all(&value).map_err(unavailable)?;
        file.write_all(b"\n").map_err(unavailable)?;
        head.len += value.len() as u64 + 1;
        if !chained {
            break;
        }
    }
    let file = file.into_inner().map_err(unavailable)?;
    let at_head = |h: &AuditHead| h.seq == head.seq && h.hash == head.hash;
    if !chained || !tree_head.as_ref().is_some_and(at_head) {
        drop(file);
        let _ = std::fs::remove_file(&tmp);
        return Err(corrupt(
            "the audit log kept in sled's `audit` tree is not one chain ending at the head \
             recorded with it (entries cut off or changed), so it was not moved into \
             audit.log: check it with the paycred release that wrote it (`paycred audit \
             --verify`)",
        ));
    }
    file.sync_all().map_err(unavailable)?;
    std::fs::rename(&tmp, path(dir)).map_err(unavailable)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(unavailable)?;
    let head = serde_json::to_vec(&head).map_err(corrupt)?;
    meta.insert(HEAD_KEY, head).map_err(unavailable)?;
    meta.remove(TREE_HEAD_KEY).map_err(unavailable)?;
    db.flush().map_err(unavailable)?;
    db.drop_tree(TREE_NAME).map_err(unavailable)?;
    db.flush().map(drop).map_err(unavailable)
}

/// The writer's [`Sink`]: the log file, and the outbox and head in sled.
pub struct LogSink {
    file: AuditFile,
    meta: sled::Tree,
    outbox: sled::Tree,
    commit: Arc<GroupCommit>,
    /// The head last recorded in `meta`.
    recorded: AuditHead,
    /// Outbox keys returned by the last [`Sink::pending`], not yet appended.
    taken: Vec<sled::IVec>,
    /// Outbox keys whose events are in the log, to take out at the next sync.
    moved: Vec<sled::IVec>,
    /// MAC the recorded heads.
    head_keys: HeadKeys,
    /// The recorded head's MAC is not by the first of `head_keys` (none, or a previous master
    /// key's): the next sync records it again.
    remac: bool,
    /// Syncs still to fail before the file's own (tests of what a failed `fdatasync` does).
    #[cfg(test)]
    fail_syncs: u32,
}

impl LogSink {
    /// Opens the log of the store in `dir` against the head recorded in `meta`. Outbox
    /// events already in the log (a crash came before they were taken out) are not
    /// appended again. New entries are hashed with `hash_fn`.
    pub fn open(
        dir: &Path,
        meta: sled::Tree,
        outbox: sled::Tree,
        commit: Arc<GroupCommit>,
        hash_fn: HashFunction,
        head_keys: HeadKeys,
    ) -> StoreResult<Self> {
        let mut recorded = recorded_head(&meta)?.unwrap_or_default();
        if recorded.seq > 0 && head_keys.held() {
            if let Some(problem) = head_keys.check(&recorded).refused() {
                return Err(StoreError::Corrupt(problem));
            }
        }
        // Not current: MACed again at the next sync.
        let remac = !head_keys.is_current(&recorded) && head_keys.held();
        recorded.mac.clear();
        let (file, after_head) =
            AuditFile::open(&path(dir), &recorded, hash_fn).map_err(StoreError::Corrupt)?;
        // Each event found after the head stands for one outbox event equal to it.
        let mut after_head = after_head;
        let mut moved = Vec::new();
        for kv in outbox.iter() {
            let (key, value) = kv.map_err(unavailable)?;
            let event: AuditEvent = serde_json::from_slice(&value).map_err(corrupt)?;
            if let Some(i) = after_head.iter().position(|e| *e == event) {
                after_head.swap_remove(i);
                moved.push(key);
            }
        }
        Ok(Self {
            file,
            meta,
            outbox,
            commit,
            recorded,
            taken: Vec::new(),
            moved,
            head_keys,
            remac,
            #[cfg(test)]
            fail_syncs: 0,
        })
    }
}

impl LogSink {
    /// `fdatasync` of the log file (in tests, failing first if told to).
    fn sync_file(&mut self) -> Result<(), String> {
        #[cfg(test)]
        if self.fail_syncs > 0 {
            self.fail_syncs -= 1;
            return Err("injected fdatasync failure".into());
        }
        self.file.sync()
    }

    /// Moves what the outbox holds into the log and syncs it (as the writer does first when
    /// it starts).
    pub fn drain(&mut self) -> Result<(), String> {
        let events = self.pending()?;
        if !events.is_empty() {
            self.append(&events)?;
        }
        self.sync()
    }
}

impl Sink for LogSink {
    fn pending(&mut self) -> Result<Vec<AuditEvent>, String> {
        self.taken.clear();
        let mut keys = Vec::new();
        let mut events = Vec::new();
        for kv in self.outbox.iter() {
            let (key, value) = kv.map_err(|e| e.to_string())?;
            if self.moved.contains(&key) {
                continue;
            }
            events.push(serde_json::from_slice(&value).map_err(|e| e.to_string())?);
            keys.push(key);
        }
        if !events.is_empty() {
            // The changes these events record are durable before their entries are.
            self.commit.durable_blocking()?;
        }
        // Only now: keys taken on a failed read would count as appended with the next batch.
        self.taken = keys;
        Ok(events)
    }

    fn append(&mut self, events: &[AuditEvent]) -> Result<(), String> {
        let result = self.file.append(events);
        if result.is_ok() {
            self.moved.append(&mut self.taken);
        }
        self.taken.clear();
        result
    }

    fn sync(&mut self) -> Result<(), String> {
        if let Err(e) = self.sync_file() {
            // What the failed sync covered may be lost, and a later sync could still report
            // success (the kernel reports a writeback error once): the file goes back to the
            // recorded head, and the outbox's events are appended again. Should that fail
            // too, the events stay counted as appended (they are in the file), not twice.
            self.file
                .rewind(&self.recorded)
                .map_err(|r| format!("{e}; going back to the recorded head: {r}"))?;
            self.moved.clear();
            return Err(e);
        }
        let head = self.file.head().clone();
        if head == self.recorded && self.moved.is_empty() && !self.remac {
            return Ok(());
        }
        let value = serde_json::to_vec(&self.head_keys.sign(&head)).map_err(|e| e.to_string())?;
        (&self.meta, &self.outbox)
            .transaction(|(meta, outbox)| {
                meta.insert(HEAD_KEY, value.as_slice())?;
                for key in &self.moved {
                    outbox.remove(key)?;
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(|e| format!("audit head not recorded: {e:?}"))?;
        // Committed: from here on sled holds this head and no longer holds these keys,
        // whether or not the flush below succeeds (a later one makes it durable).
        self.recorded = head;
        self.remac = false;
        self.moved.clear();
        self.commit.durable_blocking()
    }
}

#[async_trait]
impl AuditStore for SledStore {
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

    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>> {
        self.audit_writer
            .settle()
            .map_err(StoreError::Unavailable)?;
        crate::audit::file::read_entries(&self.audit_path).map_err(corrupt)
    }

    fn audit_head(&self) -> StoreResult<Option<AuditHead>> {
        recorded_head(&self.meta)
    }

    fn remac_audit_head(&self) -> StoreResult<bool> {
        // The writer has written everything queued: it records no head meanwhile (a head it
        // records later is MACed with the same first key).
        self.audit_writer
            .settle()
            .map_err(StoreError::Unavailable)?;
        let changed = remac_head(&self.meta, &self.head_keys)?;
        self.db.flush().map_err(unavailable)?;
        Ok(changed)
    }
}

impl SledStore {
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
        let outbox = db.open_tree(OUTBOX).map_err(unavailable)?;
        move_tree_into_file(&db, dir, &meta)?;
        // Without the master key, a MACed head is not recorded over (it would lose its MAC).
        let head = recorded_head(&meta)?.unwrap_or_default();
        if !outbox.is_empty() && head_keys.may_record_over(&head) {
            let commit = Arc::new(GroupCommit::start(db.clone()).map_err(unavailable)?);
            if let Ok(mut sink) =
                LogSink::open(dir, meta.clone(), outbox, commit, audit_hash, head_keys)
            {
                sink.drain().map_err(StoreError::Unavailable)?;
            }
        }
        let entries = crate::audit::file::read_entries(&path(dir)).map_err(corrupt)?;
        Ok((entries, recorded_head(&meta)?))
    }

    /// `paycred audit accept-head` on the store in `dir` (the server stopped): see
    /// [`accept_head`].
    pub fn accept_audit_head(
        dir: &Path,
        keys: &HeadKeys,
        check: impl FnOnce(&[AuditEntry], &AuditHead) -> Result<String, String>,
    ) -> Result<Option<(AuditHead, String)>, String> {
        accept_head(dir, keys, check)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::audit::chain::HashFunction::Sha256;
    use crate::audit::file::tests::event;
    use crate::store::{when_unlocked, AuditEntry, AuditStore, SledStore};
    use sled::transaction::TransactionError;

    fn commit_to_outbox(outbox: &sled::Tree, e: &AuditEvent) {
        outbox
            .transaction(|t| to_outbox(t, e))
            .map_err(|e: TransactionError<StoreError>| e.to_string())
            .unwrap();
    }

    fn sink(dir: &Path, db: &sled::Db) -> LogSink {
        let commit = Arc::new(GroupCommit::start(db.clone()).unwrap());
        let (meta, outbox) = (db.open_tree("meta").unwrap(), db.open_tree(OUTBOX).unwrap());
        LogSink::open(
            dir,
            meta,
            outbox,
            commit,
            Default::default(),
            HeadKeys::default(),
        )
        .unwrap()
    }

    /// The events in the log of the store in `dir`, oldest first; the chain must verify.
    fn logged_events(dir: &Path) -> Vec<AuditEvent> {
        let entries = audit_file::read_entries(&path(dir)).unwrap();
        assert_eq!(crate::audit::verify(&entries), Ok(entries.len()));
        entries.into_iter().map(|e| e.event).collect()
    }

    /// The store's database in `dir`, its outbox, and a sink on them.
    fn open_all(dir: &Path) -> (sled::Db, sled::Tree, LogSink) {
        let db = when_unlocked(|| sled::open(dir)).unwrap();
        let outbox = db.open_tree(OUTBOX).unwrap();
        let log = sink(dir, &db);
        (db, outbox, log)
    }

    #[test]
    fn an_outbox_event_in_the_log_before_a_crash_is_not_appended_twice() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (db, outbox, mut log) = open_all(dir.path());
            commit_to_outbox(&outbox, &event(1));
            log.drain().unwrap();
            commit_to_outbox(&outbox, &event(2));
            commit_to_outbox(&outbox, &event(3));
            // Appended and synced, then a crash before the outbox lost them.
            let events = log.pending().unwrap();
            assert_eq!(events, [event(2), event(3)]);
            log.append(&events).unwrap();
            log.file.sync().unwrap();
            db.flush().unwrap();
        }
        let db = when_unlocked(|| sled::open(dir.path())).unwrap();
        let outbox = db.open_tree(OUTBOX).unwrap();
        assert_eq!(outbox.len(), 2);
        commit_to_outbox(&outbox, &event(4));
        let mut log = sink(dir.path(), &db);
        log.drain().unwrap();
        assert!(outbox.is_empty());
        let got = logged_events(dir.path());
        assert_eq!(got, [event(1), event(2), event(3), event(4)]);
        let head = recorded_head(&db.open_tree("meta").unwrap()).unwrap();
        assert_eq!(head.map(|h| h.seq), Some(4));
    }

    #[test]
    fn after_a_failed_sync_the_log_goes_back_to_its_head_and_the_outbox_is_appended_again() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (db, outbox, mut log) = open_all(dir.path());
            commit_to_outbox(&outbox, &event(1));
            log.drain().unwrap();
            commit_to_outbox(&outbox, &event(2));
            assert_eq!(log.pending().unwrap(), [event(2)]);
            // Event 3 stands for a proxy entry: queued only, in no outbox.
            log.append(&[event(2), event(3)]).unwrap();
            log.fail_syncs = 1;
            assert_eq!(log.sync().unwrap_err(), "injected fdatasync failure");
            // What the failed sync covered is gone; the committed change's event waits.
            assert_eq!(logged_events(dir.path()), [event(1)]);
            assert_eq!(outbox.len(), 1);
            log.drain().unwrap();
            assert_eq!(logged_events(dir.path()), [event(1), event(2)]);
            assert!(outbox.is_empty());
            let head = recorded_head(&db.open_tree("meta").unwrap()).unwrap();
            assert_eq!(head.map(|h| h.seq), Some(2));
        }
        // The store opens on it: the file reaches the recorded head.
        let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        assert_eq!(store.audit_log().unwrap().len(), 2);
    }

    #[test]
    fn two_equal_outbox_events_of_which_one_reached_the_log_are_both_kept() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (db, outbox, mut log) = open_all(dir.path());
            commit_to_outbox(&outbox, &event(9));
            commit_to_outbox(&outbox, &event(9));
            // Only one reached the file before a crash.
            log.file.append(&[event(9)]).unwrap();
            log.file.sync().unwrap();
            db.flush().unwrap();
        }
        let db = when_unlocked(|| sled::open(dir.path())).unwrap();
        sink(dir.path(), &db).drain().unwrap();
        assert_eq!(logged_events(dir.path()), [event(9), event(9)]);
    }

    /// A data dir laid out as before the log was a file: values of entry lines keyed by
    /// their first seq (entries 1–3 and 4–5), and the last entry as the head. Its entries.
    fn old_layout(dir: &Path) -> Vec<AuditEntry> {
        let db = when_unlocked(|| sled::open(dir)).unwrap();
        let tree = db.open_tree(TREE_NAME).unwrap();
        let mut old = Vec::new();
        let mut prev = String::new();
        let mut value = Vec::new();
        for seq in 1..=5u64 {
            if !value.is_empty() {
                value.push(b'\n');
            }
            let start = value.len();
            // (All SHA-256: the layout is older than BLAKE3 in the chain.)
            prev = audit_file::push_entry(&mut value, seq, &event(seq as usize), &prev, Sha256)
                .unwrap();
            old.push(serde_json::from_slice::<AuditEntry>(&value[start..]).unwrap());
            if seq == 3 || seq == 5 {
                let first = if seq == 3 { 1u64 } else { 4 };
                tree.insert(first.to_be_bytes(), std::mem::take(&mut value))
                    .unwrap();
            }
        }
        let meta = db.open_tree("meta").unwrap();
        meta.insert(TREE_HEAD_KEY, serde_json::to_vec(&old[4]).unwrap())
            .unwrap();
        db.flush().unwrap();
        old
    }

    #[tokio::test]
    async fn a_log_kept_in_the_audit_tree_moves_into_the_file_chain_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let old = old_layout(dir.path());
        let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        assert_eq!(store.audit_log().unwrap(), old);
        store.append_audit(event(6)).await.unwrap();
        let log = store.audit_log().unwrap();
        assert_eq!(crate::audit::verify(&log), Ok(6));
        let head = store.audit_head().unwrap();
        assert_eq!(crate::audit::verify_head(&log, head.as_ref()), Ok(()));
        assert_eq!(head.map(|h| h.seq), Some(6));
        drop(store);
        let db = when_unlocked(|| sled::open(dir.path())).unwrap();
        assert!(!db
            .tree_names()
            .iter()
            .any(|n| n.as_ref() == TREE_NAME.as_bytes()));
    }

    #[test]
    fn a_log_in_the_audit_tree_cut_short_of_its_head_is_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        old_layout(dir.path());
        {
            let db = when_unlocked(|| sled::open(dir.path())).unwrap();
            db.open_tree(TREE_NAME)
                .unwrap()
                .remove(4u64.to_be_bytes())
                .unwrap();
            db.flush().unwrap();
        }
        let err = when_unlocked(|| SledStore::open(dir.path(), Default::default()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not one chain ending at the head"), "{err}");
        assert!(!path(dir.path()).exists());
    }

    #[test]
    fn a_log_in_the_audit_tree_changed_inside_is_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        old_layout(dir.path());
        {
            let db = when_unlocked(|| sled::open(dir.path())).unwrap();
            let tree = db.open_tree(TREE_NAME).unwrap();
            let value = tree.get(1u64.to_be_bytes()).unwrap().unwrap();
            let changed = String::from_utf8(value.to_vec())
                .unwrap()
                .replace("n=2", "n=7");
            tree.insert(1u64.to_be_bytes(), changed.as_bytes()).unwrap();
            db.flush().unwrap();
        }
        let err = when_unlocked(|| SledStore::open(dir.path(), Default::default()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not one chain"), "{err}");
        assert!(!path(dir.path()).exists());
    }

    #[tokio::test]
    async fn a_store_does_not_open_on_a_damaged_log_but_it_can_still_be_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
            for i in 0..3 {
                store.append_audit(event(i)).await.unwrap();
            }
        }
        let log_path = path(dir.path());
        let text = std::fs::read_to_string(&log_path).unwrap();
        std::fs::write(&log_path, text.replace("n=2", "n=9")).unwrap();
        let err = when_unlocked(|| SledStore::open(dir.path(), Default::default()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not match the head"), "{err}");
        let (entries, head) = when_unlocked(|| {
            SledStore::read_audit(dir.path(), Default::default(), HeadKeys::default())
        })
        .unwrap();
        assert_eq!(entries.len(), 3);
        assert!(crate::audit::verify(&entries).is_err());
        assert_eq!(head.map(|h| h.seq), Some(3));
    }
}
