//! Batched audit appends. Events queue for one writer thread, which appends everything queued
//! so far in a single sled transaction (the hash chain stays in queue order), makes it durable
//! with one group commit, and then answers the waiters. Under load, a whole batch of reveals
//! shares one transaction and one fsync instead of paying one each.
//!
//! [`AuditBatcher::append`] waits for durability; [`AuditBatcher::append_nowait`] (the proxy's
//! hot path) only queues: the request does not wait for the disk. A queued entry is written
//! at most [`GATHER`] later, together with whatever else queued meanwhile (so a busy proxy
//! pays one transaction per few milliseconds, not one per request, and wakes the writer once
//! per batch), and flushed with the next durable write or at the latest [`FLUSH_EVERY`] after
//! it was written. A crash can lose the entries of that last window (at most 25 ms).

use super::group_commit::GroupCommit;
use super::AuditEvent;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Most events written in one transaction.
const MAX_BATCH: usize = 1024;

/// Longest time a written entry of [`AuditBatcher::append_nowait`] stays unflushed.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// How long the writer gathers entries of [`AuditBatcher::append_nowait`] before writing them
/// in one transaction. It sleeps instead of waking for every entry, so an entry someone waits
/// for ([`AuditBatcher::append`]) that arrives meanwhile waits this long too; one that finds
/// the writer idle is written at once.
pub const GATHER: Duration = Duration::from_millis(5);

type Waiter = Option<oneshot::Sender<Result<(), String>>>;

/// Handle to the writer thread.
#[derive(Debug)]
pub struct AuditBatcher {
    queue: mpsc::Sender<(AuditEvent, Waiter)>,
}

impl AuditBatcher {
    /// Starts the writer. `write` appends a batch in one transaction.
    pub fn start<W>(commit: Arc<GroupCommit>, write: W) -> std::io::Result<Self>
    where
        W: Fn(&[AuditEvent]) -> Result<(), String> + Send + 'static,
    {
        let (queue, rx) = mpsc::channel::<(AuditEvent, Waiter)>();
        std::thread::Builder::new()
            .name("paycred-audit".into())
            .spawn(move || {
                // Written but not yet flushed entries of `append_nowait`, since when.
                let mut unflushed_since: Option<Instant> = None;
                loop {
                    let first = match unflushed_since {
                        Some(since) => match rx.recv_timeout(FLUSH_EVERY.saturating_sub(since.elapsed())) {
                            Ok(item) => Some(item),
                            Err(mpsc::RecvTimeoutError::Timeout) => None,
                            Err(mpsc::RecvTimeoutError::Disconnected) => {
                                let _ = commit.durable_blocking();
                                return;
                            }
                        },
                        None => match rx.recv() {
                            Ok(item) => Some(item),
                            Err(_) => return,
                        },
                    };
                    if let Some(first) = first {
                        if first.1.is_none() {
                            std::thread::sleep(GATHER);
                        }
                        let mut batch = vec![first];
                        batch.extend(rx.try_iter().take(MAX_BATCH - 1));
                        let (events, waiters): (Vec<AuditEvent>, Vec<Waiter>) = batch.into_iter().unzip();
                        let waiters: Vec<_> = waiters.into_iter().flatten().collect();
                        let mut result = write(&events);
                        if result.is_ok() && !waiters.is_empty() {
                            // Someone waits for durability: flush now (everything written so far).
                            result = commit.durable_blocking();
                            unflushed_since = None;
                        } else if result.is_ok() {
                            unflushed_since.get_or_insert_with(Instant::now);
                        }
                        if let Err(e) = &result {
                            tracing::error!(error = %e, lost = events.len(), "audit batch not written");
                        }
                        for waiter in waiters {
                            let _ = waiter.send(result.clone());
                        }
                    }
                    if unflushed_since.is_some_and(|since| since.elapsed() >= FLUSH_EVERY) {
                        if let Err(e) = commit.durable_blocking() {
                            tracing::error!(error = %e, "audit flush failed");
                        }
                        unflushed_since = None;
                    }
                }
            })?;
        Ok(Self { queue })
    }

    /// Appends and waits until the entry is durable.
    pub async fn append(&self, event: AuditEvent) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((event, Some(tx)))
            .map_err(|_| "audit writer stopped".to_string())?;
        rx.await.map_err(|_| "audit writer stopped".to_string())?
    }

    /// Queues the entry; it is written and flushed right behind the caller.
    pub fn append_nowait(&self, event: AuditEvent) {
        if self.queue.send((event, None)).is_err() {
            tracing::error!("audit writer stopped: an entry was not written");
        }
    }
}
