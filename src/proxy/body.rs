//! A body that streams through pingora (larger than the preflight limit, or chunked): its
//! templates are substituted chunk by chunk as pingora forwards it. An error aborts the
//! upstream request before its end, so the target never receives a complete request.

use super::failure::carry;
use super::ProxyCtx;
use crate::app::App;
use crate::error::ApiError;
use bytes::Bytes;

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
        *body = Some(match chunk {
            Some(chunk) => p
                .substitution
                .feed(app, &p.principal, chunk)
                .await
                .map_err(carry)?,
            None => Bytes::new(),
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
