//! Group commit: writers that need durability wait for one shared `flush`.
//!
//! A writer applies its change in memory, then calls [`GroupCommit::durable`]. One
//! flusher thread takes every waiter queued so far, runs a single `sled::Db::flush`
//! (which makes all earlier writes durable) and wakes them all. Under load, many writes
//! share one fsync instead of paying one each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

type Waiter = oneshot::Sender<Result<(), String>>;

/// Handle to the flusher thread. Dropping it stops the thread and waits for it, so the
/// database (and its directory lock) is let go of once the handle is.
#[derive(Debug)]
pub struct GroupCommit {
    queue: Option<mpsc::Sender<Waiter>>,
    flusher: Option<std::thread::JoinHandle<()>>,
    flushes: Arc<AtomicU64>,
    waits: AtomicU64,
}

impl GroupCommit {
    /// Starts the flusher thread for `db`.
    pub fn start(db: sled::Db) -> std::io::Result<Self> {
        let (queue, rx) = mpsc::channel::<Waiter>();
        let flushes = Arc::new(AtomicU64::new(0));
        let counter = flushes.clone();
        let flusher = std::thread::Builder::new()
            .name("paycred-flush".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let result = db.flush().map(|_| ()).map_err(|e| e.to_string());
                    counter.fetch_add(1, Ordering::Relaxed);
                    for waiter in batch {
                        let _ = waiter.send(result.clone());
                    }
                }
            })?;
        Ok(Self {
            queue: Some(queue),
            flusher: Some(flusher),
            flushes,
            waits: AtomicU64::new(0),
        })
    }

    /// Returns once every write made before the call is on disk.
    pub async fn durable(&self) -> Result<(), String> {
        self.waits.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.queue
            .as_ref()
            .and_then(|queue| queue.send(tx).ok())
            .ok_or_else(|| "flusher stopped".to_string())?;
        rx.await.map_err(|_| "flusher stopped".to_string())?
    }

    /// [`Self::durable`] for a plain thread (never call it on an async runtime thread).
    pub fn durable_blocking(&self) -> Result<(), String> {
        self.waits.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.queue
            .as_ref()
            .and_then(|queue| queue.send(tx).ok())
            .ok_or_else(|| "flusher stopped".to_string())?;
        rx.blocking_recv()
            .map_err(|_| "flusher stopped".to_string())?
    }

    /// Flushes run so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// Durable writes requested so far.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(flusher) = self.flusher.take() {
            let _ = flusher.join();
        }
    }
}
