//! REST requests: authenticate, rate-limit, read the body, run the handler (through
//! `Idempotency-Key` when the request carries one) and answer.

use crate::app::App;
use crate::auth::Principal;
use crate::edge::routes::{Resource, Route};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use bytes::Bytes;
use http::Method;

/// An authenticated request, body already read.
#[derive(Debug)]
pub struct ApiRequest<'a> {
    pub method: &'a Method,
    pub route: &'a Route,
    pub principal: &'a Principal,
    pub query: Option<&'a str>,
    pub body: Option<Bytes>,
}

/// Runs the handler of an authenticated request.
pub async fn dispatch(app: &App, req: ApiRequest<'_>) -> ApiResult<Response> {
    use crate::api::{
        client_encryption, payment_methods as pm, purchase_intents, sandbox, tokens, verify,
    };
    match (&req.route.resource, req.method) {
        (Resource::PaymentMethods, &Method::GET) => pm::list(app, req.principal, req.query).await,
        (Resource::PaymentMethods, &Method::POST) => {
            pm::create(app, req.principal, req.body.as_deref().unwrap_or_default()).await
        }
        (Resource::PaymentMethod(id), &Method::GET) => pm::get(app, req.principal, id).await,
        (Resource::PaymentMethod(id), &Method::DELETE) => pm::delete(app, req.principal, id).await,
        (Resource::PurchaseIntents, &Method::POST) => {
            purchase_intents::create(app, req.principal, req.body.as_deref().unwrap_or_default())
                .await
        }
        (Resource::PurchaseIntent(id), &Method::GET) => {
            purchase_intents::get(app, req.principal, id).await
        }
        (Resource::PurchaseIntentVerify(id), &Method::POST) => {
            let body = req.body.as_deref().unwrap_or_default();
            verify::verify(app, req.principal, id, body).await
        }
        (Resource::SandboxAuthorizations, &Method::POST) => {
            sandbox::authorize(app, req.principal, req.body.as_deref().unwrap_or_default()).await
        }
        (Resource::ClientEncryptionKey, &Method::GET) => {
            client_encryption::get_key(app, req.principal).await
        }
        (Resource::Tokens, &Method::POST) => {
            tokens::create(app, req.principal, req.body.as_deref().unwrap_or_default()).await
        }
        _ => Err(ApiError::method_not_allowed(&req.route.allow_header())),
    }
}
