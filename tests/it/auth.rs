//! JWT authentication against the real server: a matrix of crafted tokens, every one
//! refused with the envelope, and the accepted algorithms.

use crate::common::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

fn sign(alg: Algorithm, private_pem: &str, kid: Option<&str>, claims: &Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(private_pem.as_bytes()).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(private_pem.as_bytes()).unwrap(),
        _ => EncodingKey::from_ed_pem(private_pem.as_bytes()).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    encode(&header, claims, &key).unwrap()
}

fn ed(claims: &Value) -> String {
    sign(Algorithm::EdDSA, &KEYS.ed.private_pem, Some("k-ed"), claims)
}

fn claims() -> Value {
    json!({"iss": PROJECT, "sub": "user_1", "roles": ["private"], "iat": now(), "exp": now() + 300})
}

fn with(key: &str, value: Value) -> Value {
    let mut c = claims();
    c[key] = value;
    c
}

fn without(key: &str) -> Value {
    let mut c = claims();
    c.as_object_mut().unwrap().remove(key);
    c
}

fn unsigned(header: &Value, claims: &Value, signature: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims.to_string()),
        B64.encode(signature)
    )
}

fn hs256_with(secret: &[u8], kid: &str) -> String {
    let header = json!({"alg": "HS256", "typ": "JWT", "kid": kid});
    let msg = format!(
        "{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims().to_string())
    );
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret).unwrap();
    mac.update(msg.as_bytes());
    format!("{msg}.{}", B64.encode(mac.finalize().into_bytes()))
}

#[test]
fn crafted_tokens_are_refused_with_the_envelope() {
    let mut server = Server::start();
    let path = format!("/projects/{PROJECT}/payment-methods");
    let good = ed(&claims());
    let mut tampered = good.clone();
    let mid = tampered.find('.').unwrap() + 3;
    tampered.replace_range(
        mid..mid + 1,
        if &good[mid..mid + 1] == "A" { "B" } else { "A" },
    );

    let cases: Vec<(&str, Option<String>)> = vec![
        ("no header", None),
        ("basic scheme", Some("Basic dXNlcjpwYXNz".into())),
        ("empty bearer", Some("Bearer".into())),
        ("garbage", Some("Bearer not-a-jwt".into())),
        ("three garbage parts", Some("Bearer a.b.c".into())),
        (
            "alg none",
            Some(format!(
                "Bearer {}",
                unsigned(&json!({"alg": "none", "typ": "JWT"}), &claims(), b"")
            )),
        ),
        (
            "alg none with kid",
            Some(format!(
                "Bearer {}",
                unsigned(&json!({"alg": "none", "kid": "k-ed"}), &claims(), b"")
            )),
        ),
        (
            "HS256 keyed with the Ed25519 public key",
            Some(format!(
                "Bearer {}",
                hs256_with(KEYS.ed.public_pem.as_bytes(), "k-ed")
            )),
        ),
        (
            "HS256 keyed with the RSA public key",
            Some(format!(
                "Bearer {}",
                hs256_with(KEYS.rsa.public_pem.as_bytes(), "k-rsa")
            )),
        ),
        (
            "unknown kid",
            Some(format!(
                "Bearer {}",
                sign(
                    Algorithm::EdDSA,
                    &KEYS.ed.private_pem,
                    Some("k-nope"),
                    &claims()
                )
            )),
        ),
        (
            "RS256 token under the P-256 kid",
            Some(format!(
                "Bearer {}",
                sign(
                    Algorithm::RS256,
                    &KEYS.rsa.private_pem,
                    Some("k-ec"),
                    &claims()
                )
            )),
        ),
        (
            "EdDSA token under the RSA kid",
            Some(format!(
                "Bearer {}",
                sign(
                    Algorithm::EdDSA,
                    &KEYS.ed.private_pem,
                    Some("k-rsa"),
                    &claims()
                )
            )),
        ),
        (
            "expired beyond leeway",
            Some(format!("Bearer {}", ed(&with("exp", json!(now() - 120))))),
        ),
        (
            "exp as a string",
            Some(format!(
                "Bearer {}",
                ed(&with("exp", json!((now() + 300).to_string())))
            )),
        ),
        ("no exp", Some(format!("Bearer {}", ed(&without("exp"))))),
        (
            "lifetime over the maximum",
            Some(format!("Bearer {}", ed(&with("exp", json!(now() + 7200))))),
        ),
        (
            "no iat and far exp",
            Some(format!(
                "Bearer {}",
                ed(&{
                    let mut c = without("iat");
                    c["exp"] = json!(now() + 7200);
                    c
                })
            )),
        ),
        (
            "issued in the future",
            Some(format!(
                "Bearer {}",
                ed(&{
                    let mut c = claims();
                    c["iat"] = json!(now() + 600);
                    c["exp"] = json!(now() + 900);
                    c
                })
            )),
        ),
        (
            "another project's key claiming this project",
            Some(format!(
                "Bearer {}",
                sign(
                    Algorithm::EdDSA,
                    &KEYS.other.private_pem,
                    Some("k-ed"),
                    &claims()
                )
            )),
        ),
        (
            "unknown issuer",
            Some(format!("Bearer {}", ed(&with("iss", json!("proj_nope"))))),
        ),
        ("no issuer", Some(format!("Bearer {}", ed(&without("iss"))))),
        (
            "issuer not a string",
            Some(format!("Bearer {}", ed(&with("iss", json!(42))))),
        ),
        (
            "missing sub",
            Some(format!("Bearer {}", ed(&without("sub")))),
        ),
        (
            "empty sub",
            Some(format!("Bearer {}", ed(&with("sub", json!(""))))),
        ),
        (
            "sub with a control character",
            Some(format!("Bearer {}", ed(&with("sub", json!("a\u{0}b"))))),
        ),
        (
            "no roles",
            Some(format!("Bearer {}", ed(&without("roles")))),
        ),
        (
            "unknown role",
            Some(format!("Bearer {}", ed(&with("roles", json!(["admin"]))))),
        ),
        (
            "both roles",
            Some(format!(
                "Bearer {}",
                ed(&with("roles", json!(["public", "private"])))
            )),
        ),
        (
            "a known role beside an unknown one",
            Some(format!(
                "Bearer {}",
                ed(&with("roles", json!(["private", "admin"])))
            )),
        ),
        ("tampered payload", Some(format!("Bearer {tampered}"))),
        (
            "truncated signature",
            Some(format!("Bearer {}", &good[..good.len() - 10])),
        ),
        (
            "100 KB token",
            Some(format!("Bearer {}", "a".repeat(100 * 1024))),
        ),
    ];
    assert!(cases.len() >= 20);
    for (name, header) in &cases {
        let headers: Vec<(&str, &str)> = header
            .iter()
            .map(|h| ("Authorization", h.as_str()))
            .collect();
        let r = server.raw("GET", &path, &headers, None);
        assert_eq!(r.status, 401, "{name}: {}", r.text);
        r.assert_error(401, "unauthorized");
        assert!(r.json["error"].get("details").is_none(), "{name}");
    }
    let log = server.log();
    assert!(
        !log.contains(&good[good.len() - 20..]),
        "a token reached the log"
    );
}

#[test]
fn valid_tokens_of_each_algorithm_are_accepted() {
    let server = Server::start();
    let path = format!("/projects/{PROJECT}/payment-methods");
    let tokens = [
        (
            "RS256",
            sign(
                Algorithm::RS256,
                &KEYS.rsa.private_pem,
                Some("k-rsa"),
                &claims(),
            ),
        ),
        (
            "ES256",
            sign(
                Algorithm::ES256,
                &KEYS.ec.private_pem,
                Some("k-ec"),
                &claims(),
            ),
        ),
        ("EdDSA", ed(&claims())),
        (
            "EdDSA without kid",
            sign(Algorithm::EdDSA, &KEYS.ed.private_pem, None, &claims()),
        ),
        (
            "expired within the 30 s leeway",
            ed(&with("exp", json!(now() - 10))),
        ),
        ("tenant path form", ed(&claims())),
    ];
    for (name, t) in &tokens {
        let p = if *name == "tenant path form" {
            format!("/tenants/{PROJECT}/payment-methods")
        } else {
            path.clone()
        };
        let r = server.call("GET", &p, Some(t), None);
        assert_eq!(r.status, 200, "{name}: {}", r.text);
    }
}

#[test]
fn project_and_role_mismatches_are_forbidden() {
    let server = Server::start();
    let other = other_project_token("user_1", "private");
    // A valid token of project B on project A's path.
    server
        .call(
            "GET",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(&other),
            None,
        )
        .assert_error(403, "forbidden");
    // ... but fine on its own project.
    assert_eq!(
        server
            .call(
                "GET",
                &format!("/projects/{OTHER_PROJECT}/payment-methods"),
                Some(&other),
                None
            )
            .status,
        200
    );
    // sub ≠ entityId.
    let t = server.token("user_1", "private");
    server
        .call(
            "POST",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(&t),
            Some(&card_body("user_2", VISA, CVC)),
        )
        .assert_error(403, "forbidden");
    // Public role: may list, may not create from a raw card or delete.
    let public = server.token("user_1", "public");
    assert_eq!(
        server
            .call(
                "GET",
                &format!("/projects/{PROJECT}/payment-methods"),
                Some(&public),
                None
            )
            .status,
        200
    );
    server
        .call(
            "POST",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(&public),
            Some(&card_body("user_1", VISA, CVC)),
        )
        .assert_error(403, "forbidden");
    server
        .call(
            "DELETE",
            &format!("/projects/{PROJECT}/payment-methods/pm_x"),
            Some(&public),
            None,
        )
        .assert_error(403, "forbidden");
}

/// `paycred jwt` signs with OpenSSL's default EC key format (SEC1, `EC PRIVATE KEY`) and the
/// traditional RSA one (`RSA PRIVATE KEY`); the server accepts the tokens.
#[test]
fn the_cli_signs_with_traditional_key_formats() {
    use openssl::pkey::PKey;
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    // As `openssl ecparam -genkey` and `openssl genrsa -traditional` write them.
    let ec = PKey::private_key_from_pem(KEYS.ec.private_pem.as_bytes()).unwrap();
    let sec1 = String::from_utf8(ec.ec_key().unwrap().private_key_to_pem().unwrap()).unwrap();
    let rsa = PKey::private_key_from_pem(KEYS.rsa.private_pem.as_bytes()).unwrap();
    let pkcs1 = String::from_utf8(rsa.rsa().unwrap().private_key_to_pem().unwrap()).unwrap();
    for (file, pem, kid) in [
        ("ec.pem", sec1.as_str(), "k-ec"),
        ("rsa.pem", pkcs1.as_str(), "k-rsa"),
    ] {
        assert!(pem.contains(if kid == "k-ec" {
            "EC PRIVATE KEY"
        } else {
            "RSA PRIVATE KEY"
        }));
        let path = dir.path().join(file);
        std::fs::write(&path, pem).unwrap();
        let out = cli_jwt(kid, &path);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let r = server.call(
            "GET",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(&token),
            None,
        );
        assert_eq!(r.status, 200, "{kid}: {}", r.text);
    }
    // An OpenSSH key is named, with what would work.
    let path = dir.path().join("ssh");
    std::fs::write(
        &path,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    .unwrap();
    let out = cli_jwt("k-ssh", &path);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && said.contains("OPENSSH PRIVATE KEY")
            && said.contains("EC PRIVATE KEY"),
        "{said}"
    );
}

/// `paycred jwt` for a private-role token of `user_1`, signed with the key file at `path`.
fn cli_jwt(kid: &str, path: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["jwt", "--kid", kid, "--project", PROJECT, "--sub", "user_1"])
        .args(["--role", "private", "--key"])
        .arg(path)
        .output()
        .unwrap()
}
