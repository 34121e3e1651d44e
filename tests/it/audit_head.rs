//! The audit head's MAC and exported heads, on sled with the server stopped: a log rewritten
//! with its chain and its recorded head recomputed (by whoever can write the data directory
//! but lacks the master key) is named forged by `paycred audit --verify` and refused by the
//! server; a whole older copy of the data directory verifies, and only a head exported by
//! `paycred audit head` before names it a rollback; a log cut at its tail is caught. A head
//! without a MAC (stripped, or recorded before heads were MACed) is refused at start, on sled
//! and on PostgreSQL, until `paycred audit accept-head` accepts it.

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

/// `paycred audit ARGS -c CONFIG`: whether it passed, stdout and stderr.
fn audit(server: &Server, args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_paycred"))
        .arg("audit")
        .args(args)
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

/// `paycred audit head -c CONFIG`: its one line.
fn export_head(server: &Server) -> String {
    let (ok, text, err) = audit(server, &["head".as_ref()]);
    assert!(ok, "{text}{err}");
    text
}

/// `paycred audit -c CONFIG --verify --head FILE`: whether it passed, stdout and stderr.
fn verify_against(server: &Server, head: &std::path::Path) -> (bool, String, String) {
    audit(
        server,
        &["--verify".as_ref(), "--head".as_ref(), head.as_ref()],
    )
}

/// `paycred audit accept-head -c CONFIG`: whether it passed, stdout and stderr.
fn accept_head(server: &Server) -> (bool, String, String) {
    audit(server, &["accept-head".as_ref()])
}

/// A head without a MAC is refused at start, naming the check and the acceptance command;
/// `paycred audit accept-head` accepts it (its output names the head), and then the server
/// starts and the log verifies with a valid MAC.
fn refused_until_accepted(server: &mut Server) {
    let said = refused_start(&server.config_path);
    assert!(said.contains("unauthenticated"), "{said}");
    assert!(
        said.contains("paycred audit --verify") && said.contains("paycred audit accept-head"),
        "{said}"
    );
    let (ok, out, err) = accept_head(server);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("audit log verified") && out.contains("accepted audit head seq"),
        "{out}"
    );
    server.restart();
    server.stop(false);
    let (ok, out, err) = audit_cli(server, true);
    assert!(ok && out.contains("head MAC valid"), "{out}{err}");
}

/// Drops the recorded head's MAC on sled, leaving the log as it is: a store from before heads
/// were MACed.
fn strip_sled_mac(server: &Server) {
    let db = sled::open(server.dir.path().join("data")).unwrap();
    let meta = db.open_tree("meta").unwrap();
    let mut head: Value = serde_json::from_slice(&meta.get(HEAD_KEY).unwrap().unwrap()).unwrap();
    head.as_object_mut().unwrap().remove("mac");
    meta.insert(HEAD_KEY, serde_json::to_vec(&head).unwrap())
        .unwrap();
    db.flush().unwrap();
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

    // The same with the MAC dropped: named unauthenticated, and refused at start as well
    // until the operator accepts it.
    std::fs::write(log_path(&server), intact).unwrap();
    let mut server2 = server;
    rewrite_log_and_head(&server2, false);
    let (ok, out, err) = audit_cli(&server2, true);
    assert!(!ok, "{out}");
    assert!(err.contains("unauthenticated"), "{err}");
    refused_until_accepted(&mut server2);
}

#[test]
fn a_head_from_before_heads_were_maced_is_accepted_once_by_one_command() {
    let mut server = stopped_with_entries(&[VISA]);
    strip_sled_mac(&server);
    refused_until_accepted(&mut server);
    // Accepted once: it starts again without the command.
    server.restart();
    let t = server.token("user_1", "private");
    server.add_card(&t, "user_1", MASTERCARD);
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
    // accept-head MACs only a head the log holds.
    let (ok, out, err) = accept_head(&server);
    assert!(!ok, "{out}");
    assert!(
        err.contains("not accepted") && err.contains("cut off"),
        "{err}"
    );
}

/// On PostgreSQL: changes entry 1 of `audit_log` and recomputes the chain and the head
/// (`rewrite`), and drops the head's MAC: what whoever can write the database can do.
fn strip_pg_mac(url: &str, rewrite: bool) {
    on_database(url, async |c| {
        if rewrite {
            let rows = c
                .query(
                    "SELECT seq, event, prev_hash, hash FROM audit_log ORDER BY seq",
                    &[],
                )
                .await
                .unwrap();
            let mut prev = String::new();
            for (i, r) in rows.iter().enumerate() {
                let mut entry = AuditEntry {
                    seq: r.get::<_, i64>(0) as u64,
                    event: serde_json::from_value(r.get(1)).unwrap(),
                    prev_hash: r.get(2),
                    hash: r.get(3),
                };
                if i == 0 {
                    entry.event.entity = "mallory".into();
                }
                let function = HashFunction::named_by(&entry.hash).unwrap();
                let hash = function.hash_event(&prev, &entry.event).unwrap();
                let event = serde_json::to_value(&entry.event).unwrap();
                c.execute(
                    "UPDATE audit_log SET event = $2, prev_hash = $3, hash = $4 WHERE seq = $1",
                    &[&r.get::<_, i64>(0), &event, &prev, &hash],
                )
                .await
                .unwrap();
                prev = hash;
            }
            c.execute("UPDATE audit_head SET hash = $1", &[&prev])
                .await
                .unwrap();
        }
        c.execute("UPDATE audit_head SET mac = ''", &[])
            .await
            .unwrap();
    });
}

#[test]
fn on_postgresql_a_stripped_or_old_head_is_refused_until_accepted() {
    let mut server = Server::start_with(Options::on(Backend::Postgres));
    let t = server.token("user_1", "private");
    server.add_card(&t, "user_1", VISA);
    server.add_card(&t, "user_1", MASTERCARD);
    server.stop(false);
    let url = server.database_url.clone().unwrap();

    // A head recorded before heads were MACed.
    strip_pg_mac(&url, false);
    refused_until_accepted(&mut server);

    // The log rewritten with its chain and head recomputed, the MAC stripped.
    strip_pg_mac(&url, true);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(!ok && err.contains("unauthenticated"), "{out}{err}");
    refused_until_accepted(&mut server);
    let (_, out, _) = audit_cli(&server, true);
    assert!(
        out.contains("mallory"),
        "the accepted log is the rewritten one: {out}"
    );
}
