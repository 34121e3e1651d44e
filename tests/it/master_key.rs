//! `paycred master-key rotate` on sled, server stopped: killed (SIGKILL) after each of its
//! steps and run again, it finishes; a start with only one of the two keys of a half-done
//! rotation names the missing key; afterwards the old key file is deleted and every card,
//! credential, CVC and client-encryption key works under the new key alone, and the audit
//! head's MAC verifies under it.

use crate::client_encryption::{card_json, encrypt_card, server_key};
use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn mandates() -> Value {
    json!([{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}}])
}

fn intent(server: &Server, t: &str, pm: &str, kind: &str) -> Value {
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(t),
        Some(
            &json!({"entityId": "user_1", "credentialType": kind, "paymentMethodId": pm,
            "mandates": mandates()}),
        ),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json
}

fn get_intent(server: &Server, t: &str, id: &str) -> Value {
    let r = server.call(
        "GET",
        &format!("/projects/{PROJECT}/purchase-intents/{id}"),
        Some(t),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
}

/// `paycred master-key rotate -c CONFIG --new-key NEW`, killed after `crash_at` if given.
fn rotate(
    server: &Server,
    new_key: &std::path::Path,
    crash_at: Option<&str>,
) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_paycred"));
    cmd.args(["master-key", "rotate", "-c"])
        .arg(&server.config_path)
        .arg("--new-key")
        .arg(new_key)
        .env_remove("PAYCRED_MASTER_KEY");
    match crash_at {
        Some(step) => cmd.env("PAYCRED_TEST_CRASH_AT", step),
        None => cmd.env_remove("PAYCRED_TEST_CRASH_AT"),
    };
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.signal() {
        Some(signal) => (Some(signal), text),
        None => {
            assert!(out.status.success(), "rotate: {text}");
            (None, text)
        }
    }
}

fn key_id(hex: &str) -> String {
    paycred::vault::master::MasterKey::from_hex(hex)
        .unwrap()
        .id()
        .to_string()
}

#[test]
fn a_rotation_killed_at_each_step_finishes_and_the_old_key_is_not_needed() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let public = server.token("user_1", "public");
    let pm = server.add_card(&t, "user_1", VISA);
    let pan = intent(&server, &t, &pm, "pan");
    assert_eq!(pan["pan"]["cvc"], CVC, "{pan}");
    let vc = intent(&server, &t, &pm, "virtual-card");
    let nt = intent(&server, &t, &pm, "network-token");
    let verify = format!(
        "/projects/{PROJECT}/purchase-intents/{}/verify",
        nt["id"].as_str().unwrap()
    );
    server.call("POST", &verify, Some(&public), Some(&json!({})));
    let done = server.call(
        "POST",
        &verify,
        Some(&public),
        Some(&json!({"code": "123456"})),
    );
    assert_eq!(done.status, 200, "{}", done.text);
    let token = get_intent(&server, &t, nt["id"].as_str().unwrap())["token"].clone();
    assert!(token["cryptogram"].is_string(), "{token}");
    let client_key = server_key(&server);
    server.stop(false);

    let old_key = server.master_key.clone();
    let new_key = paycred::vault::master::MasterKey::generate_hex().to_string();
    let new_file = server.dir.path().join("new.key");
    write_private(&new_file, &new_key);
    let steps = [
        "start",
        "after-data-keys",
        "after-client-keys",
        "after-cvc-ratchet",
        "after-sandbox-secret",
        "after-audit-head",
    ];
    for step in steps {
        let (signal, said) = rotate(&server, &new_file, Some(step));
        assert_eq!(signal, Some(9), "{step}: {said}");
        assert!(said.contains(&format!("killed after {step}")), "{said}");
        if step == "after-client-keys" {
            // Half done: the old key alone, and the new key alone, each name the other.
            let said = refused_start(&server.config_path);
            assert!(said.contains(&key_id(&new_key)), "{said}");
            write_private(&server.dir.path().join("master.key"), &new_key);
            let said = refused_start(&server.config_path);
            assert!(said.contains(&key_id(&old_key)), "{said}");
            write_private(&server.dir.path().join("master.key"), &old_key);
        }
    }
    let (signal, said) = rotate(&server, &new_file, None);
    assert_eq!(signal, None);
    // The last kill came after every key was re-wrapped: this run had nothing left to do.
    for step in ["data-keys", "client-keys", "cvc-ratchet", "sandbox-secret"] {
        assert!(said.contains(&format!("{step}\t0 re-wrapped")), "{said}");
    }
    assert!(said.contains("audit-head\t0 re-MACed"), "{said}");
    assert!(said.contains(&key_id(&new_key)), "{said}");

    // The old key file is gone; the new key takes its place.
    std::fs::remove_file(server.dir.path().join("master.key")).unwrap();
    std::fs::rename(&new_file, server.dir.path().join("master.key")).unwrap();
    server.restart();
    let t = server.token("user_1", "private");
    let again = intent(&server, &t, &pm, "pan");
    assert_eq!(again["pan"]["number"], VISA, "{again}");
    assert_eq!(
        again["pan"]["cvc"], CVC,
        "the cvc within retention: {again}"
    );
    let vc_again = get_intent(&server, &t, vc["id"].as_str().unwrap());
    assert_eq!(
        vc_again["card"]["number"], vc["card"]["number"],
        "{vc_again}"
    );
    assert_eq!(vc_again["card"]["cvc"], vc["card"]["cvc"], "{vc_again}");
    let nt_again = get_intent(&server, &t, nt["id"].as_str().unwrap());
    assert_eq!(nt_again["token"], token);
    // The sandbox issuer's secret came along: the cryptogram issued before still verifies.
    let charge = json!({"number": token["number"], "expirationMonth": token["expirationMonth"],
        "expirationYear": token["expirationYear"], "cryptogram": token["cryptogram"],
        "amount": "1.00", "currency": "USD", "mcc": "5411"});
    let ok = server.call(
        "POST",
        &format!("/projects/{PROJECT}/sandbox/authorizations"),
        Some(&t),
        Some(&charge),
    );
    assert_eq!(ok.json, json!({"approved": true}), "{}", ok.text);
    // The client-encryption key is the same key: a card encrypted to it before still opens.
    assert_eq!(server_key(&server), client_key);
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/payment-methods"),
        Some(&t),
        Some(&json!({"entityId": "user_1",
            "encryptedCard": encrypt_card(&client_key, &card_json(MASTERCARD))})),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    // The audit head is MACed by the new key: it verifies with the new key alone.
    server.stop(false);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("head MAC valid (master key {})", key_id(&new_key))),
        "{out}"
    );
}

/// On PostgreSQL the rotation runs while instances serve: two instances hold the new key and
/// the old one as `previous_master_key_file`, and read cards throughout the rotation with no
/// failed request; afterwards one restarts with the new key alone and reads them all.
#[test]
fn on_postgresql_a_rotation_runs_while_instances_serve() {
    let mut a = Server::start_with(Options::on(Backend::Postgres));
    let t = a.token("user_1", "private");
    let pm = a.add_card(&t, "user_1", VISA);
    let vc = intent(&a, &t, &pm, "virtual-card");
    let client_key = server_key(&a);
    a.stop(false);

    let keys = tempfile::tempdir().unwrap();
    let old_file = keys.path().join("old.key");
    write_private(&old_file, &a.master_key);
    let new_key = paycred::vault::master::MasterKey::generate_hex().to_string();
    let both = || Options {
        backend: Backend::Database(a.database_url.clone().unwrap()),
        master_key: Some(new_key.clone()),
        extra_project_yaml: format!("previous_master_key_file: {}\n", old_file.display()),
        ..Options::default()
    };
    let mut servers = [Server::start_with(both()), Server::start_with(both())];

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, bases) = (stop.clone(), servers.iter().map(|s| s.base.clone()));
        let bases: Vec<String> = bases.collect();
        let (pm, vc_id, vc_number) = (
            pm.clone(),
            vc["id"].as_str().unwrap().to_string(),
            vc["card"]["number"].clone(),
        );
        let t = t.clone();
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(std::time::Duration::from_secs(30))
                .build();
            let (mut ok, mut failed) = (0, Vec::new());
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && i < 2000 {
                let base = &bases[i % bases.len()];
                i += 1;
                let pan = agent
                    .post(&format!("{base}/projects/{PROJECT}/purchase-intents"))
                    .set("Authorization", &format!("Bearer {t}"))
                    .send_json(json!({"entityId": "user_1", "credentialType": "pan",
                        "paymentMethodId": pm, "mandates": mandates()}))
                    .ok()
                    .and_then(|r| r.into_json::<Value>().ok());
                let got = agent
                    .get(&format!(
                        "{base}/projects/{PROJECT}/purchase-intents/{vc_id}"
                    ))
                    .set("Authorization", &format!("Bearer {t}"))
                    .call()
                    .ok()
                    .and_then(|r| r.into_json::<Value>().ok());
                match (pan, got) {
                    (Some(p), Some(g))
                        if p["pan"]["number"] == VISA && g["card"]["number"] == vc_number =>
                    {
                        ok += 1
                    }
                    other => failed.push(format!("{other:?}")),
                }
            }
            (ok, failed)
        })
    };
    // Let the readers run before and during the rotation.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["master-key", "rotate", "-c"])
        .arg(&servers[0].config_path)
        .env_remove("PAYCRED_MASTER_KEY")
        .env_remove("PAYCRED_TEST_CRASH_AT")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("data-keys\t1 re-wrapped"), "{said}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (ok, failed) = reader.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..1]
    );
    assert!(ok > 0);
    eprintln!("{ok} pairs of reads across the rotation, none failed");

    // The old key file is gone; an instance restarted with the new key alone reads it all.
    std::fs::remove_file(&old_file).unwrap();
    let config = std::fs::read_to_string(&servers[0].config_path).unwrap();
    let config: String = config
        .lines()
        .filter(|l| !l.starts_with("previous_master_key_file"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&servers[0].config_path, config).unwrap();
    servers[0].restart();
    let again = intent(&servers[0], &t, &pm, "pan");
    assert_eq!(again["pan"]["number"], VISA, "{again}");
    let vc_again = get_intent(&servers[0], &t, vc["id"].as_str().unwrap());
    assert_eq!(vc_again["card"], vc["card"]);
    assert_eq!(server_key(&servers[0]), client_key);
    let (ok, out, err) = audit_cli(&servers[0], true);
    assert!(ok && out.contains("head MAC valid"), "{out}{err}");
}
