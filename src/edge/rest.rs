//! REST requests: after the gateway authenticated and rate-limited the caller, read the
//! body, run the handler (through `Idempotency-Key` when a POST carries one) and answer.

use super::idempotency::{self, InFlight};
use super::routes::{Resource, Route};
use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::{read_json_body, Response};
use bytes::Bytes;
use http::Method;
use pingora::proxy::Session;

/// Answers an authenticated REST request on `route`.
pub async fn answer(
    app: &App,
    in_flight: &InFlight,
    session: &mut Session,
    route: &Route,
    principal: &Principal,
) -> ApiResult<Response> {
    let req = session.req_header();
    let method = req.method.clone();
    let query = req.uri.query().map(str::to_string);
    let idempotency_key = match method == Method::POST {
        true => idempotency::key_from(&req.headers)?,
        false => None,
    };
    let path = req.uri.path().to_string();
    let body = if method == Method::POST {
        Some(
            read_json_body(
                session,
                app.config.rest_max_body,
                app.config.server.body_read_timeout,
            )
            .await?,
        )
    } else {
        None
    };
    let request = ApiRequest {
        method: &method,
        route,
        principal,
        query: query.as_deref(),
        body: body.clone(),
    };
    let Some(key) = idempotency_key else {
        return dispatch(app, request).await;
    };
    let body = body.unwrap_or_default();
    idempotency::run(
        app,
        in_flight,
        principal,
        (method.as_str(), &path, &body),
        &key,
        dispatch(app, request),
    )
    .await
}

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
        browser_sessions as browser, client_encryption, events, passkeys, payment_methods as pm,
        purchase_intents, sandbox, tokens, verify, webhook_endpoints as hooks,
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
        (Resource::BrowserSessions(pi), &Method::POST) => {
            let body = req.body.as_deref().unwrap_or_default();
            browser::create(app, req.principal, pi, body).await
        }
        (Resource::BrowserSessions(pi), &Method::GET) => {
            browser::list(app, req.principal, pi).await
        }
        (Resource::BrowserSession(pi, id), &Method::GET) => {
            browser::get(app, req.principal, pi, id).await
        }
        (Resource::BrowserSession(pi, id), &Method::DELETE) => {
            browser::delete(app, req.principal, pi, id).await
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
        (Resource::Events, &Method::GET) => events::list(app, req.principal, req.query).await,
        (Resource::WebhookEndpoints, &Method::GET) => hooks::list(app, req.principal).await,
        (Resource::WebhookEndpoints, &Method::POST) => {
            hooks::create(app, req.principal, req.body.as_deref().unwrap_or_default()).await
        }
        (Resource::WebhookEndpoint(id), &Method::GET) => hooks::get(app, req.principal, id).await,
        (Resource::WebhookEndpoint(id), &Method::DELETE) => {
            hooks::delete(app, req.principal, id).await
        }
        (Resource::WebhookEndpointRotate(id), &Method::POST) => {
            hooks::rotate_secret(app, req.principal, id).await
        }
        (Resource::Passkeys, &Method::GET) => passkeys::list(app, req.principal).await,
        (Resource::Passkeys, &Method::POST) => {
            passkeys::create(app, req.principal, req.body.as_deref().unwrap_or_default()).await
        }
        (Resource::PasskeyRegistrationOptions, &Method::POST) => {
            let body = req.body.as_deref().unwrap_or_default();
            passkeys::registration_options(app, req.principal, body).await
        }
        (Resource::Passkey(id), &Method::DELETE) => passkeys::delete(app, req.principal, id).await,
        (Resource::EventRedeliver(id), &Method::POST) => {
            events::redeliver(
                app,
                req.principal,
                id,
                req.body.as_deref().unwrap_or_default(),
            )
            .await
        }
        (Resource::EventDeliveries(id), &Method::GET) => {
            events::deliveries(app, req.principal, id).await
        }
        _ => Err(ApiError::method_not_allowed(&req.route.allow_header())),
    }
}
