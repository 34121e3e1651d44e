//! The server's log: stderr at `RUST_LOG`'s levels, written in batches off the request path.
//!
//! A request's `info` line is appended to a shared buffer, which a thread of its own writes to
//! stderr every [`FLUSH_EVERY`]: one `write` for many lines instead of a blocking `write` on a
//! worker thread for every request (about half of the 14 % of the 1 KiB proxy's throughput
//! that the default level cost, with stderr going to a file; docs/performance.md has the
//! rest). Warnings and errors are written at
//! once, after what is buffered, so they keep their order and survive a crash (while the
//! thread is writing, they join the buffer instead of waiting for it). When stderr cannot keep
//! up, lines beyond [`MAX_BUFFERED`] are dropped and counted: an `info` line never waits for
//! stderr, and a warning only for its own write. A panic writes the buffered lines before its
//! message.

use parking_lot::Mutex;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// How often buffered lines are written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(10);

/// Buffered bytes beyond which lines are dropped (about a second of request lines at 25k/s).
pub const MAX_BUFFERED: usize = 4 << 20;

/// Log targets whose debug and trace lines print request and response headers and bodies
/// (card values, the target's API keys, paycred's tokens), or every database statement's
/// parameters (`tokio_postgres`: sealed records, ids): never below info, whatever `RUST_LOG`
/// asks. Prefixes: `pingora` covers every pingora crate (`pingora_core`, `pingora_proxy`,
/// `pingora_pool`, ...).
const CAPPED_LOG_TARGETS: [&str; 2] = ["pingora", "tokio_postgres"];

/// Logs at `RUST_LOG`'s levels (default info), `CAPPED_LOG_TARGETS` at info at most, through
/// a [`BatchedStderr`]. Keep the guard until the server has stopped: dropping it writes what
/// is left.
///
/// The two filters are joined with `and`, whose level hint is the lower of the two: the `log`
/// crate's max level (pingora logs through it) stays at what `RUST_LOG` enables, so a
/// disabled `debug!` in pingora costs one comparison, not a trip through both filters.
pub fn init() -> FlushOnDrop {
    use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let capped = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_targets(CAPPED_LOG_TARGETS.map(|t| (t, LevelFilter::INFO)));
    let (writer, guard) = BatchedStderr::start(std::io::stderr());
    let shared = writer.shared.clone();
    let panic_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // The lines before the panic come before its message; a stalled stderr must not
        // hang the panic, so nothing waits for a write under way.
        shared.write_now(&[], false);
        panic_hook(info);
    }));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                // Colours only for a person at a terminal: escape codes in a file or a log
                // collector are noise (and doubled the bytes of a request line).
                .with_ansi(std::io::stderr().is_terminal())
                .with_timer(UtcMicros)
                .with_writer(writer)
                .with_filter(filter.and(capped)),
        )
        .try_init();
    guard
}

/// Timestamps as tracing's default (`2026-11-23T02:26:31.747290Z`), with the part up to the
/// second formatted once a second per thread: tracing's own formatting of the whole date was
/// ~2.4k instructions of every request's line.
struct UtcMicros;

thread_local! {
    /// The last second formatted on this thread, and its text.
    static SECOND: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
}

impl tracing_subscriber::fmt::time::FormatTime for UtcMicros {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        SECOND.with(|cell| {
            let mut cached = cell.borrow_mut();
            if cached.0 != secs {
                let t = time::OffsetDateTime::from_unix_timestamp(secs)
                    .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
                cached.1.clear();
                std::fmt::Write::write_fmt(
                    &mut cached.1,
                    format_args!(
                        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                        t.year(),
                        u8::from(t.month()),
                        t.day(),
                        t.hour(),
                        t.minute(),
                        t.second()
                    ),
                )?;
                cached.0 = secs;
            }
            w.write_str(&cached.1)?;
            let mut digits = *b".000000Z";
            let mut micros = now.subsec_micros();
            for d in digits[1..7].iter_mut().rev() {
                *d = b'0' + (micros % 10) as u8;
                micros /= 10;
            }
            // Only ASCII digits, a dot and a Z were written.
            w.write_str(std::str::from_utf8(&digits).unwrap_or(".000000Z"))
        })
    }
}

/// A request's log line, `method=POST route=proxy status=200 target=api.example.com micros=412`,
/// written as one message: as five fields of tracing's formatter it cost ~6k instructions a
/// request (each field a `write!`, strings escaped as `Debug`). The values are a method, a
/// route label, a number and a host name that the target guard accepted: nothing to escape.
pub struct RequestLine<'a> {
    pub method: &'a str,
    pub route: &'a str,
    pub status: u16,
    pub target: &'a str,
    pub micros: u64,
}

impl std::fmt::Display for RequestLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut n = itoa::Buffer::new();
        f.write_str("request method=")?;
        f.write_str(self.method)?;
        f.write_str(" route=")?;
        f.write_str(self.route)?;
        f.write_str(" status=")?;
        f.write_str(n.format(self.status))?;
        if !self.target.is_empty() {
            f.write_str(" target=")?;
            f.write_str(self.target)?;
        }
        f.write_str(" micros=")?;
        f.write_str(n.format(self.micros))
    }
}

/// What the request threads and the flushing thread share.
///
/// Lock order: `out`, then `lines`. Request threads with an `info` line only take `lines`, for
/// a copy; whoever writes holds `out` from taking the buffered lines until they are written,
/// so lines leave in the order they were logged.
struct Shared<W> {
    /// Lines not yet written.
    lines: Mutex<Vec<u8>>,
    out: Mutex<W>,
    dropped: AtomicU64,
    stop: AtomicBool,
}

impl<W: Write> Shared<W> {
    fn new(out: W) -> Self {
        Self {
            lines: Mutex::new(Vec::with_capacity(64 << 10)),
            out: Mutex::new(out),
            dropped: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Writes the buffered lines.
    fn flush(&self, spare: &mut Vec<u8>) {
        self.write_buffered(&mut self.out.lock(), spare);
    }

    /// With `out` held: writes the buffered lines, swapped for `spare` so that request threads
    /// only wait for the swap, never for the write, and the count of dropped ones. Write
    /// errors are dropped: there is nowhere left to report them.
    fn write_buffered(&self, out: &mut W, spare: &mut Vec<u8>) {
        std::mem::swap(&mut *self.lines.lock(), spare);
        if !spare.is_empty() {
            let _ = out.write_all(spare);
            spare.clear();
        }
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = writeln!(
                out,
                "paycred: {dropped} log lines dropped: stderr did not keep up"
            );
        }
    }

    /// Writes `line` at once, after the buffered lines. While someone else is writing
    /// (the thread, into a stderr that may be stalled), a request thread does not wait: the
    /// line joins the buffer behind everything logged before it, unless `wait` (nothing
    /// would write it later).
    fn write_now(&self, line: &[u8], wait: bool) {
        let mut out = match self.out.try_lock() {
            Some(out) => out,
            None if wait => self.out.lock(),
            None => return self.keep(line),
        };
        self.write_buffered(&mut out, &mut Vec::new());
        let _ = out.write_all(line);
    }

    /// Keeps `line` for the next flush, or counts it as dropped when the buffer is full.
    fn keep(&self, line: &[u8]) {
        let mut lines = self.lines.lock();
        if lines.len() + line.len() <= MAX_BUFFERED {
            lines.extend_from_slice(line);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A [`MakeWriter`] for stderr (or any `W`) that buffers lines below `WARN` and has them
/// written by a thread every [`FLUSH_EVERY`].
pub struct BatchedStderr<W> {
    shared: Arc<Shared<W>>,
}

impl<W> Clone for BatchedStderr<W> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// Stops the flushing thread and writes what is left when dropped.
pub struct FlushOnDrop {
    stop: Box<dyn Fn() + Send>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        (self.stop)();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<W: Write + Send + 'static> BatchedStderr<W> {
    /// The writer and the guard of its flushing thread. Without a thread (the system refused
    /// one) every line is written at once.
    pub fn start(out: W) -> (Self, FlushOnDrop) {
        let shared = Arc::new(Shared::new(out));
        let flusher = shared.clone();
        let thread = std::thread::Builder::new()
            .name("paycred-log".into())
            .spawn(move || {
                let mut spare = Vec::with_capacity(64 << 10);
                while !flusher.stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(FLUSH_EVERY);
                    flusher.flush(&mut spare);
                }
                flusher.flush(&mut spare);
            })
            .ok();
        if thread.is_none() {
            shared.stop.store(true, Ordering::Release);
        }
        let stopping = shared.clone();
        let unparker = thread.as_ref().map(|t| t.thread().clone());
        let guard = FlushOnDrop {
            stop: Box::new(move || {
                stopping.stop.store(true, Ordering::Release);
                match &unparker {
                    Some(t) => t.unpark(),
                    None => stopping.flush(&mut Vec::new()),
                }
            }),
            thread,
        };
        (Self { shared }, guard)
    }
}

/// One event's writer: tracing's formatter hands it the whole line in one `write`.
pub struct LineWriter<'a, W> {
    shared: &'a Shared<W>,
    now: bool,
}

impl<W: Write> Write for LineWriter<'_, W> {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        // Once stopped there is no thread left to write later.
        let stopped = self.shared.stop.load(Ordering::Acquire);
        if self.now || stopped {
            self.shared.write_now(line, stopped);
        } else {
            self.shared.keep(line);
            // The thread may have made its last flush since the check above.
            if self.shared.stop.load(Ordering::Acquire) {
                self.shared.flush(&mut Vec::new());
            }
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a, W: Write + 'a> MakeWriter<'a> for BatchedStderr<W> {
    type Writer = LineWriter<'a, W>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            shared: &self.shared,
            now: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        LineWriter {
            shared: &self.shared,
            now: *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tracing_subscriber::prelude::*;

    /// An output that records its writes.
    #[derive(Clone, Default)]
    struct Recorder {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Write for Recorder {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.writes.lock().push(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Recorder {
        fn text(&self) -> String {
            String::from_utf8(self.writes.lock().concat()).unwrap()
        }
    }

    /// A writer without its flushing thread: lines stay buffered until [`Shared::flush`].
    fn unstarted(out: Recorder) -> BatchedStderr<Recorder> {
        BatchedStderr {
            shared: Arc::new(Shared::new(out)),
        }
    }

    /// Logs through `writer` as the server does (tracing's formatter, its timestamps, no
    /// colours).
    fn with_log(writer: &BatchedStderr<Recorder>, f: impl FnOnce()) {
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_timer(UtcMicros)
            .with_writer(writer.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
    }

    /// The lines `f` logs, as the server would write them (for tests of other modules).
    pub(crate) fn logged(f: impl FnOnce()) -> String {
        let out = Recorder::default();
        let writer = unstarted(out.clone());
        with_log(&writer, f);
        writer.shared.flush(&mut Vec::new());
        out.text()
    }

    #[test]
    fn info_lines_wait_for_the_flush_and_leave_in_one_write_in_order() {
        let out = Recorder::default();
        let writer = unstarted(out.clone());
        with_log(&writer, || {
            for i in 0..100 {
                tracing::info!(i, "request");
            }
        });
        assert!(out.writes.lock().is_empty());
        writer.shared.flush(&mut Vec::new());
        assert_eq!(out.writes.lock().len(), 1);
        let text = out.text();
        let order: Vec<usize> = text
            .lines()
            .map(|l| l.rsplit("i=").next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_warning_is_written_at_once_after_the_lines_before_it() {
        let out = Recorder::default();
        let writer = unstarted(out.clone());
        with_log(&writer, || {
            tracing::info!("first");
            tracing::warn!("second");
            tracing::info!("third");
        });
        let text = out.text();
        assert!(text.contains("INFO") && text.contains("first"), "{text}");
        assert!(text.trim_end().ends_with("second"), "{text}");
        assert!(!text.contains("third"), "{text}");
        writer.shared.flush(&mut Vec::new());
        assert!(out.text().trim_end().ends_with("third"));
    }

    #[test]
    fn a_warning_does_not_wait_for_a_write_under_way() {
        let out = Recorder::default();
        let writer = unstarted(out.clone());
        // As if the thread were stuck writing into a stalled stderr.
        let held = writer.shared.out.lock();
        with_log(&writer, || {
            tracing::info!("first");
            tracing::warn!("second");
        });
        drop(held);
        assert!(out.writes.lock().is_empty());
        writer.shared.flush(&mut Vec::new());
        let text = out.text();
        let (first, second) = (text.find("first").unwrap(), text.find("second").unwrap());
        assert!(first < second, "{text}");
    }

    #[test]
    fn the_thread_writes_lines_soon_and_the_guard_writes_what_is_left() {
        let out = Recorder::default();
        let (writer, guard) = BatchedStderr::start(out.clone());
        with_log(&writer, || tracing::info!("soon"));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !out.text().contains("soon") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(out.text().contains("soon"));
        with_log(&writer, || tracing::info!("left"));
        drop(guard);
        assert!(out.text().contains("left"));
        // Nothing is left to flush later: a line after the stop is written at once.
        with_log(&writer, || tracing::info!("after"));
        assert!(out.text().trim_end().ends_with("after"));
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        let before = time::OffsetDateTime::now_utc();
        let text = logged(|| {
            tracing::info!("a");
            tracing::info!("b");
        });
        let after = time::OffsetDateTime::now_utc();
        for line in text.lines() {
            let stamp = line.split(' ').next().unwrap();
            assert_eq!(stamp.len(), "2026-11-23T02:26:31.747290Z".len(), "{line}");
            let t =
                time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
                    .unwrap();
            assert!(
                before
                    .replace_nanosecond(before.microsecond() * 1000)
                    .unwrap()
                    <= t
            );
            assert!(t <= after, "{t} {after}");
        }
    }

    #[test]
    fn a_request_line_reads_as_key_value_pairs() {
        let line = |target| {
            RequestLine {
                method: "POST",
                route: "proxy",
                status: 201,
                target,
                micros: 412,
            }
            .to_string()
        };
        assert_eq!(
            line("api.example.com"),
            "request method=POST route=proxy status=201 target=api.example.com micros=412"
        );
        assert_eq!(
            line(""),
            "request method=POST route=proxy status=201 micros=412"
        );
    }

    #[test]
    fn lines_beyond_the_limit_are_dropped_and_counted() {
        let out = Recorder::default();
        let writer = unstarted(out.clone());
        let big = "x".repeat(MAX_BUFFERED / 2 - 200);
        with_log(&writer, || {
            for _ in 0..3 {
                tracing::info!(big = %big);
            }
        });
        writer.shared.flush(&mut Vec::new());
        let text = out.text();
        assert_eq!(text.matches('x').count(), 2 * big.len());
        assert!(
            text.ends_with("paycred: 1 log lines dropped: stderr did not keep up\n"),
            "{}",
            &text[text.len() - 80..]
        );
    }
}
