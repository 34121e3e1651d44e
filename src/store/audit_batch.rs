//! Batched audit appends. Events queue for one writer thread, which appends everything queued
//! so far in a single sled transaction (the hash chain stays in queue order), makes it durable
//! with one group commit, and then answers the waiters. Under load, a whole batch of reveals
//! shares one transaction and one fsync instead of paying one each.
//!
//! [`AuditBatcher::append`] waits for durability; [`AuditBatcher::append_nowait`] (the proxy's
//! hot path) only queues: the entry is written and flushed right behind the request, which does
//! not wait for the disk. A crash can lose the entries of the batch being written.

use super::group_commit::GroupCommit;
use super::AuditEvent;
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Most events written in one transaction.
const MAX_BATCH: usize = 1024;

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
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter().take(MAX_BATCH - 1));
                    let (events, waiters): (Vec<AuditEvent>, Vec<Waiter>) =
                        batch.into_iter().unzip();
                    let result = write(&events).and_then(|()| commit.durable_blocking());
                    if let Err(e) = &result {
                        tracing::error!(error = %e, lost = events.len(), "audit batch not written");
                    }
                    for waiter in waiters.into_iter().flatten() {
                        let _ = waiter.send(result.clone());
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
