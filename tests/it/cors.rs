//! CORS per project: preflights answered before authentication for the public role's routes
//! and a listed origin only; actual answers name the origin and vary on it; unlisted origins,
//! private-role routes and the proxy get no CORS header, and a browser's preflight to the
//! proxy never reaches a target.

use crate::common::upstream::Upstream;
use crate::common::*;

const CORS_PROJECT: &str = "proj_cors";
const SHOP: &str = "http://shop.localhost:5173";
const EVIL: &str = "http://evil.localhost:5173";

fn start() -> Server {
    Server::start_with(Options {
        extra_project_yaml: format!(
            "  - id: {CORS_PROJECT}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    \
             pan: enabled\n    token_vault_key: true\n    \
             proxy: {{allowed_hosts: [127.0.0.1], allow_http: true, allow_private_networks: true}}\n    \
             cors:\n      allowed_origins: [\"{SHOP}\", \"https://other.example\"]\n"
        ),
        ..Options::default()
    })
}

fn token(role: &str) -> String {
    token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        CORS_PROJECT,
        "user_1",
        role,
        300,
    )
}

fn preflight(server: &Server, path: &str, origin: &str, method: &str) -> Reply {
    server.raw(
        "OPTIONS",
        path,
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", method),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type",
            ),
        ],
        None,
    )
}

/// No `Access-Control-*` header at all: the browser refuses the call.
fn assert_no_cors(r: &Reply, what: &str) {
    let cors: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.to_ascii_lowercase().starts_with("access-control-"))
        .collect();
    assert!(cors.is_empty(), "{what}: {cors:?}");
}

fn vary_origin(r: &Reply) -> bool {
    r.headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("vary") && v.contains("Origin"))
}

#[test]
fn preflights_of_the_public_routes_are_answered_before_authentication() {
    let server = start();
    let p = format!("/projects/{CORS_PROJECT}");
    for (path, method, methods) in [
        (format!("{p}/payment-methods"), "GET", "GET, POST"),
        (format!("{p}/payment-methods"), "POST", "GET, POST"),
        (format!("{p}/payment-methods/pm_x"), "GET", "GET"),
        (format!("{p}/tokens"), "POST", "POST"),
        (format!("{p}/client-encryption-key"), "GET", "GET"),
        (format!("{p}/purchase-intents/pi_x/verify"), "POST", "POST"),
        (
            format!("/tenants/{CORS_PROJECT}/purchase-intent/pi_x/verify"),
            "POST",
            "POST",
        ),
    ] {
        let r = preflight(&server, &path, SHOP, method);
        assert_eq!(r.status, 204, "{method} {path}: {}", r.text);
        assert!(r.text.is_empty());
        assert_eq!(
            r.header("Access-Control-Allow-Origin"),
            Some(SHOP),
            "{path}"
        );
        assert_eq!(r.header("Access-Control-Allow-Methods"), Some(methods));
        let allowed = r.header("Access-Control-Allow-Headers").unwrap();
        for h in ["Authorization", "Content-Type", "Idempotency-Key"] {
            assert!(allowed.contains(h), "{allowed}");
        }
        assert_eq!(r.header("Access-Control-Max-Age"), Some("600"));
        assert!(vary_origin(&r), "{:?}", r.headers);
    }
}

#[test]
fn answers_name_a_listed_origin_and_vary_on_it() {
    let server = start();
    let path = format!("/projects/{CORS_PROJECT}/payment-methods");
    let auth = format!("Bearer {}", token("public"));
    let r = server.raw(
        "GET",
        &path,
        &[("Authorization", &auth), ("Origin", SHOP)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some(SHOP));
    assert!(r
        .header("Access-Control-Expose-Headers")
        .is_some_and(|h| h.contains("Idempotent-Replayed")));
    assert!(vary_origin(&r));

    // An error answer names it too, so that the page can read the envelope.
    let r = server.raw("GET", &path, &[("Origin", SHOP)], None);
    r.assert_error(401, "unauthorized");
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some(SHOP));

    // An unlisted origin (or a listed one with another port or case): served as a
    // server-to-server call would be, with no CORS header; the answer still varies on Origin.
    for origin in [
        EVIL,
        "http://shop.localhost:5174",
        "HTTP://SHOP.LOCALHOST:5173",
    ] {
        let r = server.raw(
            "GET",
            &path,
            &[("Authorization", &auth), ("Origin", origin)],
            None,
        );
        assert_eq!(r.status, 200);
        assert_no_cors(&r, origin);
        assert!(vary_origin(&r), "{origin}");
    }
    // No Origin at all (curl, a backend): the same answer as before.
    let r = server.raw("GET", &path, &[("Authorization", &auth)], None);
    assert_eq!(r.status, 200);
    assert_no_cors(&r, "no origin");
}

#[test]
fn unlisted_origins_private_routes_and_other_projects_get_no_cors() {
    let server = start();
    let p = format!("/projects/{CORS_PROJECT}");
    for (path, origin, method) in [
        // Not listed.
        (format!("{p}/payment-methods"), EVIL, "GET"),
        (format!("{p}/purchase-intents/pi_x/verify"), "null", "POST"),
        // A method the public role may not call.
        (format!("{p}/payment-methods/pm_x"), SHOP, "DELETE"),
        (format!("{p}/purchase-intents/pi_x/verify"), SHOP, "GET"),
        // Private-role routes.
        (format!("{p}/purchase-intents"), SHOP, "POST"),
        (format!("{p}/purchase-intents/pi_x"), SHOP, "GET"),
        (format!("{p}/sandbox/authorizations"), SHOP, "POST"),
        // A project that lists no origin.
        (format!("/projects/{PROJECT}/payment-methods"), SHOP, "GET"),
    ] {
        let r = preflight(&server, &path, origin, method);
        r.assert_error(403, "forbidden");
        assert_no_cors(&r, &format!("{origin} {method} {path}"));
    }
    // Actual requests of private routes from a listed origin: no CORS header either.
    let auth = format!("Bearer {}", token("private"));
    let r = server.raw(
        "GET",
        &format!("{p}/purchase-intents/pi_x"),
        &[("Authorization", &auth), ("Origin", SHOP)],
        None,
    );
    r.assert_error(404, "notFound");
    assert_no_cors(&r, "private route");
    // Service routes have no project, so no CORS.
    let r = server.raw("GET", "/health", &[("Origin", SHOP)], None);
    assert_eq!(r.status, 200);
    assert_no_cors(&r, "/health");
}

#[test]
fn a_browser_preflight_to_the_proxy_is_never_forwarded() {
    let server = start();
    let target = Upstream::start();
    let path = format!("/projects/{CORS_PROJECT}/proxy");
    for method in ["POST", "GET", "OPTIONS"] {
        let r = server.raw(
            "OPTIONS",
            &path,
            &[
                ("Origin", SHOP),
                ("Access-Control-Request-Method", method),
                ("Access-Control-Request-Headers", "svc-target-url"),
                ("Svc-Target-URL", &target.url("/pf")),
            ],
            None,
        );
        r.assert_error(403, "forbidden");
        assert_no_cors(&r, method);
    }
    assert!(target.requests().is_empty(), "{:?}", target.requests());
    assert_eq!(target.connections(), 0);

    // The caller's own OPTIONS (no preflight headers) is still forwarded, and an Origin on a
    // proxied call earns no CORS header from paycred.
    let auth = format!("Bearer {}", token("private"));
    let r = server.raw(
        "OPTIONS",
        &path,
        &[
            ("Authorization", &auth),
            ("Origin", SHOP),
            ("Svc-Target-URL", &target.url("/own")),
        ],
        None,
    );
    assert_eq!(r.status, 201, "the target's answer: {}", r.text);
    assert_no_cors(&r, "proxied OPTIONS");
    let seen = target.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("OPTIONS", "/own")
    );
}
