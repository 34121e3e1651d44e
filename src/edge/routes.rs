//! Routing: a request path to a [`Route`] (the resource it names and its project), the
//! methods each route answers, and the label metrics and logs use. Both path forms of the
//! specification are served: `/projects/:projectId/...` and `/tenants/:tenantId/...`.

use crate::config::valid_id;
use http::Method;

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Health,
    /// `GET /ready`: the store answers (the keys were checked at start).
    Ready,
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
    /// `.../purchase-intents/:id/browser-sessions`: the intent's id.
    BrowserSessions(String),
    /// `.../purchase-intents/:id/browser-sessions/:sessionId`: the intent's and the
    /// session's ids.
    BrowserSession(String, String),
    /// `POST /projects/:projectId/sandbox/authorizations`
    SandboxAuthorizations,
    /// `ANY /projects/:projectId/proxy`, forwarded by `gateway` (never dispatched here).
    Proxy,
    /// `GET /projects/:projectId/client-encryption-key`
    ClientEncryptionKey,
    /// `POST /projects/:projectId/tokens` (the token vault)
    Tokens,
    /// `GET /projects/:projectId/events`
    Events,
    /// `/projects/:projectId/webhook-endpoints`
    WebhookEndpoints,
    WebhookEndpoint(String),
    /// `POST .../webhook-endpoints/:id/rotate-secret`
    WebhookEndpointRotate(String),
    /// `/projects/:projectId/passkeys` (the token's entity's)
    Passkeys,
    /// `POST .../passkeys/registration-options`
    PasskeyRegistrationOptions,
    /// `DELETE .../passkeys/:id`
    Passkey(String),
    /// `POST .../events/:id/redeliver`
    EventRedeliver(String),
    /// `GET .../events/:id/deliveries`
    EventDeliveries(String),
    /// `POST /mcp` (the project is the token's) or `POST /projects/:projectId/mcp`: the MCP
    /// server (`edge::mcp`).
    Mcp,
    /// `POST /agentic_commerce/delegate_payment` (the project is the token's): ACP's Delegate
    /// Payment API (`edge::acp`).
    DelegatePayment,
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
            | Resource::Ready
            | Resource::Metrics
            | Resource::OpenApi
            | Resource::ClientEncryptionKey
            | Resource::Events
            | Resource::EventDeliveries(_) => &[Method::GET],
            Resource::WebhookEndpoints => &[Method::GET, Method::POST],
            Resource::WebhookEndpoint(_) => &[Method::GET, Method::DELETE],
            Resource::WebhookEndpointRotate(_) | Resource::EventRedeliver(_) => &[Method::POST],
            Resource::Passkeys => &[Method::GET, Method::POST],
            Resource::PasskeyRegistrationOptions => &[Method::POST],
            Resource::Passkey(_) => &[Method::DELETE],
            Resource::Tokens => &[Method::POST],
            Resource::PaymentMethods => &[Method::GET, Method::POST],
            Resource::PaymentMethod(_) => &[Method::GET, Method::DELETE],
            Resource::PurchaseIntents => &[Method::POST],
            Resource::PurchaseIntent(_) => &[Method::GET],
            Resource::BrowserSessions(_) => &[Method::GET, Method::POST],
            Resource::BrowserSession(..) => &[Method::GET, Method::DELETE],
            Resource::PurchaseIntentVerify(_)
            | Resource::SandboxAuthorizations
            | Resource::Mcp
            | Resource::DelegatePayment => &[Method::POST],
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

    /// Methods a public-role token may call: what a browser page calls (with the token the
    /// merchant's backend gave it), and the only requests [`super::cors`] lets other origins
    /// make. The handlers enforce the role; this list follows them (a test holds the two
    /// together).
    pub fn browser_methods(&self) -> &'static [Method] {
        match self.resource {
            Resource::PaymentMethods => &[Method::GET, Method::POST],
            Resource::PaymentMethod(_) | Resource::ClientEncryptionKey => &[Method::GET],
            Resource::Tokens | Resource::PurchaseIntentVerify(_) => &[Method::POST],
            Resource::Passkeys => &[Method::GET, Method::POST],
            Resource::PasskeyRegistrationOptions => &[Method::POST],
            Resource::Passkey(_) => &[Method::DELETE],
            Resource::Health
            | Resource::Ready
            | Resource::Metrics
            | Resource::OpenApi
            | Resource::PurchaseIntents
            | Resource::PurchaseIntent(_)
            | Resource::BrowserSessions(_)
            | Resource::BrowserSession(..)
            | Resource::SandboxAuthorizations
            | Resource::Proxy
            | Resource::Events
            | Resource::WebhookEndpoints
            | Resource::WebhookEndpoint(_)
            | Resource::WebhookEndpointRotate(_)
            | Resource::EventRedeliver(_)
            | Resource::EventDeliveries(_)
            | Resource::Mcp
            | Resource::DelegatePayment => &[],
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
            Resource::Ready => "ready",
            Resource::Metrics => "metrics",
            Resource::OpenApi => "openapi",
            Resource::PaymentMethods => "payment_methods",
            Resource::PaymentMethod(_) => "payment_method",
            Resource::PurchaseIntents => "purchase_intents",
            Resource::PurchaseIntent(_) => "purchase_intent",
            Resource::PurchaseIntentVerify(_) => "purchase_intent_verify",
            Resource::BrowserSessions(_) => "browser_sessions",
            Resource::BrowserSession(..) => "browser_session",
            Resource::SandboxAuthorizations => "sandbox_authorizations",
            Resource::Proxy => "proxy",
            Resource::ClientEncryptionKey => "client_encryption_key",
            Resource::Tokens => "tokens",
            Resource::Events => "events",
            Resource::WebhookEndpoints => "webhook_endpoints",
            Resource::WebhookEndpoint(_) => "webhook_endpoint",
            Resource::WebhookEndpointRotate(_) => "webhook_endpoint_rotate",
            Resource::Passkeys => "passkeys",
            Resource::PasskeyRegistrationOptions => "passkey_registration_options",
            Resource::Passkey(_) => "passkey",
            Resource::EventRedeliver(_) => "event_redeliver",
            Resource::EventDeliveries(_) => "event_deliveries",
            Resource::Mcp => "mcp",
            Resource::DelegatePayment => super::acp::LABEL,
        }
    }

    /// Whether the route needs a JWT.
    pub fn needs_auth(&self) -> bool {
        self.project.is_some() || matches!(self.resource, Resource::Mcp | Resource::DelegatePayment)
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
        ["ready"] => service(Resource::Ready),
        ["metrics"] => service(Resource::Metrics),
        ["openapi.json"] => service(Resource::OpenApi),
        ["mcp"] => service(Resource::Mcp),
        ["agentic_commerce", "delegate_payment"] => service(Resource::DelegatePayment),
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
                ["purchase-intents" | "purchase-intent", id, "browser-sessions"]
                    if valid_id(id) =>
                {
                    Resource::BrowserSessions(id.to_string())
                }
                ["purchase-intents" | "purchase-intent", id, "browser-sessions", sid]
                    if valid_id(id) && valid_id(sid) =>
                {
                    Resource::BrowserSession(id.to_string(), sid.to_string())
                }
                ["sandbox", "authorizations"] => Resource::SandboxAuthorizations,
                ["proxy"] => Resource::Proxy,
                ["mcp"] => Resource::Mcp,
                ["client-encryption-key"] => Resource::ClientEncryptionKey,
                ["tokens"] => Resource::Tokens,
                ["events"] => Resource::Events,
                ["webhook-endpoints"] => Resource::WebhookEndpoints,
                ["webhook-endpoints", id] if valid_id(id) => {
                    Resource::WebhookEndpoint(id.to_string())
                }
                ["webhook-endpoints", id, "rotate-secret"] if valid_id(id) => {
                    Resource::WebhookEndpointRotate(id.to_string())
                }
                ["passkeys"] => Resource::Passkeys,
                ["passkeys", "registration-options"] => Resource::PasskeyRegistrationOptions,
                ["passkeys", id] if valid_id(id) => Resource::Passkey(id.to_string()),
                ["events", id, "redeliver"] if valid_id(id) => {
                    Resource::EventRedeliver(id.to_string())
                }
                ["events", id, "deliveries"] if valid_id(id) => {
                    Resource::EventDeliveries(id.to_string())
                }
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
            ("/projects/p1/passkeys", Resource::Passkeys),
            (
                "/projects/p1/passkeys/registration-options",
                Resource::PasskeyRegistrationOptions,
            ),
            (
                "/tenants/p1/passkeys/pk_1",
                Resource::Passkey("pk_1".into()),
            ),
            (
                "/projects/p1/events/evt_1/redeliver",
                Resource::EventRedeliver("evt_1".into()),
            ),
            (
                "/projects/p1/events/evt_1/deliveries",
                Resource::EventDeliveries("evt_1".into()),
            ),
            (
                "/projects/p1/purchase-intents/pi_1/browser-sessions",
                Resource::BrowserSessions("pi_1".into()),
            ),
            (
                "/tenants/p1/purchase-intent/pi_1/browser-sessions/bs_1",
                Resource::BrowserSession("pi_1".into(), "bs_1".into()),
            ),
            ("/mcp", Resource::Mcp),
            ("/projects/p1/mcp", Resource::Mcp),
            (
                "/agentic_commerce/delegate_payment",
                Resource::DelegatePayment,
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

    /// Every documented path and method is a route that answers that method (a documented
    /// preflight: the methods the edge opens to browsers), every route form is there, and
    /// every `$ref` resolves.
    #[test]
    fn every_route_form_is_described_and_refs_resolve() {
        let doc: serde_json::Value =
            serde_json::from_str(&crate::api::openapi::DOCUMENT).unwrap_or_default();
        let paths = doc["paths"].as_object().cloned().unwrap_or_default();
        assert_eq!(paths.len(), 2 * 21 + 5 + 6);
        let text = doc.to_string();
        let schemas = &doc["components"]["schemas"];
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            assert!(schemas.get(&name).is_some(), "{name}");
        }
        for (path, item) in &paths {
            let concrete = path
                .replace("{projectId}", "p1")
                .replace("{id}", "x1")
                .replace("{sessionId}", "x2");
            let route = route(&concrete);
            let Some(route) = route else {
                unreachable!("{path} is not a route")
            };
            // The preflight documented is the one the edge answers, with the same methods.
            let browser: Vec<&str> = route.browser_methods().iter().map(|m| m.as_str()).collect();
            let documented = &item["options"]["responses"]["204"]["headers"]
                ["Access-Control-Allow-Methods"]["schema"]["enum"][0];
            match browser.as_slice() {
                [] => assert!(item.get("options").is_none(), "{path}"),
                methods => assert_eq!(documented, &methods.join(", ").as_str(), "{path}"),
            }
            for method in item.as_object().into_iter().flat_map(|m| m.keys()) {
                if method == "options" {
                    continue;
                }
                assert!(
                    route
                        .allowed()
                        .iter()
                        .any(|m| m.as_str().eq_ignore_ascii_case(method)),
                    "{method} {path} is not answered"
                );
            }
        }
    }
}
