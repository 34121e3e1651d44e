//! Webhook endpoints over HTTP: create (the secret shown once), list, get, delete, rotate
//! the secret; the URL through the proxy's target guard; private role only.

use crate::common::*;
use base64::Engine;
use serde_json::{json, Value};

fn endpoints(project: &str) -> String {
    format!("/projects/{project}/webhook-endpoints")
}

/// The bytes of a `whsec_` secret (checked to be 32 random bytes in base64).
fn secret_bytes(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap_or_default();
    let b64 = s.strip_prefix("whsec_").unwrap_or_else(|| panic!("{s}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(bytes.len(), 32, "{s}");
    bytes
}

#[test]
fn create_list_get_rotate_delete() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let path = endpoints(PROJECT);
    let made = server.call(
        "POST",
        &path,
        Some(&t),
        Some(&json!({"url": "https://localhost:9/hooks",
            "enabledEvents": ["purchase_intent.activated", "payment_method.deleted"]})),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    let id = made.json["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("we_"), "{id}");
    assert_eq!(made.json["enabled"], true);
    let first = secret_bytes(&made.json["secret"]);
    let all = server.call(
        "POST",
        &path,
        Some(&t),
        Some(&json!({"url": "https://127.0.0.1:9/all", "enabled": false})),
    );
    assert_eq!(all.status, 201, "{}", all.text);
    assert_eq!(all.json["enabledEvents"], json!(["*"]));
    assert_eq!(all.json["enabled"], false);

    // Shown once: neither get nor list carries a secret.
    let got = server.call("GET", &format!("{path}/{id}"), Some(&t), None);
    assert_eq!(got.status, 200, "{}", got.text);
    assert!(got.json.get("secret").is_none(), "{}", got.text);
    assert_eq!(got.json["url"], "https://localhost:9/hooks");
    let list = server.call("GET", &path, Some(&t), None);
    let ids = strings(&list.json, "id");
    assert_eq!(ids, [all.json["id"].as_str().unwrap(), id.as_str()]);
    assert!(!list.text.contains("whsec_"));

    let rotated = server.call(
        "POST",
        &format!("{path}/{id}/rotate-secret"),
        Some(&t),
        Some(&json!({})),
    );
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    assert_ne!(secret_bytes(&rotated.json["secret"]), first);
    assert_eq!(rotated.json["id"], id.as_str());

    assert_eq!(
        server
            .call("DELETE", &format!("{path}/{id}"), Some(&t), None)
            .status,
        204
    );
    server
        .call("GET", &format!("{path}/{id}"), Some(&t), None)
        .assert_error(404, "notFound");
    server
        .call(
            "POST",
            &format!("{path}/{id}/rotate-secret"),
            Some(&t),
            Some(&json!({})),
        )
        .assert_error(404, "notFound");

    let log = server.log();
    for secret in [&made.json["secret"], &rotated.json["secret"]] {
        assert!(!log.contains(secret.as_str().unwrap()));
    }
    server.stop(false);
    let audit = audit_cli(&server, false).1;
    for action in [
        "webhookEndpoint.create",
        "webhookEndpoint.rotateSecret",
        "webhookEndpoint.delete",
    ] {
        assert!(audit.contains(action), "{action}");
    }
}

#[test]
fn the_url_passes_the_target_guard_and_bad_bodies_are_named() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let create = |project: &str, token: &str, body: Value| {
        server.call("POST", &endpoints(project), Some(token), Some(&body))
    };
    let field_error = |r: Reply, field: &str| {
        r.assert_error(400, "invalidRequest");
        assert!(
            r.json["error"]["details"]["fields"][field].is_string(),
            "{}",
            r.text
        );
    };
    // A host the project does not allow.
    field_error(
        create(PROJECT, &t, json!({"url": "https://example.com/hooks"})),
        "url",
    );
    // A project without private networks: its allow-listed loopback is still refused.
    let guard = token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        GUARD_PROJECT,
        "user_1",
        "private",
        300,
    );
    field_error(
        create(
            GUARD_PROJECT,
            &guard,
            json!({"url": "https://127.0.0.1/hooks"}),
        ),
        "url",
    );
    field_error(
        create(
            GUARD_PROJECT,
            &guard,
            json!({"url": "https://169.254.169.254/"}),
        ),
        "url",
    );
    // https only where the project does not allow http.
    let other = other_project_token("user_1", "private");
    field_error(
        create(
            OTHER_PROJECT,
            &other,
            json!({"url": "http://localhost/hooks"}),
        ),
        "url",
    );
    field_error(create(PROJECT, &t, json!({})), "url");
    for events in [
        json!(["nope"]),
        json!([]),
        json!(["*", "payment_method.created"]),
        json!("*"),
    ] {
        field_error(
            create(
                PROJECT,
                &t,
                json!({"url": "https://localhost/h", "enabledEvents": events}),
            ),
            "enabledEvents",
        );
    }
    field_error(
        create(
            PROJECT,
            &t,
            json!({"url": "https://localhost/h", "enabled": "yes"}),
        ),
        "enabled",
    );
    field_error(
        create(
            PROJECT,
            &t,
            json!({"url": "https://localhost/h", "secret": "x"}),
        ),
        "secret",
    );
    let public = server.token("user_1", "public");
    create(PROJECT, &public, json!({"url": "https://localhost/h"})).assert_error(403, "forbidden");
    server
        .call("GET", &endpoints(PROJECT), Some(&public), None)
        .assert_error(403, "forbidden");
    // Nothing was stored.
    let list = server.call("GET", &endpoints(PROJECT), Some(&t), None);
    assert_eq!(list.json, json!([]));
}

/// paycred's signatures verify with an independent implementation: Python's
/// `standardwebhooks` (PyPI, pinned in `scripts/webhooks-venv`), with either secret of a
/// rotation's overlap; a changed body, id or timestamp, or another secret, does not.
#[test]
fn signatures_verify_with_the_standardwebhooks_library() {
    use paycred::domain::webhook::{shown_secret, signature_header};
    let python = webhooks_python();
    let (old, new, other) = ([7u8; 32], [42u8; 32], [9u8; 32]);
    let body =
        r#"{"id":"evt_000000000000002a","type":"payment_method.created","data":{"id":"pm_1"}}"#;
    let timestamp = i64::try_from(now()).unwrap();
    let header = signature_header(
        &[&new, &old],
        "evt_000000000000002a",
        timestamp,
        body.as_bytes(),
    );
    let script = r#"
import json, sys
from standardwebhooks import Webhook
secret, msg_id, ts, sig, body = sys.argv[1:]
try:
    Webhook(secret).verify(body, {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig})
    print("valid")
except Exception as e:
    print("invalid", type(e).__name__)
"#;
    let verify = |secret: &[u8], id: &str, ts: i64, body: &str| {
        let out = std::process::Command::new(&python)
            .args([
                "-c",
                script,
                &shown_secret(secret),
                id,
                &ts.to_string(),
                &header,
                body,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let id = "evt_000000000000002a";
    assert_eq!(verify(&new, id, timestamp, body), "valid");
    assert_eq!(verify(&old, id, timestamp, body), "valid");
    for (secret, id, ts, body) in [
        (&other, id, timestamp, body),
        (&new, "evt_000000000000002b", timestamp, body),
        (&new, id, timestamp + 1, body),
        (&new, id, timestamp, r#"{"id":"evt_000000000000002a"}"#),
    ] {
        assert!(
            verify(secret, id, ts, body).starts_with("invalid"),
            "{id} {ts} {body}"
        );
    }
}
