//! The wait for a connection's next request, kept small. pingora's proxy enters its
//! per-request state (the boxed request future, several KiB, and a 4 KiB header buffer) as
//! soon as a connection is accepted or reused, and holds it while the connection idles: with
//! many idle keep-alive connections that is most of the server's memory. [`IdleWait`] stands
//! in front of the proxy for HTTP/1.x: it waits for the request's first bytes in a future of
//! its own (a few hundred bytes, no buffer while nothing has arrived), then hands the session
//! to the proxy with those bytes as the start of the request, in the buffer pingora would
//! have read them into. HTTP/2 connections go to the proxy as they are.
//!
//! Once a request's first bytes are there, the rest of its head must follow within
//! `server.head_read_timeout` (10 s by default), read here into the same buffer: a caller that
//! trickles its header lines (one every few seconds, each read resetting a per-read timeout)
//! is answered 408 `requestTimeout` and its connection closed, rather than holding it for as
//! long as it likes. The head is at most pingora's limit (1 MiB); pingora parses it from the
//! buffer without reading again.
//!
//! It keeps what pingora's own loop does: the keep-alive timeout (60 s, for the first request
//! too) and reuse count, the settings carried from one request to the next, and closing idle
//! connections when the server shuts down. The bytes are read through the stream, so bytes the
//! TLS layer already holds come first and none are left behind. paycred does
//! not enable HTTP/1.1 pipelining: bytes read past a request's end close the connection after
//! its answer (pingora's rule), so no pipelined prefix is carried between requests.

use crate::error::{ApiError, ErrorKind};
use async_trait::async_trait;
use bytes::BytesMut;
use memchr::memmem;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::io::poll_read_buf;

/// How long a connection may idle before its next request (pingora's keep-alive default).
pub const KEEPALIVE: Duration = Duration::from_secs(60);

/// The header buffer a request starts with (pingora's initial size).
const HEADER_BUF: usize = 4096;

/// Most bytes of a request head read here: pingora's limit, past which it refuses the head.
const HEAD_LIMIT: usize = 1_048_575;

/// Longest the 408 of a head that came too slowly may take to leave.
const LATE_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// What became of a request head.
enum Head {
    /// The head is whole in the buffer (or as long as pingora takes one), with whatever
    /// came after it.
    Read(BytesMut),
    /// It did not come whole in time.
    Late,
    /// The caller closed the connection, or reading failed.
    Closed,
}

/// An HTTP application (pingora's proxy) behind a small wait for each HTTP/1.x request.
pub struct IdleWait<A> {
    app: Arc<A>,
    /// Set, and the waiting connections woken, when the server shuts down.
    closing: AtomicBool,
    closed: Notify,
    /// Longest a request's head may take to arrive whole, from its first bytes.
    head_timeout: Duration,
}

impl<A> IdleWait<A> {
    pub fn new(app: A, head_timeout: Duration) -> Self {
        IdleWait {
            app: Arc::new(app),
            closing: AtomicBool::new(false),
            closed: Notify::new(),
            head_timeout,
        }
    }

    /// The rest of the head whose first bytes are in `buf`, read until the blank line that
    /// ends it, for at most the head timeout.
    async fn whole_head(&self, stream: &mut Stream, mut buf: BytesMut) -> Head {
        let deadline = Instant::now() + self.head_timeout;
        let mut searched: usize = 0;
        loop {
            // From a little before the bytes searched already: the end may straddle reads.
            let from = searched.saturating_sub(3);
            let ended = memmem::find(&buf[from..], b"\r\n\r\n").is_some()
                || memmem::find(&buf[from..], b"\n\n").is_some();
            if ended || buf.len() >= HEAD_LIMIT {
                return Head::Read(buf);
            }
            searched = buf.len();
            buf.reserve(HEADER_BUF);
            let read =
                std::future::poll_fn(|cx| poll_read_buf(Pin::new(&mut *stream), cx, &mut buf));
            match tokio::time::timeout_at(deadline, read).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return Head::Closed,
                Err(_) => return Head::Late,
            }
        }
    }

    /// Answers a head that came too slowly: 408 in the error envelope, the connection closed.
    async fn answer_late(stream: &mut Stream) {
        let error = ApiError::new(
            ErrorKind::RequestTimeout,
            "The request's head did not arrive in time.",
        );
        let body = error.to_envelope().to_string();
        let answer = format!(
            "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let write = async {
            stream.write_all(answer.as_bytes()).await?;
            stream.flush().await
        };
        let _ = tokio::time::timeout(LATE_ANSWER_TIMEOUT, write).await;
    }

    /// The next request's first bytes, in the buffer its header will be read into; `None`
    /// when the client closes, the keep-alive timeout passes or the server shuts down. The
    /// buffer is allocated for each attempt to read and freed again when nothing has arrived,
    /// so an idle connection holds none.
    async fn first_bytes(&self, stream: &mut Stream) -> Option<BytesMut> {
        let closed = self.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if self.closing.load(Ordering::Acquire) {
            return None;
        }
        let read = std::future::poll_fn(|cx| {
            let mut buf = BytesMut::with_capacity(HEADER_BUF);
            poll_read_buf(Pin::new(&mut *stream), cx, &mut buf).map(|read| read.map(|_| buf))
        });
        tokio::select! {
            biased;
            read = tokio::time::timeout(KEEPALIVE, read) => match read {
                Ok(Ok(buf)) if !buf.is_empty() => Some(buf),
                _ => None,
            },
            () = &mut closed => None,
        }
    }
}

#[async_trait]
impl<A> ServerApp for IdleWait<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let options = self.app.server_options();
        if !matches!(stream.selected_alpn_proto(), None | Some(ALPN::H1))
            || options.is_some_and(|o| o.h2c || o.force_custom)
        {
            return self.app.process_new(stream, shutdown).await;
        }
        let mut carried: Option<HttpPersistentSettings> = None;
        loop {
            let first = self.first_bytes(&mut stream).await?;
            let first = match self.whole_head(&mut stream, first).await {
                Head::Read(buf) => buf,
                Head::Late => {
                    Self::answer_late(&mut stream).await;
                    return None;
                }
                Head::Closed => return None,
            };
            let mut session = ServerSession::new_http1(stream);
            match carried {
                Some(settings) => settings.apply_to_session(&mut session),
                None => {
                    session.set_keepalive(Some(KEEPALIVE.as_secs()));
                    session.set_keepalive_reuses_remaining(
                        options.and_then(|o| o.keepalive_request_limit),
                    );
                }
            }
            if *shutdown.borrow() {
                session.set_keepalive(None);
            }
            session.set_pipelined_prefix(first);
            let reused = self.app.process_new_http(session, shutdown).await?;
            (stream, carried) = reused.consume();
        }
    }

    async fn cleanup(&self) {
        self.closing.store(true, Ordering::Release);
        self.closed.notify_waiters();
        self.app.http_cleanup().await;
    }
}
