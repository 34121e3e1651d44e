//! The browser's side of an intercepted tunnel: rustls's server connection over the
//! tunnel's TCP stream, as a tokio `AsyncRead` + `AsyncWrite` of plaintext ([`BrowserTls`]),
//! which HTTP/1.1 and h2 are served over.
//!
//! rustls's buffered connection, driven by hand and poll-based: a read decrypts what the
//! socket gave until plaintext is there, a write seals into rustls and sends what it can (a
//! flush sends the rest). The browser's `close_notify` ends the reads (`Ok(0)`); a socket
//! closed without it is `UnexpectedEof`, so a truncated request is never taken for a whole
//! one. A TLS error sends rustls's alert (if the socket takes it at once) and fails the call.
//! Shutting down sends `close_notify`.

use rustls::{ServerConfig, ServerConnection};
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Bytes asked of the socket at a time: a full TLS record and its overhead.
const READ_CHUNK: usize = 16 * 1024 + 2048 + 5;

/// A browser's TLS connection to the proxy, for one host.
pub struct BrowserTls {
    tcp: TcpStream,
    conn: ServerConnection,
    /// Bytes read from the socket; rustls has taken those before `at`.
    chunk: Box<[u8]>,
    at: usize,
    len: usize,
    /// TLS records rustls sealed, not all taken by the socket yet (from `sent` on).
    out: Vec<u8>,
    sent: usize,
    closing: bool,
}

impl BrowserTls {
    /// The handshake, with `early` (bytes the browser sent after its `CONNECT` without
    /// waiting for the answer: its ClientHello) read first.
    pub async fn accept(
        tcp: TcpStream,
        config: Arc<ServerConfig>,
        early: &[u8],
    ) -> io::Result<BrowserTls> {
        let conn = ServerConnection::new(config).map_err(io::Error::other)?;
        let mut chunk = vec![0u8; READ_CHUNK.max(early.len())].into_boxed_slice();
        if let Some(start) = chunk.get_mut(..early.len()) {
            start.copy_from_slice(early);
        }
        let mut tls = BrowserTls {
            tcp,
            conn,
            chunk,
            at: 0,
            len: early.len(),
            out: Vec::new(),
            sent: 0,
            closing: false,
        };
        while tls.conn.is_handshaking() {
            poll_fn(|cx| tls.poll_send(cx)).await?;
            if tls.conn.is_handshaking() {
                poll_fn(|cx| tls.poll_fill(cx)).await?;
            }
        }
        poll_fn(|cx| tls.poll_send(cx)).await?;
        Ok(tls)
    }

    /// The host the browser asked for by SNI, if it sent one.
    pub fn server_name(&self) -> Option<&str> {
        self.conn.server_name()
    }

    /// The protocol the browser chose by ALPN, if it chose one.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Sends what rustls has sealed; ready once the socket took all of it.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.sent == self.out.len() {
                self.out.clear();
                self.sent = 0;
                if !self.conn.wants_write() {
                    return Poll::Ready(Ok(()));
                }
                self.conn.write_tls(&mut self.out)?;
            }
            let rest = self.out.get(self.sent..).unwrap_or_default();
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
    }

    /// Hands rustls the next of the socket's bytes: those read before and not taken yet,
    /// else a new read. One step at a time, so that rustls's plaintext never overflows.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.at == self.len {
            let mut buf = ReadBuf::new(&mut self.chunk);
            ready!(Pin::new(&mut self.tcp).poll_read(cx, &mut buf))?;
            let n = buf.filled().len();
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            (self.at, self.len) = (0, n);
        }
        let taken = self.absorb();
        if taken.is_err() {
            // The alert, if the socket takes it now.
            let _ = self.poll_send(cx);
        }
        Poll::Ready(taken)
    }

    /// Hands rustls what it takes of the bytes read and decrypts it.
    fn absorb(&mut self) -> io::Result<()> {
        let mut rest = self.chunk.get(self.at..self.len).unwrap_or_default();
        let before = rest.len();
        self.conn.read_tls(&mut rest)?;
        self.at += before - rest.len();
        match self.conn.process_new_packets() {
            Ok(_) => Ok(()),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Reads plaintext into `out`; `Ok(0)` at the browser's `close_notify`.
    pub async fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        AsyncReadExt::read(self, out).await
    }

    /// Seals `data` and sends it all.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        AsyncWriteExt::write_all(self, data).await?;
        AsyncWriteExt::flush(self).await
    }

    /// Sends `close_notify` and closes the socket's sending side.
    pub async fn close(mut self) {
        let _ = AsyncWriteExt::shutdown(&mut self).await;
    }
}

impl AsyncRead for BrowserTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.conn.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // What rustls has to say first (a key update's answer), if it goes now.
                    if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                        return Poll::Ready(Err(e));
                    }
                    ready!(this.poll_fill(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for BrowserTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Room in rustls first: what it holds goes out as far as the socket takes it.
        let waiting = this.poll_send(cx)?.is_pending();
        let n = this.conn.writer().write(data)?;
        if n == 0 && !data.is_empty() {
            if waiting {
                return Poll::Pending;
            }
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        if !waiting {
            // Sealed now; what the socket does not take yet goes at the next write or flush.
            let _ = this.poll_send(cx)?;
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn.writer().flush()?;
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.closing = true;
            this.conn.send_close_notify();
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::browser::ca::{Ca, Interceptor};
    use crate::clock::ManualClock;
    use rustls::pki_types::{CertificateDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

    /// A browser's TLS to `shop.test` on 127.0.0.1, trusting the interceptor's CA, run by
    /// `browser` on its own thread; the proxy's side of it.
    async fn connected(
        browser: impl FnOnce(StreamOwned<ClientConnection, std::net::TcpStream>) + Send + 'static,
    ) -> (BrowserTls, std::thread::JoinHandle<()>) {
        let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
        let interceptor = Interceptor::new(Ca::generate().unwrap(), clock).unwrap();
        let pem = interceptor.ca().cert_pem().unwrap();
        let der = openssl::x509::X509::from_pem(pem.as_bytes())
            .unwrap()
            .to_der()
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(der)).unwrap();
        let client =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let name = ServerName::try_from("shop.test").unwrap();
            let conn = ClientConnection::new(Arc::new(client), name).unwrap();
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            browser(StreamOwned::new(conn, tcp));
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let config = interceptor.server_config("shop.test").unwrap();
        let tls = BrowserTls::accept(tcp, config, &[]).await.unwrap();
        (tls, thread)
    }

    /// Closes the browser's sending side (no `close_notify` unless it sent one) and reads
    /// until the proxy closes, so that nothing unread resets the connection.
    fn drain(mut browser: StreamOwned<ClientConnection, std::net::TcpStream>) {
        browser.sock.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = std::io::copy(&mut browser.sock, &mut std::io::sink());
    }

    #[tokio::test]
    async fn reads_take_every_record_to_close_notify_and_a_cut_socket_is_a_truncation() {
        // Many records in one socket read: rustls takes them a step at a time.
        let big: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let sent = big.clone();
        let (mut tls, thread) = connected(move |mut browser| {
            browser.write_all(&sent).unwrap();
            browser.conn.send_close_notify();
            browser.flush().unwrap();
            drain(browser);
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut got = Vec::new();
        tls.read_to_end(&mut got).await.unwrap();
        assert!(got == big);
        tls.close().await;
        thread.join().unwrap();

        let (mut tls, thread) = connected(|mut browser| {
            browser.write_all(b"hel").unwrap();
            browser.flush().unwrap();
            drain(browser);
        })
        .await;
        let mut got = Vec::new();
        let read = tls.read_to_end(&mut got).await;
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(got, b"hel");
        tls.close().await;
        thread.join().unwrap();
    }

    #[tokio::test]
    async fn writes_of_any_size_arrive_whole_and_shutdown_sends_close_notify() {
        let (seen, sent) = std::sync::mpsc::channel();
        let (mut tls, thread) = connected(move |mut browser| {
            browser.write_all(b"go").unwrap();
            browser.flush().unwrap();
            let mut got = Vec::new();
            // Ok at the end: the proxy's close_notify came.
            browser.read_to_end(&mut got).unwrap();
            seen.send(got).unwrap();
        })
        .await;
        let mut go = [0u8; 2];
        tls.read_exact(&mut go).await.unwrap();
        let big: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        tls.write_all(&big).await.unwrap();
        AsyncWriteExt::write_all(&mut tls, b"tail").await.unwrap();
        tls.close().await;
        thread.join().unwrap();
        let got = sent.recv().unwrap();
        assert_eq!(got.len(), big.len() + 4);
        assert!(got.starts_with(&big) && got.ends_with(b"tail"));
    }
}
