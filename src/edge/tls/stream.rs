//! A caller's TLS connection on rustls's unbuffered API, with buffers of paycred's own that
//! are let go while the connection idles.
//!
//! rustls's buffered connection keeps a 4 KiB read buffer for as long as a connection lives,
//! and pingora's stream a write buffer under it. Here every buffer is paycred's and exists
//! only while it holds bytes:
//! - `incoming`: TLS bytes read and not yet processed (a partial record, mostly). Reads ask
//!   for a whole record's worth ([`READ_CHUNK`]); the buffer is freed whenever it empties.
//! - `plaintext`: decrypted bytes the HTTP layer has not read yet (a record larger than its
//!   read), freed when drained.
//! - `outgoing`: sealed records not yet sent. Writes are held until a flush or until
//!   [`SEND_AT`] bytes are waiting, so a response's head and a small body leave in one
//!   segment; the buffer is freed by each flush.
//!
//! An idle connection holds only rustls's own state (its keys and the connection, about
//! 3 KiB).
//!
//! The rules the stream keeps:
//! - Records rustls produces on its own (the handshake, session tickets after it, a
//!   KeyUpdate answer, an alert) are queued ahead of anything sealed later, so the order on
//!   the wire is rustls's order.
//! - The caller's `close_notify` ends the reads once the plaintext before it is read. A
//!   connection closed without it is an error (`UnexpectedEof`), not an end: a truncated
//!   request is never taken for a whole one.
//! - A TLS error (a bad record, say) sends rustls's alert if the socket takes it at once,
//!   and fails every later read and write: nothing more is decrypted or sealed.
//! - At most [`MAX_INCOMING`] unprocessed bytes are held: a handshake message of rustls's
//!   largest (64 KiB) and a record on top. A caller that sends more without completing a
//!   record or message is cut off.
//! - Shutting down seals `close_notify` once, sends what is queued, then closes the socket's
//!   sending side.

use async_trait::async_trait;
use bytes::{Buf, BytesMut};
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, InsufficientSizeError,
    UnbufferedStatus,
};
use rustls::ServerConfig;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The most plaintext a TLS record carries.
const RECORD: usize = 16 * 1024;

/// Bytes asked of the socket at a time: a full record with its header and the most
/// overhead TLS 1.2 allows, so a stream of full records takes about a read each.
const READ_CHUNK: usize = RECORD + 5 + 2048;

/// The most unprocessed TLS bytes held: a 64 KiB handshake message spread over records
/// (rustls's own limit on one), with a read on top.
pub const MAX_INCOMING: usize = 64 * 1024 + 2 * READ_CHUNK;

/// The most plaintext one write seals: four full records.
const WRITE_CHUNK: usize = 4 * RECORD;

/// Sealed bytes that are sent without waiting for a flush.
const SEND_AT: usize = RECORD;

/// A caller's connection: rustls's state, the TCP stream and the buffers above.
pub struct TlsStream {
    conn: UnbufferedServerConnection,
    tcp: Stream,
    incoming: BytesMut,
    plaintext: BytesMut,
    outgoing: Vec<u8>,
    /// How much of `outgoing` is on the wire already.
    sent: usize,
    /// The caller's `close_notify` arrived.
    peer_closed: bool,
    /// paycred's `close_notify` is sealed: nothing more is.
    closing: bool,
    /// A TLS error ended the connection.
    failed: bool,
}

/// What a call wants of the records in hand.
enum Want<'a, 'b> {
    /// Plaintext into this buffer; what does not fit is kept in `plaintext`.
    Read(&'a mut ReadBuf<'b>),
    /// This plaintext sealed.
    Write(&'a [u8]),
    /// `close_notify` sealed.
    Close,
    /// The handshake completed.
    Handshake,
}

/// How far [`TlsStream::process`] got.
enum Step {
    /// Done: read into the buffer, the handshake complete, or this many bytes sealed.
    Done(usize),
    /// It needs more bytes from the caller first.
    NeedInput,
    /// The caller closed (its `close_notify`): no more plaintext.
    End,
}

/// What one state of rustls's came to, once its borrows are over.
enum Outcome {
    Continue,
    Step(Step),
    /// The handshake may be complete: rustls is asked once its state is let go.
    Writable,
    Fail(io::Error),
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

impl TlsStream {
    /// Completes the handshake on `tcp` (the caller bounds its time). On failure the alert
    /// rustls chose is sent if the socket takes it within `alert_wait`.
    pub async fn accept(
        config: Arc<ServerConfig>,
        tcp: Stream,
        alert_wait: std::time::Duration,
    ) -> io::Result<Self> {
        let conn = UnbufferedServerConnection::new(config).map_err(invalid)?;
        let mut tls = TlsStream {
            conn,
            tcp,
            incoming: BytesMut::new(),
            plaintext: BytesMut::new(),
            outgoing: Vec::new(),
            sent: 0,
            peer_closed: false,
            closing: false,
            failed: false,
        };
        loop {
            let more = match tls.process(&mut Want::Handshake) {
                Ok(Step::Done(_)) => break,
                Ok(Step::NeedInput) => {
                    std::future::poll_fn(|cx| tls.poll_send(cx)).await?;
                    std::future::poll_fn(|cx| tls.poll_fill(cx)).await? > 0
                }
                Ok(Step::End) => false,
                Err(error) => {
                    let send = std::future::poll_fn(|cx| tls.poll_send(cx));
                    let _ = tokio::time::timeout(alert_wait, send).await;
                    return Err(error);
                }
            };
            if !more {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the caller closed the connection during the handshake",
                ));
            }
        }
        // The server's last flight and its session tickets.
        std::future::poll_fn(|cx| tls.poll_send(cx)).await?;
        tls.outgoing = Vec::new();
        Ok(tls)
    }

    /// Runs rustls over the records in hand until `want` is done or needs more input.
    fn process(&mut self, want: &mut Want<'_, '_>) -> io::Result<Step> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the TLS connection failed earlier",
            ));
        }
        let mut delivered = false;
        loop {
            let outcome = {
                let UnbufferedStatus { mut discard, state } =
                    self.conn.process_tls_records(&mut self.incoming[..]);
                let outcome = match state {
                    Err(error) => Outcome::Fail(invalid(error)),
                    Ok(ConnectionState::ReadTraffic(mut records)) => {
                        let mut outcome = Outcome::Continue;
                        while let Some(record) = records.next_record() {
                            let record = match record {
                                Ok(record) => record,
                                Err(error) => {
                                    outcome = Outcome::Fail(invalid(error));
                                    break;
                                }
                            };
                            discard += record.discard;
                            let mut payload = record.payload;
                            if let Want::Read(buf) = want {
                                let n = buf.remaining().min(payload.len());
                                buf.put_slice(&payload[..n]);
                                payload = &payload[n..];
                                delivered |= n > 0;
                            }
                            self.plaintext.extend_from_slice(payload);
                        }
                        match (&outcome, &want) {
                            (Outcome::Continue, Want::Read(buf)) if buf.remaining() == 0 => {
                                Outcome::Step(Step::Done(0))
                            }
                            _ => outcome,
                        }
                    }
                    Ok(ConnectionState::EncodeTlsData(mut data)) => {
                        match encode(&mut self.outgoing, &mut data) {
                            Ok(_) => Outcome::Continue,
                            Err(error) => Outcome::Fail(error),
                        }
                    }
                    // The records stay in `outgoing`, ahead of anything sealed after them.
                    Ok(ConnectionState::TransmitTlsData(transmit)) => {
                        transmit.done();
                        Outcome::Continue
                    }
                    Ok(ConnectionState::BlockedHandshake) => match want {
                        Want::Read(_) | Want::Handshake => Outcome::Step(Step::NeedInput),
                        Want::Write(_) | Want::Close => Outcome::Fail(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "TLS: the handshake is not complete",
                        )),
                    },
                    Ok(ConnectionState::WriteTraffic(mut traffic)) => match want {
                        Want::Write(plain) => {
                            let guess = plain.len() + (plain.len() / RECORD + 1) * 64;
                            match seal(&mut self.outgoing, guess, |out| {
                                traffic.encrypt(plain, out).map_err(needed)
                            }) {
                                Ok(_) => Outcome::Step(Step::Done(plain.len())),
                                Err(error) => Outcome::Fail(error),
                            }
                        }
                        Want::Close => {
                            match seal(&mut self.outgoing, 64, |out| {
                                traffic.queue_close_notify(out).map_err(needed)
                            }) {
                                Ok(_) => Outcome::Step(Step::Done(0)),
                                Err(error) => Outcome::Fail(error),
                            }
                        }
                        Want::Read(_) if self.peer_closed => Outcome::Step(Step::End),
                        Want::Read(_) => Outcome::Step(Step::NeedInput),
                        Want::Handshake => Outcome::Writable,
                    },
                    Ok(ConnectionState::PeerClosed) => {
                        self.peer_closed = true;
                        Outcome::Continue
                    }
                    Ok(ConnectionState::Closed) => match want {
                        Want::Read(_) | Want::Close => Outcome::Step(Step::End),
                        Want::Write(_) | Want::Handshake => Outcome::Fail(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "the TLS connection is closed",
                        )),
                    },
                    // Early data is never accepted (`max_early_data_size` is 0), and rustls
                    // may add states paycred does not know.
                    Ok(_) => Outcome::Fail(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "TLS: an unexpected connection state",
                    )),
                };
                self.incoming.advance(discard);
                outcome
            };
            if self.incoming.is_empty() && self.incoming.capacity() > 0 {
                self.incoming = BytesMut::new();
            }
            match outcome {
                Outcome::Continue => {}
                Outcome::Writable if self.conn.is_handshaking() => return Ok(Step::NeedInput),
                Outcome::Writable => return Ok(Step::Done(0)),
                Outcome::Step(Step::NeedInput | Step::End) if delivered => {
                    return Ok(Step::Done(0))
                }
                Outcome::Step(step) => return Ok(step),
                Outcome::Fail(error) => {
                    self.fail();
                    return Err(error);
                }
            }
        }
    }

    /// Marks the connection failed and queues the alert rustls chose, if any. rustls is only
    /// asked for records it holds: past an error its record parser must not run again.
    fn fail(&mut self) {
        self.failed = true;
        self.plaintext = BytesMut::new();
        while self.conn.wants_write() {
            match self.conn.process_tls_records(&mut []).state {
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    if encode(&mut self.outgoing, &mut data).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    /// Reads from the socket into `incoming`: the number of bytes, 0 at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.incoming.len() >= MAX_INCOMING {
            self.fail();
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS: more unprocessed bytes than a record or handshake message can hold",
            )));
        }
        self.incoming.reserve(READ_CHUNK);
        let read = tokio_util::io::poll_read_buf(Pin::new(&mut self.tcp), cx, &mut self.incoming);
        if self.incoming.is_empty() {
            self.incoming = BytesMut::new();
        }
        read
    }

    /// Sends what is queued in `outgoing`.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.outgoing.len() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.outgoing[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.outgoing.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Sends what is queued if the socket takes it now; what it does not take waits for the
    /// next write or flush.
    fn send_now(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.outgoing.is_empty() {
            return Ok(());
        }
        match self.poll_send(cx) {
            Poll::Ready(Ok(())) => {
                self.outgoing = Vec::new();
                Ok(())
            }
            Poll::Ready(Err(error)) => Err(error),
            Poll::Pending => Ok(()),
        }
    }

    fn queued(&self) -> usize {
        self.outgoing.len() - self.sent
    }
}

/// Seals into the end of `out` through `write`, which says how much it wrote or, when the
/// room is too small, how much it needs (`None`: it cannot write at all).
fn seal(
    out: &mut Vec<u8>,
    guess: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>,
) -> io::Result<usize> {
    let start = out.len();
    let mut room = guess;
    // The second try has the room the first said it needs.
    for _ in 0..2 {
        out.resize(start + room, 0);
        match write(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(n);
            }
            Err(Some(needed)) if needed > room => room = needed,
            Err(_) => break,
        }
    }
    out.truncate(start);
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "TLS: a record could not be sealed",
    ))
}

/// Queues a record rustls made (handshake, ticket, KeyUpdate, alert) at the end of `out`.
fn encode<Data>(out: &mut Vec<u8>, data: &mut EncodeTlsData<'_, Data>) -> io::Result<usize> {
    seal(out, 512, |room| {
        data.encode(room).map_err(|error| match error {
            EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
                Some(required_size)
            }
            EncodeError::AlreadyEncoded => None,
        })
    })
}

/// The room an encryption needs, when that is why it failed.
fn needed(error: EncryptError) -> Option<usize> {
    match error {
        EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(required_size)
        }
        _ => None,
    }
}

fn invalid(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if !this.plaintext.is_empty() {
            let n = buf.remaining().min(this.plaintext.len());
            buf.put_slice(&this.plaintext[..n]);
            this.plaintext.advance(n);
            if this.plaintext.is_empty() {
                this.plaintext = BytesMut::new();
            }
            return Poll::Ready(Ok(()));
        }
        loop {
            let step = this.process(&mut Want::Read(buf));
            // Records rustls queued while reading (an alert, say); a KeyUpdate answer is
            // queued by rustls itself until the next write.
            let sent = this.send_now(cx);
            match step? {
                // A failed send shows again at the next write; what was read is delivered.
                Step::Done(_) | Step::End => return Poll::Ready(Ok(())),
                Step::NeedInput => {
                    sent?;
                    if ready!(this.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the caller closed the connection without close_notify",
                        )));
                    }
                }
            }
        }
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.closing {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the TLS connection is shutting down",
            )));
        }
        if this.queued() >= SEND_AT {
            ready!(this.poll_send(cx))?;
        }
        let plain = &buf[..buf.len().min(WRITE_CHUNK)];
        let sealed = this.process(&mut Want::Write(plain));
        if sealed.is_err() {
            // The alert of a failure goes out if the socket takes it.
            let _ = this.send_now(cx);
        }
        let Step::Done(n) = sealed? else {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS: nothing could be sealed",
            )));
        };
        if this.queued() >= SEND_AT {
            if let Poll::Ready(Err(error)) = this.poll_send(cx) {
                return Poll::Ready(Err(error));
            }
        }
        Poll::Ready(Ok(n))
    }

    /// Several pieces (an HTTP/2 frame's header and its payload, say) are sealed together,
    /// in one record rather than one each.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        match bufs.iter().find(|b| !b.is_empty()) {
            None => return Poll::Ready(Ok(0)),
            Some(only) if only.len() == total => return self.poll_write(cx, only),
            Some(_) => {}
        }
        let mut joined = Vec::with_capacity(total.min(WRITE_CHUNK));
        for piece in bufs {
            let room = WRITE_CHUNK - joined.len();
            joined.extend_from_slice(&piece[..piece.len().min(room)]);
            if joined.len() == WRITE_CHUNK {
                break;
            }
        }
        self.poll_write(cx, &joined)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        this.outgoing = Vec::new();
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.closing = true;
            // A failed connection sends no close_notify: its alert went instead.
            let _ = this.process(&mut Want::Close);
        }
        ready!(this.poll_send(cx))?;
        this.outgoing = Vec::new();
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

/// Sends `close_notify` and closes the connection's sending side.
#[async_trait]
impl Shutdown for TlsStream {
    async fn shutdown(&mut self) {
        if let Err(e) = AsyncWriteExt::shutdown(self).await {
            tracing::debug!(error = %e, "TLS shutdown failed");
        }
    }
}

impl UniqueID for TlsStream {
    fn id(&self) -> UniqueIDType {
        self.tcp.id()
    }
}

/// ALPN only: no OpenSSL handle and no `SslDigest` (paycred logs neither). pingora takes a
/// stream without an `SslDigest` for cleartext when it decides on h2c, which paycred does not
/// enable.
impl Ssl for TlsStream {
    fn selected_alpn_proto(&self) -> Option<ALPN> {
        // Only the two offered can be chosen.
        match self.conn.alpn_protocol() {
            Some(b"h2") => Some(ALPN::H2),
            Some(b"http/1.1") => Some(ALPN::H1),
            _ => None,
        }
    }
}

impl GetTimingDigest for TlsStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.tcp.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> std::time::Duration {
        self.tcp.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> std::time::Duration {
        self.tcp.get_write_pending_time()
    }
}

impl GetProxyDigest for TlsStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.tcp.get_proxy_digest()
    }
}

impl GetSocketDigest for TlsStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.tcp.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.tcp.set_socket_digest(digest);
    }
}

impl Peek for TlsStream {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    use rustls::{ClientConfig, ClientConnection, StreamOwned};
    use std::io::{Read, Write};
    use tokio::io::AsyncReadExt;

    type Client = StreamOwned<ClientConnection, std::net::TcpStream>;

    /// The listener's configuration (its certificate in `dir`) and a client's that trusts
    /// it and speaks `version`.
    fn configs(
        dir: &std::path::Path,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
        let (cert, key) = super::super::tests::pem_files(dir);
        let config = super::super::server_config(&cert, &key, false).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&cert).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut client =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        (config, Arc::new(client))
    }

    /// What accepting a connection on 127.0.0.1 came to while `client` used it.
    async fn accept_while<T: Send + 'static>(
        config: Arc<ServerConfig>,
        client: impl FnOnce(std::net::TcpStream) -> T + Send + 'static,
    ) -> (io::Result<TlsStream>, T) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::task::spawn_blocking(move || {
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            client(tcp)
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let tcp: Stream = Box::new(pingora::protocols::l4::stream::Stream::from(tcp));
        let accept = TlsStream::accept(config, tcp, std::time::Duration::from_secs(1));
        let accepted = tokio::time::timeout(std::time::Duration::from_secs(10), accept)
            .await
            .unwrap();
        (accepted, client.await.unwrap())
    }

    /// A TLS stream on 127.0.0.1 and a blocking rustls client of it at `version`.
    async fn pair(version: &'static rustls::SupportedProtocolVersion) -> (TlsStream, Client) {
        let dir = tempfile::tempdir().unwrap();
        let (config, client) = configs(dir.path(), version);
        let (tls, client) = accept_while(config, move |tcp| {
            let conn = ClientConnection::new(client, "localhost".try_into().unwrap()).unwrap();
            let mut client = StreamOwned::new(conn, tcp);
            while client.conn.is_handshaking() {
                client.conn.complete_io(&mut client.sock).unwrap();
            }
            client
        })
        .await;
        (tls.unwrap(), client)
    }

    /// The first record a client sends: its ClientHello.
    fn client_hello(client: Arc<ClientConfig>) -> Vec<u8> {
        let mut conn = ClientConnection::new(client, "localhost".try_into().unwrap()).unwrap();
        let mut hello = Vec::new();
        conn.write_tls(&mut hello).unwrap();
        hello
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_hello_with_a_stray_byte_after_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (config, client) = configs(dir.path(), &rustls::version::TLS13);
        let mut hello = client_hello(client);
        // One byte of a next handshake message in the same record: the handshake keys
        // would change with it pending.
        let len = u16::from_be_bytes([hello[3], hello[4]]) + 1;
        hello[3..5].copy_from_slice(&len.to_be_bytes());
        hello.push(0x01);
        let (accepted, answer) = accept_while(config, move |mut tcp| {
            tcp.write_all(&hello).unwrap();
            let mut answer = Vec::new();
            let _ = tcp.read_to_end(&mut answer);
            answer
        })
        .await;
        let error = accepted.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        assert!(!answer.is_empty(), "no alert came");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handshake_message_sent_a_byte_a_record_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let (config, _) = configs(dir.path(), &rustls::version::TLS13);
        let (accepted, ()) = accept_while(config, |mut tcp| {
            // A ClientHello of 60,000 bytes, announced, then sent one byte to a record: six
            // bytes held for each.
            let mut message = vec![0x01, 0x00, 0xea, 0x60];
            message.resize(60_004, 0x00);
            let mut records = Vec::new();
            for byte in message {
                records.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x01, byte]);
            }
            // The server hangs up once it has had enough.
            let _ = tcp.write_all(&records);
        })
        .await;
        let error = accepted.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        assert!(error.to_string().contains("unprocessed bytes"), "{error}");
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Echoes what it reads, 1,000 bytes at most a read, until the caller's close_notify.
    async fn echo(mut tls: TlsStream) -> io::Result<()> {
        let mut buf = [0u8; 1000];
        loop {
            let n = tls.read(&mut buf).await?;
            if n == 0 {
                return AsyncWriteExt::shutdown(&mut tls).await;
            }
            tls.write_all(&buf[..n]).await?;
            tls.flush().await?;
            assert_eq!(tls.outgoing.capacity(), 0);
        }
    }

    async fn bytes_of_every_size_come_back_in_order(
        version: &'static rustls::SupportedProtocolVersion,
    ) {
        let (tls, mut client) = pair(version).await;
        let server = tokio::spawn(echo(tls));
        let client = tokio::task::spawn_blocking(move || {
            for len in [1, 100, 16383, 16384, 16385, 70_000, 1 << 20] {
                let sent = pattern(len);
                // 32 KiB in flight at most: the echo is not read while the client writes.
                for piece in sent.chunks(32 * 1024) {
                    client.write_all(piece).unwrap();
                    client.flush().unwrap();
                    let mut back = vec![0u8; piece.len()];
                    client.read_exact(&mut back).unwrap();
                    assert!(back == piece, "{len} bytes came back changed");
                }
            }
            client.conn.send_close_notify();
            client.flush().unwrap();
            let mut rest = Vec::new();
            // The server's close_notify ends the stream cleanly.
            client.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
        });
        client.await.unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_of_every_size_come_back_in_order_over_tls_1_3() {
        bytes_of_every_size_come_back_in_order(&rustls::version::TLS13).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_of_every_size_come_back_in_order_over_tls_1_2() {
        bytes_of_every_size_come_back_in_order(&rustls::version::TLS12).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_update_is_answered_and_the_data_flows_on() {
        let (tls, mut client) = pair(&rustls::version::TLS13).await;
        let server = tokio::spawn(echo(tls));
        let client = tokio::task::spawn_blocking(move || {
            for round in 0..3u8 {
                let sent = vec![round; 20_000];
                client.write_all(&sent).unwrap();
                client.flush().unwrap();
                let mut back = vec![0u8; sent.len()];
                client.read_exact(&mut back).unwrap();
                assert!(back == sent, "round {round}");
                // The next round under new keys both ways: the client asks the server to
                // update its own too.
                client.conn.refresh_traffic_keys().unwrap();
            }
            client.conn.send_close_notify();
            client.flush().unwrap();
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).unwrap();
        });
        client.await.unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_connection_holds_no_buffer() {
        let (mut tls, mut client) = pair(&rustls::version::TLS13).await;
        let mut sock = client.sock.try_clone().unwrap();
        let client = tokio::task::spawn_blocking(move || {
            client.write_all(b"ping").unwrap();
            client.flush().unwrap();
            let mut back = [0u8; 4];
            client.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"pong");
            client
        });
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await.unwrap();
        tls.write_all(b"pong").await.unwrap();
        tls.flush().await.unwrap();
        let mut client = client.await.unwrap();
        // A read that finds nothing, as the wait for a connection's next request does.
        let idle = tokio::time::timeout(std::time::Duration::from_millis(100), tls.read(&mut buf));
        assert!(idle.await.is_err());
        assert_eq!(tls.incoming.capacity(), 0);
        assert_eq!(tls.plaintext.capacity(), 0);
        assert_eq!(tls.outgoing.capacity(), 0);
        // A partial record is held, and completed by the bytes after it.
        let mut sealed = Vec::new();
        client.conn.writer().write_all(b"again").unwrap();
        client.conn.write_tls(&mut sealed).unwrap();
        sock.write_all(&sealed[..3]).unwrap();
        let partial =
            tokio::time::timeout(std::time::Duration::from_millis(100), tls.read(&mut buf));
        assert!(partial.await.is_err());
        assert_eq!(tls.incoming.len(), 3);
        sock.write_all(&sealed[3..]).unwrap();
        let mut again = [0u8; 5];
        tls.read_exact(&mut again).await.unwrap();
        assert_eq!(&again, b"again");
        assert_eq!(tls.incoming.capacity(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pieces_written_together_are_sealed_in_one_record_and_held_until_a_flush() {
        let (mut tls, mut client) = pair(&rustls::version::TLS13).await;
        let pieces = [io::IoSlice::new(b"head"), io::IoSlice::new(b"body")];
        assert_eq!(tls.write_vectored(&pieces).await.unwrap(), 8);
        // One TLS 1.3 record: its header, the 8 bytes, their content type and the tag.
        assert_eq!(tls.outgoing.len(), 5 + 8 + 1 + 16);
        tls.flush().await.unwrap();
        assert_eq!(tls.outgoing.capacity(), 0);
        let read = tokio::task::spawn_blocking(move || {
            let mut both = [0u8; 8];
            client.read_exact(&mut both).unwrap();
            both
        });
        assert_eq!(&read.await.unwrap(), b"headbody");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_closed_without_close_notify_is_an_error_not_an_end() {
        let (mut tls, mut client) = pair(&rustls::version::TLS13).await;
        client.write_all(b"half a requ").unwrap();
        client.flush().unwrap();
        client.sock.shutdown(std::net::Shutdown::Both).unwrap();
        let mut buf = [0u8; 11];
        tls.read_exact(&mut buf).await.unwrap();
        let end = tls.read(&mut buf).await.unwrap_err();
        assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_forged_record_fails_the_connection_and_its_alert_is_sent() {
        let (mut tls, mut client) = pair(&rustls::version::TLS13).await;
        // An application data record of 32 bytes no key sealed.
        let mut forged = vec![0x17, 0x03, 0x03, 0x00, 0x20];
        forged.extend_from_slice(&[0x5a; 32]);
        client.sock.write_all(&forged).unwrap();
        let mut buf = [0u8; 16];
        let error = tls.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        // Nothing more is read or sealed.
        assert!(tls.read(&mut buf).await.is_err());
        assert!(tls.write(b"late").await.is_err());
        let told = tokio::task::spawn_blocking(move || client.read(&mut [0u8; 16]).unwrap_err());
        let told = told.await.unwrap().to_string();
        assert!(told.contains("BadRecordMac"), "{told}");
    }
}
