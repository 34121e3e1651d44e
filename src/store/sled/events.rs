//! [`EventStore`] on sled: the `events` tree ([`crate::store::events`]): key `project \0` and the event's sequence
//! number (u64 BE, from sled's id generator, which only grows, across restarts too), so one
//! project's events are one range, oldest first; value the event (JSON).
//!
//! Beside each event, in the same transaction, its fan-out marker
//! ([`crate::store::deliveries`]): key `0xff` and the sequence number (no project's key
//! starts so: 0xff is no byte of UTF-8), value the project.

use super::SledStore;
use crate::store::events::{EventQuery, EventRecord, EventStore, NewEvent};
use crate::store::{corrupt, unavailable, StoreError, StoreResult};
use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

/// Name of the tree.
pub const TREE: &str = "events";

fn prefix(project: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(project.len() + 9);
    k.extend_from_slice(project.as_bytes());
    k.push(0);
    k
}

/// Writes `events` in order, inside the transaction of the change they record.
pub fn write(
    tree: &TransactionalTree,
    events: &[NewEvent],
) -> Result<(), ConflictableTransactionError<StoreError>> {
    for event in events {
        let seq = tree.generate_id()?;
        let key = key(&event.project, seq);
        let value = serde_json::to_vec(event)
            .map_err(|e| ConflictableTransactionError::Abort(corrupt(e)))?;
        tree.insert(key, value)?;
        tree.insert(marker(seq).as_slice(), event.project.as_bytes())?;
    }
    Ok(())
}

/// Writes `events` in order without a transaction (a change written alone, by a
/// compare-and-swap: [`super::ahead`]): each event, then its fan-out marker, so the fan-out
/// never finds a marker without its event.
pub fn write_alone(db: &sled::Db, tree: &sled::Tree, events: &[NewEvent]) -> StoreResult<()> {
    for event in events {
        let seq = db.generate_id().map_err(unavailable)?;
        let value = serde_json::to_vec(event).map_err(corrupt)?;
        tree.insert(key(&event.project, seq), value)
            .map_err(unavailable)?;
        tree.insert(marker(seq).as_slice(), event.project.as_bytes())
            .map_err(unavailable)?;
    }
    Ok(())
}

/// First byte of a fan-out marker's key.
pub const MARKER: u8 = 0xff;

/// The fan-out marker's key of event `seq`.
pub fn marker(seq: u64) -> [u8; 9] {
    let mut k = [MARKER; 9];
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The key of event `seq` of `project`.
pub fn key(project: &str, seq: u64) -> Vec<u8> {
    let mut k = prefix(project);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Up to `limit` fan-out markers, oldest first: (event number, project).
pub fn markers(tree: &sled::Tree, limit: usize) -> StoreResult<Vec<(u64, String)>> {
    tree.scan_prefix([MARKER])
        .take(limit)
        .map(|item| {
            let (k, v) = item.map_err(unavailable)?;
            let seq = u64_at(&k, 1).ok_or_else(|| corrupt("bad fan-out marker"))?;
            let project = String::from_utf8(v.to_vec()).map_err(corrupt)?;
            Ok((seq, project))
        })
        .collect()
}

/// Event `seq` of `project`, if stored.
pub fn get(tree: &sled::Tree, project: &str, seq: u64) -> StoreResult<Option<EventRecord>> {
    let k = key(project, seq);
    tree.get(&k)
        .map_err(unavailable)?
        .map(|v| decode(&k, &v, |_| Some(k.len() - 8)))
        .transpose()
}

/// Every event of every project, oldest first of each project (`paycred store copy`).
pub fn all(tree: &sled::Tree) -> StoreResult<Vec<EventRecord>> {
    tree.iter()
        .filter(|item| {
            item.as_ref()
                .map_or(true, |(k, _)| k.first() != Some(&MARKER))
        })
        .map(|item| {
            let (k, v) = item.map_err(unavailable)?;
            decode(&k, &v, |k| k.iter().position(|b| *b == 0).map(|i| i + 1))
        })
        .collect()
}

/// The number a key ends with: the 8 bytes (big-endian) from `at` to its end.
pub fn u64_at(k: &[u8], at: usize) -> Option<u64> {
    k.get(at..)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
}

/// The event stored at `k` (its sequence number after `start(k)` bytes) with value `v`.
fn decode(k: &[u8], v: &[u8], start: impl Fn(&[u8]) -> Option<usize>) -> StoreResult<EventRecord> {
    let seq = start(k)
        .and_then(|i| u64_at(k, i))
        .ok_or_else(|| corrupt("bad events key"))?;
    let event: NewEvent = serde_json::from_slice(v).map_err(corrupt)?;
    Ok(EventRecord { seq, event })
}

/// The events `query` asks for, newest first.
pub fn list(tree: &sled::Tree, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>> {
    let start = prefix(query.project);
    let mut end = start.clone();
    end.extend_from_slice(&query.before.unwrap_or(u64::MAX).to_be_bytes());
    let mut found = Vec::new();
    for item in tree.range(start.clone()..end).rev() {
        if found.len() >= query.limit {
            break;
        }
        let (k, v) = item.map_err(unavailable)?;
        let record = decode(&k, &v, |_| Some(start.len()))?;
        if query.matches(record.seq, &record.event) {
            found.push(record);
        }
    }
    Ok(found)
}

#[async_trait]
impl EventStore for SledStore {
    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>> {
        list(&self.events, query)
    }

    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>> {
        get(&self.events, project, seq)
    }
}
