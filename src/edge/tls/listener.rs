//! The TLS listener's socket and accept loop, as a pingora service of paycred's own.
//!
//! pingora's listening service runs each connection in a task whose future is sized for its
//! own TLS handshake (about 2.5 KiB, held for the connection's life even when that listener
//! is plain TCP), and gives each stream a 1460-byte write buffer. The TLS listener needs
//! neither: [`TlsAccept`] does the handshake in a box it frees, and [`TlsStream`] holds its
//! records until a flush itself. So [`TlsListener`] accepts the connections and starts each
//! one in a task of a few hundred bytes. The plain listener stays on pingora's service,
//! whose write buffer sends a response's head and a small body in one segment.
//!
//! It keeps what pingora's listener does:
//! - the socket: `SO_REUSEADDR`, a backlog of 65,535, `TCP_NODELAY` on every connection, and
//!   the caller's address in the socket digest (logs and rate limits read it there);
//! - the hand-over on upgrade: a socket passed on by the server being replaced is taken by
//!   its address, and the socket bound here is entered in the table the next upgrade
//!   passes on;
//! - a bind that finds the address in use is retried every second, 30 times, before the
//!   server gives up (it exits: a server without its listener serves nothing);
//! - too many open files (or no memory): accepting pauses for a second rather than spinning;
//! - shutdown: accepting stops, and the application's cleanup closes idle connections.
//!
//! Connections run on the service's runtime, which steals work (pingora's default), so
//! `tokio::spawn` spreads them as pingora's own does.
//!
//! [`TlsStream`]: super::TlsStream

use super::TlsAccept;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::l4::listener::Listener;
use pingora::server::{ListenFds, ShutdownWatch};
use pingora::services::Service;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The errors of an `accept` that would fail again at once: too many open files (the
/// process's or the system's), no buffer space or memory.
const SHORT_OF: [nix::errno::Errno; 4] = [
    nix::errno::Errno::EMFILE,
    nix::errno::Errno::ENFILE,
    nix::errno::Errno::ENOBUFS,
    nix::errno::Errno::ENOMEM,
];

/// How long accepting pauses after one of them.
const ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// The TLS listener: `accept` (the handshake, then the HTTP application) on `addr`.
pub struct TlsListener<A> {
    addr: SocketAddr,
    /// The address as pingora's hand-over table names the socket.
    key: String,
    accept: Option<Arc<TlsAccept<A>>>,
}

impl<A> TlsListener<A> {
    pub fn new(addr: SocketAddr, accept: TlsAccept<A>) -> Self {
        TlsListener {
            addr,
            key: addr.to_string(),
            accept: Some(Arc::new(accept)),
        }
    }
}

#[async_trait]
impl<A> Service for TlsListener<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn start_service(
        &mut self,
        fds: Option<ListenFds>,
        shutdown: ShutdownWatch,
        listeners_per_fd: usize,
    ) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        let listener = match listen(self.addr, &self.key, fds).await {
            Ok(listener) => Arc::new(listener),
            Err(e) => {
                tracing::error!("listener {}: {e}", self.key);
                std::process::exit(1);
            }
        };
        let loops: Vec<_> = (0..listeners_per_fd.max(1))
            .map(|_| {
                tokio::spawn(accept_loop(
                    listener.clone(),
                    accept.clone(),
                    shutdown.clone(),
                ))
            })
            .collect();
        for accepting in loops {
            let _ = accepting.await;
        }
        accept.cleanup().await;
    }

    fn name(&self) -> &str {
        "paycred"
    }

    fn listen_addresses(&self) -> Option<Vec<String>> {
        Some(vec![self.key.clone()])
    }
}

/// The listening socket ([`crate::http::listening_socket`]), as pingora's listener.
async fn listen(addr: SocketAddr, key: &str, fds: Option<ListenFds>) -> io::Result<Listener> {
    crate::http::listening_socket(addr, key, fds)
        .await
        .map(Listener::from)
}

/// Accepts connections until the server shuts down, each in a task of its own.
async fn accept_loop<A>(
    listener: Arc<Listener>,
    accept: Arc<TlsAccept<A>>,
    mut shutdown: ShutdownWatch,
) where
    A: ServerApp + Send + Sync + 'static,
{
    loop {
        if *shutdown.borrow() {
            break;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            changed = shutdown.changed() => match changed {
                Ok(()) => continue,
                Err(_) => break,
            },
        };
        match accepted {
            Ok(mut stream) => {
                if let Err(e) = stream.set_nodelay() {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
                let (accept, shutdown) = (accept.clone(), shutdown.clone());
                // The task holds the application's boxed future and no more.
                tokio::spawn(async move {
                    accept.process_new(Box::new(stream), &shutdown).await;
                });
            }
            Err(e) => {
                tracing::error!(error = %e, "accept failed");
                // Out of files or memory: accept fails at once until some are let go.
                if SHORT_OF
                    .iter()
                    .any(|errno| e.raw_os_error() == Some(*errno as i32))
                {
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_PAUSE) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
        }
    }
}
