//! The audit log: create/delete/reveal, proxy uses and auth failures are recorded
//! without secrets; `paycred audit --verify` proves the chain and names the seq of an entry
//! changed on disk.

use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::{json, Value};

/// The entries `paycred audit --verify` printed.
fn printed_entries(out: &str) -> Vec<Value> {
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Sends the card number of `pm_id` to the recording target through the proxy.
fn proxy_pan(server: &Server, up: &Upstream, token: &str, pm_id: &str) {
    let body =
        json!({"n": format!("{{{{ paymentMethod: {pm_id} | type: 'pan' | json: '$.number' }}}}")});
    let r = server.proxy_json(token, &up.url("/charge"), &body);
    assert_eq!(r.status, 201, "{}", r.text);
}

#[test]
fn events_are_recorded_and_tampering_is_found() {
    let mut server = Server::start();
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let pm_id = server.add_card(&t, "user_1", VISA);
    let pi = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(&t),
        Some(&json!({"entityId": "user_1", "credentialType": "virtual-card", "paymentMethodId": pm_id,
            "mandates": [{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}}]})),
    );
    assert_eq!(pi.status, 201, "{}", pi.text);
    // A proxy use with a pan template.
    proxy_pan(&server, &up, &t, &pm_id);
    // Auth failures: no token, a forged one, another project's token.
    server
        .call(
            "GET",
            &format!("/projects/{PROJECT}/payment-methods"),
            None,
            None,
        )
        .assert_error(401, "unauthorized");
    server
        .call(
            "GET",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."),
            None,
        )
        .assert_error(401, "unauthorized");
    let delete = server.call(
        "DELETE",
        &format!("/projects/{PROJECT}/payment-methods/{pm_id}"),
        Some(&t),
        None,
    );
    assert_eq!(delete.status, 204);
    std::thread::sleep(std::time::Duration::from_millis(300));
    server.stop(false);

    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{err}");
    let entries = printed_entries(&out);
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["event"]["action"].as_str().unwrap())
        .collect();
    for a in [
        "paymentMethod.create",
        "purchaseIntent.create",
        "purchaseIntent.reveal",
        "proxy.use",
        "auth.failure",
        "paymentMethod.delete",
    ] {
        assert!(actions.contains(&a), "{a} missing from {actions:?}");
    }
    let proxy_use = entries
        .iter()
        .find(|e| e["event"]["action"] == "proxy.use")
        .unwrap();
    // The proxy's reveal is part of its one entry.
    assert_eq!(
        proxy_use["event"]["resource"],
        format!("host=127.0.0.1 status=201 templates=1 revealed={pm_id}")
    );
    assert!(!actions.contains(&"paymentMethod.reveal"), "{actions:?}");
    // Two failures of one route and status within a second: the first is an entry, the
    // second is counted and written as `count=1` when the server stops.
    assert_eq!(auth_failures(&out), (2, 2));
    assert!(out.contains("status=401 count=1"), "{out}");
    assert!(out.contains("audit log verified"), "{out}");
    let card = pi.json["card"]["number"].as_str().unwrap();
    for secret in [VISA, card, t.as_str(), "\"123\""] {
        assert!(!out.contains(secret), "a secret is in the audit log");
    }

    // Change one entry on disk: --verify names its seq.
    let log_path = server.dir.path().join("data").join("audit.log");
    let original = std::fs::read_to_string(&log_path).unwrap();
    let changed: Vec<String> = original
        .lines()
        .map(|line| {
            let mut entry: Value = serde_json::from_str(line).unwrap();
            if entry["seq"] == 3 {
                entry["event"]["entity"] = json!("mallory");
            }
            entry.to_string()
        })
        .collect();
    assert!(changed.iter().any(|l| l.contains("mallory")));
    std::fs::write(&log_path, changed.join("\n") + "\n").unwrap();
    let (ok, _, err) = audit_cli(&server, true);
    assert!(!ok, "a changed entry passed --verify");
    assert!(err.contains("seq 3"), "{err}");
    // Without --verify it still prints.
    let (ok, out, _) = audit_cli(&server, false);
    assert!(ok && out.contains("mallory"));

    // Put the entry back, then cut the newest entry off the end: every link left is
    // intact, but the log no longer reaches the head the store recorded.
    std::fs::write(&log_path, &original).unwrap();
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "the restored log verifies: {err}");
    assert!(out.contains("audit log verified"));
    let without_last = original.trim_end().rsplit_once('\n').unwrap().0.to_string() + "\n";
    std::fs::write(&log_path, without_last).unwrap();
    let (ok, _, err) = audit_cli(&server, true);
    assert!(!ok, "a log cut short passed --verify");
    assert!(err.contains("entries cut off"), "{err}");
    // Keep the server object alive until here (its dir holds the data).
    server.stop(true);
}

#[test]
fn the_chain_holds_across_a_change_of_hash_function() {
    // Pinned to SHA-256 first (as every entry before BLAKE3), then to BLAKE3: one chain.
    let mut server = Server::start_with(Options {
        audit_hash: "sha256",
        ..Options::default()
    });
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let first = server.add_card(&t, "user_1", VISA);
    proxy_pan(&server, &up, &t, &first);
    server.stop(false);
    let config = std::fs::read_to_string(&server.config_path).unwrap();
    let blake3 = config.replace("audit_hash: sha256", "audit_hash: blake3");
    assert_ne!(config, blake3);
    std::fs::write(&server.config_path, blake3).unwrap();
    server.restart();
    let second = server.add_card(&t, "user_1", MASTERCARD);
    proxy_pan(&server, &up, &t, &second);
    server.stop(false);

    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{err}");
    assert!(
        out.contains("audit log verified: 4 entries, head blake3:"),
        "{out}"
    );
    let hashes: Vec<String> = printed_entries(&out)
        .iter()
        .map(|e| e["hash"].as_str().unwrap().to_string())
        .collect();
    let blake3_at: Vec<bool> = hashes.iter().map(|h| h.starts_with("blake3:")).collect();
    assert_eq!(blake3_at, [false, false, true, true], "{hashes:?}");
    assert!(hashes.iter().all(|h| h.len() == 64 || h.len() == 71));

    // A BLAKE3 entry changed on disk: --verify names its seq.
    let log_path = server.dir.path().join("data").join("audit.log");
    let original = std::fs::read_to_string(&log_path).unwrap();
    let changed = original.replacen(&format!("revealed={second}"), "revealed=pm_other", 1);
    assert_ne!(changed, original);
    std::fs::write(&log_path, changed).unwrap();
    let (ok, _, err) = audit_cli(&server, true);
    assert!(!ok, "a changed entry passed --verify");
    assert!(err.contains("seq 4"), "{err}");
    server.stop(true);
}

/// The `auth.failure` entries of `out` (printed by `paycred audit`), and the failures they
/// stand for: 1 for an entry of its own, n for one that ends in ` count=n`.
fn auth_failures(out: &str) -> (usize, u64) {
    let resources: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"]["action"] == "auth.failure")
        .map(|e| e["event"]["resource"].as_str().unwrap().to_string())
        .collect();
    let failures = resources
        .iter()
        .map(|r| match r.rsplit_once(" count=") {
            Some((_, n)) => n.parse::<u64>().unwrap(),
            None => 1,
        })
        .sum();
    (resources.len(), failures)
}

/// Anyone can fail authentication as fast as they can send: the failures are counted, a few
/// entries stand for all of them, and a graceful stop right after the last request still
/// writes every count and every proxy use.
#[test]
fn repeated_auth_failures_are_counted_and_a_graceful_stop_loses_no_entry() {
    const FAILURES: u64 = 300;
    const USES: usize = 20;
    let mut server = Server::start();
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let pm_id = server.add_card(&t, "user_1", VISA);
    let started = std::time::Instant::now();
    for i in 0..FAILURES {
        let token = (i % 2 == 0).then_some("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.");
        server
            .call(
                "GET",
                &format!("/projects/{PROJECT}/payment-methods"),
                token,
                None,
            )
            .assert_error(401, "unauthorized");
    }
    let seconds = started.elapsed().as_secs();
    for _ in 0..USES {
        proxy_pan(&server, &up, &t, &pm_id);
    }
    // No pause: the last entries are still queued or counted when the stop begins.
    server.stop(false);

    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{err}");
    let (entries, failures) = auth_failures(&out);
    assert_eq!(failures, FAILURES, "every failure is counted");
    // One route and status: the first entry at once, then at most one a second (the
    // sends took `seconds`, and the last count is written at the stop).
    assert!(
        (2..=3 + usize::try_from(seconds).unwrap()).contains(&entries),
        "{entries} entries for {FAILURES} failures in {seconds}s"
    );
    assert_eq!(out.matches("\"proxy.use\"").count(), USES, "{out}");
    assert!(out.contains("audit log verified"), "{out}");
    server.stop(true);
}
