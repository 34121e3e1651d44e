//! HTTP plumbing between pingora's session and the plain handlers: a bounded body reader,
//! the content-type check, and the writer of JSON responses and error envelopes; and the
//! listening socket of paycred's own listeners ([`listening_socket`]: the TLS listener and
//! the browser proxy), with pingora's hand-over on upgrade.

use crate::error::{ApiError, ErrorKind};
use bytes::{Bytes, BytesMut};
use http::header;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde::Serialize;
use std::time::Duration;

/// A response produced by a handler, written by [`write_response`].
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    /// JSON body; `None` for 204.
    pub body: Option<Bytes>,
    /// The purchase intent this answer shows. An `Idempotency-Key` replay shows that intent
    /// again as it is then, so the answer's credential is never stored for replays.
    pub intent: Option<String>,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, value: &impl Serialize) -> Result<Response, ApiError> {
        let body = serde_json::to_vec(value).map_err(|e| {
            tracing::error!(error = %e, "serialising a response");
            ApiError::internal()
        })?;
        Ok(Response {
            status,
            headers: Vec::new(),
            body: Some(Bytes::from(body)),
            intent: None,
        })
    }

    /// A response without body.
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: None,
            intent: None,
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &'static str, value: String) -> Response {
        self.headers.push((name, value));
        self
    }

    /// The error envelope of the specification's section 7.
    pub fn error(e: &ApiError) -> Response {
        let body = Bytes::from(e.to_envelope().to_string());
        Response {
            status: e.status(),
            headers: e.headers.clone(),
            body: Some(body),
            intent: None,
        }
    }
}

/// Writes `resp` as the whole answer to the request.
pub async fn write_response(session: &mut Session, resp: &Response) -> pingora::Result<()> {
    let len = resp.body.as_ref().map_or(0, |b| b.len());
    let mut header = ResponseHeader::build(resp.status, Some(4 + resp.headers.len()))?;
    let has_type = resp
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if resp.body.is_some() && !has_type {
        header.insert_header("Content-Type", "application/json")?;
    }
    if resp.status != 204 {
        header.insert_header("Content-Length", len.to_string())?;
    }
    header.insert_header("Cache-Control", "no-store")?;
    for (name, value) in &resp.headers {
        header.insert_header(*name, value.as_str())?;
    }
    let end = resp.body.is_none();
    session.write_response_header(Box::new(header), end).await?;
    if let Some(body) = &resp.body {
        session
            .write_response_body(Some(body.clone()), true)
            .await?;
    }
    Ok(())
}

/// `application/json`, `application/*+json`, with or without parameters.
pub fn is_json_content_type(value: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(value) else {
        return false;
    };
    let mime = s.split(';').next().unwrap_or("").trim().as_bytes();
    let is = |part: Option<&[u8]>, want: &[u8]| part.is_some_and(|p| p.eq_ignore_ascii_case(want));
    is(Some(mime), b"application/json")
        || (mime.len() >= "application/+json".len()
            && is(mime.get(..12), b"application/")
            && is(mime.get(mime.len() - 5..), b"+json"))
}

/// Reads a JSON request body of at most `max` bytes.
///
/// Wrong or missing content type → 415; a declared or actual size over `max` → 413 (the
/// connection is then not reused, so the unread rest is never parsed as a request).
/// Answers `Expect: 100-continue` before reading; waits at most `timeout` for each piece.
pub async fn read_json_body(
    session: &mut Session,
    max: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let content_type = session
        .req_header()
        .headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.as_bytes().to_vec());
    match content_type {
        Some(ct) if is_json_content_type(&ct) => {}
        _ => {
            session.set_keepalive(None);
            return Err(ApiError::new(
                ErrorKind::UnsupportedMediaType,
                "Send the body as JSON with Content-Type: application/json.",
            ));
        }
    }
    let declared = session
        .req_header()
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        session.set_keepalive(None);
        return Err(too_large(max));
    }
    read_body(session, max, timeout).await
}

/// Reads a request body of at most `max` bytes (413 past that, and the connection is not
/// reused), answering `Expect: 100-continue` first; 408 when no piece comes for `timeout`.
pub async fn read_body(
    session: &mut Session,
    max: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    Ok(join(read_body_pieces(session, max, timeout).await?))
}

/// [`read_body`], as the pieces it arrived in (none for an empty body): a caller that goes
/// through the body once needs no copy of it joined.
pub async fn read_body_pieces(
    session: &mut Session,
    max: usize,
    timeout: Duration,
) -> Result<Vec<Bytes>, ApiError> {
    answer_continue(session).await?;
    let mut pieces = Vec::new();
    let mut total = 0usize;
    // Asked before each read: a read past the end would only arm a read timeout to learn
    // that there is nothing more.
    while !session.is_body_done() {
        let Some(chunk) = next_body_piece(session, timeout).await? else {
            break;
        };
        total += chunk.len();
        if total > max {
            session.set_keepalive(None);
            return Err(too_large(max));
        }
        if !chunk.is_empty() {
            pieces.push(chunk);
        }
    }
    Ok(pieces)
}

/// Answers `Expect: 100-continue` (`100 Continue`) before a body is read; nothing otherwise.
pub async fn answer_continue(session: &mut Session) -> Result<(), ApiError> {
    let expects_continue = session
        .req_header()
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        session.write_continue_response().await.map_err(|e| {
            tracing::debug!(error = %e, "writing 100 Continue");
            ApiError::invalid_request("The request body could not be read.")
        })?;
    }
    Ok(())
}

/// The next piece of the caller's body (`None` at its end), waiting at most `timeout`: 408
/// when nothing came in time, 400 when the body is broken; either way the connection is not
/// reused (the rest of the body is unread).
pub async fn next_body_piece(
    session: &mut Session,
    timeout: Duration,
) -> Result<Option<Bytes>, ApiError> {
    read_piece(session, timeout).await.map_err(|e| {
        tracing::debug!(error = %e, "reading request body");
        session.set_keepalive(None);
        body_read_error(&e)
    })
}

/// The next piece of the caller's body, waiting at most `timeout`. pingora bounds an
/// HTTP/1.1 read with the session's read timeout (set per request from
/// `server.body_read_timeout`) but ignores that setting on HTTP/2 streams: there the wait
/// is bounded here, with the same error.
async fn read_piece(
    session: &mut Session,
    timeout: Duration,
) -> Result<Option<Bytes>, Box<pingora::Error>> {
    if !session.is_http2() {
        return session.read_request_body().await;
    }
    match tokio::time::timeout(timeout, session.read_request_body()).await {
        Ok(read) => read,
        Err(_) => Err(pingora::Error::explain(
            pingora::ErrorType::ReadTimedout,
            "no request body piece in time",
        )),
    }
}

/// What a failed read of the caller's body answers: 408 when the caller sent nothing for the
/// configured `server.body_read_timeout`, 400 otherwise.
pub fn body_read_error(e: &pingora::Error) -> ApiError {
    if matches!(e.etype(), pingora::ErrorType::ReadTimedout) {
        ApiError::new(
            ErrorKind::RequestTimeout,
            "The request body did not arrive in time.",
        )
    } else {
        ApiError::invalid_request("The request body could not be read.")
    }
}

/// The pieces of a body as one buffer: a single piece as it is, without a copy.
pub fn join(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() <= 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for piece in &pieces {
        joined.extend_from_slice(piece);
    }
    joined.freeze()
}

fn too_large(max: usize) -> ApiError {
    ApiError::new(
        ErrorKind::PayloadTooLarge,
        format!("The request body is larger than {max} bytes."),
    )
}

/// Parses a JSON body; malformed JSON is 400 `invalidRequest` (no echo of the body).
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid_request(format!(
            "The body is not valid JSON of the expected shape (line {}, column {}).",
            e.line(),
            e.column()
        ))
    })
}

/// The backlog of a listening socket (pingora's).
const BACKLOG: u32 = 65_535;

/// How often, and how far apart, a bind that finds its address in use is tried.
const BIND_TRIES: u32 = 30;
const BIND_PAUSE: Duration = Duration::from_secs(1);

/// The listening socket at `addr`: the one the replaced server passed on under `key` in
/// pingora's hand-over table, or a new one (`SO_REUSEADDR`, a backlog of 65,535; an address
/// in use is tried again every second, 30 times), entered in the table the next upgrade
/// passes on.
pub async fn listening_socket(
    addr: std::net::SocketAddr,
    key: &str,
    fds: Option<pingora::server::ListenFds>,
) -> std::io::Result<tokio::net::TcpListener> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let Some(fds) = fds else {
        return bind(addr).await;
    };
    let passed = fds.lock().get(key).copied();
    match passed {
        #[allow(unsafe_code)]
        Some(fd) => {
            // SAFETY: the hand-over table holds listening sockets this process received and
            // nothing else owns; each address's is taken once, by its one service.
            let socket = unsafe { std::net::TcpListener::from_raw_fd(fd) };
            socket.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(socket)
        }
        None => {
            let listener = bind(addr).await?;
            fds.lock().add(key.to_string(), listener.as_raw_fd());
            Ok(listener)
        }
    }
}

async fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let mut tries = 0;
    loop {
        let socket = match addr {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return socket.listen(BACKLOG),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries + 1 < BIND_TRIES => {
                tries += 1;
                tracing::warn!("{addr} is in use, trying again");
                tokio::time::sleep(BIND_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json_content_type(b"application/json"));
        assert!(is_json_content_type(b"Application/JSON; charset=utf-8"));
        assert!(is_json_content_type(b"application/merge-patch+json"));
        assert!(!is_json_content_type(b"text/plain"));
        assert!(!is_json_content_type(b"application/jsonx"));
    }

    #[test]
    fn parse_errors_do_not_echo_the_body() {
        let e = parse_json::<serde_json::Value>(b"{\"number\": 4242424242424242").err();
        let text = e.map(|e| e.to_envelope().to_string()).unwrap_or_default();
        assert!(text.contains("invalidRequest"));
        assert!(!text.contains("4242424242424242"));
    }
}
