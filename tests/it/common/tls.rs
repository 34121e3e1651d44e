//! Clients of a test server's TLS listener, trusting the test CA ([`super::tls_files`]):
//! HTTP/1.1 over a blocking TLS stream, and HTTP/2 (negotiated by ALPN) with the `h2` crate.
//! Every wait is bounded.
#![allow(dead_code)]

use bytes::Bytes;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// The longest any one exchange of these clients waits.
pub const WAIT: Duration = Duration::from_secs(15);

/// A connector that verifies `localhost` against the CA at `ca` and offers `alpn` (wire
/// format: length-prefixed protocol names).
fn connector(ca: &Path, alpn: &[u8]) -> SslConnector {
    let mut builder = SslConnector::builder(SslMethod::tls_client()).unwrap();
    builder.set_ca_file(ca).unwrap();
    builder.set_verify(SslVerifyMode::PEER);
    builder.set_alpn_protos(alpn).unwrap();
    builder.build()
}

/// ALPN: HTTP/2, then HTTP/1.1.
pub const H2_H1: &[u8] = b"\x02h2\x08http/1.1";
/// ALPN: HTTP/1.1 only.
pub const H1: &[u8] = b"\x08http/1.1";

/// Sends the raw HTTP/1.1 `request` (which should ask for `Connection: close`) over TLS to
/// `localhost:port`, offering `alpn`; the protocol the server chose and the whole answer,
/// or `None` when the connection or the handshake failed.
pub fn h1_exchange(port: u16, ca: &Path, alpn: &[u8], request: &[u8]) -> Option<(String, String)> {
    let mut tls = h1_connect(port, ca, alpn, WAIT)?;
    let chosen =
        String::from_utf8_lossy(tls.ssl().selected_alpn_protocol().unwrap_or(b"")).into_owned();
    tls.write_all(request).ok()?;
    let mut answer = Vec::new();
    // The server closes after the answer (`Connection: close`); a read error after some
    // bytes is a TLS close without close_notify.
    let _ = Read::by_ref(&mut tls)
        .take(16 * 1024 * 1024)
        .read_to_end(&mut answer);
    Some((chosen, String::from_utf8_lossy(&answer).into_owned()))
}

/// The status of an HTTP/1.1 answer's first line (0 when there is none).
pub fn h1_status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// An HTTP/2 connection to `localhost:port`, ALPN offering h2 and http/1.1; `None` unless
/// the server chose h2. Its connection task runs on the current runtime.
pub async fn h2_connect(port: u16, ca: &Path) -> Option<h2::client::SendRequest<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    h2_over(tcp, "localhost", ca).await
}

/// HTTP/2 over TLS on `tcp` (a connection, or a proxy's tunnel) to `host`, verified against
/// the CA at `ca`, ALPN offering h2 and http/1.1; `None` unless the server chose h2. Its
/// connection task runs on the current runtime.
pub async fn h2_over(
    tcp: tokio::net::TcpStream,
    host: &str,
    ca: &Path,
) -> Option<h2::client::SendRequest<Bytes>> {
    let ssl = connector(ca, H2_H1).configure().ok()?.into_ssl(host).ok()?;
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).ok()?;
    tokio::time::timeout(WAIT, std::pin::Pin::new(&mut tls).connect())
        .await
        .ok()?
        .ok()?;
    if tls.ssl().selected_alpn_protocol() != Some(b"h2") {
        return None;
    }
    let (sender, connection) = tokio::time::timeout(WAIT, h2::client::handshake(tls))
        .await
        .ok()?
        .ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(sender)
}

/// An HTTP/2 answer: its status, headers and whole body.
#[derive(Debug)]
pub struct H2Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl H2Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends one request on `sender` (`path` is the path and query), its body in `pieces`, each
/// its own DATA frame, with `pause` between them; the answer, or the stream's error (a reset
/// stream, or the connection gone). Bounded by [`WAIT`].
pub async fn h2_request(
    sender: &mut h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    pieces: &[&[u8]],
    pause: Duration,
) -> Result<H2Reply, String> {
    let call = Call {
        method,
        path,
        headers,
        pieces,
        pause,
    };
    bounded(exchange(sender, &call, true)).await
}

/// A `POST` to `path` whose body stops after `part`: the stream is left open, and the answer
/// is what the server gives a caller that stopped sending. Bounded by [`WAIT`].
pub async fn h2_stalled(
    sender: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    part: &[u8],
) -> Result<H2Reply, String> {
    let call = Call {
        method: "POST",
        path,
        headers,
        pieces: &[part],
        pause: Duration::ZERO,
    };
    bounded(exchange(sender, &call, false)).await
}

/// One request of [`exchange`].
struct Call<'a> {
    method: &'a str,
    path: &'a str,
    headers: &'a [(&'a str, &'a str)],
    pieces: &'a [&'a [u8]],
    pause: Duration,
}

/// `exchange`, given at most [`WAIT`].
async fn bounded(
    exchange: impl std::future::Future<Output = Result<H2Reply, String>>,
) -> Result<H2Reply, String> {
    tokio::time::timeout(WAIT, exchange)
        .await
        .map_err(|_| "no answer in time".to_string())?
}

/// Sends `call` on `sender`, ending the stream with its last piece when `end`; its answer.
async fn exchange(
    sender: &mut h2::client::SendRequest<Bytes>,
    call: &Call<'_>,
    end: bool,
) -> Result<H2Reply, String> {
    let Call {
        method,
        path,
        headers,
        pieces,
        pause,
    } = *call;
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(()).map_err(|e| e.to_string())?;
    let ready = sender.clone().ready().await.map_err(|e| e.to_string())?;
    *sender = ready;
    let (answer, mut stream) = sender
        .send_request(request, end && pieces.is_empty())
        .map_err(|e| e.to_string())?;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        stream.reserve_capacity(piece.len());
        stream
            .send_data(Bytes::copy_from_slice(piece), end && i + 1 == pieces.len())
            .map_err(|e| e.to_string())?;
    }
    let answer = answer.await.map_err(|e| e.to_string())?;
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    let mut body_stream = answer.into_body();
    let mut body = Vec::new();
    while let Some(data) = body_stream.data().await {
        let data = data.map_err(|e| e.to_string())?;
        let _ = body_stream.flow_control().release_capacity(data.len());
        body.extend_from_slice(&data);
    }
    Ok(H2Reply {
        status,
        headers,
        body: body.into(),
    })
}

/// A runtime for one test's HTTP/2 client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A blocking TLS connection to `localhost:port` offering `alpn`, its reads and writes
/// bounded by `wait`; `None` when the connection or the handshake failed.
pub fn h1_connect(
    port: u16,
    ca: &Path,
    alpn: &[u8],
    wait: Duration,
) -> Option<openssl::ssl::SslStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).ok()?;
    tcp.set_read_timeout(Some(wait)).ok()?;
    tcp.set_write_timeout(Some(wait)).ok()?;
    connector(ca, alpn).connect("localhost", tcp).ok()
}
