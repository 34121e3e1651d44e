//! The browser's side of an intercepted tunnel: rustls's server connection over the
//! tunnel's TCP stream, with async reads and writes of plaintext ([`BrowserTls`]).
//!
//! rustls's buffered connection, driven by hand: a read decrypts what the socket gave until
//! plaintext is there, a write seals and sends at once. The browser's `close_notify` ends the
//! reads (`Ok(0)`); a socket closed without it is `UnexpectedEof`, so a truncated request is
//! never taken for a whole one. A TLS error sends rustls's alert and fails the call.

use rustls::{ServerConfig, ServerConnection};
use std::io::{self, Read, Write};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes asked of the socket at a time: a full TLS record and its overhead.
const READ_CHUNK: usize = 16 * 1024 + 2048 + 5;

/// A browser's TLS connection to the proxy, for one host.
pub struct BrowserTls {
    tcp: TcpStream,
    conn: ServerConnection,
    chunk: Box<[u8]>,
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
        let mut tls = BrowserTls {
            tcp,
            conn,
            chunk: vec![0u8; READ_CHUNK].into_boxed_slice(),
        };
        tls.take(early).await?;
        while tls.conn.is_handshaking() {
            tls.flush().await?;
            if tls.conn.is_handshaking() {
                tls.fill().await?;
            }
        }
        tls.flush().await?;
        Ok(tls)
    }

    /// The host the browser asked for by SNI, if it sent one.
    pub fn server_name(&self) -> Option<&str> {
        self.conn.server_name()
    }

    /// Sends what rustls has sealed.
    async fn flush(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            let mut out = Vec::new();
            self.conn.write_tls(&mut out)?;
            self.tcp.write_all(&out).await?;
        }
        Ok(())
    }

    /// Hands `bytes` (TLS records from the browser) to rustls.
    async fn take(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            self.conn.read_tls(&mut bytes)?;
            if let Err(e) = self.conn.process_new_packets() {
                // The alert, if the socket takes it.
                let _ = self.flush().await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        Ok(())
    }

    /// Reads TLS bytes from the socket into rustls.
    async fn fill(&mut self) -> io::Result<()> {
        let n = self.tcp.read(&mut self.chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let chunk = std::mem::take(&mut self.chunk);
        let taken = self.take(chunk.get(..n).unwrap_or_default()).await;
        self.chunk = chunk;
        taken
    }

    /// Reads plaintext into `out`; `Ok(0)` at the browser's `close_notify`.
    pub async fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.flush().await?;
                    self.fill().await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Seals `data` and sends it.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(data)?;
        self.flush().await
    }

    /// Sends `close_notify` and closes the socket's sending side.
    pub async fn close(mut self) {
        self.conn.send_close_notify();
        let _ = self.flush().await;
        let _ = self.tcp.shutdown().await;
    }
}
