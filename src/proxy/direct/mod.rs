//! The direct exchange: a proxied request goes to the target without pingora's proxy
//! pipeline, and the answer streams back through the response guard.
//!
//! pingora's HTTP/1 client flushes the request header on its own before the body
//! (`write_request_header`), and its proxy runs the request and the response as two tasks
//! joined by channels, sending the answer's head before its body filter has seen a byte. The
//! exchange needs none of that. A prepared request (its body read whole and substituted in
//! `request_filter`, or none) leaves in one write ([`Exchanger::relay`]); a streamed one
//! leaves as its head and first piece in one write, then one chunk per piece, the pieces
//! already read leaving together ([`Exchanger::open_streamed`], driven by
//! [`crate::proxy::body::relay`]). The answer is then read and relayed in one loop
//! ([`Exchanger::answer`]), where the guard can hold the head back until it has scanned the
//! body's start. New connections come from a pingora
//! [`TransportConnector`] (TCP) and [`TargetTls`] (TLS, verification, sessions resumed),
//! idle ones wait in paycred's [`IdlePool`]
//! (see there for why not pingora's pool), and the response is parsed by pingora's HTTP/1
//! client session.
//!
//! Why paycred keeps its own path beside pingora's: with it, the load bench's proxy with four
//! templates does 1.24x the pingora pass-through's requests a second at 1 KiB and 1.30x at
//! 64 KiB; the same bodies substituted as they stream through pingora's proxy (read, then
//! re-framed chunked) do 0.66x and 0.71x (`benches/load/run.sh`, one machine, paired runs;
//! docs/performance.md). The difference is pingora's per-request work that the exchange does
//! not do: the header flushed alone, two tasks joined by channels, its pool's watcher task
//! per connection.
//!
//! `HEAD`, `CONNECT` and upgrades, which carry no body through paycred, are proxied by
//! pingora.

pub mod pool;
mod records;
pub mod tls;

use super::failure::carry;
use super::forward::{host_header, is_framing, Forwarding};
use super::guard::{ResponseGuard, BUFFERED_LIMIT};
use super::target::Target;
use bytes::Bytes;
use pingora::connectors::{ConnectorOptions, TransportConnector};
use pingora::http::RequestHeader;
use pingora::prelude::HttpPeer;
use pingora::protocols::http::v1::client::HttpSession;
use pingora::protocols::Stream;
use pingora::proxy::Session;
use pingora::upstreams::peer::Peer;
use pingora::{Error, ErrorType, OkOrErr, Result, RetryType};
use pool::{IdlePool, PeerKey};
use records::RecordChunks;
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tls::TargetTls;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use zeroize::Zeroizing;

/// Whether a request of this kind can carry a body at all through the proxy: not `HEAD`
/// (whose answer is framed by the request), `CONNECT` or an upgrade. Such a request with a
/// body is refused; without one it is proxied by pingora.
pub fn carries_body(req: &RequestHeader) -> bool {
    req.method != http::Method::HEAD
        && req.method != http::Method::CONNECT
        && !req.headers.contains_key(http::header::UPGRADE)
}

/// Longest `Content-Length: N\r\n\r\n`.
const LENGTH_LINE_MAX: usize = "Content-Length: \r\n\r\n".len() + 20;

/// The request as the target receives it, built in one buffer: the head (request line,
/// `Host`, the caller's headers less the dropped ones, the body's length) and the body, which
/// is appended first ([`RequestBuf::body`]) while room for the head is kept in front. So the
/// substituted body is written once, where it is sent from. Body pieces that no template
/// reaches follow the buffer as they were read ([`RequestBuf::finish`]).
pub struct RequestBuf {
    buf: Vec<u8>,
    head: Vec<u8>,
    /// Where the body starts in `buf`.
    body_start: usize,
    /// The caller framed a body (`Content-Length` or `Transfer-Encoding`): an empty one still
    /// leaves with `Content-Length: 0`; a request without one leaves without.
    framed: bool,
}

impl RequestBuf {
    /// Header values come from pingora's parser, which admits no CR or LF; the path and
    /// query were checked when the target URL was ([`crate::proxy::forward::target_uri`]).
    pub fn new(
        req: &RequestHeader,
        target: &Target,
        forwarding: &Forwarding,
        path_and_query: &str,
        body_len_hint: usize,
    ) -> Self {
        let head = request_head(req, target, forwarding, path_and_query);
        let body_start = head.len() + LENGTH_LINE_MAX;
        let mut buf = Vec::with_capacity(body_start + body_len_hint);
        buf.resize(body_start, 0);
        RequestBuf {
            buf,
            head,
            body_start,
            framed: req.headers.contains_key(http::header::CONTENT_LENGTH)
                || req.headers.contains_key(http::header::TRANSFER_ENCODING),
        }
    }

    /// Append the body here; what is before it must stay as it is.
    pub fn body(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The whole request: this buffer, with the body's end in `rest` (pieces sent as they
    /// are, after it).
    pub fn finish(self, rest: &[Bytes]) -> WireRequest {
        let RequestBuf {
            mut buf,
            head,
            body_start,
            framed,
        } = self;
        let body_len = buf.len() - body_start + rest.iter().map(Bytes::len).sum::<usize>();
        let length = if body_len == 0 && !framed {
            "\r\n".to_owned()
        } else {
            format!("Content-Length: {body_len}\r\n\r\n")
        };
        let start = body_start - length.len() - head.len();
        buf[start..start + head.len()].copy_from_slice(&head);
        buf[body_start - length.len()..body_start].copy_from_slice(length.as_bytes());
        let mut parts = Vec::with_capacity(1 + rest.len());
        parts.push(Bytes::from(buf).slice(start..));
        parts.extend(rest.iter().filter(|p| !p.is_empty()).cloned());
        WireRequest { parts }
    }
}

/// The head of a request whose body streams: the body leaves `chunked`, since substitution
/// changes its length ([`Exchanger::open_streamed`]).
pub fn chunked_head(
    req: &RequestHeader,
    target: &Target,
    forwarding: &Forwarding,
    path_and_query: &str,
) -> Bytes {
    let mut head = request_head(req, target, forwarding, path_and_query);
    head.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
    Bytes::from(head)
}

/// The request line and headers as the target receives them, up to (not including) the
/// body's framing and the blank line: `Host`, the caller's headers less the dropped ones.
fn request_head(
    req: &RequestHeader,
    target: &Target,
    forwarding: &Forwarding,
    path_and_query: &str,
) -> Vec<u8> {
    let host = host_header(target);
    let mut head = Vec::with_capacity(128 + 48 * req.headers.len());
    head.extend_from_slice(req.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(path_and_query.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    head.extend_from_slice(host.as_bytes());
    head.extend_from_slice(b"\r\n");
    // Header names leave as the caller wrote them, as pingora's own proxy sends them:
    // the names pingora read are kept beside the map, in the map's order.
    let mut as_written = req.case_header_iter().map(|(name, _)| name.as_slice());
    for (name, value) in &req.headers {
        let wire_name = as_written.next().unwrap_or(name.as_str().as_bytes());
        if is_framing(name) || !forwarding.forwards(name) {
            continue;
        }
        head.extend_from_slice(wire_name);
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if forwarding.identity_encoding {
        head.extend_from_slice(b"Accept-Encoding: identity\r\n");
    }
    head
}

/// A request ready to be written to the target: its bytes in order, in one or more parts
/// (the head and the body's start in one buffer, then body pieces as they were read).
#[derive(Clone)]
pub struct WireRequest {
    parts: Vec<Bytes>,
}

/// The lengths of the parts only: the body holds card values.
impl std::fmt::Debug for WireRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lengths: Vec<usize> = self.parts.iter().map(Bytes::len).collect();
        f.debug_struct("WireRequest")
            .field("part_lengths", &lengths)
            .finish()
    }
}

impl WireRequest {
    /// The parts, in the order they are written.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }
}

/// Sends prepared requests to targets over pooled connections: new ones from a pingora
/// [`TransportConnector`] (TCP, TLS and its verification), idle ones kept in an [`IdlePool`].
pub struct Exchanger {
    transport: TransportConnector,
    /// TLS to targets, resuming sessions; `None` if OpenSSL could not set it up, and then
    /// pingora's connector makes TLS connections too, each with a full handshake.
    tls: Option<TargetTls>,
    idle: IdlePool,
    /// Shared with whoever reports them ([`crate::proxy::ProxyStats`]).
    connections: Arc<Connections>,
    /// Requests inside [`Self::relay`] now ([`Relaying`]).
    relaying: AtomicUsize,
}

/// The exchange's counters: connections opened to targets, and requests sent on an idle one
/// from the pool.
#[derive(Default)]
pub struct Connections {
    opened: AtomicU64,
    reused: AtomicU64,
}

impl Connections {
    /// Connections opened, and requests sent on an idle connection, so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.opened.load(Ordering::Relaxed),
            self.reused.load(Ordering::Relaxed),
        )
    }
}

/// One request inside [`Exchanger::relay`], counted while it is there: until its answer is
/// relayed, or it fails, or its future is dropped.
struct Relaying<'a>(&'a AtomicUsize);

impl<'a> Relaying<'a> {
    /// Counts one more; also returns how many others were inside.
    fn enter(count: &'a AtomicUsize) -> (Self, usize) {
        // Relaxed: the count only decides whether to yield, and any value is safe.
        let others = count.fetch_add(1, Ordering::Relaxed);
        (Relaying(count), others)
    }
}

impl Drop for Relaying<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Exchanger {
    /// Keeps up to `pool_size` idle connections, all targets together, and counts them in
    /// `connections`.
    pub fn new(pool_size: usize, connections: Arc<Connections>) -> Self {
        Exchanger {
            // The connector's own pool is not used.
            transport: TransportConnector::new(Some(ConnectorOptions::new(0))),
            tls: TargetTls::new()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "TLS session resumption to targets is off");
                })
                .ok(),
            idle: IdlePool::new(pool_size),
            connections,
            relaying: AtomicUsize::new(0),
        }
    }

    /// Sends `request` ([`RequestBuf`]) to `peer` and relays the response to the caller
    /// through `guard` (which may read a small answer whole first, mask it, or refuse it).
    /// Returns the response's status. `sent_at` is set when the request is about to leave
    /// (after it has waited for the runtime's next turn, unless it was alone, below): the
    /// target's time starts there.
    ///
    /// On error nothing more is written to the caller: when `session.response_written()` is
    /// still `None` the caller can be answered with an error, otherwise its response is cut
    /// short. Errors on the target's side are marked as upstream errors, errors writing to
    /// the caller as downstream ones.
    pub async fn relay(
        &self,
        session: &mut Session,
        peer: &HttpPeer,
        request: &WireRequest,
        replayable: bool,
        sent_at: &mut Option<Instant>,
        guard: &mut ResponseGuard,
    ) -> Result<u16> {
        // Yield once before writing: the runtime runs every other request ready in this
        // round up to here, polls its sockets (unless another worker thread is polling them
        // at that moment), then resumes them one after another, so the round's requests
        // reach their targets in one burst. A target (or any receiver) sleeping on another
        // CPU is then woken once a burst instead of once a request: in the load bench, 0.31
        // wake-ups a request instead of 0.83, and 29 → 25.5 µs of CPU (docs/performance.md). The poll also refreshes the pooled connections' readiness before
        // `take` checks them. The count of requests inside `relay` (sent, or about to be,
        // and not yet answered) stands in for "others are busy": when it is zero the proxy
        // is idle apart from this request, nothing is likely to join a burst, and the yield
        // would only cost one `epoll_wait` that does not wait and one more poll of the task. So from idle, the first request of a round leaves at once and the
        // rest of the round follows as a burst.
        let (_relaying, others) = Relaying::enter(&self.relaying);
        if others > 0 {
            tokio::task::yield_now().await;
        }
        *sent_at = Some(Instant::now());
        let key = peer_key(peer)?;
        let upstream = self.send(key, peer, request, replayable).await?;
        self.answer(session, upstream, key, peer, guard, true).await
    }

    /// Relays the target's answer (its head read already) to the caller through `guard`,
    /// then keeps the connection for the next request when `reusable` (the request left
    /// whole) and the answer allows it. Returns the answer's status.
    pub async fn answer(
        &self,
        session: &mut Session,
        mut upstream: HttpSession,
        key: PeerKey,
        peer: &HttpPeer,
        guard: &mut ResponseGuard,
        reusable: bool,
    ) -> Result<u16> {
        let mut header = upstream
            .resp_header()
            .cloned()
            .or_err(ErrorType::InternalError, "no response header")
            .map_err(|e| e.into_up())?;
        let status = header.status.as_u16();
        guard.head(&mut header).map_err(carry)?;
        // Under `refuse`, up to BUFFERED_LIMIT of the body is read and scanned before the
        // head is sent: a number in it answers 502, and what was read is zeroed as it is
        // dropped.
        let mut first = None;
        if guard.buffers() {
            guard.buffering();
            let mut body = Zeroizing::new(Vec::new());
            while !upstream.is_body_done() && body.len() <= BUFFERED_LIMIT {
                match upstream.read_body_bytes().await.map_err(|e| e.into_up())? {
                    Some(chunk) => body.extend_from_slice(&chunk),
                    None if upstream.is_body_done() => break,
                    None => return cut_short(),
                }
            }
            if upstream.is_body_done() {
                let body = guard.whole(&body).map_err(carry)?.filter(|b| !b.is_empty());
                session
                    .write_response_header(Box::new(header), body.is_none())
                    .await
                    .map_err(|e| e.into_down())?;
                if body.is_some() {
                    session
                        .write_response_body(body, true)
                        .await
                        .map_err(|e| e.into_down())?;
                }
                return self.keep(upstream, key, peer, reusable, status).await;
            }
            // Longer: the rest streams after what was read.
            first = guard
                .body(Some(Bytes::copy_from_slice(&body)), false)
                .map_err(carry)?;
        }
        guard.started_streaming();
        let done = upstream.is_body_done() && first.is_none();
        session
            .write_response_header(Box::new(header), done)
            .await
            .map_err(|e| e.into_down())?;
        if first.is_some() {
            session
                .write_response_body(first, false)
                .await
                .map_err(|e| e.into_down())?;
        }
        while !upstream.is_body_done() {
            let chunk = upstream.read_body_bytes().await.map_err(|e| e.into_up())?;
            let done = upstream.is_body_done();
            if chunk.is_none() && !done {
                return cut_short();
            }
            // A number in a streamed answer under `refuse` cuts it here.
            let out = guard.body(chunk, done).map_err(carry)?;
            if out.is_none() && !done {
                continue;
            }
            session
                .write_response_body(out, done)
                .await
                .map_err(|e| e.into_down())?;
        }
        self.keep(upstream, key, peer, reusable, status).await
    }

    /// After the answer: the connection goes back to the idle pool when `reusable` (the
    /// request left whole) and the answer allows it. Returns `status`.
    async fn keep(
        &self,
        mut upstream: HttpSession,
        key: PeerKey,
        peer: &HttpPeer,
        reusable: bool,
        status: u16,
    ) -> Result<u16> {
        if reusable {
            upstream.respect_keepalive();
            if let Some(stream) = upstream.reuse().await {
                let idle = peer.get_peer_options().and_then(|o| o.idle_timeout);
                self.idle.put(key, stream, idle);
            }
        }
        Ok(status)
    }

    /// Starts a request whose body streams ([`StreamedRequest`]): its head (the body
    /// `chunked`: substitution changes its length) and the body's first pieces leave in one
    /// write, with the body's end when they are the `last`, on an idle connection or a
    /// new one. A pooled connection the target had closed
    /// fails that write, and the same bytes go out once more on a new connection: none of
    /// the request can have been taken.
    pub async fn open_streamed(
        &self,
        peer: &HttpPeer,
        head: Bytes,
        first: Vec<Bytes>,
        last: bool,
    ) -> Result<StreamedRequest> {
        let key = peer_key(peer)?;
        let write_timeout = peer.get_peer_options().and_then(|o| o.write_timeout);
        let mut parts = Vec::with_capacity(first.len() * 3 + 2);
        parts.push(head);
        for piece in first {
            push_chunk(&mut parts, piece);
        }
        if last {
            parts.push(Bytes::from_static(LAST_CHUNK));
        }
        let (stream, reused) = match self.idle.take(key) {
            Some(stream) => {
                self.connections.reused.fetch_add(1, Ordering::Relaxed);
                (stream, true)
            }
            None => (self.connect(peer, key).await?, false),
        };
        let mut out = StreamedRequest {
            records: stream.get_ssl().is_some().then(RecordChunks::default),
            stream,
            key,
            write_timeout,
        };
        match out.write(&parts).await {
            Err(e) if reused && e.etype() == &ErrorType::WriteError => {
                out.stream = self.connect(peer, key).await?;
                out.records = out.stream.get_ssl().is_some().then(RecordChunks::default);
                out.write(&parts).await?;
            }
            written => written?,
        }
        Ok(out)
    }

    /// Writes the request and reads the response header.
    ///
    /// A pooled connection the target had already closed fails before any answer, and is
    /// retried once on a new connection, but only where a second delivery is harmless: the
    /// request did not leave whole (the write failed), or it is `replayable` ([`replayable`])
    /// and nothing at all came back. A POST that may have reached the target is never sent
    /// twice: it answers 502. The pool checks a connection before handing it out, by the
    /// readiness the runtime last saw. Unless it was alone, the request has first yielded to
    /// the runtime ([`Self::relay`]), which usually polls its sockets before resuming it, so
    /// a close that arrived before then is seen; one that arrives after that poll (for a
    /// request alone, after the poll that woke it), while the round's other requests run (at
    /// most one round) or its own work is done, is missed, and such a POST then answers 502.
    async fn send(
        &self,
        key: PeerKey,
        peer: &HttpPeer,
        request: &WireRequest,
        replayable: bool,
    ) -> Result<HttpSession> {
        let (stream, reused) = match self.idle.take(key) {
            Some(stream) => {
                self.connections.reused.fetch_add(1, Ordering::Relaxed);
                (stream, true)
            }
            None => (self.connect(peer, key).await?, false),
        };
        match exchange_header(stream, peer, request).await {
            Err(mut e) => {
                e.retry.decide_reuse(reused);
                let unsent = e.etype() == &ErrorType::WriteError;
                if !(e.retry.retry() && (unsent || replayable)) {
                    return Err(e);
                }
                let stream = self.connect(peer, key).await?;
                exchange_header(stream, peer, request)
                    .await
                    .map_err(|mut e| {
                        e.retry.decide_reuse(false);
                        e
                    })
            }
            ok => ok,
        }
    }

    /// A new connection to `peer` (TCP, and TLS with verification where the peer asks),
    /// within the peer's total connection timeout. TCP comes from pingora's connector; TLS,
    /// which resumes the peer's last session, from [`TargetTls`].
    async fn connect(&self, peer: &HttpPeer, key: PeerKey) -> Result<Stream> {
        let stream = match &self.tls {
            Some(tls) if peer.is_tls() => {
                let mut tcp_peer = peer.clone();
                tcp_peer.scheme = pingora::upstreams::peer::Scheme::HTTP;
                let both = async {
                    let tcp = self.transport.new_stream(&tcp_peer).await?;
                    tls.connect(peer, key, tcp).await
                };
                match peer.total_connection_timeout() {
                    Some(limit) => tokio::time::timeout(limit, both).await.map_err(|_| {
                        Error::explain(ErrorType::ConnectTimedout, "connecting to the target")
                    })?,
                    None => both.await,
                }
            }
            _ => self.transport.new_stream(peer).await,
        }
        .map_err(|e| e.into_up())?;
        self.connections.opened.fetch_add(1, Ordering::Relaxed);
        Ok(stream)
    }
}

const IDEMPOTENCY_KEY: http::HeaderName = http::HeaderName::from_static("idempotency-key");

/// Whether sending this request twice is harmless (RFC 9110, section 9.2.2): an idempotent method, or
/// an `Idempotency-Key` that lets the target recognise the second delivery.
pub fn replayable(req: &RequestHeader) -> bool {
    use http::Method;
    matches!(
        req.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    ) || req.headers.contains_key(IDEMPOTENCY_KEY)
}

/// Writes `parts` in order and flushes. A plain TCP connection takes them in one vectored
/// write (`writev`), so they leave together without being copied into one buffer first; a
/// stream without vectored writes writes the first part that is not empty at each call, and
/// the loop goes on from where it stopped (a TLS stream is given one part: [`timed_write`]).
async fn write_parts<S>(stream: &mut S, parts: &[Bytes]) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin + ?Sized,
{
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut unsent = &mut slices[..];
    while !unsent.is_empty() {
        let n = stream.write_vectored(unsent).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut unsent, n);
    }
    stream.flush().await
}

/// One write of the whole request, then the final (non-1xx) response header.
async fn exchange_header(
    mut stream: Stream,
    peer: &HttpPeer,
    request: &WireRequest,
) -> Result<HttpSession> {
    let write_timeout = peer.get_peer_options().and_then(|o| o.write_timeout);
    timed_write(&mut stream, request.parts(), write_timeout).await?;
    read_answer_head(stream, peer).await
}

/// Writes `parts` within `timeout`. A failed write (not a slow one) is marked retryable on a
/// reused connection: the request did not leave whole, so the target cannot have taken it.
async fn timed_write(
    stream: &mut Stream,
    parts: &[Bytes],
    timeout: Option<std::time::Duration>,
) -> Result<()> {
    // Over TLS each write is a record of its own, and a send: a streamed chunk's size line
    // and CRLF would each cost one. There the parts are joined and written once.
    let joined;
    let parts = if parts.len() > 1 && stream.get_ssl().is_some() {
        let mut all = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
        for part in parts {
            all.extend_from_slice(part);
        }
        joined = [Bytes::from(all)];
        &joined[..]
    } else {
        parts
    };
    let write = write_parts(stream, parts);
    let written = match timeout {
        Some(t) => tokio::time::timeout(t, write)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
        None => write.await,
    };
    let Err(e) = written else {
        return Ok(());
    };
    let timed_out = e.kind() == std::io::ErrorKind::TimedOut;
    let kind = if timed_out {
        ErrorType::WriteTimedout
    } else {
        ErrorType::WriteError
    };
    let mut err = Error::because(kind, "writing the request to the target", e);
    if !timed_out {
        err.retry = RetryType::ReusedOnly;
    }
    Err(err.into_up())
}

/// Reads the target's final (non-1xx) response header from `stream`.
async fn read_answer_head(stream: Stream, peer: &HttpPeer) -> Result<HttpSession> {
    let options = peer.get_peer_options();
    let mut upstream = HttpSession::new_with_options(stream, peer);
    upstream.read_timeout = options.and_then(|o| o.read_timeout);
    upstream.write_timeout = options.and_then(|o| o.write_timeout);
    let mut answered = false;
    loop {
        // pingora marks a connection closed before the answer as retryable when reused;
        // once anything came back (a 1xx), the target has seen the request: no retry.
        if let Err(mut e) = upstream.read_response().await {
            if answered {
                e.retry = false.into();
            }
            return Err(e.into_up());
        }
        match upstream.get_status().map(|s| s.as_u16()) {
            Some(101) => {
                // Nothing asked for an upgrade (such requests go through pingora).
                return Error::e_explain(
                    ErrorType::InvalidHTTPHeader,
                    "the target switched protocols unasked",
                )
                .map_err(|e| e.into_up());
            }
            Some(100..=199) => answered = true,
            _ => return Ok(upstream),
        }
    }
}

/// The target's answer ended before its body did.
fn cut_short<T>() -> Result<T> {
    Error::e_explain(ErrorType::ConnectionClosed, "target response cut short")
        .map_err(|e| e.into_up())
}

/// Where a peer's idle connections are kept.
fn peer_key(peer: &HttpPeer) -> Result<PeerKey> {
    Ok(PeerKey {
        hash: peer.reuse_hash(),
        addr: *peer
            .address()
            .as_inet()
            .or_err(ErrorType::InternalError, "target is not an IP address")?,
    })
}

/// The chunk that ends a chunked body.
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Appends one chunk of a `chunked` body: its size line, the bytes, the CRLF. Nothing for an
/// empty piece (a zero-size chunk would end the body).
fn push_chunk(parts: &mut Vec<Bytes>, piece: Bytes) {
    if piece.is_empty() {
        return;
    }
    parts.push(Bytes::from(format!("{:x}\r\n", piece.len())));
    parts.push(piece);
    parts.push(Bytes::from_static(b"\r\n"));
}

/// A request whose body streams to the target as it is read from the caller and
/// substituted ([`Exchanger::open_streamed`]): each piece leaves as one chunk. Only the
/// write of the last piece carries the body's end; dropped before that, the connection
/// closes on a body without its end, so the target never holds a complete request.
pub struct StreamedRequest {
    stream: Stream,
    key: PeerKey,
    write_timeout: Option<std::time::Duration>,
    /// Over TLS: the body's bytes held back so that each write is whole records.
    records: Option<RecordChunks>,
}

impl StreamedRequest {
    /// Sends the body's next pieces in one write: each as one chunk, or over TLS as part of
    /// the next record-sized one ([`RecordChunks`]). With `last` the body's end (and over TLS
    /// every byte still held back) leaves in the same write: after it the target holds the
    /// whole request.
    pub async fn send(&mut self, pieces: Vec<Bytes>, last: bool) -> Result<()> {
        let mut parts = Vec::with_capacity(pieces.len() * 3 + 1);
        match &mut self.records {
            Some(records) => {
                records.hold(&pieces);
                parts.extend(if last {
                    Some(records.finish())
                } else {
                    records.take()
                });
            }
            None => {
                for piece in pieces {
                    push_chunk(&mut parts, piece);
                }
                if last {
                    parts.push(Bytes::from_static(LAST_CHUNK));
                }
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        self.write(&parts).await
    }

    /// Reads the answer's head: after the last [`Self::send`], or after a failed write, when
    /// the target stopped reading the body and may have answered before closing (a 413,
    /// say).
    pub async fn answer_head(self, peer: &HttpPeer) -> Result<(HttpSession, PeerKey)> {
        Ok((read_answer_head(self.stream, peer).await?, self.key))
    }

    async fn write(&mut self, parts: &[Bytes]) -> Result<()> {
        timed_write(&mut self.stream, parts, self.write_timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::target::TargetUrl;

    fn target() -> Target {
        Target {
            url: TargetUrl {
                https: false,
                host: "127.0.0.1".into(),
                port: 8080,
                path_and_query: "/c?x=1".into(),
            },
            addr: "127.0.0.1:8080".parse().unwrap_or_else(|_| unreachable!()),
        }
    }

    #[test]
    fn relaying_counts_the_others_inside_until_each_leaves() {
        let count = AtomicUsize::new(0);
        let (first, alone) = Relaying::enter(&count);
        assert_eq!(alone, 0);
        let (second, others) = Relaying::enter(&count);
        assert_eq!(others, 1);
        drop(first);
        let (third, others) = Relaying::enter(&count);
        assert_eq!(others, 1);
        drop((second, third));
        assert_eq!(Relaying::enter(&count).1, 0);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }

    /// A caller's proxy request head, with headers to drop and to keep.
    fn header() -> RequestHeader {
        let mut req = RequestHeader::build("POST", b"/projects/p/proxy", None)
            .unwrap_or_else(|_| unreachable!());
        for (name, value) in [
            ("Host", "paycred.local"),
            ("Authorization", "Bearer t"),
            ("Svc-Target-URL", "http://127.0.0.1:8080/c?x=1"),
            ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "dropped"),
            ("Content-Length", "999"),
            ("X-Request-Id", "r1"),
        ] {
            req.append_header(name, value)
                .unwrap_or_else(|_| unreachable!());
        }
        req
    }

    /// The request's bytes, and how many parts they came in.
    fn request(drop_authorization: bool, body: &[u8], rest: &[&'static [u8]]) -> (Bytes, usize) {
        let forwarding = Forwarding::new(&header(), drop_authorization).unwrap_or_default();
        let mut buf = RequestBuf::new(&header(), &target(), &forwarding, "/c?x=1", 0);
        buf.body().extend_from_slice(body);
        let rest: Vec<Bytes> = rest.iter().map(|p| Bytes::from_static(p)).collect();
        let request = buf.finish(&rest);
        let parts = request.parts();
        (crate::http::join(parts.to_vec()), parts.len())
    }

    #[test]
    fn the_head_lands_right_before_the_body_with_its_length() {
        let (whole, parts) = request(true, b"{\"a\":1}", &[]);
        assert_eq!(
            std::str::from_utf8(&whole).unwrap_or_default(),
            "POST /c?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-Request-Id: r1\r\n\
             Content-Length: 7\r\n\r\n{\"a\":1}"
        );
        assert_eq!(parts, 1);
    }

    #[test]
    fn pieces_left_as_read_follow_the_buffer_and_count_in_the_length() {
        let (whole, parts) = request(true, b"{\"a\":", &[b"", b"[1,", b"2]}"]);
        let text = std::str::from_utf8(&whole).unwrap_or_default();
        assert!(
            text.ends_with("Content-Length: 11\r\n\r\n{\"a\":[1,2]}"),
            "{text}"
        );
        // The empty piece is left out.
        assert_eq!(parts, 3);
    }

    #[test]
    fn a_request_debugs_as_lengths_only() {
        let mut buf = RequestBuf::new(
            &header(),
            &target(),
            &Forwarding::new(&header(), true).unwrap_or_default(),
            "/c",
            0,
        );
        buf.body()
            .extend_from_slice(b"{\"pan\":\"4242424242424242\"}");
        let shown = format!(
            "{:?}",
            buf.finish(&[Bytes::from_static(b"{\"cvc\":\"123\"}")])
        );
        assert!(
            shown.starts_with("WireRequest { part_lengths: ["),
            "{shown}"
        );
        assert!(
            !shown.contains("4242") && !shown.contains("123\""),
            "{shown}"
        );
    }

    /// Takes at most `max` bytes a write, as a socket with a full buffer does; a vectored
    /// write takes from several parts only when `vectored`.
    struct Trickle {
        got: Vec<u8>,
        max: usize,
        vectored: bool,
        writes: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.got.extend_from_slice(&buf[..n]);
            self.writes += 1;
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            if !self.vectored {
                // As tokio's default does: the first part that is not empty, alone.
                let first = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &b[..]);
                return self.poll_write(cx, first);
            }
            let mut n = 0;
            for buf in bufs {
                let take = buf.len().min(self.max - n);
                self.got.extend_from_slice(&buf[..take]);
                n += take;
            }
            self.writes += 1;
            std::task::Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            self.vectored
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn parts_arrive_whole_and_in_order_however_short_the_writes() {
        let parts: Vec<Bytes> = ["POST / HTTP/1.1\r\n\r\n{", "", "\"a\":", "[1,2,3]", "}"]
            .into_iter()
            .map(|p| Bytes::from_static(p.as_bytes()))
            .collect();
        let want: Vec<u8> = parts.concat();
        for vectored in [true, false] {
            for max in 1..=want.len() {
                let mut sink = Trickle {
                    got: Vec::new(),
                    max,
                    vectored,
                    writes: 0,
                };
                write_parts(&mut sink, &parts).await.unwrap_or_default();
                assert_eq!(sink.got, want, "max {max}, vectored {vectored}");
                if vectored && max == want.len() {
                    assert_eq!(sink.writes, 1, "one writev for it all");
                }
            }
        }
    }

    #[test]
    fn the_callers_own_authorization_is_kept_and_an_empty_body_is_framed() {
        let (whole, _) = request(false, b"", &[]);
        let text = std::str::from_utf8(&whole).unwrap_or_default();
        assert!(text.contains("\r\nAuthorization: Bearer t\r\n"), "{text}");
        assert!(text.ends_with("Content-Length: 0\r\n\r\n"), "{text}");
    }
}
