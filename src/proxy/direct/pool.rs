//! Idle connections to targets, kept for the next request to the same peer.
//!
//! pingora's connector pool spawns a task for every connection it takes back, to watch it
//! while idle, and hands a connection out through a lock that task holds: each request
//! spawns a task, yields to the runtime once to get its connection, and calls `getpeername`
//! to check the connection's peer. Here an idle connection waits in a list instead. Whether
//! the target closed it (or sent anything unasked) is read from the readiness the runtime
//! keeps for every socket anyway: when it is taken, when it is put back, and by a sweep once
//! a second, which also closes connections idle past their timeout. A connection's peer is
//! the address it was opened to, kept beside it.
//!
//! The list is one least-recently-used order over all peers, at most `max` long: a
//! connection put back past that closes the one idle longest. A peer takes the connection
//! it put back last (the warmest).

use crate::proxy::substitute::poll_once;
use pingora::protocols::Stream;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// How often idle connections are checked for a close by the target and for their timeout.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Idle connections by peer ([`IdlePool::take`], [`IdlePool::put`]).
pub struct IdlePool {
    shared: Arc<Shared>,
}

struct Shared {
    max: usize,
    /// Oldest first.
    idle: Mutex<VecDeque<Idle>>,
    sweeping: AtomicBool,
}

/// Which connections can serve a request: pingora's reuse hash of the peer (address, TLS
/// name and verification, pool group), and the address itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PeerKey {
    pub hash: u64,
    pub addr: SocketAddr,
}

struct Idle {
    peer: PeerKey,
    stream: Stream,
    /// When it is closed unused (`None`: kept until the target closes it or it is evicted).
    until: Option<Instant>,
}

impl Idle {
    fn usable(&mut self, now: Instant) -> bool {
        self.until.is_none_or(|until| now < until) && quiet(&mut self.stream)
    }
}

impl IdlePool {
    /// Keeps at most `max` idle connections (0: none).
    pub fn new(max: usize) -> Self {
        IdlePool {
            shared: Arc::new(Shared {
                max,
                idle: Mutex::new(VecDeque::new()),
                sweeping: AtomicBool::new(false),
            }),
        }
    }

    /// The connection to `peer` put back last that is still open and quiet, if any. Closed
    /// or expired ones met on the way are closed.
    pub fn take(&self, peer: PeerKey) -> Option<Stream> {
        let now = Instant::now();
        loop {
            let mut idle = {
                let mut list = self.shared.lock();
                let at = list.iter().rposition(|c| c.peer == peer)?;
                list.remove(at)?
            };
            if idle.usable(now) {
                return Some(idle.stream);
            }
            // Dropped here, outside the lock: closing is a syscall.
        }
    }

    /// Keeps `stream` for `peer` for up to `idle_timeout`, unless the target already closed
    /// it or sent something unasked. Must be called on a runtime: the first call starts the
    /// sweep there.
    pub fn put(&self, peer: PeerKey, mut stream: Stream, idle_timeout: Option<Duration>) {
        if self.shared.max == 0 || !quiet(&mut stream) {
            return;
        }
        let until = idle_timeout.map(|t| Instant::now() + t);
        let evicted = {
            let mut list = self.shared.lock();
            list.push_back(Idle {
                peer,
                stream,
                until,
            });
            if list.len() > self.shared.max {
                list.pop_front()
            } else {
                None
            }
        };
        drop(evicted);
        if !self.shared.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(SweepTask(Arc::downgrade(&self.shared))));
        }
    }

    /// How many connections are idle.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shared.lock().len()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Idle>> {
        // The list stays consistent whatever panicked while it was held.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Closes the connections that are no longer usable; keeps the others in their order.
    /// They are checked out of the lock (a TLS connection's check can decrypt a record), so
    /// requests take and put back meanwhile; the survivors go back in front of what was put
    /// back in the meantime.
    fn sweep(&self, now: Instant) {
        let mut swept = std::mem::take(&mut *self.lock());
        swept.retain_mut(|idle| idle.usable(now));
        let evicted: Vec<Idle> = {
            let mut list = self.lock();
            swept.append(&mut list);
            *list = swept;
            let excess = list.len().saturating_sub(self.max);
            list.drain(..excess).collect()
        };
        drop(evicted);
    }
}

/// Sweeps the pool every [`SWEEP_EVERY`] while it exists.
async fn sweep(task: SweepTask) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(shared) = task.0.upgrade() else {
            return;
        };
        shared.sweep(Instant::now());
    }
}

/// The sweep task's hold on the pool. However the task ends (the pool dropped, a panic, its
/// runtime shut down, even before it first ran), this is dropped with it, and the next
/// [`IdlePool::put`] starts another.
struct SweepTask(Weak<Shared>);

impl Drop for SweepTask {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared.sweeping.store(false, Ordering::Relaxed);
        }
    }
}

/// Whether nothing is waiting to be read on an idle connection: no close, no reset, no
/// unasked data (the target never speaks first on HTTP/1.x, so anything there means the
/// connection cannot carry another exchange). This reads only if the runtime saw the socket
/// become readable since the last read, so an open, quiet connection costs no syscall;
/// pingora's pool makes the same check.
fn quiet(stream: &mut Stream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    // `unconstrained`: the runtime's task budget could make a ready read look pending.
    match poll_once(tokio::task::unconstrained(stream.read(&mut byte))) {
        None => true,
        Some(Ok(0)) | Some(Err(_)) => false,
        Some(Ok(_)) => {
            // What it sent is not logged: it is the target's, and may be anything.
            tracing::debug!("a target sent bytes unasked on an idle connection: closed");
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use pingora::protocols::l4::stream::Stream as L4Stream;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A connection to a listener on 127.0.0.1, as pingora's connector makes them, and the
    /// listener's end of it.
    async fn connection(listener: &TcpListener) -> (Stream, TcpStream) {
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Box::new(L4Stream::from(client)), server)
    }

    fn key(listener: &TcpListener, hash: u64) -> PeerKey {
        PeerKey {
            hash,
            addr: listener.local_addr().unwrap(),
        }
    }

    /// Whether paycred's end of the connection was closed: the far end reads its end.
    async fn was_closed(far_end: &mut TcpStream) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(2), far_end.read(&mut buf));
        matches!(read.await, Ok(Ok(0)) | Ok(Err(_)))
    }

    /// Whether the pool empties by itself within 10 s (a sweep runs every second; a loaded
    /// machine may be late).
    async fn emptied(pool: &IdlePool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if pool.len() == 0 {
                return true;
            }
        }
        false
    }

    /// Lets the runtime's reactor see what the other end did.
    async fn settle() {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_connection_serves_only_its_own_peer_and_the_newest_comes_first() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = IdlePool::new(8);
        let (a, _sa) = connection(&listener).await;
        let (b, _sb) = connection(&listener).await;
        let (a_id, b_id) = (a.id(), b.id());
        pool.put(key(&listener, 1), a, None);
        pool.put(key(&listener, 1), b, None);
        let other_hash = key(&listener, 2);
        let other_addr = PeerKey {
            hash: 1,
            addr: "127.0.0.1:9".parse().unwrap(),
        };
        assert!(pool.take(other_hash).is_none());
        assert!(pool.take(other_addr).is_none());
        assert_eq!(pool.take(key(&listener, 1)).map(|s| s.id()), Some(b_id));
        assert_eq!(pool.take(key(&listener, 1)).map(|s| s.id()), Some(a_id));
        assert!(pool.take(key(&listener, 1)).is_none());
    }

    #[tokio::test]
    async fn a_connection_the_target_closed_or_spoke_on_is_not_handed_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = IdlePool::new(8);
        let (open, _keep) = connection(&listener).await;
        let (closed, closer) = connection(&listener).await;
        let (chatty, mut talker) = connection(&listener).await;
        let open_id = open.id();
        let peer = key(&listener, 1);
        pool.put(peer, open, None);
        pool.put(peer, closed, None);
        pool.put(peer, chatty, None);
        drop(closer);
        talker
            .write_all(b"HTTP/1.1 408 Timeout\r\n\r\n")
            .await
            .unwrap();
        settle().await;
        assert_eq!(pool.take(peer).map(|s| s.id()), Some(open_id));
        assert_eq!(pool.len(), 0, "the two passed over on the way were dropped");
        assert!(was_closed(&mut talker).await, "and closed");
    }

    #[tokio::test]
    async fn a_connection_closed_before_it_is_put_back_is_not_kept_and_the_sweep_runs_alone() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = IdlePool::new(8);
        let peer = key(&listener, 1);
        let (gone, far_end) = connection(&listener).await;
        drop(far_end);
        settle().await;
        pool.put(peer, gone, None);
        assert_eq!(pool.len(), 0, "put back after the target closed it");

        let (idle, far_end) = connection(&listener).await;
        pool.put(peer, idle, None);
        drop(far_end);
        // Nothing takes or puts back: the sweep (started by this `put`, the first that kept
        // a connection) closes it.
        assert!(emptied(&pool).await);
    }

    #[test]
    fn a_sweep_that_ended_with_its_runtime_is_started_again_by_the_next_put() {
        let pool = IdlePool::new(8);
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let first = runtime();
        first.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let (c, _far_end) = connection(&listener).await;
            pool.put(key(&listener, 1), c, None);
        });
        // The sweep task is dropped with its runtime (and that connection is dead).
        drop(first);
        runtime().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let (c, far_end) = connection(&listener).await;
            pool.put(key(&listener, 1), c, None);
            drop(far_end);
            assert!(emptied(&pool).await, "a new sweep closed both");
        });
    }

    #[tokio::test]
    async fn the_sweep_closes_expired_and_closed_connections_and_keeps_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = IdlePool::new(8);
        let (expiring, mut expiring_end) = connection(&listener).await;
        let (closed, closer) = connection(&listener).await;
        let (kept, _k) = connection(&listener).await;
        let kept_id = kept.id();
        let peer = key(&listener, 1);
        pool.put(peer, expiring, Some(Duration::from_millis(50)));
        pool.put(peer, closed, Some(Duration::from_secs(60)));
        pool.put(peer, kept, Some(Duration::from_secs(60)));
        drop(closer);
        settle().await;
        pool.shared.sweep(Instant::now());
        assert_eq!(pool.len(), 1);
        assert!(
            was_closed(&mut expiring_end).await,
            "the expired one was closed"
        );
        assert_eq!(pool.take(peer).map(|s| s.id()), Some(kept_id));
    }

    #[tokio::test]
    async fn past_its_size_the_pool_closes_the_connection_idle_longest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = IdlePool::new(2);
        let mut ids = Vec::new();
        let mut ends = Vec::new();
        for hash in [1, 2, 3] {
            let (c, end) = connection(&listener).await;
            ids.push(c.id());
            ends.push(end);
            pool.put(key(&listener, hash), c, None);
        }
        assert_eq!(pool.len(), 2);
        assert!(
            pool.take(key(&listener, 1)).is_none(),
            "the oldest was dropped"
        );
        assert!(was_closed(&mut ends[0]).await, "and closed");
        assert_eq!(pool.take(key(&listener, 3)).map(|s| s.id()), Some(ids[2]));
        assert_eq!(pool.take(key(&listener, 2)).map(|s| s.id()), Some(ids[1]));

        let none = IdlePool::new(0);
        let (c, _end) = connection(&listener).await;
        none.put(key(&listener, 1), c, None);
        assert_eq!(none.len(), 0);
    }
}
