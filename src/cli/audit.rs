//! `paycred audit -c FILE [--verify [--head EXPORTED]]`: prints the audit log and proves its
//! chain and its recorded head's MAC; `paycred audit head -c FILE` prints the recorded head
//! (seq, hash, MAC) as one JSON line, for the operator to keep apart from the deployment;
//! `paycred audit accept-head -c FILE` MACs a recorded head the store refuses at start (none,
//! or a forged one) once the operator has verified the log.

use crate::audit::head_mac::{HeadKeys, MacCheck};
use crate::audit::{verify, verify_head, AuditEntry, AuditHead};
use std::io::Write;
use std::path::Path;

/// `paycred audit`: prints every entry as a JSON line to `out`; with `verify`, proves the
/// chain and that it reaches `head`, and prints a summary line.
pub fn print(
    entries: &[AuditEntry],
    head: Option<&AuditHead>,
    verify_chain: bool,
    out: &mut impl Write,
) -> Result<(), String> {
    for e in entries {
        let line = serde_json::to_string(e).map_err(|e| e.to_string())?;
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    if verify_chain {
        let n = verify(entries).map_err(|b| b.to_string())?;
        verify_head(entries, head).map_err(|b| b.to_string())?;
        let last = entries.last().map(|e| e.hash.as_str()).unwrap_or("");
        writeln!(out, "audit log verified: {n} entries, head {last}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether the recorded head's MAC verifies under `keys` (a log with no entry has no head to
/// authenticate); the error names a forged or unauthenticated head.
pub fn check_mac(head: Option<&AuditHead>, keys: &HeadKeys) -> Result<String, String> {
    match head.filter(|h| h.seq > 0) {
        None => Ok("no head recorded yet".into()),
        Some(head) => match keys.check(head) {
            MacCheck::Valid(id) => Ok(format!("head MAC valid (master key {id})")),
            other => Err(other.problem().unwrap_or_default()),
        },
    }
}

/// Whether the log still holds `exported`, a head printed by `paycred audit head` earlier:
/// the entry at its seq has its hash. A log that ends before it was rolled back (or cut); one
/// whose entry there differs was rewritten.
pub fn check_exported(
    entries: &[AuditEntry],
    exported: &AuditHead,
    keys: &HeadKeys,
) -> Result<String, String> {
    if keys.check(exported) == MacCheck::Forged {
        return Err(
            "the exported head's MAC does not verify: it is not a head paycred \
                    recorded"
                .into(),
        );
    }
    let at = usize::try_from(exported.seq.saturating_sub(1))
        .ok()
        .and_then(|i| entries.get(i));
    match at {
        _ if exported.seq == 0 => Ok("the exported head is empty".into()),
        None => Err(format!(
            "rollback: the log ends at seq {}, before the exported head (seq {}): entries \
             recorded before the head was exported are gone (an older copy of the store, or \
             a cut log)",
            entries.len(),
            exported.seq
        )),
        Some(e) if e.hash != exported.hash => Err(format!(
            "rewrite: the entry at seq {} is not the exported head (hash {}, exported {}): the \
             log was rewritten",
            exported.seq, e.hash, exported.hash
        )),
        Some(_) => Ok(format!(
            "the log holds the exported head (seq {})",
            exported.seq
        )),
    }
}

/// The log and the head recorded apart from it: from `config`'s data dir (the server must be
/// stopped: sled locks the directory), or from the PostgreSQL database while the servers run.
/// Heads recorded meanwhile (moving a committed outbox) are MACed with `keys`.
fn read(
    config: &crate::config::Config,
    keys: HeadKeys,
) -> Result<(Vec<AuditEntry>, Option<AuditHead>), String> {
    if let crate::config::store::StoreConfig::Postgres(_) = &config.store {
        let store = crate::store::open_with(config, keys)?;
        let head = store.audit_head().map_err(|e| e.to_string())?;
        let entries = store.audit_log().map_err(|e| e.to_string())?;
        return Ok((entries, head));
    }
    crate::store::SledStore::read_audit(&config.data_dir, config.audit_hash, keys)
        .map_err(|e| format!("data_dir {}: {e}", config.data_dir.display()))
}

fn head_keys(config: &crate::config::Config) -> Result<HeadKeys, String> {
    crate::server::master_key(config)
        .map(|m| m.head_keys())
        .map_err(|e| e.to_string())
}

/// `paycred audit -c FILE [--verify [--head EXPORTED]]`: [`print()`]s the log; with `verify`,
/// also checks the recorded head's MAC (under the configured master keys) and, given an
/// exported head, that the log still holds it.
pub fn run(
    config: &crate::config::Config,
    verify_chain: bool,
    exported: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), String> {
    // Printing alone works without the master key; with it, a head recorded meanwhile (a
    // committed outbox moved into the log) is MACed, not left without a MAC.
    let keys = match head_keys(config) {
        Ok(keys) => keys,
        Err(e) if verify_chain => return Err(e),
        Err(_) => HeadKeys::default(),
    };
    let (entries, head) = read(config, keys.clone())?;
    print(&entries, head.as_ref(), verify_chain, out)?;
    if verify_chain {
        let said = check_mac(head.as_ref(), &keys)?;
        writeln!(out, "{said}").map_err(|e| e.to_string())?;
        if let Some(path) = exported {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--head {}: {e}", path.display()))?;
            let exported: AuditHead = serde_json::from_str(text.trim())
                .map_err(|e| format!("--head {}: not a head ({e})", path.display()))?;
            let said = check_exported(&entries, &exported, &keys)?;
            writeln!(out, "{said}").map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// `paycred audit head -c FILE`: the recorded head, its MAC checked, as one JSON line
/// (`{"seq":…,"hash":"…","mac":"…"}`).
pub fn head(config: &crate::config::Config, out: &mut impl Write) -> Result<(), String> {
    let keys = head_keys(config)?;
    let (_, head) = read(config, keys.clone())?;
    let head = head.unwrap_or_default();
    check_mac(Some(&head), &keys)?;
    let line = serde_json::json!({"seq": head.seq, "hash": head.hash, "mac": head.mac});
    writeln!(out, "{line}").map_err(|e| e.to_string())
}

/// The check `paycred audit accept-head` makes before MACing a recorded head: the chain holds
/// and ends at `head` (entries after it are events a crash left to record); what it proved.
pub fn acceptable(entries: &[AuditEntry], head: &AuditHead) -> Result<String, String> {
    let n = verify(entries).map_err(|b| format!("not accepted: {b}"))?;
    verify_head(entries, Some(head)).map_err(|b| format!("not accepted: {b}"))?;
    Ok(format!("audit log verified: {n} entries"))
}

/// `paycred audit accept-head -c FILE`: for a recorded head the store refuses at start (it
/// carries no MAC, or one that does not verify) once the operator has checked the log: proves
/// the chain and that it holds the head ([`acceptable`]), then MACs the head under the master
/// key; prints what it proved and the head accepted (one JSON line, as `paycred audit head`).
/// On sled, run with the server stopped.
pub fn accept_head(config: &crate::config::Config, out: &mut impl Write) -> Result<(), String> {
    let keys = head_keys(config)?;
    let accepted = match &config.store {
        crate::config::store::StoreConfig::Postgres(pg) => {
            // Opened without the keys: the store's own start check would refuse the head.
            let store =
                crate::store::PgStore::open(pg, config.audit_hash).map_err(|e| e.to_string())?;
            store.accept_audit_head(&keys, acceptable)?
        }
        _ => crate::store::SledStore::accept_audit_head(&config.data_dir, &keys, acceptable)?,
    };
    let Some((head, said)) = accepted else {
        return writeln!(out, "no head recorded yet: nothing to accept").map_err(|e| e.to_string());
    };
    let by = head.mac.split_once(':').map_or("", |(id, _)| id);
    let line = serde_json::json!({"seq": head.seq, "hash": head.hash, "mac": head.mac});
    writeln!(
        out,
        "{said}\naccepted audit head seq {} (hash {}), now MACed by master key {by}\n{line}",
        head.seq, head.hash
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::secret::KeyMaterial;

    /// Five entries, all SHA-256 (`a`) or all BLAKE3 (`b`): two logs that differ at every
    /// seq.
    fn chain(tag: &str) -> Vec<AuditEntry> {
        crate::audit::tests::chain_of(5, if tag == "a" { 5 } else { 0 })
    }

    #[test]
    fn an_exported_head_names_a_rollback_and_a_rewrite() {
        let keys = HeadKeys::new(vec![("k".into(), KeyMaterial::new([3; 32]))]);
        let log = chain("a");
        let exported = keys.sign(&AuditHead {
            seq: 4,
            hash: log[3].hash.clone(),
            ..AuditHead::default()
        });
        assert!(check_exported(&log, &exported, &keys).is_ok());
        let e = check_exported(&log[..3], &exported, &keys).unwrap_err();
        assert!(e.starts_with("rollback"), "{e}");
        let e = check_exported(&chain("b"), &exported, &keys).unwrap_err();
        assert!(e.starts_with("rewrite"), "{e}");
        let forged = AuditHead {
            hash: chain("b")[3].hash.clone(),
            ..exported.clone()
        };
        assert!(check_exported(&chain("b"), &forged, &keys).is_err());
        // The recorded head: valid, unauthenticated, forged.
        assert!(check_mac(Some(&exported), &keys).is_ok());
        let bare = AuditHead {
            mac: String::new(),
            ..exported.clone()
        };
        assert!(check_mac(Some(&bare), &keys)
            .unwrap_err()
            .contains("unauthenticated"));
        assert!(check_mac(Some(&forged), &keys)
            .unwrap_err()
            .contains("forged"));
    }
}
