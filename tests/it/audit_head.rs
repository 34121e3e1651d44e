//! The audit head's MAC and exported heads, on sled with the server stopped: a log rewritten
//! with its chain and its recorded head recomputed (by whoever can write the data directory
//! but lacks the master key) is named forged by `paycred audit --verify` and refused by the
//! server; a whole older copy of the data directory verifies, and only a head exported by
//! `paycred audit head` before names it a rollback; a log cut at its tail is caught.

use crate::common::*;
use paycred::audit::chain::HashFunction;
use paycred::audit::AuditEntry;
use serde_json::Value;
use std::process::Command;

const HEAD_KEY: &[u8] = b"audit_file_head";

fn log_path(server: &Server) -> std::path::PathBuf {
    server.dir.path().join("data").join("audit.log")
}

/// A server (stopped) whose log holds a few entries.
fn stopped_with_entries(cards: &[&str]) -> Server {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    for number in cards {
        server.add_card(&t, "user_1", number);
    }
    server.stop(false);
    server
}

/// `paycred audit head -c CONFIG`: its one line.
fn export_head(server: &Server) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["audit", "head", "-c"])
        .arg(&server.config_path)
        .env_remove("PAYCRED_MASTER_KEY")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `paycred audit -c CONFIG --verify --head FILE`: whether it passed, stdout and stderr.
fn verify_against(server: &Server, head: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["audit", "--verify", "--head"])
        .arg(head)
        .arg("-c")
        .arg(&server.config_path)
        .env_remove("PAYCRED_MASTER_KEY")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Changes entry 1 of the log, recomputes every hash after it with the chain's own code, and
/// records the recomputed head in the store as the writer would, keeping (`mac`) or dropping
/// the old MAC: all that needs no master key.
fn rewrite_log_and_head(server: &Server, keep_mac: bool) {
    let text = std::fs::read_to_string(log_path(server)).unwrap();
    let mut entries: Vec<AuditEntry> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(entries.len() >= 2, "{text}");
    entries[0].event.entity = "mallory".into();
    let mut prev = String::new();
    for e in &mut entries {
        let function = HashFunction::named_by(&e.hash).unwrap();
        e.prev_hash = prev.clone();
        e.hash = function.hash_event(&prev, &e.event).unwrap();
        prev = e.hash.clone();
    }
    let mut forged = String::new();
    for e in &entries {
        forged.push_str(&serde_json::to_string(e).unwrap());
        forged.push('\n');
    }
    std::fs::write(log_path(server), &forged).unwrap();
    assert_eq!(paycred::audit::verify(&entries), Ok(entries.len()));

    let db = sled::open(server.dir.path().join("data")).unwrap();
    let meta = db.open_tree("meta").unwrap();
    let mut head: Value = serde_json::from_slice(&meta.get(HEAD_KEY).unwrap().unwrap()).unwrap();
    let last = entries.last().unwrap();
    head["seq"] = last.seq.into();
    head["hash"] = last.hash.clone().into();
    head["len"] = (forged.len() as u64).into();
    if !keep_mac {
        head.as_object_mut().unwrap().remove("mac");
    }
    assert!(keep_mac == head.get("mac").is_some(), "{head}");
    meta.insert(HEAD_KEY, serde_json::to_vec(&head).unwrap())
        .unwrap();
    db.flush().unwrap();
}

#[test]
fn a_log_rewritten_with_its_chain_and_head_recomputed_is_named_forged() {
    let server = stopped_with_entries(&[VISA, MASTERCARD]);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok && out.contains("head MAC valid"), "{out}{err}");
    let intact = std::fs::read(log_path(&server)).unwrap();

    rewrite_log_and_head(&server, true);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(!ok, "{out}");
    assert!(err.contains("forged"), "{err}");
    let said = refused_start(&server.config_path);
    assert!(said.contains("forged"), "{said}");

    // The same with the MAC dropped: named unauthenticated.
    std::fs::write(log_path(&server), intact).unwrap();
    let server2 = server;
    rewrite_log_and_head(&server2, false);
    let (ok, out, err) = audit_cli(&server2, true);
    assert!(!ok, "{out}");
    assert!(err.contains("unauthenticated"), "{err}");
}

#[test]
fn a_rolled_back_store_is_named_only_against_an_exported_head_and_a_cut_tail_is_caught() {
    let mut server = stopped_with_entries(&[VISA]);
    let data = server.dir.path().join("data");
    let backup = server.dir.path().join("backup");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&data)
        .arg(&backup)
        .status();
    assert!(copied.unwrap().success());

    server.restart();
    let t = server.token("user_1", "private");
    server.add_card(&t, "user_1", MASTERCARD);
    server.stop(false);
    let exported = server.dir.path().join("head.json");
    let line = export_head(&server);
    let head: Value = serde_json::from_str(line.trim()).unwrap();
    assert!(head["mac"].as_str().unwrap().contains(':'), "{line}");
    std::fs::write(&exported, &line).unwrap();
    let (ok, out, err) = verify_against(&server, &exported);
    assert!(ok && out.contains("holds the exported head"), "{out}{err}");

    // The older copy is consistent: its own head's MAC is valid.
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::rename(&backup, &data).unwrap();
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = verify_against(&server, &exported);
    assert!(!ok, "{out}");
    assert!(err.contains("rollback"), "{err}");

    // A cut tail: the log ends before the head the store recorded.
    let text = std::fs::read_to_string(log_path(&server)).unwrap();
    let last_line = text[..text.len() - 1].rfind('\n').map_or(0, |i| i + 1);
    std::fs::write(log_path(&server), &text[..last_line]).unwrap();
    let (ok, out, err) = audit_cli(&server, true);
    assert!(!ok, "{out}");
    assert!(err.contains("cut off"), "{err}");
}
