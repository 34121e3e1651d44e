//! Key management from the command line, with the server stopped: `paycred data-key rotate`
//! makes a new data key current while every stored card keeps opening, and `paycred
//! master-key --out` writes a key file only its owner can read, never over an existing one.

use crate::common::*;
use serde_json::json;
use std::process::Command;

fn pan_intent(server: &Server, t: &str, pm: &str) -> serde_json::Value {
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(t),
        Some(
            &json!({"entityId": "user_1", "credentialType": "pan", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "10", "details": {"currency": "USD"}}]}),
        ),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json
}

#[test]
fn a_rotated_data_key_seals_new_cards_and_the_old_ones_still_open() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let add = |server: &Server, number: &str| {
        let r = server.call(
            "POST",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(&t),
            Some(&card_body("user_1", number, CVC)),
        );
        assert_eq!(r.status, 201, "{}", r.text);
        r.json["id"].as_str().unwrap().to_string()
    };
    let old_pm = add(&server, VISA);
    server.stop(false);

    let lines = |args: &[&str]| -> Vec<String> {
        project_cli(&server, args)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let before = lines(&["data-key", "list"]);
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(before[0].ends_with("\tcurrent"), "{before:?}");
    let rotated = lines(&["data-key", "rotate"]);
    let new_id = rotated[0].strip_suffix("\tcurrent").unwrap().to_string();
    let after = lines(&["data-key", "list"]);
    let old_id = before[0].strip_suffix("\tcurrent").unwrap();
    assert_eq!(
        after,
        vec![format!("{old_id}\topens"), format!("{new_id}\tcurrent")]
    );

    server.restart();
    let t = server.token("user_1", "private");
    let new_pm = add(&server, MASTERCARD);
    assert_eq!(pan_intent(&server, &t, &old_pm)["pan"]["number"], VISA);
    assert_eq!(
        pan_intent(&server, &t, &new_pm)["pan"]["number"],
        MASTERCARD
    );
    server.stop(false);

    // The new card was sealed with the new key: its sealed number names it.
    let db = sled::open(server.dir.path().join("data")).unwrap();
    let pms = db.open_tree("pm").unwrap();
    let sealed_with = |pm: &str| {
        let record = pms
            .iter()
            .values()
            .map(|v| serde_json::from_slice::<serde_json::Value>(&v.unwrap()).unwrap())
            .find(|r| r["id"] == pm)
            .unwrap();
        let sealed = record["card"]["number_sealed"]
            .as_str()
            .unwrap()
            .to_string();
        sealed.split('.').next().unwrap().to_string()
    };
    assert_eq!(sealed_with(&old_pm), old_id);
    assert_eq!(sealed_with(&new_pm), new_id);
}

#[test]
fn the_master_key_file_is_private_and_never_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("master.key");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_paycred"))
            .args(["master-key", "--out"])
            .arg(&path)
            .output()
            .unwrap()
    };
    assert!(run().status.success());
    let key = std::fs::read_to_string(&path).unwrap();
    assert_eq!(key.len(), 64);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let again = run();
    assert!(!again.status.success());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), key);
}

#[test]
fn data_key_commands_refuse_a_store_that_is_not_the_servers() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let r = server.call(
        "GET",
        &format!("/projects/{PROJECT}/payment-methods"),
        Some(&t),
        None,
    );
    assert_eq!(r.status, 200);
    server.stop(false);
    // No card was ever sealed: the project has no keys, and rotate must not make them.
    for action in ["list", "rotate"] {
        let out = project_cli_output(&server.config_path, &["data-key", action]);
        assert!(!out.status.success(), "{action}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no keys in this store"), "{err}");
    }
    // A data_dir that does not exist is not created.
    let missing = server.dir.path().join("missing");
    let config = std::fs::read_to_string(&server.config_path)
        .unwrap()
        .replace(
            &format!("data_dir: {}", server.dir.path().join("data").display()),
            &format!("data_dir: {}", missing.display()),
        );
    let elsewhere = server.dir.path().join("elsewhere.yaml");
    std::fs::write(&elsewhere, config).unwrap();
    let out = project_cli_output(&elsewhere, &["data-key", "list"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!missing.exists());
}

/// A server started with another master key than the one its store's keys are wrapped by
/// refuses to start, naming both keys' ids (it would otherwise answer every read with 500);
/// with the right key it starts and `/ready` answers 200.
#[test]
fn a_wrong_master_key_is_refused_at_start() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let ready = server.call("GET", "/ready", None, None);
    assert_eq!(
        (ready.status, ready.json["status"].as_str()),
        (200, Some("ready"))
    );
    server.stop(false);

    let key_file = server.dir.path().join("master.key");
    let right = std::fs::read_to_string(&key_file).unwrap();
    std::fs::write(
        &key_file,
        paycred::vault::master::MasterKey::generate_hex().as_str(),
    )
    .unwrap();
    let said = refused_start(&server.config_path);
    assert!(
        said.contains("by master key") && said.contains("configured master key is"),
        "{said}"
    );

    std::fs::write(&key_file, right).unwrap();
    server.restart();
    let got = server.call(
        "GET",
        &format!("/projects/{PROJECT}/payment-methods/{pm}"),
        Some(&t),
        None,
    );
    assert_eq!(got.status, 200, "{}", got.text);
}
