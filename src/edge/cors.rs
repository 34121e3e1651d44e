//! CORS: which pages of other origins may call paycred from a browser.
//!
//! A merchant's page (`https://shop.example`) calls paycred (`https://pay.example`) with the
//! public-role token its backend gave it. The browser lets it only if paycred allows that
//! origin: first a preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`, no
//! token), then the request itself, whose answer must name the origin.
//!
//! - Only the routes and methods a public-role token may call
//!   ([`Route::browser_methods`]) answer CORS, and only to the project's
//!   `cors.allowed_origins`, compared byte for byte (no wildcard: the token is a bearer
//!   credential). Private-role routes and the proxy never do: a private token does not belong
//!   in a browser.
//! - A preflight is answered here, before authentication: 204 with the allowed methods and
//!   headers and a max age, or 403 without any CORS header (the browser then refuses to send
//!   the request). On the proxy route a preflight is never forwarded to a target.
//! - Every answer of a browser route carries `Vary: Origin` (it depends on the `Origin`
//!   header); an allowed origin also gets `Access-Control-Allow-Origin`, errors included, so
//!   that the page can read the error envelope.

use super::routes::Route;
use crate::error::ApiError;
use crate::http::Response;
use http::{header, HeaderMap, Method};

/// Request headers a page may send.
pub const ALLOW_HEADERS: &str = "Authorization, Content-Type, Idempotency-Key";
/// How long a browser may keep a preflight's answer, seconds.
pub const MAX_AGE_SECS: u32 = 600;
/// Answer headers a page may read besides the simple ones.
pub const EXPOSE_HEADERS: &str = "Idempotent-Replayed, Retry-After, X-Total-Count";

/// Whether the request is a CORS preflight: `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The `Origin` of the request when it is one of `allowed`.
fn allowed_origin<'a>(allowed: &'a [String], headers: &HeaderMap) -> Option<&'a str> {
    let origin = headers.get(header::ORIGIN)?.as_bytes();
    allowed
        .iter()
        .find(|o| o.as_bytes() == origin)
        .map(String::as_str)
}

/// The answer to a preflight for `route`, from a project that allows `allowed` origins.
pub fn preflight(allowed: &[String], route: &Route, headers: &HeaderMap) -> Response {
    let methods = route.browser_methods();
    if methods.is_empty() {
        return Response::error(&ApiError::forbidden(
            "This route is not open to browsers: it needs a private-role token, which stays on the backend.",
        ));
    }
    let vary = ("Vary", "Origin, Access-Control-Request-Method".to_string());
    let asked = headers
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let refused = |message: &str| {
        let mut r = Response::error(&ApiError::forbidden(message));
        r.headers.push(vary.clone());
        r
    };
    let Some(origin) = allowed_origin(allowed, headers) else {
        return refused("This origin is not in the project's cors.allowed_origins.");
    };
    if !methods.iter().any(|m| m.as_str().as_bytes() == asked) {
        return refused("This method of this route is not open to browsers.");
    }
    let list = methods
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    let mut r = Response::empty(204);
    r.headers = vec![
        ("Access-Control-Allow-Origin", origin.to_string()),
        ("Access-Control-Allow-Methods", list),
        ("Access-Control-Allow-Headers", ALLOW_HEADERS.to_string()),
        ("Access-Control-Max-Age", MAX_AGE_SECS.to_string()),
        vary,
    ];
    r
}

/// The CORS headers of the answer to `method` on `route` (none when the route does not answer
/// browsers that method).
pub fn headers(
    allowed: &[String],
    route: &Route,
    method: &Method,
    headers: &HeaderMap,
) -> Vec<(&'static str, String)> {
    if !route.browser_methods().contains(method) {
        return Vec::new();
    }
    let mut out = vec![("Vary", "Origin".to_string())];
    if let Some(origin) = allowed_origin(allowed, headers) {
        out.push(("Access-Control-Allow-Origin", origin.to_string()));
        out.push(("Access-Control-Expose-Headers", EXPOSE_HEADERS.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::routes::route;

    const SHOP: &str = "https://shop.example";

    fn request(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap_or_else(|_| unreachable!()));
        }
        h
    }

    fn header<'a>(r: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        r.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn route_of(path: &str) -> Route {
        route(path).unwrap_or_else(|| unreachable!("{path}"))
    }

    #[test]
    fn a_preflight_is_options_with_origin_and_method() {
        let full = request(&[("origin", SHOP), ("access-control-request-method", "POST")]);
        assert!(is_preflight(&Method::OPTIONS, &full));
        assert!(!is_preflight(&Method::POST, &full));
        assert!(!is_preflight(
            &Method::OPTIONS,
            &request(&[("origin", SHOP)])
        ));
        assert!(!is_preflight(
            &Method::OPTIONS,
            &request(&[("access-control-request-method", "POST")])
        ));
    }

    #[test]
    fn preflights() {
        let allowed = [SHOP.to_string()];
        let verify = route_of("/projects/p1/purchase-intents/pi_1/verify");
        let ok = preflight(
            &allowed,
            &verify,
            &request(&[("origin", SHOP), ("access-control-request-method", "POST")]),
        );
        assert_eq!(ok.status, 204);
        assert!(ok.body.is_none());
        assert_eq!(
            header(&ok.headers, "access-control-allow-origin"),
            Some(SHOP)
        );
        assert_eq!(
            header(&ok.headers, "access-control-allow-methods"),
            Some("POST")
        );
        assert_eq!(
            header(&ok.headers, "access-control-allow-headers"),
            Some(ALLOW_HEADERS)
        );
        assert_eq!(header(&ok.headers, "access-control-max-age"), Some("600"));
        assert!(header(&ok.headers, "vary").is_some_and(|v| v.contains("Origin")));

        // Refused: no CORS header at all.
        let pm = route_of("/tenants/p1/payment-methods/pm_1");
        let intents = route_of("/projects/p1/purchase-intents");
        let proxy = route_of("/projects/p1/proxy");
        for (route, origin, method) in [
            (&verify, "https://evil.example", "POST"),
            (&verify, "https://shop.example:8443", "POST"),
            (&verify, "HTTPS://SHOP.EXAMPLE", "POST"),
            (&verify, SHOP, "GET"),
            (&pm, SHOP, "DELETE"),
            (&intents, SHOP, "POST"),
            (&proxy, SHOP, "POST"),
            (&proxy, SHOP, "OPTIONS"),
        ] {
            let r = preflight(
                &allowed,
                route,
                &request(&[
                    ("origin", origin),
                    ("access-control-request-method", method),
                ]),
            );
            assert_eq!(r.status, 403, "{origin} {method} {route:?}");
            assert!(
                !r.headers
                    .iter()
                    .any(|(n, _)| n.to_ascii_lowercase().starts_with("access-control-")),
                "{origin} {method} {route:?}: {:?}",
                r.headers
            );
        }
        // No origin allowed at all.
        let r = preflight(
            &[],
            &verify,
            &request(&[("origin", SHOP), ("access-control-request-method", "POST")]),
        );
        assert_eq!(r.status, 403);
    }

    #[test]
    fn answers_of_browser_routes_vary_on_origin() {
        let allowed = [SHOP.to_string()];
        let pms = route_of("/projects/p1/payment-methods");
        let from_shop = request(&[("origin", SHOP)]);
        let h = headers(&allowed, &pms, &Method::GET, &from_shop);
        assert_eq!(header(&h, "vary"), Some("Origin"));
        assert_eq!(header(&h, "access-control-allow-origin"), Some(SHOP));
        assert!(header(&h, "access-control-expose-headers")
            .is_some_and(|v| v.contains("X-Total-Count")));
        // Another origin, or none: the answer still depends on Origin.
        for other in [request(&[("origin", "https://evil.example")]), request(&[])] {
            let h = headers(&allowed, &pms, &Method::POST, &other);
            assert_eq!(h, vec![("Vary", "Origin".to_string())]);
        }
        // Routes and methods a browser may not call: nothing.
        for (path, method) in [
            ("/projects/p1/payment-methods/pm_1", Method::DELETE),
            ("/projects/p1/purchase-intents", Method::POST),
            ("/projects/p1/purchase-intents/pi_1", Method::GET),
            ("/projects/p1/proxy", Method::POST),
            ("/projects/p1/sandbox/authorizations", Method::POST),
        ] {
            assert!(
                headers(&allowed, &route_of(path), &method, &from_shop).is_empty(),
                "{method} {path}"
            );
        }
    }
}
