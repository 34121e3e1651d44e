//! `paycred audit -c FILE [--verify]`: prints the audit log and proves its chain.

use crate::audit::{verify, verify_head, AuditEntry, AuditHead};
use std::io::Write;

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

/// `paycred audit -c FILE [--verify]`: reads the log and the head recorded apart from it
/// and [`print()`]s them: from `config`'s data dir (the server must be stopped: sled locks
/// the directory), or from the PostgreSQL database while the servers run.
pub fn run(
    config: &crate::config::Config,
    verify_chain: bool,
    out: &mut impl Write,
) -> Result<(), String> {
    if let crate::config::store::StoreConfig::Postgres(_) = &config.store {
        let store = crate::store::open(config)?;
        let head = store.audit_head().map_err(|e| e.to_string())?;
        let entries = store.audit_log().map_err(|e| e.to_string())?;
        return print(&entries, head.as_ref(), verify_chain, out);
    }
    let (entries, head) = crate::store::SledStore::read_audit(&config.data_dir, config.audit_hash)
        .map_err(|e| format!("data_dir {}: {e}", config.data_dir.display()))?;
    print(&entries, head.as_ref(), verify_chain, out)
}
