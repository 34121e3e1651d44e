//! The REST API as plain async functions: [`route`] maps a path to a [`Route`], and
//! [`dispatch`] runs the handler for an authenticated [`ApiRequest`]. Nothing here touches
//! pingora; `gateway` reads the request and writes the [`Response`].

pub mod client_encryption;
pub mod payment_methods;
pub mod purchase_intents;
pub mod sandbox;
pub mod tokens;

use crate::auth::{Authenticator, Principal};
use crate::clock::Clock;
use crate::config::{valid_id, Config};
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::vault::Vault;
use bytes::Bytes;
use http::Method;
use std::sync::Arc;

/// Everything a handler can reach.
pub struct App {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub vault: Arc<Vault>,
    pub auth: Authenticator,
    pub clock: Arc<dyn Clock>,
    pub metrics: Metrics,
    /// Where purchase-intent credentials come from (the sandbox issuer by default).
    pub issuer: Arc<dyn crate::issuer::Issuer>,
    /// Purchase intents whose verification is running (a second one at once is 409).
    pub verifying: purchase_intents::InFlight,
}

impl App {
    /// Unix seconds now.
    pub fn now_secs(&self) -> u64 {
        u64::try_from(self.clock.now().unix_timestamp()).unwrap_or(0)
    }
}

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Health,
    Metrics,
    /// `GET /openapi.json`
    OpenApi,
    PaymentMethods,
    PaymentMethod(String),
    /// `/purchase-intents` (also `/tenants/:t/purchase-intent`, singular).
    PurchaseIntents,
    PurchaseIntent(String),
    /// `POST .../purchase-intents/:id/verify`
    PurchaseIntentVerify(String),
    /// `POST /projects/:projectId/sandbox/authorizations`
    SandboxAuthorizations,
    /// `ANY /projects/:projectId/proxy`, forwarded by `gateway` (never dispatched here).
    Proxy,
    /// `GET /projects/:projectId/client-encryption-key`
    ClientEncryptionKey,
    /// `POST /projects/:projectId/tokens` (the token vault)
    Tokens,
}

/// A matched path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The `:projectId` (or `:tenantId`) of the path; `None` for service routes.
    pub project: Option<String>,
    pub resource: Resource,
}

impl Route {
    /// Methods the route answers, for 405 and `Allow`.
    pub fn allowed(&self) -> &'static [Method] {
        match self.resource {
            Resource::Health
            | Resource::Metrics
            | Resource::OpenApi
            | Resource::ClientEncryptionKey => &[Method::GET],
            Resource::Tokens => &[Method::POST],
            Resource::PaymentMethods => &[Method::GET, Method::POST],
            Resource::PaymentMethod(_) => &[Method::GET, Method::DELETE],
            Resource::PurchaseIntents => &[Method::POST],
            Resource::PurchaseIntent(_) => &[Method::GET],
            Resource::PurchaseIntentVerify(_) | Resource::SandboxAuthorizations => &[Method::POST],
            Resource::Proxy => &[
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
                Method::HEAD,
                Method::OPTIONS,
            ],
        }
    }

    /// The `Allow` header value.
    pub fn allow_header(&self) -> String {
        self.allowed()
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A label for metrics and logs: the route's shape, never its ids.
    pub fn label(&self) -> &'static str {
        match self.resource {
            Resource::Health => "health",
            Resource::Metrics => "metrics",
            Resource::OpenApi => "openapi",
            Resource::PaymentMethods => "payment_methods",
            Resource::PaymentMethod(_) => "payment_method",
            Resource::PurchaseIntents => "purchase_intents",
            Resource::PurchaseIntent(_) => "purchase_intent",
            Resource::PurchaseIntentVerify(_) => "purchase_intent_verify",
            Resource::SandboxAuthorizations => "sandbox_authorizations",
            Resource::Proxy => "proxy",
            Resource::ClientEncryptionKey => "client_encryption_key",
            Resource::Tokens => "tokens",
        }
    }

    /// Whether the route needs a JWT.
    pub fn needs_auth(&self) -> bool {
        self.project.is_some()
    }
}

/// Matches a path (without query) to a route. Both path forms of the specification are
/// served: `/projects/:projectId/...` and `/tenants/:tenantId/...`.
pub fn route(path: &str) -> Option<Route> {
    let path = path
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path);
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let service = |resource| {
        Some(Route {
            project: None,
            resource,
        })
    };
    match segments.as_slice() {
        ["health"] => service(Resource::Health),
        ["metrics"] => service(Resource::Metrics),
        ["openapi.json"] => service(Resource::OpenApi),
        ["projects" | "tenants", project, rest @ ..] if valid_id(project) => {
            let resource = match rest {
                ["payment-methods"] => Resource::PaymentMethods,
                ["payment-methods", id] if valid_id(id) => Resource::PaymentMethod(id.to_string()),
                ["purchase-intents" | "purchase-intent"] => Resource::PurchaseIntents,
                ["purchase-intents" | "purchase-intent", id] if valid_id(id) => {
                    Resource::PurchaseIntent(id.to_string())
                }
                ["purchase-intents" | "purchase-intent", id, "verify"] if valid_id(id) => {
                    Resource::PurchaseIntentVerify(id.to_string())
                }
                ["sandbox", "authorizations"] => Resource::SandboxAuthorizations,
                ["proxy"] => Resource::Proxy,
                ["client-encryption-key"] => Resource::ClientEncryptionKey,
                ["tokens"] => Resource::Tokens,
                _ => return None,
            };
            Some(Route {
                project: Some(project.to_string()),
                resource,
            })
        }
        _ => None,
    }
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
    use payment_methods as pm;
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
            purchase_intents::verify(app, req.principal, id, body).await
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

/// A request body that must be a JSON object.
pub fn json_object(body: &[u8]) -> ApiResult<serde_json::Map<String, serde_json::Value>> {
    match crate::http::parse_json(body)? {
        serde_json::Value::Object(obj) => Ok(obj),
        _ => Err(ApiError::invalid_request("The body must be a JSON object.")),
    }
}

/// Checks a body's `entityId` against the token's subject: a different entity is 403; a
/// missing one is 400 where `required`, else the subject is meant.
pub fn check_entity(
    obj: &serde_json::Map<String, serde_json::Value>,
    principal: &Principal,
    required: bool,
) -> ApiResult<()> {
    use serde_json::Value;
    match obj.get("entityId") {
        None | Some(Value::Null) if required => {
            Err(ApiError::invalid_field("entityId", "required"))
        }
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(e)) if *e == principal.entity => Ok(()),
        Some(Value::String(_)) => Err(ApiError::forbidden(
            "entityId does not match the token's subject.",
        )),
        Some(_) => Err(ApiError::invalid_field("entityId", "must be a string")),
    }
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Query parameters as (name, value) pairs, percent-decoding `%XX` and `+`.
pub fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    let decode = |s: &str| -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match (hex_val(bytes[i + 1]), hex_val(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push(h * 16 + l);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = route("/projects/p1/payment-methods").unwrap_or_else(|| unreachable!());
        assert_eq!(r.project.as_deref(), Some("p1"));
        assert_eq!(r.resource, Resource::PaymentMethods);
        assert_eq!(
            route("/tenants/p1/payment-methods/pm_1/").map(|r| r.resource),
            Some(Resource::PaymentMethod("pm_1".into()))
        );
        assert_eq!(route("/health").map(|r| r.resource), Some(Resource::Health));
        for (path, resource) in [
            ("/projects/p1/purchase-intents", Resource::PurchaseIntents),
            ("/tenants/p1/purchase-intent", Resource::PurchaseIntents),
            ("/tenants/p1/purchase-intents/", Resource::PurchaseIntents),
            (
                "/tenants/p1/purchase-intent/pi_1",
                Resource::PurchaseIntent("pi_1".into()),
            ),
            (
                "/projects/p1/purchase-intents/pi_1/verify",
                Resource::PurchaseIntentVerify("pi_1".into()),
            ),
            (
                "/projects/p1/sandbox/authorizations",
                Resource::SandboxAuthorizations,
            ),
        ] {
            assert_eq!(route(path).map(|r| r.resource), Some(resource), "{path}");
        }
        for bad in [
            "",
            "/",
            "/projects",
            "/projects/p1",
            "/projects/p1/nope",
            "/projects/a b/payment-methods",
            "health",
        ] {
            assert_eq!(route(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn query_decoding() {
        assert_eq!(
            query_pairs(Some("limit=5&type=card&x=a%20b+c&flag&bad=%zz&end=%4")),
            vec![
                ("limit".into(), "5".into()),
                ("type".into(), "card".into()),
                ("x".into(), "a b c".into()),
                ("flag".into(), "".into()),
                ("bad".into(), "%zz".into()),
                ("end".into(), "%4".into()),
            ]
        );
    }
}
