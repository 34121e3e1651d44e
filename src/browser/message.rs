//! What HTTP/1.1 and h2 in an intercepted tunnel share: a browser's request read whole
//! ([`Request`]), the [`Sink`] its answer is written to in the protocol's framing, the one
//! [`Exchange`] that serves it, and how an exchange fails ([`Answer`]).

use crate::error::ApiError;
use async_trait::async_trait;
use bytes::Bytes;
use zeroize::Zeroizing;

/// A request read from the browser. Wiped when dropped: its body and query hold stand-ins,
/// and after the swap what is built from it holds real values.
pub struct Request {
    pub method: String,
    /// The origin-form target: path and query.
    pub target: String,
    /// The headers as sent (names as written; lowercase over h2).
    pub headers: Vec<(String, Zeroizing<Vec<u8>>)>,
    pub body: Zeroizing<Vec<u8>>,
    /// The browser asked to close after this exchange (`Connection: close`, HTTP/1.0).
    pub close: bool,
}

impl Request {
    /// The first value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// An answer's head as the host gave it, its connection's own headers (framing, hop-by-hop)
/// taken off.
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    /// The answer has a body (not to `HEAD`, nor a 1xx, 204 or 304).
    pub body: bool,
    /// The host gave its body's `Content-Length`.
    pub length: bool,
}

/// Where an exchange writes its answer, in the browser's protocol.
#[async_trait]
pub trait Sink: Send {
    /// The answer's head.
    async fn head(&mut self, head: Head) -> std::io::Result<()>;
    /// A piece of the body (never empty).
    async fn data(&mut self, data: Bytes) -> std::io::Result<()>;
    /// The body's end (after a head with a body).
    async fn end(&mut self) -> std::io::Result<()>;
}

/// One request to its answer: swapped, counted, sent to the host, the host's answer
/// written to the sink through the response guard.
#[async_trait]
pub trait Exchange: Send + Sync {
    async fn exchange(&self, request: Request, sink: &mut dyn Sink) -> Result<(), Answer>;
}

/// How an exchange failed: before the answer's head (answered with the error) or after it
/// (the answer is cut).
pub enum Answer {
    Before(ApiError),
    Cut,
}

impl From<ApiError> for Answer {
    fn from(e: ApiError) -> Self {
        Answer::Before(e)
    }
}
