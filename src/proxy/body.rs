//! A body that streams (larger than the preflight limit, or chunked): its templates are
//! substituted piece by piece as it goes to the target, over the direct exchange
//! ([`relay`]), or through pingora for an upgraded connection's bytes ([`filter`]). An error
//! aborts the upstream request before its end, so the target never receives a complete
//! request.

use super::direct::Exchanger;
use super::failure::carry;
use super::substitute::poll_once;
use super::ProxyCtx;
use crate::app::App;
use crate::error::ApiError;
use crate::http::{answer_continue, next_body_piece};
use bytes::Bytes;
use pingora::prelude::HttpPeer;
use pingora::proxy::Session;
use std::time::Instant;

/// Sends a request whose body streams behind `head` through `exchanger` and relays the
/// answer; returns its status. Each piece of the caller's body is read, substituted and sent
/// as one chunk, in one write with the pieces that could be read at once after it
/// ([`BATCH`]); the uses are counted before the last piece leaves, and the body's end leaves
/// with it. A failure before then (a template, a refused use, the caller's body) drops the
/// connection on an unfinished body: the target never holds a complete request.
///
/// The answer is read once the request has left whole, or as soon as a write to the target
/// fails (a target that stops reading may have answered first: that answer is relayed, and
/// neither connection is kept). A target that answers while still reading a body is answered
/// once the body has left.
pub async fn relay(
    app: &App,
    session: &mut Session,
    p: &mut ProxyCtx,
    exchanger: &Exchanger,
    peer: &HttpPeer,
    head: Bytes,
) -> pingora::Result<u16> {
    let timeout = app.config.server.body_read_timeout;
    answer_continue(session).await.map_err(carry)?;
    let mut first = Vec::new();
    let mut end = next_piece(app, session, p, timeout, &mut first).await?;
    p.upstream_started = Some(Instant::now());
    let mut out = exchanger.open_streamed(peer, head, first, end).await?;
    let mut sent = Ok(());
    while !end && sent.is_ok() {
        let mut pieces = Vec::new();
        end = next_piece(app, session, p, timeout, &mut pieces).await?;
        while !end && batched(&pieces) < BATCH && pieces.len() < BATCH_PIECES {
            let Some(last) = ready_piece(app, session, p, timeout, &mut pieces).await? else {
                break;
            };
            end = last;
        }
        sent = out.send(pieces, end).await;
    }
    let whole = sent.is_ok();
    if !whole {
        // The rest of the caller's body is unread.
        session.set_keepalive(None);
    }
    p.guard
        .arm(p.substitution.card_numbers(), p.substitution.cvcs());
    let (upstream, key) = match out.answer_head(peer).await {
        Ok(answer) => answer,
        // No answer after a failed write: the write's error is the one to report.
        Err(e) => return Err(sent.err().unwrap_or(e)),
    };
    exchanger
        .answer(session, upstream, key, peer, &mut p.guard, whole)
        .await
}

/// How much of the caller's body is gathered into one write, at most (and one piece
/// more): the pieces that can be read at once when the first of them is, so a fast caller's
/// body leaves in fewer, larger writes (fewer system calls, and fewer wake-ups of the
/// target's reader). An HTTP/1.1 read takes at most 64 KiB, an HTTP/2 piece is a frame. It
/// is also the most a streamed request holds of what it has read before it writes it. With
/// 1 MiB bodies under load, 512 KiB used about a quarter less CPU a request than 256 KiB
/// (`ab.sh`), 1 MiB about the same as 512 KiB, and 128 KiB more than 256 KiB.
const BATCH: usize = 512 * 1024;

/// The most pieces in one write: a caller's chunks of a byte each would otherwise make a
/// batch of a quarter of a million pieces (each a buffer and three parts of the write).
const BATCH_PIECES: usize = 64;

/// The bytes in `pieces`.
fn batched(pieces: &[Bytes]) -> usize {
    pieces.iter().map(Bytes::len).sum()
}

/// Reads the caller's next piece and substitutes it into `out`; returns whether it was the
/// last, in which case the request's uses are counted before it is returned (so before it
/// leaves).
async fn next_piece(
    app: &App,
    session: &mut Session,
    p: &mut ProxyCtx,
    timeout: std::time::Duration,
    out: &mut Vec<Bytes>,
) -> pingora::Result<bool> {
    let piece = next_body_piece(session, timeout).await.map_err(carry)?;
    substitute_piece(app, session, p, piece, out).await
}

/// [`next_piece`], if the caller's next piece can be read without waiting.
async fn ready_piece(
    app: &App,
    session: &mut Session,
    p: &mut ProxyCtx,
    timeout: std::time::Duration,
    out: &mut Vec<Bytes>,
) -> pingora::Result<Option<bool>> {
    // Cancel safe: pingora's own proxy races a body read against the answer the same way.
    let Some(piece) = poll_once(next_body_piece(session, timeout)) else {
        return Ok(None);
    };
    let piece = piece.map_err(carry)?;
    substitute_piece(app, session, p, piece, out)
        .await
        .map(Some)
}

/// Substitutes the caller's `piece` (`None`: the body has ended) into `out`; returns whether
/// it was the last, in which case the request's uses are counted first.
async fn substitute_piece(
    app: &App,
    session: &mut Session,
    p: &mut ProxyCtx,
    piece: Option<Bytes>,
    out: &mut Vec<Bytes>,
) -> pingora::Result<bool> {
    let end = piece.is_none() || session.is_body_done();
    match piece {
        Some(piece) if !end => (p.substitution).feed(app, &p.principal, piece, out).await,
        Some(piece) => (p.substitution)
            .feed_last(app, &p.principal, &piece)
            .await
            .map(|last| out.push(Bytes::from(last))),
        None => p
            .substitution
            .finish()
            .map(|last| out.push(Bytes::from(last))),
    }
    .map_err(carry)?;
    if end {
        record_uses(app, p).await.map_err(carry)?;
    }
    Ok(end)
}

/// pingora's `request_body_filter` for a proxied request.
pub async fn filter(
    app: &App,
    p: &mut ProxyCtx,
    body: &mut Option<Bytes>,
    end_of_stream: bool,
) -> pingora::Result<()> {
    if !p.substitute {
        return Ok(());
    }
    let chunk = body.take();
    if !end_of_stream {
        // Before the end, `Some(empty)` holds back; `None` would end the body.
        let mut out = Vec::new();
        if let Some(chunk) = chunk {
            (p.substitution)
                .feed(app, &p.principal, chunk, &mut out)
                .await
                .map_err(carry)?;
        }
        *body = Some(match out.len() {
            0 | 1 => out.pop().unwrap_or_default(),
            _ => Bytes::from(out.concat()),
        });
        return Ok(());
    }
    let out = match chunk {
        Some(chunk) => p
            .substitution
            .feed_last(app, &p.principal, &chunk)
            .await
            .map_err(carry)?,
        None => p.substitution.finish().map_err(carry)?,
    };
    record_uses(app, p).await.map_err(carry)?;
    // At the end, nothing left is `None`: an empty write would be a second terminator that
    // desyncs a pooled connection (https://github.com/cloudflare/pingora/issues/935).
    *body = (!out.is_empty()).then(|| Bytes::from(out));
    Ok(())
}

/// Counts one use of every purchase intent the request's templates used.
pub async fn record_uses(app: &App, p: &ProxyCtx) -> Result<(), ApiError> {
    for intent in p.substitution.intents_used() {
        crate::service::intents::record_proxy_use(
            app,
            &p.principal.project,
            &p.principal.entity,
            &intent,
        )
        .await?;
    }
    Ok(())
}
