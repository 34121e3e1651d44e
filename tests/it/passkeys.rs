//! Passkeys over HTTP: the routes of a project with `verification.passkeys` (both roles, the
//! token's entity), their CORS preflights, a registration started before a restart and
//! finished after it, 404 in a project without passkeys, and a config that names a bad key.
//! The signed ceremonies are in the handler tests and sdk/js's Chromium tests.

use crate::common::*;
use serde_json::json;

const PASSKEY_PROJECT: &str = "proj_passkeys";
const SHOP: &str = "http://shop.localhost:5173";

fn project_yaml(passkeys: &str) -> String {
    format!(
        "  - id: {PASSKEY_PROJECT}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    \
         pan: enabled\n    \
         cors:\n      allowed_origins: [\"{SHOP}\"]\n    \
         verification:\n      passkeys: {passkeys}\n"
    )
}

fn start() -> Server {
    Server::start_with(Options {
        extra_project_yaml: project_yaml(&format!("{{rp_id: localhost, origins: [\"{SHOP}\"]}}")),
        ..Options::default()
    })
}

fn token(sub: &str, role: &str) -> String {
    token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        PASSKEY_PROJECT,
        sub,
        role,
        300,
    )
}

#[test]
fn passkey_routes_for_the_tokens_entity_survive_a_restart() {
    let mut server = start();
    let public = token("user_1", "public");
    let p = format!("/projects/{PASSKEY_PROJECT}/passkeys");
    let started = server.call(
        "POST",
        &format!("{p}/registration-options"),
        Some(&public),
        Some(&json!({})),
    );
    assert_eq!(started.status, 200, "{}", started.text);
    let options = &started.json["options"];
    assert_eq!(options["rp"]["id"], "localhost");
    assert_eq!(
        options["authenticatorSelection"]["userVerification"],
        "required"
    );
    let reg = started.json["registrationId"].as_str().unwrap().to_string();
    // Another entity named: 403; the wrong method: 405.
    let other = server.call(
        "POST",
        &format!("{p}/registration-options"),
        Some(&public),
        Some(&json!({"entityId": "user_2"})),
    );
    other.assert_error(403, "forbidden");
    let wrong = server.call(
        "GET",
        &format!("{p}/registration-options"),
        Some(&public),
        None,
    );
    wrong.assert_error(405, "methodNotAllowed");

    // Started on one run, finished on the next: the state is in the store (the credential
    // is not a real one, so it is refused as a passkey, not as an unknown registration).
    server.restart();
    let credential = json!({"id": "AAAA", "rawId": "AAAA", "type": "public-key", "extensions": {},
        "response": {"attestationObject": "AAAA", "clientDataJSON": "AAAA"}});
    let finish = |reg: &str| {
        server.call(
            "POST",
            &p,
            Some(&public),
            Some(&json!({"registrationId": reg, "credential": credential})),
        )
    };
    let refused = finish(&reg);
    refused.assert_error(400, "invalidPasskey");
    assert!(
        refused.json["error"]["details"]["reason"].is_string(),
        "{}",
        refused.text
    );
    // Used once.
    let again = finish(&reg);
    again.assert_error(400, "invalidRequest");
    assert!(again.json["error"]["details"]["fields"]["registrationId"].is_string());

    let private = token("user_1", "private");
    let listed = server.call("GET", &p, Some(&private), None);
    assert_eq!((listed.status, listed.json.clone()), (200, json!([])));
    server
        .call("DELETE", &format!("{p}/pk_nope"), Some(&public), None)
        .assert_error(404, "notFound");

    // A project without passkeys: 404 on every passkey route.
    let t = server.token("user_1", "public");
    for (method, path) in [
        (
            "POST",
            format!("/projects/{PROJECT}/passkeys/registration-options"),
        ),
        ("GET", format!("/projects/{PROJECT}/passkeys")),
        ("DELETE", format!("/projects/{PROJECT}/passkeys/pk_x")),
    ] {
        let body = (method == "POST").then(|| json!({}));
        let r = server.call(method, &path, Some(&t), body.as_ref());
        r.assert_error(404, "notFound");
        assert!(r.text.contains("verification.passkeys"), "{}", r.text);
    }
}

#[test]
fn browsers_of_a_listed_origin_may_call_the_passkey_routes() {
    let server = start();
    let p = format!("/projects/{PASSKEY_PROJECT}/passkeys");
    for (path, method, methods) in [
        (p.clone(), "POST", "GET, POST"),
        (format!("{p}/registration-options"), "POST", "POST"),
        (format!("{p}/pk_x"), "DELETE", "DELETE"),
    ] {
        let r = server.raw(
            "OPTIONS",
            &path,
            &[
                ("Origin", SHOP),
                ("Access-Control-Request-Method", method),
                (
                    "Access-Control-Request-Headers",
                    "authorization, content-type",
                ),
            ],
            None,
        );
        assert_eq!(r.status, 204, "{path} {method}: {}", r.text);
        assert_eq!(r.header("access-control-allow-origin"), Some(SHOP));
        assert_eq!(
            r.header("access-control-allow-methods"),
            Some(methods),
            "{path}"
        );
    }
}

#[test]
fn a_bad_passkey_config_stops_the_start_naming_the_key() {
    let mut server = start();
    server.stop(false);
    let config = std::fs::read_to_string(&server.config_path).unwrap();
    let bad = config.replace(
        &format!("{{rp_id: localhost, origins: [\"{SHOP}\"]}}"),
        "{rp_id: shop.example, origins: [\"https://other.example\"]}",
    );
    assert_ne!(bad, config);
    std::fs::write(&server.config_path, bad).unwrap();
    let said = refused_start(&server.config_path);
    assert!(
        said.contains("verification.passkeys.origins[0]") && said.contains("not on `shop.example`"),
        "{said}"
    );
}
