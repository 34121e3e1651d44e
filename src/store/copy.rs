//! `paycred store copy --from <sled config> --to <postgres config>`: everything a sled store
//! holds into a PostgreSQL database, records still sealed and keys still wrapped (the same
//! master key opens them there). Safe to run again: rows already there are kept (`ON
//! CONFLICT DO NOTHING`), and the audit log is copied with its own sequence numbers and
//! hashes. Webhook deliveries still pending are copied, and so are the fan-out markers of
//! events not fanned out yet, so the database's instances send what the sled store had still
//! to send (finished deliveries are not: they are history). It ends by checking that every copied row is there and that the database's
//! audit log starts with the copied one and verifies as one chain.

use crate::audit::AuditEntry;
use crate::store::{
    DeliveryRecord, EventRecord, IntentRecord, PasskeyRecord, PaymentMethodRecord,
    WebhookEndpointRecord,
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
    /// Webhook deliveries still pending (due, or waiting for a retry).
    pub pending_deliveries: Vec<DeliveryRecord>,
    /// The sequence numbers of events not fanned out to deliveries yet.
    pub fan_out: Vec<u64>,
}

impl Export {
    /// (what, its PostgreSQL table, how many), for the report and the check.
    pub fn counts(&self) -> [(&'static str, &'static str, usize); 12] {
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
            (
                "pending webhook deliveries",
                "webhook_deliveries",
                self.pending_deliveries.len(),
            ),
            ("events to fan out", "webhook_fanout", self.fan_out.len()),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::super::contract_tests::{endpoint, ev, keep, pm};
    use crate::store::{
        DeliveryStatus, EventQuery, EventStore, PaymentMethodStore, PgStore, SledStore,
        WebhookStore,
    };

    /// What the sled store had still to send reaches the database: its pending delivery (not
    /// its delivered one), and the event it had not fanned out yet.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pending_deliveries_and_events_not_fanned_out_are_copied() {
        let dir = tempfile::tempdir().unwrap();
        let sled = SledStore::open(dir.path(), Default::default()).unwrap();
        for id in ["we_a", "we_b"] {
            sled.put_webhook_endpoint(&endpoint(id, 1), false, ev("w"))
                .await
                .unwrap();
        }
        sled.insert_payment_method(&pm("pm_a", "fp1", 1), ev("c"), &keep)
            .await
            .unwrap();
        assert_eq!(sled.fan_out_events(10, 10).await.unwrap(), 1);
        let skip = ["we_b".to_string()];
        let mut sent = sled.claim_deliveries(10, 20, &skip, 10).await.unwrap();
        sent[0].status = DeliveryStatus::Delivered;
        sent[0].attempts = 1;
        assert!(sled.record_delivery(&sent[0], 20).await.unwrap());
        sled.insert_payment_method(&pm("pm_b", "fp2", 2), ev("c"), &keep)
            .await
            .unwrap();
        let export = sled.export().unwrap();
        drop(sled);
        assert_eq!(export.pending_deliveries.len(), 1);
        let pending = export.pending_deliveries[0].clone();
        assert_eq!(pending.endpoint_id, "we_b");
        assert_eq!(export.fan_out.len(), 1);

        let config = crate::store::postgres::test_cluster::fresh_config(4)
            .unwrap_or_else(|e| panic!("no PostgreSQL for the tests: {e}"));
        let pg = PgStore::open(&config, Default::default()).unwrap();
        for run in 0..2 {
            assert_eq!(pg.import(&export).unwrap(), 0, "run {run}");
        }
        assert_eq!(pg.deliveries_pending().await.unwrap(), 1, "copied once");
        let copied = pg.list_deliveries("p1", pending.event_seq).await.unwrap();
        assert_eq!(copied.len(), 1);
        assert_eq!(copied[0], pending);
        let claimed = pg.claim_deliveries(30, 40, &[], 10).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].id, pending.id);
        // The event not fanned out is, there, to both endpoints; new deliveries number after
        // the copied one.
        assert_eq!(pg.fan_out_events(30, 10).await.unwrap(), 1);
        let q = EventQuery {
            project: "p1",
            before: None,
            kind: None,
            limit: 1,
        };
        let newest = pg.list_events(q).await.unwrap()[0].seq;
        let fanned = pg.list_deliveries("p1", newest).await.unwrap();
        assert_eq!(fanned.len(), 2);
        assert!(fanned.iter().all(|d| d.id > pending.id), "{fanned:?}");
        assert_eq!(pg.deliveries_pending().await.unwrap(), 3);
    }
}
