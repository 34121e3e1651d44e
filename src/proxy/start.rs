//! A proxy request from its head to a [`ProxyCtx`] ([`super::Proxy::start`]): the target
//! checked and resolved by the target guard ([`target`]), and a body up to
//! [`PREFLIGHT_LIMIT`] with a `Content-Length` read and substituted whole, so that every
//! template is validated and resolved (and every use counted) before the target is contacted.
//! Such a body leaves as one prepared request over the direct exchange ([`super::direct`]); a
//! larger or chunked one streams over the same exchange, substituted piece by piece
//! ([`super::body::relay`]). Only `HEAD`, `CONNECT` and upgrades, which carry no body, go
//! through pingora's proxy pipeline.

use super::direct::{self, RequestBuf};
use super::forward::{target_uri, Forwarding};
use super::guard::ResponseGuard;
use super::substitute::Substitution;
use super::{body, target, Outgoing, Proxy, ProxyCtx, PREFLIGHT_LIMIT};
use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::http::{is_json_content_type, read_body_pieces};
use crate::template::Format;
use http::header;
use pingora::proxy::Session;
use std::sync::Arc;

/// Checks the target, picks the body's format by its `Content-Type` (JSON, form, XML, or another,
/// which is only checked for `{{`) and substitutes a small body up front. `principal` was
/// authenticated by the edge; `drop_authorization` when its token came in `Authorization`.
pub async fn start(
    app: &App,
    session: &mut Session,
    principal: Arc<Principal>,
    drop_authorization: bool,
) -> Result<ProxyCtx, ApiError> {
    principal.require_private()?;
    let project = app
        .config
        .project(&principal.project)
        .cloned()
        .ok_or_else(ApiError::internal)?;
    let req = session.req_header();
    let headers = &req.headers;
    let raw_target = headers
        .get(Proxy::SVC_TARGET_URL)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            ApiError::invalid_field("Svc-Target-URL", "required: the URL to forward to")
        })?;
    let url = target::parse(raw_target, &project.proxy)?;
    let format = format_of(
        headers
            .get(header::CONTENT_TYPE)
            .map_or(&[][..], |v| v.as_bytes()),
    );
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = headers.get(header::TRANSFER_ENCODING).is_some();
    if !direct::carries_body(req) && (chunked || declared.is_some_and(|n| n > 0)) {
        return Err(ApiError::invalid_request(
            "A HEAD, CONNECT or upgrade request cannot carry a body through the proxy.",
        ));
    }
    let mut forwarding = Forwarding::new(req, drop_authorization)?;
    let guard = ResponseGuard::new(&project.proxy);
    // An answer the guard scans must come uncompressed.
    forwarding.identity_encoding = guard.is_on();
    let target = target::resolve(url, &project.proxy).await?;
    let substitution = Substitution::new(format).toward(&target.url.host);
    let mut ctx = ProxyCtx {
        principal,
        project,
        target,
        forwarding,
        // Every body is scanned: another format's only for `{{`, which is refused.
        substitute: true,
        outgoing: Outgoing::Pingora,
        substitution,
        upstream_started: None,
        failed: false,
        guard,
    };
    let uri = target_uri(&ctx.target)?;
    let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
    if !direct::carries_body(session.req_header()) {
        // Proxied by pingora, with nothing to substitute.
    } else if session.is_body_empty()
        || (!chunked && declared.is_some_and(|n| n <= PREFLIGHT_LIMIT))
    {
        let pieces = read_body_pieces(
            session,
            PREFLIGHT_LIMIT,
            app.config.server.body_read_timeout,
        )
        .await?;
        // The whole request, built in one buffer: the body is substituted (or copied) once,
        // in place, behind room for the head.
        // Room for the first piece: the pieces after the last one a template reaches are not
        // copied into the buffer, and it grows when more are.
        let first = pieces.first().map_or(0, bytes::Bytes::len);
        let mut request = RequestBuf::new(
            session.req_header(),
            &ctx.target,
            &ctx.forwarding,
            path,
            first + first / 8,
        );
        // The body is copied once, from the pieces it arrived in, up to the last piece a
        // template reaches; the pieces after it are sent as they were read.
        let used = ctx
            .substitution
            .feed_pieces_into(app, &ctx.principal, &pieces, request.body())
            .await?;
        ctx.outgoing = Outgoing::Prepared(request.finish(pieces.get(used..).unwrap_or_default()));
        body::record_uses(app, &ctx).await?;
    } else {
        ctx.outgoing = Outgoing::Streamed(direct::chunked_head(
            session.req_header(),
            &ctx.target,
            &ctx.forwarding,
            path,
        ));
    }
    Ok(ctx)
}

/// The format of a body of this `Content-Type` (empty when there is none).
fn format_of(content_type: &[u8]) -> Format {
    let mime = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if is_json_content_type(content_type) {
        Format::Json
    } else if mime.eq_ignore_ascii_case(b"application/x-www-form-urlencoded") {
        Format::Form
    } else if is_xml(mime) {
        Format::Xml
    } else {
        Format::Other
    }
}

/// `text/xml`, `application/xml`, or `application/<anything>+xml` (`application/soap+xml`).
fn is_xml(mime: &[u8]) -> bool {
    let lower = mime.to_ascii_lowercase();
    lower == b"text/xml"
        || lower == b"application/xml"
        || (lower.starts_with(b"application/") && lower.ends_with(b"+xml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_content_type() {
        for (ct, want) in [
            (&b"application/json"[..], Format::Json),
            (b"application/vnd.api+json; charset=utf-8", Format::Json),
            (b"application/x-www-form-urlencoded", Format::Form),
            (
                b"Application/X-WWW-Form-Urlencoded ; charset=UTF-8",
                Format::Form,
            ),
            (b"text/xml; charset=utf-8", Format::Xml),
            (b"Application/XML", Format::Xml),
            (
                b"application/soap+xml; charset=utf-8; action=\"x\"",
                Format::Xml,
            ),
            (b"application/atom+xml", Format::Xml),
            (b"text/xml-external-parsed-entity", Format::Other),
            (b"image/svg+xml", Format::Other),
            (b"text/plain", Format::Other),
            (b"multipart/form-data; boundary=x", Format::Other),
            (b"", Format::Other),
        ] {
            assert_eq!(format_of(ct), want, "{}", String::from_utf8_lossy(ct));
        }
    }
}
