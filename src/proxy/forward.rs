//! The one forwarding policy: which of the caller's request headers reach the target. Both
//! body paths apply it, the direct exchange (`direct::RequestBuf`) and pingora's proxy
//! (`upstream_request`), so a target sees the same headers whichever path a body takes.
//!
//! Never forwarded:
//! - paycred's own headers (`Svc-*`: `Svc-Target-URL`, `Svc-Authorization`);
//! - hop-by-hop headers ([`HOP_BY_HOP`]), and every header the caller's `Connection` names
//!   (RFC 9110, section 7.6.1: they are hop-by-hop too);
//! - `Authorization` when it carried paycred's token (no `Svc-Authorization` was sent); with
//!   `Svc-Authorization`, the caller's `Authorization` is the target's and goes through.
//!
//! Written by paycred for the target, whatever the caller sent ([`is_framing`]): `Host` (the
//! target's) and the body's framing (`Content-Length` or `Transfer-Encoding`, for the body
//! as sent after substitution). `Connection` cannot name these away.

use super::target::Target;
use crate::error::ApiError;
use http::{header, HeaderName};
use pingora::http::RequestHeader;
use std::fmt::Write as _;

/// Hop-by-hop request headers, never forwarded.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "http2-settings",
];

/// A `Connection` header may name fewer headers than this.
pub const MAX_NOMINATIONS: usize = 10;

/// Headers a `Connection` header may not name.
const PROTECTED: &[&str] = &[
    "host",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
];

/// An HTTP token character (RFC 9110, section 5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Headers each path writes for the target itself: the target's `Host`, and the framing of
/// the body as sent.
pub fn is_framing(name: &HeaderName) -> bool {
    name == header::HOST || name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING
}

/// The forwarding policy of one request.
#[derive(Debug, Clone, Default)]
pub struct Forwarding {
    /// `Authorization` carried paycred's token, not the target's: drop it.
    pub drop_authorization: bool,
    /// Headers the caller's `Connection` names (lowercase), framing headers excepted.
    nominated: Vec<String>,
    /// The caller's `Accept-Encoding` is replaced by `identity`: the response guard scans
    /// the answer, and cannot scan a compressed one.
    pub identity_encoding: bool,
}

impl Forwarding {
    /// The policy for `req`; `drop_authorization` when its `Authorization` is paycred's.
    ///
    /// A `Connection` header that names more than [`MAX_NOMINATIONS`] headers, a token that
    /// is not an HTTP token, a pseudo-header, `Host` or a forwarding-origin header
    /// (`X-Forwarded-For`, `-Host`, `-Proto`) is refused (400), as pingora's own proxy
    /// refuses it: a request is refused the same way on every path.
    pub fn new(req: &RequestHeader, drop_authorization: bool) -> Result<Self, ApiError> {
        let refuse = |why: &str| ApiError::invalid_field("Connection", why);
        let mut nominated = Vec::new();
        let tokens = req
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|token| !token.is_empty());
        for (i, token) in tokens.enumerate() {
            if i + 1 >= MAX_NOMINATIONS {
                return Err(refuse("names too many headers"));
            }
            if !token.iter().all(|b| is_tchar(*b)) {
                return Err(refuse("holds something other than header names"));
            }
            let Ok(name) = HeaderName::from_bytes(token) else {
                return Err(refuse("holds something other than header names"));
            };
            if PROTECTED.contains(&name.as_str()) {
                return Err(refuse("names a header that cannot be hop-by-hop"));
            }
            if !is_framing(&name) {
                nominated.push(name.as_str().to_string());
            }
        }
        Ok(Forwarding {
            drop_authorization,
            nominated,
            identity_encoding: false,
        })
    }

    /// Whether the caller's header `name` reaches the target (framing headers aside, which
    /// each path writes itself). Names are lowercase.
    pub fn forwards(&self, name: &HeaderName) -> bool {
        let n = name.as_str();
        !(n.starts_with("svc-")
            || HOP_BY_HOP.contains(&n)
            || (self.drop_authorization && name == header::AUTHORIZATION)
            || (self.identity_encoding && name == header::ACCEPT_ENCODING)
            || self.nominated.iter().any(|nominated| nominated == n))
    }
}

/// The request target (path and query) sent to the target: checked to be a valid URI path,
/// so it holds no space, CR or LF.
pub fn target_uri(target: &Target) -> Result<http::Uri, ApiError> {
    target
        .url
        .path_and_query
        .parse::<http::Uri>()
        .map_err(|_| ApiError::invalid_field("Svc-Target-URL", "has an invalid path"))
}

/// `Host` header value for the target.
pub fn host_header(target: &Target) -> String {
    let url = &target.url;
    let mut host = String::with_capacity(url.host.len() + 8);
    if url.host.contains(':') {
        host.extend(["[", url.host.as_str(), "]"]);
    } else {
        host.push_str(&url.host);
    }
    let default_port = if url.https { 443 } else { 80 };
    if url.port != default_port {
        // Writing to a String cannot fail.
        let _ = write!(host, ":{}", url.port);
    }
    host
}

/// The request header pingora sends to the target: the target's URI and `Host`, the
/// caller's headers as [`Forwarding`] allows, and no `Content-Length` when the body is
/// substituted as it streams (its length changes; pingora then sends it chunked to an
/// HTTP/1.1 target).
pub fn upstream_request(
    upstream: &mut RequestHeader,
    target: &Target,
    forwarding: &Forwarding,
    body_changes: bool,
) -> Result<(), ApiError> {
    upstream.set_uri(target_uri(target)?);
    let dropped: Vec<HeaderName> = upstream
        .headers
        .keys()
        .filter(|n| !forwarding.forwards(n))
        .cloned()
        .collect();
    for name in dropped {
        upstream.remove_header(&name);
    }
    upstream
        .insert_header(header::HOST, host_header(target))
        .map_err(|_| ApiError::internal())?;
    if forwarding.identity_encoding {
        upstream
            .insert_header(header::ACCEPT_ENCODING, "identity")
            .map_err(|_| ApiError::internal())?;
    }
    if body_changes {
        upstream.remove_header(&header::CONTENT_LENGTH);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> RequestHeader {
        let mut req =
            RequestHeader::build("POST", b"/proxy", None).unwrap_or_else(|_| unreachable!());
        for (name, value) in headers {
            req.append_header(name.to_string(), *value)
                .unwrap_or_else(|_| unreachable!());
        }
        req
    }

    #[test]
    fn own_hop_by_hop_and_nominated_headers_stay_behind() {
        let req = request(&[
            ("Connection", "keep-alive, X-Secret-Hop , Content-Length"),
            ("X-Secret-Hop", "1"),
            ("Svc-Target-URL", "https://t.example/"),
            ("Svc-Authorization", "Bearer a"),
            ("Authorization", "Bearer b"),
            ("Content-Type", "application/json"),
        ]);
        let f = Forwarding::new(&req, false).unwrap_or_default();
        let kept: Vec<&str> = req
            .headers
            .keys()
            .filter(|n| f.forwards(n))
            .map(HeaderName::as_str)
            .collect();
        assert_eq!(kept, ["authorization", "content-type"]);
        // paycred's token in Authorization stays behind too.
        let paycreds = Forwarding::new(&req, true).unwrap_or_default();
        assert!(!paycreds.forwards(&header::AUTHORIZATION));
        // Connection cannot name the framing away.
        assert!(!f.nominated.iter().any(|n| n == "content-length"));
    }

    #[test]
    fn a_connection_header_that_pingora_would_refuse_is_refused() {
        for value in [
            "host",
            "X-Forwarded-For",
            ":authority",
            "\"x-quoted\"",
            "a, b, c, d, e, f, g, h, i, j",
        ] {
            let req = request(&[("Connection", value)]);
            let e = Forwarding::new(&req, true).err();
            assert_eq!(e.map(|e| e.status()), Some(400), "{value}");
        }
        let nine = request(&[("Connection", "a, b, c, d, e, f, g, h, i")]);
        assert!(Forwarding::new(&nine, true).is_ok());
    }
}
