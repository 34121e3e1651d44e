//! The audit log in PostgreSQL: one chain for every instance.
//!
//! [`PgSink`] is the audit writer's sink. Each move takes the chain's advisory lock in a
//! transaction, reads the head, chains the events of committed changes waiting in
//! `audit_outbox` (oldest first) and then the writer's own, inserts them into `audit_log`,
//! records the new head in `audit_head` and deletes the moved outbox rows, and commits: the
//! entries of every instance form one order, and the head is never apart from the log.

use super::{client, run_blocking, timed, PgStore};
use crate::audit::chain::HashFunction;
use crate::audit::head_mac::HeadKeys;
use crate::audit::writer::Sink;
use crate::audit::{AuditEntry, AuditEvent, AuditHead};
use crate::store::{corrupt, AuditStore, StoreError, StoreResult};
use async_trait::async_trait;
use deadpool_postgres::Pool;

/// The advisory lock that serializes chaining.
pub(crate) const CHAIN_LOCK: i64 = 0x0070_6179_6372_6565;

/// The audit writer's sink on the database.
pub struct PgSink {
    pool: Pool,
    handle: tokio::runtime::Handle,
    hash: HashFunction,
    /// The writer's own events, appended but not yet committed.
    own: Vec<AuditEvent>,
    /// MAC the recorded heads.
    keys: HeadKeys,
}

impl PgSink {
    pub fn new(
        pool: Pool,
        handle: tokio::runtime::Handle,
        hash: HashFunction,
        keys: HeadKeys,
    ) -> Self {
        Self {
            pool,
            handle,
            hash,
            own: Vec::new(),
            keys,
        }
    }

    /// Chains the outbox and `own` into the log in one transaction.
    fn chain(&mut self, own: Vec<AuditEvent>) -> Result<(), String> {
        let (pool, hash, keys) = (self.pool.clone(), self.hash, self.keys.clone());
        run_blocking(
            &self.handle,
            async move { chain(&pool, hash, &keys, own).await },
        )
        .map_err(|e| e.to_string())
    }
}

async fn chain(
    pool: &Pool,
    hash: HashFunction,
    keys: &HeadKeys,
    own: Vec<AuditEvent>,
) -> StoreResult<()> {
    let mut c = client(pool).await?;
    let tx = timed(c.transaction()).await?;
    timed(tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CHAIN_LOCK])).await?;
    let outbox = timed(tx.query("DELETE FROM audit_outbox RETURNING n, event", &[])).await?;
    if outbox.is_empty() && own.is_empty() {
        return Ok(());
    }
    let mut waiting: Vec<(i64, AuditEvent)> = outbox
        .iter()
        .map(|r| {
            Ok((
                r.get::<_, i64>(0),
                serde_json::from_value(r.get(1)).map_err(corrupt)?,
            ))
        })
        .collect::<StoreResult<_>>()?;
    waiting.sort_by_key(|(n, _)| *n);
    let head = timed(tx.query_opt("SELECT seq, hash, mac FROM audit_head", &[])).await?;
    let head = head.as_ref().map(head_of).transpose()?.unwrap_or_default();
    if head.seq > 0 && keys.held() {
        // Chained on by an instance holding the master key only if its MAC verifies: a head
        // stripped of its MAC or forged while instances run is not MACed with the next entry.
        if let Some(problem) = keys.check(&head).refused() {
            return Err(StoreError::Corrupt(problem));
        }
    }
    if !keys.may_record_over(&head) {
        // Left for an instance holding the master key.
        return Ok(());
    }
    let (mut seq, mut prev) = (i64::try_from(head.seq).map_err(corrupt)?, head.hash);
    // The whole batch in one statement (one round trip, however many entries are waiting).
    let (mut seqs, mut values, mut prevs, mut hashes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for event in waiting.into_iter().map(|(_, e)| e).chain(own) {
        let json = serde_json::to_vec(&event).map_err(corrupt)?;
        let h = hash.hash(&prev, &json);
        seq += 1;
        let value: serde_json::Value = serde_json::from_slice(&json).map_err(corrupt)?;
        seqs.push(seq);
        values.push(value);
        prevs.push(std::mem::replace(&mut prev, h.clone()));
        hashes.push(h);
    }
    timed(tx.execute(
        "INSERT INTO audit_log (seq, event, prev_hash, hash) \
         SELECT * FROM UNNEST($1::bigint[], $2::jsonb[], $3::text[], $4::text[])",
        &[&seqs, &values, &prevs, &hashes],
    ))
    .await?;
    let mac = keys.mac(&AuditHead {
        seq: u64::try_from(seq).map_err(corrupt)?,
        hash: prev.clone(),
        ..AuditHead::default()
    });
    timed(tx.execute(
        "INSERT INTO audit_head (one, seq, hash, mac) VALUES (true, $1, $2, $3) \
         ON CONFLICT (one) DO UPDATE SET seq = $1, hash = $2, mac = $3",
        &[&seq, &prev, &mac],
    ))
    .await?;
    timed(tx.commit()).await
}

/// A row of `audit_head` (seq, hash, mac) as a head.
fn head_of(r: &tokio_postgres::Row) -> StoreResult<AuditHead> {
    Ok(AuditHead {
        seq: u64::try_from(r.get::<_, i64>(0)).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        hash: r.get(1),
        len: 0,
        mac: r.get(2),
    })
}

/// MACs the recorded head again with the first of `keys`, under the chain's lock, once its
/// MAC verifies under one of them (or it has none); whether it changed it.
pub async fn remac_head(pool: &Pool, keys: &HeadKeys) -> StoreResult<bool> {
    let mut c = client(pool).await?;
    let tx = timed(c.transaction()).await?;
    timed(tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CHAIN_LOCK])).await?;
    let Some(row) = timed(tx.query_opt("SELECT seq, hash, mac FROM audit_head", &[])).await? else {
        return Ok(false);
    };
    let head = head_of(&row)?;
    if keys.is_current(&head) || !keys.held() {
        return Ok(false);
    }
    if let Some(problem) = keys.check(&head).refused() {
        return Err(StoreError::Corrupt(problem));
    }
    timed(tx.execute("UPDATE audit_head SET mac = $1", &[&keys.mac(&head)])).await?;
    timed(tx.commit()).await?;
    Ok(true)
}

/// `paycred audit accept-head` on the database: under the chain's lock, reads the log and the
/// recorded head without checking the head's MAC, lets `check` prove them, and MACs the head
/// with the first of `keys`; the head accepted (none: nothing recorded yet) and what `check`
/// said.
pub async fn accept_head(
    pool: &Pool,
    keys: &HeadKeys,
    check: impl FnOnce(&[AuditEntry], &AuditHead) -> Result<String, String>,
) -> StoreResult<Result<Option<(AuditHead, String)>, String>> {
    let mut c = client(pool).await?;
    let tx = timed(c.transaction()).await?;
    timed(tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CHAIN_LOCK])).await?;
    let Some(row) = timed(tx.query_opt("SELECT seq, hash, mac FROM audit_head", &[])).await? else {
        return Ok(Ok(None));
    };
    let head = head_of(&row)?;
    let rows = timed(tx.query(
        "SELECT seq, event, prev_hash, hash FROM audit_log ORDER BY seq",
        &[],
    ))
    .await?;
    let entries = rows.iter().map(entry_of).collect::<StoreResult<Vec<_>>>()?;
    let said = match check(&entries, &head) {
        Ok(said) => said,
        Err(e) => return Ok(Err(e)),
    };
    let signed = keys.sign(&head);
    timed(tx.execute("UPDATE audit_head SET mac = $1", &[&signed.mac])).await?;
    timed(tx.commit()).await?;
    Ok(Ok(Some((signed, said))))
}

impl Sink for PgSink {
    /// Moves the outbox into the log at once (its own transaction) and returns nothing: on the
    /// database the move is durable as it happens.
    fn pending(&mut self) -> Result<Vec<AuditEvent>, String> {
        self.chain(Vec::new())?;
        Ok(Vec::new())
    }

    fn append(&mut self, events: &[AuditEvent]) -> Result<(), String> {
        self.own.extend_from_slice(events);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), String> {
        let own = std::mem::take(&mut self.own);
        self.chain(own)
    }
}

/// The whole log, oldest first.
pub async fn read_log(pool: &Pool) -> StoreResult<Vec<AuditEntry>> {
    let c = client(pool).await?;
    let rows = timed(c.query(
        "SELECT seq, event, prev_hash, hash FROM audit_log ORDER BY seq",
        &[],
    ))
    .await?;
    rows.iter().map(entry_of).collect()
}

/// A row of `audit_log` (seq, event, prev_hash, hash) as an entry.
fn entry_of(r: &tokio_postgres::Row) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        seq: u64::try_from(r.get::<_, i64>(0)).map_err(corrupt)?,
        event: serde_json::from_value(r.get(1)).map_err(corrupt)?,
        prev_hash: r.get(2),
        hash: r.get(3),
    })
}

/// The recorded head, if any entry was chained.
pub async fn read_head(pool: &Pool) -> StoreResult<Option<AuditHead>> {
    let c = client(pool).await?;
    let row = timed(c.query_opt("SELECT seq, hash, mac FROM audit_head", &[])).await?;
    row.as_ref().map(head_of).transpose()
}

#[async_trait]
impl AuditStore for PgStore {
    async fn append_audit(&self, audit: AuditEvent) -> StoreResult<()> {
        self.writer()?
            .append(audit)
            .await
            .map_err(StoreError::Unavailable)
    }

    fn append_audit_nowait(&self, audit: AuditEvent) {
        if let Some(w) = &self.audit_writer {
            w.append_nowait(audit);
        }
    }

    fn count_audit(&self, audit: AuditEvent) {
        if let Some(w) = &self.audit_writer {
            w.count(audit);
        }
    }

    fn audit_log(&self) -> StoreResult<Vec<AuditEntry>> {
        self.writer()?.settle().map_err(StoreError::Unavailable)?;
        let pool = self.pool.clone();
        self.blocking(async move { read_log(&pool).await })
    }

    fn audit_head(&self) -> StoreResult<Option<AuditHead>> {
        let pool = self.pool.clone();
        self.blocking(async move { read_head(&pool).await })
    }

    fn remac_audit_head(&self) -> StoreResult<bool> {
        let (pool, keys) = (self.pool.clone(), self.head_keys.clone());
        self.blocking(async move { remac_head(&pool, &keys).await })
    }
}

impl PgStore {
    /// `paycred audit accept-head` on the database: see [`accept_head`].
    pub fn accept_audit_head(
        &self,
        keys: &HeadKeys,
        check: impl FnOnce(&[AuditEntry], &AuditHead) -> Result<String, String> + Send + 'static,
    ) -> Result<Option<(AuditHead, String)>, String> {
        let (pool, keys) = (self.pool.clone(), keys.clone());
        self.blocking(async move { accept_head(&pool, &keys, check).await })
            .map_err(|e| format!("database {}: {e}", self.describe))?
    }
}
