//! Proxy failures: an [`ApiError`] carried through pingora's error type, and the one mapping
//! from a failure to what the caller is answered (502 `badGateway` when the target cannot be
//! reached, 504 `gatewayTimeout` when it is too slow), used by pingora's `fail_to_proxy` and
//! by the direct exchange alike.

use crate::error::{ApiError, ErrorKind};
use crate::http::{body_read_error, write_response, Response};
use pingora::prelude::*;
use pingora::proxy::Session;

/// Carries an `ApiError` through pingora's error type, marked as the downstream's fault so
/// pingora stops waiting for the target (an HTTP/2 target would otherwise stall the request).
pub fn carry(e: ApiError) -> Box<Error> {
    Error::because(ErrorType::HTTPStatus(e.status()), "paycred", e).into_down()
}

/// The `ApiError` a pingora error carries, if any.
pub fn carried(e: &Error) -> Option<&ApiError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = e.cause.as_deref().map(|c| c as _);
    while let Some(c) = cause {
        if let Some(api) = c.downcast_ref::<ApiError>() {
            return Some(api);
        }
        // pingora boxes causes either as `Error` or as `Box<Error>`.
        if let Some(inner) = c.downcast_ref::<Error>() {
            cause = inner.cause.as_deref().map(|c| c as _);
        } else if let Some(inner) = c.downcast_ref::<Box<Error>>() {
            cause = inner.cause.as_deref().map(|c| c as _);
        } else {
            cause = c.source();
        }
    }
    None
}

/// What to answer the caller when proxying failed; `None` when the caller went away or sent
/// a broken request (nothing to answer).
pub fn answer_for(e: &Error) -> Option<ApiError> {
    if let Some(a) = carried(e) {
        return Some(a.clone());
    }
    let unreachable = || ApiError::new(ErrorKind::BadGateway, "The target could not be reached.");
    if matches!(e.esource(), ErrorSource::Downstream) {
        // The caller stopped sending its body: 408. Any other failure to read from or write
        // to the caller: nothing to answer.
        return matches!(e.etype(), ErrorType::ReadTimedout).then(|| body_read_error(e));
    }
    Some(match e.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            ApiError::new(
                ErrorKind::GatewayTimeout,
                "The target did not answer in time.",
            )
        }
        _ if matches!(e.esource(), ErrorSource::Upstream) => unreachable(),
        ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::TLSHandshakeFailure
        | ErrorType::ConnectError
        | ErrorType::ConnectionClosed
        | ErrorType::InvalidCert
        | ErrorType::HandshakeError => unreachable(),
        _ => {
            tracing::error!(error_type = e.etype().as_str(), "proxy failure");
            ApiError::internal()
        }
    })
}

/// Answers the caller for a failed request, unless its response had started (then it can
/// only be cut short); returns the status to record: the answer's, or 499 when the caller
/// went away.
pub async fn answer(session: &mut Session, e: &Error) -> u16 {
    let Some(api_error) = answer_for(e) else {
        return 499;
    };
    if session.response_written().is_none() {
        if let Err(write_error) = write_response(session, &Response::error(&api_error)).await {
            tracing::debug!(error = %write_error, "writing the error response");
        }
    }
    api_error.status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carried_api_error_is_found_through_wrapping() {
        let e = carry(ApiError::invalid_template("a", "{{x}}", "bad"));
        assert!(carried(&e).is_some());
        let wrapped = Error::because(ErrorType::HTTPStatus(400), "wrap", e).more_context("Peer");
        assert_eq!(carried(&wrapped).map(|a| a.status()), Some(400));
    }

    #[test]
    fn target_failures_map_to_502_and_504_and_the_callers_to_nothing() {
        let up = |t| Error::new(t).into_up();
        assert_eq!(
            answer_for(&up(ErrorType::ConnectRefused)).map(|a| a.status()),
            Some(502)
        );
        assert_eq!(
            answer_for(&up(ErrorType::ReadTimedout)).map(|a| a.status()),
            Some(504)
        );
        assert_eq!(
            answer_for(&Error::new(ErrorType::ReadError).into_down()),
            None
        );
        assert_eq!(
            answer_for(&Error::new(ErrorType::ReadTimedout).into_down()).map(|a| a.status()),
            Some(408)
        );
    }
}
