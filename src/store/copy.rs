//! `paycred store copy --from <sled config> --to <postgres config>`: everything a sled store
//! holds into a PostgreSQL database, records still sealed and keys still wrapped (the same
//! master key opens them there). Safe to run again: rows already there are kept (`ON
//! CONFLICT DO NOTHING`), and the audit log is copied with its own sequence numbers and
//! hashes. It ends by checking that every copied row is there and that the database's
//! audit log starts with the copied one and verifies as one chain.

use crate::audit::AuditEntry;
use crate::store::{
    EventRecord, IntentRecord, PasskeyRecord, PaymentMethodRecord, WebhookEndpointRecord,
};

/// A record of a scoped tree (card tokens, idempotent answers).
#[derive(Debug, Clone)]
pub struct Scoped {
    pub project: String,
    pub entity: String,
    pub id: String,
    pub value: serde_json::Value,
}

/// Everything a store holds.
#[derive(Debug, Clone, Default)]
pub struct Export {
    /// With whether the method passed network-token verification.
    pub payment_methods: Vec<(PaymentMethodRecord, bool)>,
    pub intents: Vec<IntentRecord>,
    pub card_tokens: Vec<Scoped>,
    pub idempotency: Vec<Scoped>,
    /// (project or reserved name, wrapped bytes)
    pub keyrings: Vec<(String, Vec<u8>)>,
    pub client_keys: Vec<(String, Vec<u8>)>,
    pub audit: Vec<AuditEntry>,
    pub webhook_endpoints: Vec<WebhookEndpointRecord>,
    /// With their sequence numbers (their ids), oldest first.
    pub events: Vec<EventRecord>,
    /// Passkeys (ceremonies under way are not copied: they expire within minutes).
    pub passkeys: Vec<PasskeyRecord>,
}

impl Export {
    /// (what, its PostgreSQL table, how many), for the report and the check.
    pub fn counts(&self) -> [(&'static str, &'static str, usize); 10] {
        [
            (
                "payment methods",
                "payment_methods",
                self.payment_methods.len(),
            ),
            ("purchase intents", "intents", self.intents.len()),
            ("card tokens", "card_tokens", self.card_tokens.len()),
            ("idempotent answers", "idempotency", self.idempotency.len()),
            ("keyrings", "keyrings", self.keyrings.len()),
            ("client key sets", "client_keys", self.client_keys.len()),
            ("audit entries", "audit_log", self.audit.len()),
            (
                "webhook endpoints",
                "webhook_endpoints",
                self.webhook_endpoints.len(),
            ),
            ("events", "events", self.events.len()),
            ("passkeys", "passkeys", self.passkeys.len()),
        ]
    }
}

/// Copies the sled store of `from` into the database of `to` (the copied audit head MACed
/// with `head_keys`, the master key's); the report's lines.
pub fn run(
    from: &crate::config::Config,
    to: &crate::config::Config,
    head_keys: crate::audit::head_mac::HeadKeys,
) -> Result<Vec<String>, String> {
    let crate::config::store::StoreConfig::Postgres(pg) = &to.store else {
        return Err("--to must name a config with store kind postgres".into());
    };
    if !matches!(from.store, crate::config::store::StoreConfig::Sled) {
        return Err("--from must name a config with store kind sled".into());
    }
    if !from.data_dir.is_dir() {
        return Err(format!(
            "data_dir {} does not exist",
            from.data_dir.display()
        ));
    }
    let sled = super::SledStore::open_with(&from.data_dir, from.audit_hash, head_keys.clone())
        .map_err(|e| {
            format!(
                "data_dir {}: {e} (stop the server first: the store is opened exclusively)",
                from.data_dir.display()
            )
        })?;
    let export = sled.export().map_err(|e| e.to_string())?;
    drop(sled);
    let target =
        super::PgStore::open_with(pg, to.audit_hash, head_keys).map_err(|e| e.to_string())?;
    let missing = target.import(&export).map_err(|e| e.to_string())?;
    let mut lines: Vec<String> = export
        .counts()
        .into_iter()
        .map(|(what, _, n)| format!("{what}: {n}"))
        .collect();
    if missing > 0 {
        return Err(format!("{missing} copied rows are not in the database"));
    }
    let log = crate::store::AuditStore::audit_log(&target).map_err(|e| e.to_string())?;
    let head = crate::store::AuditStore::audit_head(&target).map_err(|e| e.to_string())?;
    let n = crate::audit::verify(&log).map_err(|b| format!("database audit log: {b}"))?;
    crate::audit::verify_head(&log, head.as_ref())
        .map_err(|b| format!("database audit log: {b}"))?;
    if log.len() < export.audit.len() || log[..export.audit.len()] != export.audit[..] {
        return Err("the database's audit log does not start with the copied one".into());
    }
    lines.push(format!(
        "copied to {}: every row there, audit log verified ({n} entries)",
        pg.url.describe()
    ));
    Ok(lines)
}
