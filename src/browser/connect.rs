//! The browser proxy's front door: the request head a browser opens a proxy connection with,
//! read within bounds ([`read_head`]) and parsed ([`parse`]), and the small HTTP/1.1 answers
//! the proxy gives before any tunnel exists ([`answer`], [`ESTABLISHED`]).
//!
//! | input | answer |
//! |---|---|
//! | a head over [`MAX_HEAD`] bytes, or over [`MAX_HEADERS`] header lines | 431 `requestHeaderFieldsTooLarge` |
//! | no whole head by the caller's deadline | 408 `requestTimeout` |
//! | the connection closed, or bytes that are not an HTTP/1.x request head | 400 `invalidRequest` |
//! | any method but `CONNECT` (a plain-HTTP proxy request such as `GET http://…`, or a request to the proxy itself) | 405 `methodNotAllowed`, `Allow: CONNECT`: plain HTTP is never proxied |
//! | `CONNECT` without a port, with a port of 0 or not a number, or with a host that is not a host name or a canonical IP address | 400 `invalidRequest` |
//! | no `Proxy-Authorization`, more than one, or one that is not `Basic` base64 of `user:password` | 407 `proxyAuthenticationRequired`, `Proxy-Authenticate: Basic realm="paycred"` |
//!
//! Each answer is `Connection: close` with paycred's error envelope as its JSON body; the
//! answers never repeat what the caller sent.

use crate::error::{ApiError, ErrorKind};
use crate::secret::ProxyPassword;
use base64::Engine;
use std::net::{Ipv4Addr, Ipv6Addr};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use zeroize::Zeroizing;

/// Largest request head read (request line and headers, with the blank line).
pub const MAX_HEAD: usize = 16 * 1024;

/// Most header lines in a head.
pub const MAX_HEADERS: usize = 64;

/// The realm of `Proxy-Authenticate`.
pub const REALM: &str = "paycred";

/// The answer to a `CONNECT` that opens a tunnel.
pub const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// A request head as read: the head and any bytes the caller sent after it (a TLS
/// ClientHello sent without waiting for the answer). Wiped when dropped: the head holds the
/// proxy password.
pub struct Head {
    bytes: Zeroizing<Vec<u8>>,
    len: usize,
}

impl Head {
    /// The head, up to and with its blank line.
    pub fn head(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    /// The bytes read after the head.
    pub fn rest(&self) -> &[u8] {
        self.bytes.get(self.len..).unwrap_or_default()
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Head")
            .field("len", &self.len)
            .field("rest", &self.rest().len())
            .finish()
    }
}

/// Reads one request head from `conn`: at most [`MAX_HEAD`] bytes, by `deadline`.
pub async fn read_head<R: AsyncRead + Unpin>(
    conn: &mut R,
    deadline: Instant,
) -> Result<Head, ApiError> {
    let mut bytes = Zeroizing::new(Vec::with_capacity(1024));
    let mut chunk = Zeroizing::new([0u8; 4096]);
    loop {
        let room = (MAX_HEAD - bytes.len()).min(chunk.len());
        if room == 0 {
            return Err(too_large());
        }
        let read = tokio::time::timeout_at(deadline, conn.read(&mut chunk[..room])).await;
        let n = match read {
            Err(_) => {
                return Err(ApiError::new(
                    ErrorKind::RequestTimeout,
                    "The proxy request head did not arrive in time.",
                ))
            }
            Ok(Err(_)) | Ok(Ok(0)) => {
                return Err(ApiError::invalid_request(
                    "The connection ended before the proxy request head did.",
                ))
            }
            Ok(Ok(n)) => n,
        };
        // The blank line may straddle two reads.
        let from = bytes.len().saturating_sub(3);
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(at) = memchr::memmem::find(&bytes[from..], b"\r\n\r\n") {
            let len = from + at + 4;
            return Ok(Head { bytes, len });
        }
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorKind::RequestHeaderFieldsTooLarge,
        format!("A proxy request head is at most {MAX_HEAD} bytes and {MAX_HEADERS} header lines."),
    )
}

/// A `CONNECT` of a browser: where to, and the session's credentials.
#[derive(Debug)]
pub struct Connect {
    /// The host: a lower-case name without a trailing dot, or a canonical IP address (IPv6
    /// without brackets).
    pub host: String,
    pub port: u16,
    /// The session's proxy username.
    pub username: String,
    /// The session's proxy password.
    pub password: ProxyPassword,
}

/// Parses a request head read by [`read_head`]: a `CONNECT` with its credentials, or the
/// refusal to answer (module doc).
pub fn parse(head: &[u8]) -> Result<Connect, ApiError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
        Ok(httparse::Status::Partial) | Err(_) => {
            return Err(ApiError::invalid_request(
                "The proxy request head is not an HTTP/1.1 request.",
            ))
        }
    }
    if request.method != Some("CONNECT") {
        let mut refused = ApiError::new(
            ErrorKind::MethodNotAllowed,
            "This proxy only opens tunnels for HTTPS (CONNECT host:443): plain-HTTP requests \
             are never proxied. Use an https:// URL.",
        );
        refused.headers.push(("Allow", "CONNECT".to_string()));
        return Err(refused);
    }
    let (host, port) = authority(request.path.unwrap_or_default())?;
    let (username, password) = credentials(request.headers)?;
    Ok(Connect {
        host,
        port,
        username,
        password,
    })
}

/// The host and port of a `CONNECT`'s authority (`host:port`, `[v6]:port`).
fn authority(target: &str) -> Result<(String, u16), ApiError> {
    let bad = |why: &str| {
        ApiError::invalid_request(format!(
            "CONNECT needs host:port with {why}, e.g. CONNECT shop.example:443."
        ))
    };
    let (host, port) = match target.strip_prefix('[') {
        Some(v6) => {
            let (host, port) = v6.split_once("]:").ok_or_else(|| bad("a port"))?;
            let ip: Ipv6Addr = host
                .parse()
                .map_err(|_| bad("an IPv6 address in brackets"))?;
            (ip.to_string(), port)
        }
        None => {
            let (host, port) = target.rsplit_once(':').ok_or_else(|| bad("a port"))?;
            (host.trim_end_matches('.').to_ascii_lowercase(), port)
        }
    };
    let port = Some(port)
        .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p != 0)
        .ok_or_else(|| bad("a port from 1 to 65535"))?;
    if host.contains(':') {
        // Bracketed above; an IPv6 address elsewhere is not an authority.
        if target.starts_with('[') {
            return Ok((host, port));
        }
        return Err(bad("an IPv6 address in brackets"));
    }
    let labels_ok = crate::config::browser::is_host_name(&host);
    // A name whose last label is numeric reads as an address: only the canonical dotted quad.
    let numeric = host
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()) || l.starts_with("0x"));
    if !labels_ok || (numeric && host.parse::<Ipv4Addr>().is_err()) {
        return Err(bad("a host name or a canonical IP address"));
    }
    Ok((host, port))
}

/// The username and password of the one `Proxy-Authorization: Basic` header.
fn credentials(headers: &[httparse::Header<'_>]) -> Result<(String, ProxyPassword), ApiError> {
    let mut given = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("proxy-authorization"));
    let (Some(header), None) = (given.next(), given.next()) else {
        return Err(unauthenticated());
    };
    let value = std::str::from_utf8(header.value).map_err(|_| unauthenticated())?;
    let (scheme, encoded) = value.trim().split_once(' ').ok_or_else(unauthenticated)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(unauthenticated());
    }
    let decoded = Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| unauthenticated())?,
    );
    let text = std::str::from_utf8(&decoded).map_err(|_| unauthenticated())?;
    let (username, password) = text.split_once(':').ok_or_else(unauthenticated)?;
    if username.is_empty() || password.is_empty() {
        return Err(unauthenticated());
    }
    Ok((username.to_string(), ProxyPassword::new(password)))
}

/// 407 with the challenge.
pub fn unauthenticated() -> ApiError {
    let mut e = ApiError::new(
        ErrorKind::ProxyAuthenticationRequired,
        "This proxy needs Proxy-Authorization: Basic with a browser session's username and \
         password.",
    );
    e.headers
        .push(("Proxy-Authenticate", format!("Basic realm=\"{REALM}\"")));
    e
}

/// The HTTP/1.1 answer of an error: its status, its extra headers, `Connection: close`,
/// and the error envelope as JSON.
pub fn answer(error: &ApiError) -> Vec<u8> {
    let body = serde_json::to_vec(&error.to_envelope()).unwrap_or_default();
    let reason = http::StatusCode::from_u16(error.status())
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        error.status(),
        body.len()
    );
    for (name, value) in &error.headers {
        if !value.contains(['\r', '\n']) {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    fn basic(user_password: &str) -> String {
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    fn connect(target: &str, headers: &str) -> Vec<u8> {
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{headers}\r\n").into_bytes()
    }

    /// Status and envelope type of a refused head.
    fn refused(head: &[u8]) -> (u16, String) {
        let e = parse(head).unwrap_err();
        (
            e.status(),
            e.to_envelope()["error"]["type"]
                .as_str()
                .unwrap()
                .to_string(),
        )
    }

    #[test]
    fn a_connect_with_credentials_is_parsed() {
        let auth = basic("bs_123:s3cr3t:with:colons");
        let cases = [
            ("shop.test:443", "shop.test", 443),
            ("Shop.Test.:8443", "shop.test", 8443),
            ("127.0.0.1:443", "127.0.0.1", 443),
            ("[::1]:443", "::1", 443),
            ("[2001:DB8::1]:1", "2001:db8::1", 1),
            ("api_v2.pay.test:65535", "api_v2.pay.test", 65535),
        ];
        for (target, host, port) in cases {
            let c = parse(&connect(target, &auth)).unwrap();
            assert_eq!((c.host.as_str(), c.port), (host, port), "{target}");
            assert_eq!(c.username, "bs_123");
            assert_eq!(c.password.expose(), "s3cr3t:with:colons");
        }
        let lower = "proxy-authorization: basic YTpi\r\n";
        let c = parse(&connect("shop.test:443", lower)).unwrap();
        assert_eq!((c.username.as_str(), c.password.expose()), ("a", "b"));
        assert!(!format!("{c:?}").contains("YTpi"));
    }

    #[test]
    fn each_bad_head_has_its_answer() {
        let auth = basic("bs_1:pw");
        let many: String = (0..MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let cases: Vec<(Vec<u8>, u16, &str)> = vec![
            (connect("shop.test", &auth), 400, "invalidRequest"),
            (connect("shop.test:", &auth), 400, "invalidRequest"),
            (connect("shop.test:0", &auth), 400, "invalidRequest"),
            (connect("shop.test:65536", &auth), 400, "invalidRequest"),
            (connect("shop.test:+443", &auth), 400, "invalidRequest"),
            (connect("shop..test:443", &auth), 400, "invalidRequest"),
            (connect("sh op.test:443", &auth), 400, "invalidRequest"),
            (connect("user@shop.test:443", &auth), 400, "invalidRequest"),
            (connect("0x7f.1:443", &auth), 400, "invalidRequest"),
            (connect("2130706433:443", &auth), 400, "invalidRequest"),
            (connect("127.1:443", &auth), 400, "invalidRequest"),
            (connect("::1:443", &auth), 400, "invalidRequest"),
            (connect("[::1]", &auth), 400, "invalidRequest"),
            (connect("[nope]:443", &auth), 400, "invalidRequest"),
            (connect(":443", &auth), 400, "invalidRequest"),
            (
                connect("shop.test:443", ""),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", "Proxy-Authorization: Bearer x\r\n"),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", "Proxy-Authorization: Basic !!!\r\n"),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", "Proxy-Authorization: Basic\r\n"),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", &basic("no-colon")),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", &basic(":pw")),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", &basic("user:")),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", &format!("{auth}{auth}")),
                407,
                "proxyAuthenticationRequired",
            ),
            (
                connect("shop.test:443", &format!("{auth}{many}")),
                431,
                "requestHeaderFieldsTooLarge",
            ),
            (
                b"GET http://shop.test/ HTTP/1.1\r\nHost: shop.test\r\n\r\n".to_vec(),
                405,
                "methodNotAllowed",
            ),
            (
                format!("POST http://shop.test/pay HTTP/1.1\r\n{auth}\r\n").into_bytes(),
                405,
                "methodNotAllowed",
            ),
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), 405, "methodNotAllowed"),
            (
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
                400,
                "invalidRequest",
            ),
            (
                b"CONNECT shop.test:443 HTTP/2.0\r\n\r\n".to_vec(),
                400,
                "invalidRequest",
            ),
        ];
        for (head, status, kind) in cases {
            assert_eq!(
                refused(&head),
                (status, kind.to_string()),
                "{}",
                String::from_utf8_lossy(&head)
            );
        }
    }

    #[test]
    fn answers_are_small_closing_http_responses() {
        let text = |e: &ApiError| String::from_utf8(answer(e)).unwrap();
        let a = text(&parse(&connect("shop.test:443", "")).unwrap_err());
        assert!(
            a.starts_with("HTTP/1.1 407 Proxy Authentication Required\r\n"),
            "{a}"
        );
        assert!(
            a.contains("\r\nProxy-Authenticate: Basic realm=\"paycred\"\r\n"),
            "{a}"
        );
        assert!(a.contains("\r\nConnection: close\r\n"), "{a}");
        let (head, body) = a.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{a}"
        );
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["status"], 407);
        let a = text(&parse(b"GET http://shop.test/ HTTP/1.1\r\n\r\n").unwrap_err());
        assert!(
            a.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")
                && a.contains("\r\nAllow: CONNECT\r\n"),
            "{a}"
        );
        assert!(a.contains("plain-HTTP"), "{a}");
        let a = text(&too_large());
        assert!(
            a.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{a}"
        );
        // What the caller sent is not repeated.
        let a = text(&parse(&connect("secret.test", &basic("bs_1:hunter2"))).unwrap_err());
        assert!(!a.contains("secret.test") && !a.contains("hunter2"), "{a}");
        let mut injected = ApiError::invalid_request("x");
        injected.headers.push(("X", "a\r\nSet-Cookie: b".into()));
        assert!(!text(&injected).contains("Set-Cookie"));
        assert!(ESTABLISHED.starts_with(b"HTTP/1.1 200 "));
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn a_head_is_read_to_its_blank_line_and_what_follows_is_kept() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let head = connect("shop.test:443", &basic("a:b"));
        // In pieces, the blank line split between two writes, a ClientHello after it.
        let (first, second) = head.split_at(head.len() - 2);
        client.write_all(first).await.unwrap();
        let reading = tokio::spawn(async move { read_head(&mut server, soon()).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        client.write_all(second).await.unwrap();
        client.write_all(b"\x16\x03\x01hello").await.unwrap();
        let read = reading.await.unwrap().unwrap();
        assert_eq!(read.head(), &head[..]);
        assert!(read.rest().is_empty() || read.rest() == b"\x16\x03\x01hello");
        assert_eq!(parse(read.head()).unwrap().host, "shop.test");
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client
            .write_all(&[head.as_slice(), b"\x16\x03\x01"].concat())
            .await
            .unwrap();
        let read = read_head(&mut server, soon()).await.unwrap();
        assert_eq!(read.rest(), b"\x16\x03\x01");
    }

    #[tokio::test]
    async fn a_huge_slow_or_cut_head_is_refused() {
        // Huge: 431 once MAX_HEAD bytes came without a blank line.
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let huge = format!(
            "CONNECT shop.test:443 HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        client.write_all(huge.as_bytes()).await.unwrap();
        assert_eq!(
            read_head(&mut server, soon()).await.unwrap_err().status(),
            431
        );
        // Just under the bound is read.
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let fits = format!(
            "CONNECT shop.test:443 HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD - 45)
        );
        assert_eq!(fits.len(), MAX_HEAD - 6);
        client.write_all(fits.as_bytes()).await.unwrap();
        assert!(read_head(&mut server, soon()).await.is_ok());
        // Slow: 408 at the deadline.
        let (mut client, mut server) = tokio::io::duplex(1024);
        client
            .write_all(b"CONNECT shop.test:443 HTTP/1.1\r\n")
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        assert_eq!(
            read_head(&mut server, deadline).await.unwrap_err().status(),
            408
        );
        // Cut: the connection ends before the head.
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(b"CONNECT shop.test:443 HT").await.unwrap();
        drop(client);
        assert_eq!(
            read_head(&mut server, soon()).await.unwrap_err().status(),
            400
        );
    }
}
