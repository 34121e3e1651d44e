//! Client encryption (`GET .../client-encryption-key`, `encryptedCard`) and the token vault
//! (`POST .../tokens`, `tokenId`) against the real server. JWEs are made here with josekit from
//! the key the server publishes, as a browser SDK would.

use crate::common::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use josekit::jwe::{self, JweHeader, ECDH_ES, ECDH_ES_A256KW};
use josekit::jwk::alg::ec::{EcCurve, EcKeyPair};
use josekit::jwk::Jwk;
use serde_json::{json, Value};

fn key_path() -> String {
    format!("/projects/{PROJECT}/client-encryption-key")
}

fn pm_path() -> String {
    format!("/projects/{PROJECT}/payment-methods")
}

fn tokens_path() -> String {
    format!("/projects/{PROJECT}/tokens")
}

fn card_json(number: &str) -> Value {
    json!({"number": number, "expirationMonth": "12", "expirationYear": "2031", "cvc": CVC})
}

/// The server's current public key (JWK).
fn server_key(server: &Server) -> Value {
    let r = server.call(
        "GET",
        &key_path(),
        Some(&server.token("user_1", "public")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
}

/// A compact JWE of `plaintext` to `key` with the given `alg` ("ECDH-ES" or
/// "ECDH-ES+A256KW"), `enc` and `kid`.
fn encrypt_with(key: &Value, plaintext: &[u8], alg: &str, enc: &str, kid: Option<&str>) -> String {
    let mut public = key.as_object().unwrap().clone();
    public.remove("alg");
    public.remove("kid");
    let public = Jwk::from_map(public).unwrap();
    let mut header = JweHeader::new();
    header.set_content_encryption(enc);
    if let Some(kid) = kid {
        header.set_key_id(kid);
    }
    match alg {
        "ECDH-ES" => {
            let e = ECDH_ES.encrypter_from_jwk(&public).unwrap();
            jwe::serialize_compact(plaintext, &header, &e).unwrap()
        }
        "ECDH-ES+A256KW" => {
            let e = ECDH_ES_A256KW.encrypter_from_jwk(&public).unwrap();
            jwe::serialize_compact(plaintext, &header, &e).unwrap()
        }
        other => panic!("unsupported alg {other}"),
    }
}

/// An `encryptedCard` for the server's current key, as the SDK makes it.
pub(crate) fn encrypt_card(key: &Value, card: &Value) -> String {
    let kid = key["kid"].as_str().unwrap();
    encrypt_with(
        key,
        card.to_string().as_bytes(),
        "ECDH-ES",
        "A256GCM",
        Some(kid),
    )
}

fn create_pm(server: &Server, token: &str, body: &Value) -> Reply {
    server.call("POST", &pm_path(), Some(token), Some(body))
}

fn assert_bad_field(r: &Reply, field: &str) {
    r.assert_error(400, "invalidRequest");
    let fields = r.json["error"]["details"]["fields"].as_object().unwrap();
    assert!(fields.contains_key(field), "{field}: {}", r.text);
    for secret in ["4242424242424242", "424242424242", "\"123\"", "2031"] {
        assert!(!r.text.contains(secret), "leaked {secret}: {}", r.text);
    }
}

/// Replaces part `i` of a compact JWE.
fn with_part(compact: &str, i: usize, f: impl Fn(&str) -> String) -> String {
    let mut parts: Vec<String> = compact.split('.').map(str::to_string).collect();
    parts[i] = f(&parts[i]);
    parts.join(".")
}

/// Flips one byte in the middle of a base64url part.
fn flip(part: &str) -> String {
    let mut bytes = B64URL.decode(part).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    B64URL.encode(bytes)
}

#[test]
fn the_key_is_a_p256_jwk_for_ecdh_es_with_a_kid_and_both_roles_get_it() {
    let server = Server::start();
    let public = server_key(&server);
    assert_eq!(public["kty"], "EC");
    assert_eq!(public["crv"], "P-256");
    assert_eq!(public["alg"], "ECDH-ES");
    assert!(public["kid"].as_str().is_some_and(|k| !k.is_empty()));
    assert!(public.get("d").is_none(), "private part leaked: {public}");
    let private = server
        .call(
            "GET",
            &key_path(),
            Some(&server.token("user_2", "private")),
            None,
        )
        .json;
    assert_eq!(private, public, "one key per project, whoever asks");
    // Another project has its own key.
    let other = server.call(
        "GET",
        &format!("/projects/{OTHER_PROJECT}/client-encryption-key"),
        Some(&other_project_token("user_1", "public")),
        None,
    );
    assert_eq!(other.status, 200, "{}", other.text);
    assert_ne!(other.json["kid"], public["kid"]);
    assert_ne!(other.json["x"], public["x"]);
    // Without a token: 401.
    server
        .call("GET", &key_path(), None, None)
        .assert_error(401, "unauthorized");
    // The key survives a restart (stored wrapped by the master key).
    let mut server = server;
    server.restart();
    assert_eq!(server_key(&server), public);
}

#[test]
fn an_encrypted_card_creates_a_payment_method_like_a_raw_card_with_a_public_token() {
    let mut server = Server::start();
    let key = server_key(&server);
    let public = server.token("user_1", "public");
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": encrypt_card(&key, &card_json(VISA))}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["card"]["details"]["last4"], "4242");
    assert_eq!(r.json["card"]["details"]["bin"], "424242");
    assert_eq!(r.json["card"]["brand"], "visa");
    // Same card again, encrypted anew: the existing payment method (200), as for `card`.
    let again = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": encrypt_card(&key, &card_json(VISA))}),
    );
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["id"], r.json["id"]);
    // A public token still may not send a raw card.
    create_pm(&server, &public, &card_body("user_1", MASTERCARD, CVC))
        .assert_error(403, "forbidden");
    // The decrypted card is validated exactly like `card`, errors under `encryptedCard.`.
    let bad = json!({"number": "4242424242424241", "expirationMonth": "13", "expirationYear": "2031", "cvc": "12"});
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": encrypt_card(&key, &bad)}),
    );
    r.assert_error(400, "invalidRequest");
    let fields = r.json["error"]["details"]["fields"].as_object().unwrap();
    for f in [
        "encryptedCard.number",
        "encryptedCard.expirationMonth",
        "encryptedCard.cvc",
    ] {
        assert!(fields.contains_key(f), "{f}: {}", r.text);
    }
    assert!(!r.text.contains("4242424242424241"));
    assert!(
        !server.log().contains("4242424242424242"),
        "number in the log"
    );
}

#[test]
fn every_bad_jwe_is_a_400_naming_encrypted_card_without_the_plaintext() {
    let mut server = Server::start();
    let key = server_key(&server);
    let kid = key["kid"].as_str().unwrap().to_string();
    let card = card_json(VISA);
    let plain = card.to_string();
    let good = encrypt_card(&key, &card);

    let stranger = EcKeyPair::generate(EcCurve::P256)
        .unwrap()
        .to_jwk_public_key();
    let mut stranger: Value = serde_json::to_value(stranger.as_ref()).unwrap();
    stranger["kid"] = json!(kid);

    let header: Value =
        serde_json::from_slice(&B64URL.decode(good.split('.').next().unwrap()).unwrap()).unwrap();
    let mut extra = header.clone();
    extra["cty"] = json!("card");
    let mut other_epk = header.clone();
    other_epk["epk"]["x"] = stranger["x"].clone();
    other_epk["epk"]["y"] = stranger["y"].clone();

    let cases: Vec<(&str, String)> = vec![
        (
            "wrong key",
            encrypt_with(
                &stranger,
                plain.as_bytes(),
                "ECDH-ES",
                "A256GCM",
                Some(&kid),
            ),
        ),
        ("tampered ciphertext", with_part(&good, 3, flip)),
        ("tampered tag", with_part(&good, 4, flip)),
        ("tampered iv", with_part(&good, 2, flip)),
        (
            "tampered header (extra member)",
            with_part(&good, 0, |_| B64URL.encode(extra.to_string())),
        ),
        (
            "tampered header (other epk)",
            with_part(&good, 0, |_| B64URL.encode(other_epk.to_string())),
        ),
        (
            "wrong alg (ECDH-ES+A256KW)",
            encrypt_with(
                &key,
                plain.as_bytes(),
                "ECDH-ES+A256KW",
                "A256GCM",
                Some(&kid),
            ),
        ),
        (
            "wrong enc (A128GCM)",
            encrypt_with(&key, plain.as_bytes(), "ECDH-ES", "A128GCM", Some(&kid)),
        ),
        (
            "wrong enc (A256CBC-HS512)",
            encrypt_with(
                &key,
                plain.as_bytes(),
                "ECDH-ES",
                "A256CBC-HS512",
                Some(&kid),
            ),
        ),
        (
            "unknown kid",
            encrypt_with(
                &key,
                plain.as_bytes(),
                "ECDH-ES",
                "A256GCM",
                Some("ck_unknown"),
            ),
        ),
        (
            "no kid",
            encrypt_with(&key, plain.as_bytes(), "ECDH-ES", "A256GCM", None),
        ),
        ("garbage", "not a jwe at all".to_string()),
        ("empty", String::new()),
        ("five parts, not a JWE", "a.b.c.d.e".to_string()),
        (
            "three parts (a JWS shape)",
            "eyJhbGciOiJub25lIn0.e30.".to_string(),
        ),
        (
            "not a card inside",
            encrypt_with(&key, b"hello", "ECDH-ES", "A256GCM", Some(&kid)),
        ),
        ("huge", "a".repeat(20_000)),
    ];
    let public = server.token("user_1", "public");
    for (name, jwe) in &cases {
        let r = create_pm(
            &server,
            &public,
            &json!({"entityId": "user_1", "encryptedCard": jwe}),
        );
        assert_eq!(r.status, 400, "{name}: {}", r.text);
        assert_bad_field(&r, "encryptedCard");
        // The token vault refuses it the same way.
        let t = server.call(
            "POST",
            &tokens_path(),
            Some(&public),
            Some(&json!({"encryptedCard": jwe})),
        );
        assert_bad_field(&t, "encryptedCard");
    }
    // Not a string.
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": {"number": VISA}}),
    );
    assert_bad_field(&r, "encryptedCard");
    // Nothing was stored, and the good one still works.
    assert_eq!(
        server.call("GET", &pm_path(), Some(&public), None).json,
        json!([])
    );
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": good}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(!server.log().contains(VISA), "number in the log");
}

#[test]
fn rotated_keys_keep_decrypting_until_retired() {
    let mut server = Server::start();
    let old = server_key(&server);
    let old_kid = old["kid"].as_str().unwrap().to_string();
    let public = server.token("user_1", "public");
    let made_with_old = encrypt_card(&old, &card_json(VISA));

    server.stop(false);
    let rotated = project_cli(&server, &["client-key", "rotate"]);
    let new_kid = rotated.split_whitespace().next().unwrap().to_string();
    assert_ne!(new_kid, old_kid);
    let listed = project_cli(&server, &["client-key", "list"]);
    assert!(listed.contains(&format!("{old_kid}\tdecrypts")), "{listed}");
    assert!(listed.contains(&format!("{new_kid}\tcurrent")), "{listed}");
    server.restart();

    let new = server_key(&server);
    assert_eq!(new["kid"], new_kid.as_str());
    // The old kid still decrypts.
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": made_with_old}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    // The new one too.
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": encrypt_card(&new, &card_json(MASTERCARD))}),
    );
    assert_eq!(r.status, 201, "{}", r.text);

    // Retire the old key: what was made with it is refused.
    server.stop(false);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["client-key", "retire", "--kid", &new_kid, "-c"])
        .arg(&server.config_path)
        .args(["--project", PROJECT])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the current key cannot be retired");
    project_cli(&server, &["client-key", "retire", "--kid", &old_kid]);
    let listed = project_cli(&server, &["client-key", "list"]);
    assert!(listed.contains(&format!("{old_kid}\tretired")), "{listed}");
    server.restart();
    let r = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "encryptedCard": encrypt_card(&old, &card_json(AMEX))}),
    );
    assert_bad_field(&r, "encryptedCard");
}

#[test]
fn a_token_is_used_once_and_only_by_its_project_and_entity() {
    let mut server = Server::start();
    let key = server_key(&server);
    let public = server.token("user_1", "public");
    // From an encrypted card, with a public token (as the SDK does).
    let t = server.call(
        "POST",
        &tokens_path(),
        Some(&public),
        Some(&json!({"encryptedCard": encrypt_card(&key, &card_json(VISA))})),
    );
    assert_eq!(t.status, 201, "{}", t.text);
    let id = t.json["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("tok_"));
    assert_eq!(t.json["maskedData"], "424242******4242");
    assert!(t.json["fingerprint"]
        .as_str()
        .is_some_and(|f| f.len() == 32));
    assert!(t.json["createdAt"].is_string());
    assert!(!t.text.contains(VISA));

    // Another entity of the same project cannot use it.
    let other_entity = server.token("user_2", "public");
    assert_bad_field(
        &create_pm(
            &server,
            &other_entity,
            &json!({"entityId": "user_2", "tokenId": id}),
        ),
        "tokenId",
    );
    // Another project neither.
    let other_project = other_project_token("user_1", "public");
    let r = server.call(
        "POST",
        &format!("/projects/{OTHER_PROJECT}/payment-methods"),
        Some(&other_project),
        Some(&json!({"entityId": "user_1", "tokenId": id})),
    );
    assert_bad_field(&r, "tokenId");

    // Its owner can, once.
    let pm = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "tokenId": id}),
    );
    assert_eq!(pm.status, 201, "{}", pm.text);
    assert_eq!(pm.json["card"]["details"]["last4"], "4242");
    let again = create_pm(
        &server,
        &public,
        &json!({"entityId": "user_1", "tokenId": id}),
    );
    assert_bad_field(&again, "tokenId");
    assert!(again.text.contains("used"), "{}", again.text);

    // Unknown ids and wrong types.
    for bad in [json!("tok_nope"), json!(""), json!("a/b"), json!(42)] {
        assert_bad_field(
            &create_pm(
                &server,
                &public,
                &json!({"entityId": "user_1", "tokenId": bad}),
            ),
            "tokenId",
        );
    }

    // A private token may store a raw card; a public one may not (encryptedCard only).
    let private = server.token("user_1", "private");
    let t = server.call(
        "POST",
        &tokens_path(),
        Some(&private),
        Some(&json!({"entityId": "user_1", "card": card_json(MASTERCARD)})),
    );
    assert_eq!(t.status, 201, "{}", t.text);
    server
        .call(
            "POST",
            &tokens_path(),
            Some(&public),
            Some(&json!({"card": card_json(MASTERCARD)})),
        )
        .assert_error(403, "forbidden");
    // The raw card is validated like `card`.
    let mut bad = card_json(MASTERCARD);
    bad["number"] = json!("5555555555554445");
    let r = server.call(
        "POST",
        &tokens_path(),
        Some(&private),
        Some(&json!({"card": bad})),
    );
    assert_bad_field(&r, "card.number");
    // Both or neither source, another entity's id, unknown fields.
    let both = json!({"card": card_json(VISA), "encryptedCard": "x"});
    let r = server.call("POST", &tokens_path(), Some(&private), Some(&both));
    r.assert_error(400, "invalidRequest");
    let r = server.call("POST", &tokens_path(), Some(&private), Some(&json!({})));
    assert_bad_field(&r, "card");
    server
        .call(
            "POST",
            &tokens_path(),
            Some(&private),
            Some(&json!({"entityId": "user_9", "card": card_json(VISA)})),
        )
        .assert_error(403, "forbidden");
    let r = server.call(
        "POST",
        &tokens_path(),
        Some(&private),
        Some(&json!({"card": card_json(VISA), "tokenId": "x"})),
    );
    assert_bad_field(&r, "tokenId");
    assert!(!server.log().contains(VISA) && !server.log().contains(MASTERCARD));
}

#[test]
fn the_demo_is_served_only_when_configured() {
    let server = Server::start();
    for path in ["/demo", "/demo/paycred.js", "/demo/session"] {
        server
            .call("GET", path, None, None)
            .assert_error(404, "notFound");
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("dev.pem");
    std::fs::write(&key, &KEYS.ed.private_pem).unwrap();
    let extra = format!(
        "demo: {{project: {PROJECT}, kid: k-ed, private_key_file: {}}}\n",
        key.display()
    );
    let server = Server::start_with(Options {
        extra_project_yaml: extra,
        ..Options::default()
    });
    let page = server.call("GET", "/demo", None, None);
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let sdk = server.call("GET", "/demo/paycred.js", None, None);
    assert!(sdk.text.contains("verifyPurchaseIntent"));
    let session = server.call("GET", "/demo/session", None, None).json;
    assert_eq!(session["projectId"], PROJECT);
    // The minted tokens work with their roles.
    let public = session["publicToken"].as_str().unwrap();
    let private = session["privateToken"].as_str().unwrap();
    assert_eq!(
        server.call("GET", &key_path(), Some(public), None).status,
        200
    );
    create_pm(
        &server,
        public,
        &json!({"entityId": session["entityId"], "card": card_json(VISA)}),
    )
    .assert_error(403, "forbidden");
    let r = create_pm(
        &server,
        private,
        &json!({"entityId": session["entityId"], "card": card_json(VISA)}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    server
        .call("POST", "/demo", None, Some(&json!({})))
        .assert_error(405, "methodNotAllowed");
}
