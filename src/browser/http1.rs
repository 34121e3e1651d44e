//! HTTP/1.1 inside an intercepted tunnel: the tunnel's requests one after another
//! ([`serve`]), each read whole within bounds ([`read_request`]) and its answer written back
//! as the exchange gives it ([`Http1Sink`]: the host's length, else chunked).
//!
//! | input | answer |
//! |---|---|
//! | a head over [`MAX_HEAD`] bytes or [`MAX_HEADERS`] lines | 431 `requestHeaderFieldsTooLarge` |
//! | a head or body not read by its deadline | 408 `requestTimeout` |
//! | bytes that are not an HTTP/1.x request, an absolute-form target, a bad `Content-Length` | 400 `invalidRequest` |
//! | `Transfer-Encoding` on a request (a streamed upload) | 411 as 400 `invalidRequest`: a checkout form's body has a length |
//! | a body over [`crate::browser::swap::MAX_BODY`] | 413 `payloadTooLarge` |
//!
//! The body is read whole (it is swapped whole before anything is sent). `Expect:
//! 100-continue` is answered before the body is read.

use super::message::{Answer, Exchange, Head, Request, Sink};
use super::tls::BrowserTls;
use crate::error::{ApiError, ErrorKind};
use async_trait::async_trait;
use bytes::Bytes;
use std::time::Duration;
use tokio::time::Instant;
use zeroize::Zeroizing;

/// Largest request head read in a tunnel.
pub const MAX_HEAD: usize = 64 * 1024;

/// Most header lines of a request in a tunnel.
pub const MAX_HEADERS: usize = 128;

/// The tunnel's requests in turn, each answered by `exchange`, until the browser closes it,
/// asks to, sends nothing for `idle`, or a request fails (answered with its error); then
/// `close_notify`.
pub async fn serve(
    mut tls: BrowserTls,
    exchange: &dyn Exchange,
    idle: Duration,
    head_within: Duration,
    body_within: Duration,
) {
    let mut pending = Zeroizing::new(Vec::new());
    loop {
        let idle_by = Instant::now() + idle;
        let read = read_request(&mut tls, &mut pending, idle_by, head_within, body_within).await;
        let request = match read {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                let _ = tls.write_all(&super::connect::answer(&e)).await;
                break;
            }
        };
        let close = request.close;
        let mut sink = Http1Sink {
            tls: &mut tls,
            chunked: false,
        };
        match exchange.exchange(request, &mut sink).await {
            Ok(()) if !close => {}
            Ok(()) => break,
            Err(Answer::Before(e)) => {
                let _ = tls.write_all(&super::connect::answer(&e)).await;
                break;
            }
            Err(Answer::Cut) => break,
        }
    }
    tls.close().await;
}

/// An answer in HTTP/1.1: the host's `Content-Length` kept, else the body chunked.
pub struct Http1Sink<'a> {
    tls: &'a mut BrowserTls,
    chunked: bool,
}

#[async_trait]
impl Sink for Http1Sink<'_> {
    async fn head(&mut self, head: Head) -> std::io::Result<()> {
        let mut headers = head.headers;
        self.chunked = head.body && !head.length;
        if self.chunked {
            headers.push(("transfer-encoding".into(), b"chunked".to_vec()));
        }
        self.tls
            .write_all(&response_head(head.status, &headers))
            .await
    }

    async fn data(&mut self, data: Bytes) -> std::io::Result<()> {
        if !self.chunked {
            return self.tls.write_all(&data).await;
        }
        let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
        framed.extend_from_slice(&data);
        framed.extend_from_slice(b"\r\n");
        self.tls.write_all(&framed).await
    }

    async fn end(&mut self) -> std::io::Result<()> {
        if self.chunked {
            self.tls.write_all(b"0\r\n\r\n").await?;
        }
        Ok(())
    }
}

pub(super) fn timeout() -> ApiError {
    ApiError::new(
        ErrorKind::RequestTimeout,
        "The request was not sent in time.",
    )
}

pub(super) fn too_large_head() -> ApiError {
    ApiError::new(
        ErrorKind::RequestHeaderFieldsTooLarge,
        format!("A request head is at most {MAX_HEAD} bytes and {MAX_HEADERS} header lines."),
    )
}

/// Reads more plaintext into `pending`, by `deadline`; `false` at the browser's close.
async fn more(
    tls: &mut BrowserTls,
    pending: &mut Zeroizing<Vec<u8>>,
    deadline: Instant,
) -> Result<bool, ApiError> {
    let mut chunk = Zeroizing::new([0u8; 8192]);
    match tokio::time::timeout_at(deadline, tls.read(chunk.as_mut())).await {
        Err(_) => Err(timeout()),
        Ok(Err(_)) | Ok(Ok(0)) => Ok(false),
        Ok(Ok(n)) => {
            pending.extend_from_slice(chunk.get(..n).unwrap_or_default());
            Ok(true)
        }
    }
}

/// Reads the next request of the tunnel: `Ok(None)` when the browser closed it, or sent
/// nothing more by `idle` (a kept-alive tunnel let go). `pending` holds what was read past
/// the request (the next one's start). The head must arrive within `head_within` once it started,
/// the body within `body_within` of the head.
pub async fn read_request(
    tls: &mut BrowserTls,
    pending: &mut Zeroizing<Vec<u8>>,
    idle: Instant,
    head_within: std::time::Duration,
    body_within: std::time::Duration,
) -> Result<Option<Request>, ApiError> {
    if pending.is_empty() {
        match more(tls, pending, idle).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return Ok(None),
        }
    }
    let head_by = Instant::now() + head_within;
    let head_len = loop {
        if let Some(at) = memchr::memmem::find(pending, b"\r\n\r\n") {
            break at + 4;
        }
        if pending.len() > MAX_HEAD {
            return Err(too_large_head());
        }
        if !more(tls, pending, head_by).await? {
            return Ok(None);
        }
    };
    if head_len > MAX_HEAD {
        return Err(too_large_head());
    }
    let mut request = parse_head(pending.get(..head_len).unwrap_or_default())?;
    let length = content_length(&request)?;
    if length > super::swap::MAX_BODY {
        return Err(super::swap::SwapError::TooLarge.into());
    }
    let expects = request
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    request
        .headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("expect"));
    pending.drain(..head_len);
    if expects && pending.len() < length {
        tls.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(|_| timeout())?;
    }
    let body_by = Instant::now() + body_within;
    while pending.len() < length {
        if !more(tls, pending, body_by).await? {
            return Ok(None);
        }
    }
    request.body = Zeroizing::new(pending.drain(..length).collect());
    Ok(Some(request))
}

fn parse_head(head: &[u8]) -> Result<Request, ApiError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(too_large_head()),
        _ => {
            return Err(ApiError::invalid_request(
                "The request is not an HTTP/1.1 request.",
            ))
        }
    }
    let target = parsed.path.unwrap_or_default();
    if !target.starts_with('/') {
        return Err(ApiError::invalid_request(
            "A request in the tunnel names its path only (origin form).",
        ));
    }
    let close_asked = parsed.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("connection")
            && h.value
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    });
    Ok(Request {
        method: parsed.method.unwrap_or_default().to_string(),
        target: target.to_string(),
        headers: parsed
            .headers
            .iter()
            .map(|h| (h.name.to_string(), Zeroizing::new(h.value.to_vec())))
            .collect(),
        body: Zeroizing::new(Vec::new()),
        close: close_asked || parsed.version == Some(0),
    })
}

/// The body's length: its one `Content-Length` (0 without one); a request with
/// `Transfer-Encoding` is refused.
fn content_length(request: &Request) -> Result<usize, ApiError> {
    if request.header("transfer-encoding").is_some() {
        return Err(ApiError::invalid_request(
            "A request through the browser proxy needs a Content-Length (411): a streamed \
             body cannot be checked for stand-ins.",
        ));
    }
    let mut lengths = request
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"));
    match (lengths.next(), lengths.next()) {
        (None, _) => Ok(0),
        (Some((_, v)), None) => std::str::from_utf8(v)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid_request("The Content-Length is not a number.")),
        _ => Err(ApiError::invalid_request(
            "The request has more than one Content-Length.",
        )),
    }
}

/// The head of an answer to the browser: status line and `headers`, ending the head.
pub fn response_head(status: u16, headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}
