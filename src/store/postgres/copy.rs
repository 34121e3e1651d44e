//! `paycred store copy` on the PostgreSQL side: an export written into the tables
//! ([`crate::store::copy`]).

use super::audit::CHAIN_LOCK;
use super::intents::insert_key;
use super::{client, i64_of, json, seq_i64, timed, PgStore};
use crate::audit::AuditHead;
use crate::store::copy::Export;
use crate::store::{corrupt, IntentRecord, StoreResult};
use serde_json::Value;

/// Moves the sequence of `table`'s `column` past the rows there, so what is written from now
/// on numbers after the copied rows.
async fn number_after_copied(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
    column: &str,
) -> StoreResult<()> {
    let sql = format!(
        "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
         GREATEST((SELECT max({column}) FROM {table}), 1))"
    );
    timed(tx.execute(sql.as_str(), &[])).await?;
    Ok(())
}

impl PgStore {
    /// Writes `export` (`paycred store copy`) in one transaction, keeping rows already there;
    /// how many of the export's rows the tables lack afterwards (0 when all is well).
    pub fn import(&self, export: &Export) -> StoreResult<usize> {
        let (pool, export, keys) = (self.pool.clone(), export.clone(), self.head_keys.clone());
        self.blocking(async move {
            let mut c = client(&pool).await?;
            let tx = timed(c.transaction()).await?;
            timed(tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CHAIN_LOCK])).await?;
            for (pm, verified) in &export.payment_methods {
                timed(tx.execute(
                    "INSERT INTO payment_methods (project, entity, id, created_micros, fingerprint,                      verified, record) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
                    &[&pm.project, &pm.entity, &pm.id, &pm.created_micros, &pm.fingerprint, verified, &json(pm)?],
                ))
                .await?;
            }
            // An intent ended before records kept the time of their end counts as ended now.
            let now = crate::clock::micros(time::OffsetDateTime::now_utc());
            for pi in &export.intents {
                let usage_limit = pi.mandates.usage_limit.map(i64_of);
                let ended = pi.ended_at().or((!pi.is_live_stored()).then_some(now));
                timed(tx.execute(
                    "INSERT INTO intents (project, entity, id, payment_method_id, status, created_micros, \
                     expires_micros, usage_limit, uses, record, ended_micros) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING",
                    &[&pi.project, &pi.entity, &pi.id, &pi.payment_method_id, &pi.status.as_str(),
                      &pi.created_micros, &pi.expires_micros, &usage_limit, &i64_of(pi.uses),
                      &json(&IntentRecord { key_slot: None, ..pi.clone() })?, &ended],
                ))
                .await?;
                if let Some(key) = pi.credential_key.as_ref().filter(|_| pi.is_live_stored()) {
                    insert_key(&tx, pi, key).await?;
                }
            }
            for (table, column, rows) in [
                ("card_tokens", "id", &export.card_tokens),
                ("idempotency", "key", &export.idempotency),
            ] {
                let sql = format!(
                    "INSERT INTO {table} (project, entity, {column}, expires_micros, record)                      VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
                );
                for r in rows {
                    let expires = r.value.get("expires_micros").and_then(Value::as_i64).unwrap_or(0);
                    timed(tx.execute(sql.as_str(), &[&r.project, &r.entity, &r.id, &expires, &r.value])).await?;
                }
            }
            for (table, column, rows) in [
                ("keyrings", "keyring", &export.keyrings),
                ("client_keys", "keyset", &export.client_keys),
            ] {
                let sql = format!("INSERT INTO {table} (project, {column}) VALUES ($1, $2) ON CONFLICT DO NOTHING");
                for (project, bytes) in rows {
                    timed(tx.execute(sql.as_str(), &[project, bytes])).await?;
                }
            }
            for e in &export.audit {
                let seq = i64::try_from(e.seq).map_err(corrupt)?;
                timed(tx.execute(
                    "INSERT INTO audit_log (seq, event, prev_hash, hash) VALUES ($1, $2, $3, $4)                      ON CONFLICT DO NOTHING",
                    &[&seq, &json(&e.event)?, &e.prev_hash, &e.hash],
                ))
                .await?;
            }
            if let Some(last) = export.audit.last() {
                let seq = i64::try_from(last.seq).map_err(corrupt)?;
                let mac = keys.mac(&AuditHead {
                    seq: last.seq,
                    hash: last.hash.clone(),
                    ..AuditHead::default()
                });
                timed(tx.execute(
                    "INSERT INTO audit_head (one, seq, hash, mac) VALUES (true, $1, $2, $3) ON CONFLICT (one) \
                     DO UPDATE SET seq = $1, hash = $2, mac = $3 WHERE audit_head.seq < $1",
                    &[&seq, &last.hash, &mac],
                ))
                .await?;
            }
            for e in &export.webhook_endpoints {
                timed(tx.execute(
                    "INSERT INTO webhook_endpoints (project, id, created_micros, record) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&e.project, &e.id, &e.created_micros, &json(e)?],
                ))
                .await?;
            }
            for k in &export.passkeys {
                timed(tx.execute(
                    "INSERT INTO passkeys (project, entity, id, created_micros, record) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    &[&k.project, &k.entity, &k.id, &k.created_micros, &json(k)?],
                ))
                .await?;
            }
            for e in &export.events {
                let seq = i64::try_from(e.seq).map_err(corrupt)?;
                timed(tx.execute(
                    "INSERT INTO events (seq, project, type, event) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT DO NOTHING",
                    &[&seq, &e.event.project, &e.event.kind, &json(&e.event)?],
                ))
                .await?;
            }
            // Events written from now on number after the copied ones (their ids keep growing).
            number_after_copied(&tx, "events", "seq").await?;
            for d in &export.pending_deliveries {
                let attempts = i32::try_from(d.attempts).unwrap_or(i32::MAX);
                timed(tx.execute(
                    "INSERT INTO webhook_deliveries (id, project, event_seq, endpoint_id, attempts, \
                     next_micros, status, last_outcome, created_micros) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                    &[&seq_i64(d.id), &d.project, &seq_i64(d.event_seq), &d.endpoint_id,
                      &attempts, &d.next_micros,
                      &d.status.as_str(), &d.last_outcome, &d.created_micros],
                ))
                .await?;
            }
            number_after_copied(&tx, "webhook_deliveries", "id").await?;
            for seq in &export.fan_out {
                timed(tx.execute(
                    "INSERT INTO webhook_fanout (seq) VALUES ($1) ON CONFLICT DO NOTHING",
                    &[&seq_i64(*seq)],
                ))
                .await?;
            }
            let mut missing = 0usize;
            for (_, table, n) in export.counts() {
                let have: i64 = timed(tx.query_one(&format!("SELECT count(*) FROM {table}"), &[]))
                    .await?
                    .get(0);
                missing += n.saturating_sub(usize::try_from(have).unwrap_or(0));
            }
            timed(tx.commit()).await?;
            Ok(missing)
        })
    }
}
