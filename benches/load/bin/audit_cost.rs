//! The audit log's CPU an entry, as the proxy loads it: `audit_cost DIR [BATCHES] [PER]
//! [PAUSE_MS]` opens a new store in DIR (an old one adds its own work) and queues BATCHES ×
//! PER proxy entries (`Store::append_audit_nowait`), PER at a time with PAUSE_MS between
//! (default 600 × 100 every 5 ms: the 1 KiB load bench's rate, 20k entries a second), then
//! prints the process's CPU time per entry: all threads, so the writer, its file writes and
//! syncs (and the sled flush that records the chain head at each), and also the main thread building each event and queueing it (which in
//! the proxy is the serving thread's work: a few hundred ns of the total).
//! Run it pinned to one core (`taskset -c 0`), several times: the machine's noise shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use paycred::audit::AuditEvent;
use paycred::store::{AuditStore, SledStore};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// User and system time of this process so far, in clock ticks (`/proc/self/stat`).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn main() {
    let arg = |n: usize, default: u64| {
        std::env::args()
            .nth(n)
            .map_or(default, |a| a.parse().unwrap())
    };
    let dir = std::env::args()
        .nth(1)
        .expect("usage: audit_cost DIR [BATCHES] [PER] [PAUSE_MS]");
    let (batches, per, pause) = (arg(2, 600), arg(3, 100), arg(4, 5));
    let store = SledStore::open(std::path::Path::new(&dir), Default::default()).unwrap();
    let event = |i: u64| AuditEvent {
        at_micros: 1_700_000_000_000_000 + i as i64,
        action: "proxy.use".into(),
        project: "bench".into(),
        entity: "bench".into(),
        resource: format!(
            "host=127.0.0.1 status=200 templates=4 revealed=pm_01JD3X4Y5Z6A7B8C9D{i:06}"
        ),
    };
    let (start, before) = (Instant::now(), cpu_ticks());
    let mut n = 0;
    for _ in 0..batches {
        for _ in 0..per {
            store.append_audit_nowait(event(n));
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(pause));
    }
    // Past the writer's gather and flush windows.
    std::thread::sleep(Duration::from_millis(100));
    let ticks = cpu_ticks() - before;
    let tick_ns = 1e9 / 100.0; // USER_HZ is 100 on Linux.
    println!(
        "{n} entries in {:.2?}: {:.0} ns of CPU an entry",
        start.elapsed(),
        ticks as f64 * tick_ns / n.max(1) as f64
    );
}
