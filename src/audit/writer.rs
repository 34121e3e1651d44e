//! Batched audit appends. Events queue for one writer thread, which appends everything queued
//! so far to the log in one write (the hash chain stays in queue order), makes it durable with
//! one sync, and then answers the waiters. Under load, a whole batch of reveals shares one
//! write and one sync instead of paying one each.
//!
//! [`AuditBatcher::append`] waits for durability; [`AuditBatcher::append_nowait`] (the proxy's
//! hot path) only queues: the request does not wait for the disk. A queued entry is written
//! at most [`GATHER`] later, together with whatever else queued meanwhile (so a busy proxy
//! pays one write per few milliseconds, not one per request, and wakes the writer once
//! per batch), and synced with the next durable append or at the latest [`FLUSH_EVERY`] after
//! it was written.
//!
//! Changes the store commits write their event into the store's outbox in the same
//! transaction ([`Sink::pending`]); [`AuditBatcher::wake`] tells the writer to move them into
//! the log.
//!
//! [`AuditBatcher::count`] is for events anyone can repeat at will (authentication failures).
//! The caller's thread counts the repeats in a [`Tally`] shared with the writer, so a flood
//! of them never reaches the queue. The writer writes each count when its window ends, with
//! the time of the last repeat; that time can be earlier than an entry's just before it.
//!
//! Dropping the handle closes the queue and waits until the writer has written everything
//! queued, open counts and the outbox included, and synced it. The store is dropped when
//! pingora stops its runtimes at the end of a graceful shutdown, before the process exits,
//! unless something else holds it at that moment (a sweeper mid-sweep) or the runtimes
//! outlast `graceful_shutdown_timeout`. A crash can lose the entries of the last window (at
//! most 25 ms) and counts not yet written (at most 1 s); events in the outbox stay there
//! until the log holds them durably.
//!
//! While the storage fails, the writer retries every [`FLUSH_EVERY`] and logs at most two
//! lines every [`FAILURE_LOG_EVERY`] (`FailureLog`), which count every failure and the
//! entries lost with them.

use super::tally::Tally;
use super::AuditEvent;
use parking_lot::Mutex;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Most events written in one append.
const MAX_BATCH: usize = 1024;

/// Longest time a written entry of [`AuditBatcher::append_nowait`] stays unsynced.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// How long the writer gathers entries of [`AuditBatcher::append_nowait`] before writing them
/// in one append. It sleeps instead of waking for every entry, so an entry someone waits
/// for ([`AuditBatcher::append`]) that arrives meanwhile waits this long too; one that finds
/// the writer idle is written at once.
pub const GATHER: Duration = Duration::from_millis(5);

/// How often a storage failure that goes on is logged again.
pub const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

/// The writer's error lines while its storage fails. The writer retries every
/// [`FLUSH_EVERY`], so a dead disk would log 50 lines a second: a failure is logged when
/// none was for [`FAILURE_LOG_EVERY`]; the ones in between are counted, with the entries lost
/// with them (for a failed sync: possibly lost, see [`Writer::sync_now`]), and reported in
/// one line [`FAILURE_LOG_EVERY`] after the last line (or when the writer stops). At most two
/// lines every [`FAILURE_LOG_EVERY`], and every failure and lost entry is in one of them.
#[derive(Debug, Default)]
struct FailureLog {
    last_line: Option<Instant>,
    /// Failures, and entries lost with them, not yet in a line.
    unlogged: u64,
    lost: usize,
}

impl FailureLog {
    /// Notes a failure at `now`; whether it was logged at once.
    fn failed(&mut self, what: &str, error: &str, lost: usize, now: Instant) -> bool {
        self.unlogged += 1;
        self.lost += lost;
        if self
            .last_line
            .is_some_and(|t| now.saturating_duration_since(t) < FAILURE_LOG_EVERY)
        {
            return false;
        }
        tracing::error!(error = %error, times = self.unlogged, lost = self.lost, "{what}");
        self.logged(now);
        true
    }

    /// When the failures not yet in a line are due to be reported.
    fn report_due(&self) -> Option<Instant> {
        (self.unlogged > 0).then(|| {
            self.last_line
                .map_or(Instant::now(), |t| t + FAILURE_LOG_EVERY)
        })
    }

    /// Reports the failures not yet in a line if that is due at `now` (or `now` is the last
    /// chance); whether it did.
    fn report(&mut self, now: Instant, last_chance: bool) -> bool {
        let due = last_chance || self.report_due().is_some_and(|due| due <= now);
        if !due || self.unlogged == 0 {
            return false;
        }
        tracing::error!(
            times = self.unlogged,
            lost = self.lost,
            "audit storage failures since the last line"
        );
        self.logged(now);
        true
    }

    fn logged(&mut self, now: Instant) {
        *self = Self {
            last_line: Some(now),
            ..Self::default()
        };
    }
}

/// Where the writer writes: the log, and the outbox of events that changes committed.
pub trait Sink: Send + 'static {
    /// Events committed to the outbox since the last call and not yet in the log, oldest
    /// first. The changes they record are durable before they are returned.
    fn pending(&mut self) -> Result<Vec<AuditEvent>, String>;
    /// Appends `events` (the last [`Sink::pending`] ones first, when it returned any) as
    /// chained entries; not yet durable. On failure nothing counts as appended, and the
    /// pending events are returned again.
    fn append(&mut self, events: &[AuditEvent]) -> Result<(), String>;
    /// Makes everything appended durable (and then takes the appended outbox events out).
    /// An error means it may not be: the appended entries may be lost (the outbox's events
    /// are then returned by [`Sink::pending`] again), or durable with only the bookkeeping
    /// after the sync failed.
    fn sync(&mut self) -> Result<(), String>;
}

/// Someone waiting for an entry to be durable.
#[derive(Debug)]
enum Waiter {
    /// A task on a runtime.
    Task(oneshot::Sender<Result<(), String>>),
    /// A plain thread.
    Thread(mpsc::Sender<Result<(), String>>),
}

impl Waiter {
    fn answer(self, result: Result<(), String>) {
        let _ = match self {
            Self::Task(tx) => tx.send(result).map_err(drop),
            Self::Thread(tx) => tx.send(result).map_err(drop),
        };
    }
}

/// What the writer is sent: an entry to append (none: only a wake-up); with a waiter,
/// someone waits for it, and everything before it, to be durable.
type Item = (Option<AuditEvent>, Option<Waiter>);

/// Handle to the writer thread. Dropping it stops the writer once it has written and
/// synced everything queued, counts included, and waits for that.
#[derive(Debug)]
pub struct AuditBatcher {
    queue: Option<mpsc::Sender<Item>>,
    writer: Option<JoinHandle<()>>,
    /// Counted events, shared with the writer: counting happens on the caller's thread, so
    /// a flood of repeats never reaches the queue.
    tally: Arc<Mutex<Tally>>,
}

impl AuditBatcher {
    /// Starts the writer on `sink`.
    pub fn start(sink: impl Sink) -> std::io::Result<Self> {
        let (queue, rx) = mpsc::channel::<Item>();
        let tally = Arc::new(Mutex::new(Tally::default()));
        let writer = Writer::new(sink, Arc::clone(&tally));
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
        self.send((Some(event), Some(Waiter::Task(tx))))?;
        rx.await.map_err(|_| "audit writer stopped".to_string())?
    }

    /// Queues the entry; it is written and synced right behind the caller.
    pub fn append_nowait(&self, event: AuditEvent) {
        if self.send((Some(event), None)).is_err() {
            tracing::error!("audit writer stopped: an entry was not written");
        }
    }

    /// Tells the writer that the outbox has events.
    pub fn wake(&self) {
        if self.send((None, None)).is_err() {
            tracing::error!("audit writer stopped: the outbox is moved at the next start");
        }
    }

    /// Waits (on a plain thread, or briefly on a runtime's) until everything queued and
    /// committed so far is in the log and durable.
    pub fn settle(&self) -> Result<(), String> {
        let (tx, rx) = mpsc::channel();
        self.send((None, Some(Waiter::Thread(tx))))?;
        rx.recv().map_err(|_| "audit writer stopped".to_string())?
    }

    /// Counts an event that anyone can repeat at will: the first of a quiet spell is
    /// queued as [`AuditBatcher::append_nowait`] queues it; its repeats are only counted,
    /// here, and the writer writes the count as one entry a
    /// [`WINDOW`](super::tally::WINDOW) (see [`Tally`]).
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
struct Writer<S> {
    sink: S,
    tally: Arc<Mutex<Tally>>,
    /// Since when entries are written but not synced.
    unsynced_since: Option<Instant>,
    /// When to try again after the outbox could not be read or a batch not written.
    retry_at: Option<Instant>,
    /// Entries appended since the last good sync that are in no outbox (proxy uses, counts):
    /// a failed sync may lose them (the log goes back to its recorded head).
    unsynced_own: usize,
    failures: FailureLog,
}

impl<S: Sink> Writer<S> {
    fn new(sink: S, tally: Arc<Mutex<Tally>>) -> Self {
        Self {
            sink,
            tally,
            unsynced_since: None,
            retry_at: None,
            unsynced_own: 0,
            failures: FailureLog::default(),
        }
    }

    fn run(mut self, rx: &mpsc::Receiver<Item>) {
        // Whatever the outbox kept from before a stop goes first.
        self.write_batch(Vec::new(), Vec::new());
        loop {
            let wake = [
                self.unsynced_since.map(|since| since + FLUSH_EVERY),
                self.retry_at,
                // A window opened since is noticed: its first event comes through the queue.
                self.tally.lock().next_due(),
                self.failures.report_due(),
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
                if first.0.is_some() && first.1.is_none() {
                    std::thread::sleep(GATHER);
                }
                for (event, waiter) in
                    std::iter::once(first).chain(rx.try_iter().take(MAX_BATCH - 1))
                {
                    events.extend(event);
                    waiters.extend(waiter);
                }
            }
            events.extend(self.tally.lock().due(Instant::now()));
            self.write_batch(events, waiters);
            if self
                .unsynced_since
                .is_some_and(|since| since.elapsed() >= FLUSH_EVERY)
            {
                self.sync();
            }
            self.failures.report(Instant::now(), false);
        }
        // Stopping: the counts still open, then everything to disk.
        let events = self.tally.lock().drain();
        self.write_batch(events, Vec::new());
        self.sync();
        self.failures.report(Instant::now(), true);
    }

    /// Writes the outbox's pending events and then `events` in one append, and answers
    /// `waiters` once that is durable.
    fn write_batch(&mut self, events: Vec<AuditEvent>, waiters: Vec<Waiter>) {
        let (mut batch, mut result) = match self.sink.pending() {
            Ok(pending) => (pending, Ok(())),
            Err(e) => {
                self.failures
                    .failed("audit outbox not read", &e, 0, Instant::now());
                (Vec::new(), Err(e))
            }
        };
        let pending = batch.len();
        batch.extend(events);
        if !batch.is_empty() {
            let own = batch.len() - pending;
            match self.sink.append(&batch) {
                Ok(()) => self.unsynced_own += own,
                Err(e) => {
                    self.failures
                        .failed("audit batch not written", &e, own, Instant::now());
                    result = Err(e);
                }
            }
            self.unsynced_since.get_or_insert_with(Instant::now);
        }
        // Someone waits, or the outbox is to be emptied: sync now (everything so far).
        if !waiters.is_empty() || pending > 0 {
            let synced = self.sync_now();
            result = result.and(synced);
        }
        // On failure the outbox is read again a window later (and again after that).
        self.retry_at = result.is_err().then(|| Instant::now() + FLUSH_EVERY);
        for waiter in waiters {
            waiter.answer(result.clone());
        }
    }

    /// Syncs. On failure the entries of the writer's own since the last good sync count as
    /// lost: the store's log goes back to its recorded head when `fdatasync` fails (they are
    /// kept when only recording the head failed).
    fn sync_now(&mut self) -> Result<(), String> {
        self.unsynced_since = None;
        let result = self.sink.sync();
        // Lost, or kept when only recording the head failed after the data was synced.
        let at_risk = std::mem::take(&mut self.unsynced_own);
        if let Err(e) = &result {
            self.failures
                .failed("audit sync failed", e, at_risk, Instant::now());
            // Tried again with the next window.
            self.unsynced_since = Some(Instant::now());
        }
        result
    }

    fn sync(&mut self) {
        if self.unsynced_since.is_some() {
            let _ = self.sync_now();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::audit::file::tests::event;

    /// What a [`FakeSink`] holds, modelled on the store's sink: events committed to an
    /// outbox, entries appended but not synced, and durable ones. A failed sync loses what it
    /// covered, and the outbox's events are returned again; failures are injected by count.
    #[derive(Default)]
    struct State {
        outbox: Vec<AuditEvent>,
        /// How many of the outbox's first events are appended (not to be returned again).
        moved: usize,
        /// How many the last `pending` returned.
        taken: usize,
        appended: Vec<AuditEvent>,
        durable: Vec<AuditEvent>,
        fail_pending: u32,
        fail_append: u32,
        fail_sync: u32,
        pending_reads: u32,
    }

    #[derive(Clone, Default)]
    struct FakeSink(Arc<Mutex<State>>);

    impl Sink for FakeSink {
        fn pending(&mut self) -> Result<Vec<AuditEvent>, String> {
            let mut s = self.0.lock();
            s.pending_reads += 1;
            s.taken = 0;
            if s.fail_pending > 0 {
                s.fail_pending -= 1;
                return Err("outbox not readable".into());
            }
            s.taken = s.outbox.len() - s.moved;
            Ok(s.outbox[s.moved..].to_vec())
        }

        fn append(&mut self, events: &[AuditEvent]) -> Result<(), String> {
            let mut s = self.0.lock();
            if s.fail_append > 0 {
                s.fail_append -= 1;
                s.taken = 0;
                return Err("append failed".into());
            }
            s.appended.extend_from_slice(events);
            s.moved += std::mem::take(&mut s.taken);
            Ok(())
        }

        fn sync(&mut self) -> Result<(), String> {
            let mut s = self.0.lock();
            if s.fail_sync > 0 {
                s.fail_sync -= 1;
                s.appended.clear();
                s.moved = 0;
                return Err("sync failed".into());
            }
            let appended = std::mem::take(&mut s.appended);
            s.durable.extend(appended);
            let moved = std::mem::take(&mut s.moved);
            s.outbox.drain(..moved);
            Ok(())
        }
    }

    impl FakeSink {
        fn durable(&self) -> Vec<AuditEvent> {
            self.0.lock().durable.clone()
        }

        /// Waits (at most 5 s) until the durable entries are `expected`.
        fn await_durable(&self, expected: &[AuditEvent]) {
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.durable() != expected && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            assert_eq!(self.durable(), expected);
        }
    }

    #[test]
    fn a_failure_that_goes_on_is_logged_once_a_window_and_every_one_is_counted() {
        let mut log = FailureLog::default();
        let start = Instant::now();
        let text = crate::ops::logging::tests::logged(|| {
            assert!(log.failed("audit sync failed", "EIO", 2, start));
            // The writer retries every 20 ms: 499 more failures in the next 10 s, 2 lost.
            for i in 1..500u32 {
                let at = start + FLUSH_EVERY * i;
                let lost = usize::from(i % 200 == 0);
                assert!(!log.failed("audit batch not written", "EIO", lost, at));
                assert!(!log.report(at, false));
            }
            // Reported 10 s after the last line, with no further failure needed.
            assert_eq!(log.report_due(), Some(start + FAILURE_LOG_EVERY));
            assert!(log.report(start + FAILURE_LOG_EVERY, false));
            assert!(!log.report(start + FAILURE_LOG_EVERY * 3, false));
            // One more, too soon for a line of its own: reported when the writer stops.
            let later = start + FAILURE_LOG_EVERY + Duration::from_secs(2);
            assert!(!log.failed("audit outbox not read", "EIO", 0, later));
            assert!(log.report(later + Duration::from_secs(1), true));
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].contains("audit sync failed error=EIO times=1 lost=2"),
            "{text}"
        );
        assert!(
            lines[1].contains("audit storage failures since the last line times=499 lost=2"),
            "{text}"
        );
        assert!(lines[2].ends_with("times=1 lost=0"), "{text}");
    }

    #[tokio::test]
    async fn the_outbox_goes_first_and_a_waiter_is_answered_once_all_before_it_is_durable() {
        let sink = FakeSink::default();
        sink.0.lock().outbox.push(event(1));
        let batcher = AuditBatcher::start(sink.clone()).unwrap();
        // Moved when the writer starts, before anything is queued.
        sink.await_durable(&[event(1)]);
        batcher.append_nowait(event(2));
        batcher.append(event(3)).await.unwrap();
        assert_eq!(sink.durable(), [event(1), event(2), event(3)]);
        assert!(sink.0.lock().outbox.is_empty());
    }

    #[tokio::test]
    async fn a_failed_sync_fails_its_waiter_and_the_next_one_succeeds() {
        let sink = FakeSink::default();
        let batcher = AuditBatcher::start(sink.clone()).unwrap();
        batcher.append(event(1)).await.unwrap();
        sink.0.lock().fail_sync = 1;
        let err = batcher.append(event(2)).await.unwrap_err();
        assert_eq!(err, "sync failed");
        // The failed sync lost the entry it covered, and its waiter was told so.
        batcher.append(event(3)).await.unwrap();
        assert_eq!(sink.durable(), [event(1), event(3)]);
    }

    #[tokio::test]
    async fn a_failed_append_fails_its_waiter_and_the_outbox_is_written_later() {
        let sink = FakeSink::default();
        let batcher = AuditBatcher::start(sink.clone()).unwrap();
        batcher.append(event(1)).await.unwrap();
        {
            let mut s = sink.0.lock();
            s.outbox.push(event(2));
            s.fail_append = 1;
        }
        let err = batcher.append(event(3)).await.unwrap_err();
        assert_eq!(err, "append failed");
        // The committed change's event is retried on its own; the waiter's entry was lost,
        // and it was told so.
        sink.await_durable(&[event(1), event(2)]);
    }

    #[test]
    fn outbox_events_whose_sync_failed_are_written_again_once() {
        let sink = FakeSink::default();
        {
            let mut s = sink.0.lock();
            s.outbox.extend([event(1), event(2)]);
            s.fail_sync = 2;
        }
        let _batcher = AuditBatcher::start(sink.clone()).unwrap();
        // No one asks again: the writer retries on its own.
        sink.await_durable(&[event(1), event(2)]);
        assert!(sink.0.lock().outbox.is_empty());
    }

    #[test]
    fn an_unreadable_outbox_is_read_again_without_anything_queued() {
        let sink = FakeSink::default();
        {
            let mut s = sink.0.lock();
            s.outbox.push(event(1));
            s.fail_pending = 3;
        }
        let batcher = AuditBatcher::start(sink.clone()).unwrap();
        sink.await_durable(&[event(1)]);
        assert!(sink.0.lock().pending_reads >= 4);
        // A waiter that met the unreadable outbox was told; once it reads, waiters succeed.
        sink.0.lock().fail_pending = 1;
        assert!(batcher.settle().is_err());
        batcher.settle().unwrap();
    }

    #[test]
    fn an_entry_nobody_waits_for_is_synced_within_the_flush_window() {
        let sink = FakeSink::default();
        let batcher = AuditBatcher::start(sink.clone()).unwrap();
        batcher.append_nowait(event(1));
        sink.await_durable(&[event(1)]);
        drop(batcher);
    }

    #[test]
    fn dropping_the_handle_writes_and_syncs_what_is_queued_and_counted() {
        let sink = FakeSink::default();
        let batcher = AuditBatcher::start(sink.clone()).unwrap();
        for i in 0..10 {
            batcher.append_nowait(event(i));
        }
        let failure = || AuditEvent {
            action: "auth.failure".into(),
            resource: "route=proxy status=401".into(),
            ..event(0)
        };
        for _ in 0..3 {
            batcher.count(failure());
        }
        drop(batcher);
        let durable = sink.durable();
        assert_eq!(durable[..10], (0..10).map(event).collect::<Vec<_>>()[..]);
        assert_eq!(durable[10], failure());
        assert_eq!(durable[11].resource, "route=proxy status=401 count=2");
        assert_eq!(durable.len(), 12);
        assert!(sink.0.lock().appended.is_empty());
    }
}
