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
//! it was written.
//!
//! [`AuditBatcher::count`] is for events anyone can repeat at will (authentication failures).
//! The caller's thread counts the repeats in a [`Tally`] shared with the writer, so a flood
//! of them never reaches the queue. The writer writes each count when its window ends, with
//! the time of the last repeat; that time can be earlier than an entry's just before it.
//!
//! Dropping the handle closes the queue and waits until the writer has written everything
//! queued, open counts included, and flushed it. The store is dropped when pingora stops its
//! runtimes at the end of a graceful shutdown, before the process exits, unless something
//! else holds it at that moment (a sweeper mid-sweep) or the runtimes outlast
//! `graceful_shutdown_timeout`. A crash can lose the entries of the last window (at most
//! 25 ms) and counts not yet written (at most 1 s).

use super::audit_tally::Tally;
use super::group_commit::GroupCommit;
use super::AuditEvent;
use parking_lot::Mutex;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
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

/// What the writer is sent: an entry to append; with a waiter, someone waits for it to be
/// durable.
type Item = (AuditEvent, Waiter);

/// Handle to the writer thread. Dropping it stops the writer once it has written and
/// flushed everything queued, counts included, and waits for that.
#[derive(Debug)]
pub struct AuditBatcher {
    queue: Option<mpsc::Sender<Item>>,
    writer: Option<JoinHandle<()>>,
    /// Counted events, shared with the writer: counting happens on the caller's thread, so
    /// a flood of repeats never reaches the queue.
    tally: Arc<Mutex<Tally>>,
}

impl AuditBatcher {
    /// Starts the writer. `write` appends a batch in one transaction.
    pub fn start<W>(commit: Arc<GroupCommit>, write: W) -> std::io::Result<Self>
    where
        W: Fn(&[AuditEvent]) -> Result<(), String> + Send + 'static,
    {
        let (queue, rx) = mpsc::channel::<Item>();
        let tally = Arc::new(Mutex::new(Tally::default()));
        let writer = Writer::new(commit, write, Arc::clone(&tally));
        let writer = std::thread::Builder::new()
            .name("paycred-audit".into())
            .spawn(move || writer.run(&rx))?;
        Ok(Self {
            queue: Some(queue),
            writer: Some(writer),
            tally,
        })
    }

    fn send(&self, item: Item) -> Result<(), String> {
        self.queue
            .as_ref()
            .and_then(|queue| queue.send(item).ok())
            .ok_or_else(|| "audit writer stopped".to_string())
    }

    /// Appends and waits until the entry is durable.
    pub async fn append(&self, event: AuditEvent) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.send((event, Some(tx)))?;
        rx.await.map_err(|_| "audit writer stopped".to_string())?
    }

    /// Queues the entry; it is written and flushed right behind the caller.
    pub fn append_nowait(&self, event: AuditEvent) {
        if self.send((event, None)).is_err() {
            tracing::error!("audit writer stopped: an entry was not written");
        }
    }

    /// Counts an event that anyone can repeat at will: the first of a quiet spell is
    /// queued as [`AuditBatcher::append_nowait`] queues it; its repeats are only counted,
    /// here, and the writer writes the count as one entry a
    /// [`WINDOW`](super::audit_tally::WINDOW) (see [`Tally`]).
    pub fn count(&self, event: AuditEvent) {
        let first = self.tally.lock().note(event, Instant::now());
        if let Some(first) = first {
            self.append_nowait(first);
        }
    }
}

impl Drop for AuditBatcher {
    fn drop(&mut self) {
        // The writer sees the queue closed once it has taken everything in it.
        self.queue.take();
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("audit writer panicked");
            }
        }
    }
}

/// The writer thread's state.
struct Writer<W> {
    commit: Arc<GroupCommit>,
    write: W,
    tally: Arc<Mutex<Tally>>,
    /// Since when entries of `append_nowait` are written but not flushed.
    unflushed_since: Option<Instant>,
}

impl<W> Writer<W>
where
    W: Fn(&[AuditEvent]) -> Result<(), String>,
{
    fn new(commit: Arc<GroupCommit>, write: W, tally: Arc<Mutex<Tally>>) -> Self {
        Self {
            commit,
            write,
            tally,
            unflushed_since: None,
        }
    }

    fn run(mut self, rx: &mpsc::Receiver<Item>) {
        loop {
            let wake = [
                self.unflushed_since.map(|since| since + FLUSH_EVERY),
                // A window opened since is noticed: its first event comes through the queue.
                self.tally.lock().next_due(),
            ]
            .into_iter()
            .flatten()
            .min();
            let first = match wake {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(item) => Some(item),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match rx.recv() {
                    Ok(item) => Some(item),
                    Err(_) => break,
                },
            };
            let mut events = Vec::new();
            let mut waiters = Vec::new();
            if let Some(first) = first {
                if first.1.is_none() {
                    std::thread::sleep(GATHER);
                }
                for (event, waiter) in
                    std::iter::once(first).chain(rx.try_iter().take(MAX_BATCH - 1))
                {
                    events.push(event);
                    waiters.extend(waiter);
                }
            }
            let due = self.tally.lock().due(Instant::now());
            events.extend(due);
            self.write_batch(&events, waiters);
            if self
                .unflushed_since
                .is_some_and(|since| since.elapsed() >= FLUSH_EVERY)
            {
                self.flush();
            }
        }
        // Stopping: the counts still open, then everything to disk.
        let events = self.tally.lock().drain();
        self.write_batch(&events, Vec::new());
        self.flush();
    }

    /// Writes `events` in one transaction and answers `waiters` once it is durable.
    fn write_batch(
        &mut self,
        events: &[AuditEvent],
        waiters: Vec<oneshot::Sender<Result<(), String>>>,
    ) {
        if events.is_empty() {
            return;
        }
        let mut result = (self.write)(events);
        if result.is_ok() && !waiters.is_empty() {
            // Someone waits for durability: flush now (everything written so far).
            result = self.commit.durable_blocking();
            self.unflushed_since = None;
        } else if result.is_ok() {
            self.unflushed_since.get_or_insert_with(Instant::now);
        }
        if let Err(e) = &result {
            tracing::error!(error = %e, lost = events.len(), "audit batch not written");
        }
        for waiter in waiters {
            let _ = waiter.send(result.clone());
        }
    }

    fn flush(&mut self) {
        if self.unflushed_since.take().is_some() {
            if let Err(e) = self.commit.durable_blocking() {
                tracing::error!(error = %e, "audit flush failed");
            }
        }
    }
}
