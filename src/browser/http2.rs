//! h2 inside an intercepted tunnel, when the browser chose it by ALPN ([`serve`]): each
//! stream, up to [`MAX_STREAMS`] at once, read whole within the bounds of
//! [`super::http1`] ([`read_request`]) and answered by the same exchange through an
//! [`H2Sink`], DATA frames sent as the browser's flow control allows.
//!
//! | input | answer |
//! |---|---|
//! | headers over [`MAX_HEAD`] bytes (name, value and 4 each) or [`MAX_HEADERS`] fields | 431 `requestHeaderFieldsTooLarge` |
//! | a body not read within the body timeout | 408 `requestTimeout` |
//! | no origin-form `:path` (`CONNECT`, `*`), a bad `content-length` | 400 `invalidRequest` |
//! | a body over [`crate::browser::swap::MAX_BODY`] | 413 `payloadTooLarge` |
//!
//! The pseudo-headers become the request line; the host's `Host` is the tunnel's, as over
//! HTTP/1.1. Split `cookie` fields are joined into one. An exchange that fails after its
//! head resets the stream.

use super::http1::{timeout, too_large_head, MAX_HEAD, MAX_HEADERS};
use super::message::{Answer, Exchange, Head, Request, Sink};
use super::swap::{SwapError, MAX_BODY};
use super::tls::BrowserTls;
use crate::error::ApiError;
use ::h2::server::SendResponse;
use ::h2::{Reason, RecvStream, SendStream};
use async_trait::async_trait;
use bytes::Bytes;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use zeroize::Zeroizing;

/// Most streams of one connection served at once (the SETTINGS the proxy sends).
pub const MAX_STREAMS: u32 = 100;

/// Largest header list h2 decodes (its own count: 32 more a field); a list under it but over
/// [`MAX_HEAD`] is answered 431 with paycred's envelope.
const MAX_HEADER_LIST: u32 = 4 * MAX_HEAD as u32;

/// The connection's streams, each answered by `exchange`, until the browser closes it or
/// opens none for `idle` (then GOAWAY). The preface must come within `head_within`; each
/// body within `body_within` of its headers.
pub async fn serve<E: Exchange + 'static>(
    tls: BrowserTls,
    exchange: Arc<E>,
    idle: Duration,
    head_within: Duration,
    body_within: Duration,
) {
    let mut builder = ::h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST);
    let handshake = tokio::time::timeout(head_within, builder.handshake::<_, Bytes>(tls)).await;
    let Ok(Ok(mut conn)) = handshake else {
        tracing::debug!("browser proxy: no h2 preface");
        return;
    };
    let mut streams = tokio::task::JoinSet::new();
    let mut closing = false;
    loop {
        let idle_by = Instant::now() + idle;
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((request, respond))) => {
                    streams.spawn(stream(exchange.clone(), request, respond, body_within));
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "browser proxy: the h2 connection failed");
                    break;
                }
                None => break,
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
            _ = tokio::time::sleep_until(idle_by), if streams.is_empty() && !closing => {
                closing = true;
                conn.graceful_shutdown();
            }
        }
    }
}

/// One stream: read, exchanged, answered (an error with its envelope).
async fn stream<E: Exchange>(
    exchange: Arc<E>,
    request: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    body_within: Duration,
) {
    let mut sink = H2Sink {
        respond,
        send: None,
    };
    let answered = match read_request(request, body_within).await {
        Ok(request) => exchange.exchange(request, &mut sink).await,
        Err(e) => Err(Answer::Before(e)),
    };
    match answered {
        Ok(()) => {}
        Err(Answer::Before(e)) => sink.error(&e).await,
        Err(Answer::Cut) => sink.reset(),
    }
}

/// A stream's request, its body read whole by `body_within` from now.
pub async fn read_request(
    request: http::Request<RecvStream>,
    body_within: Duration,
) -> Result<Request, ApiError> {
    let (parts, mut body) = request.into_parts();
    let size = parts.method.as_str().len()
        + parts.uri.path_and_query().map_or(0, |p| p.as_str().len())
        + parts
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if parts.headers.len() > MAX_HEADERS || size > MAX_HEAD {
        return Err(too_large_head());
    }
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|t| t.starts_with('/') && parts.method != http::Method::CONNECT)
        .ok_or_else(|| {
            ApiError::invalid_request("A request in the tunnel names its path (origin form).")
        })?
        .to_string();
    let length = match parts.headers.get(http::header::CONTENT_LENGTH) {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid_request("The Content-Length is not a number."))?,
    };
    if length > MAX_BODY {
        return Err(SwapError::TooLarge.into());
    }
    let mut headers: Vec<(String, Zeroizing<Vec<u8>>)> = Vec::new();
    let mut cookie: Option<Zeroizing<Vec<u8>>> = None;
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE {
            let joined = cookie.get_or_insert_with(Default::default);
            if !joined.is_empty() {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(value.as_bytes());
        } else {
            headers.push((
                name.as_str().to_string(),
                Zeroizing::new(value.as_bytes().to_vec()),
            ));
        }
    }
    if let Some(cookie) = cookie {
        headers.push(("cookie".into(), cookie));
    }
    let deadline = Instant::now() + body_within;
    let mut whole = Zeroizing::new(Vec::with_capacity(length));
    loop {
        let chunk = match tokio::time::timeout_at(deadline, body.data()).await {
            Err(_) => return Err(timeout()),
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(ApiError::invalid_request(
                    "The request body was not received whole.",
                ))
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        if whole.len() + chunk.len() > MAX_BODY {
            return Err(SwapError::TooLarge.into());
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(Request {
        method: parts.method.as_str().to_string(),
        target,
        headers,
        body: whole,
        close: false,
    })
}

/// An answer on one h2 stream.
pub struct H2Sink {
    respond: SendResponse<Bytes>,
    /// The body's stream, once a head with a body was sent.
    send: Option<SendStream<Bytes>>,
}

fn broken(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

impl H2Sink {
    /// Answers `error` with paycred's envelope.
    async fn error(&mut self, error: &ApiError) {
        let body = serde_json::to_vec(&error.to_envelope()).unwrap_or_default();
        let mut headers = vec![("content-type".to_string(), b"application/json".to_vec())];
        headers.extend(
            error
                .headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec())),
        );
        let head = Head {
            status: error.status(),
            headers,
            body: true,
            length: false,
        };
        let sent = async {
            self.head(head).await?;
            self.data(Bytes::from(body)).await?;
            self.end().await
        };
        if sent.await.is_err() {
            self.reset();
        }
    }

    /// Resets the stream: the browser sees no whole answer.
    fn reset(&mut self) {
        match &mut self.send {
            Some(send) => send.send_reset(Reason::INTERNAL_ERROR),
            None => self.respond.send_reset(Reason::INTERNAL_ERROR),
        }
    }
}

#[async_trait]
impl Sink for H2Sink {
    async fn head(&mut self, head: Head) -> io::Result<()> {
        let mut response = http::Response::new(());
        *response.status_mut() = http::StatusCode::from_u16(head.status).map_err(broken)?;
        let headers = response.headers_mut();
        for (name, value) in head.headers {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).map_err(broken)?,
                http::HeaderValue::from_bytes(&value).map_err(broken)?,
            );
        }
        let send = self
            .respond
            .send_response(response, !head.body)
            .map_err(broken)?;
        if head.body {
            self.send = Some(send);
        }
        Ok(())
    }

    async fn data(&mut self, mut data: Bytes) -> io::Result<()> {
        let send = self
            .send
            .as_mut()
            .ok_or_else(|| io::Error::other("no body"))?;
        while !data.is_empty() {
            send.reserve_capacity(data.len());
            let granted = std::future::poll_fn(|cx| send.poll_capacity(cx))
                .await
                .ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?
                .map_err(broken)?;
            if granted > 0 {
                let part = data.split_to(granted.min(data.len()));
                send.send_data(part, false).map_err(broken)?;
            }
        }
        Ok(())
    }

    async fn end(&mut self) -> io::Result<()> {
        match &mut self.send {
            Some(send) => send.send_data(Bytes::new(), true).map_err(broken),
            None => Ok(()),
        }
    }
}
