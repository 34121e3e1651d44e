//! [`WebhookStore`] on PostgreSQL: endpoints in `webhook_endpoints`, and webhook deliveries
//! ([`crate::store::deliveries`]): `webhook_fanout` holds the markers written with each
//! event, `webhook_deliveries` the deliveries. Fan-out and claims lock their rows `FOR UPDATE
//! SKIP LOCKED`, so instances sharing the database take each marker and each due delivery
//! once; a claim is a lease (`next_micros` moved to its end) that expires by itself if its
//! instance dies.

use super::{client, from_json, json, seq_i64, timed, PgStore};
use crate::audit::AuditEvent;
use crate::store::deliveries::{sends, DeliveryRecord, DeliveryStatus};
use crate::store::{corrupt, StoreResult, WebhookEndpointRecord, WebhookStore};
use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

const COLUMNS: &str =
    "id, project, event_seq, endpoint_id, attempts, next_micros, status, last_outcome, created_micros";

fn record_of(row: &Row) -> StoreResult<DeliveryRecord> {
    let status: &str = row.get("status");
    Ok(DeliveryRecord {
        id: u64::try_from(row.get::<_, i64>("id")).unwrap_or(0),
        project: row.get("project"),
        event_seq: u64::try_from(row.get::<_, i64>("event_seq")).unwrap_or(0),
        endpoint_id: row.get("endpoint_id"),
        attempts: u32::try_from(row.get::<_, i32>("attempts")).unwrap_or(0),
        next_micros: row.get("next_micros"),
        status: DeliveryStatus::parse(status).ok_or_else(|| corrupt("unknown delivery status"))?,
        last_outcome: row.get("last_outcome"),
        created_micros: row.get("created_micros"),
    })
}

async fn insert(
    tx: &tokio_postgres::Transaction<'_>,
    project: &str,
    seq: u64,
    endpoints: &[String],
    now_micros: i64,
) -> StoreResult<()> {
    for endpoint in endpoints {
        timed(tx.execute(
            "INSERT INTO webhook_deliveries (project, event_seq, endpoint_id, attempts, \
             next_micros, status, created_micros) VALUES ($1, $2, $3, 0, $4, 'pending', $4)",
            &[&project, &seq_i64(seq), endpoint, &now_micros],
        ))
        .await?;
    }
    Ok(())
}

/// [`WebhookStore::fan_out_events`]: one transaction for up to `limit` markers.
async fn fan_out(pool: &Pool, now_micros: i64, limit: usize) -> StoreResult<usize> {
    let mut c = client(pool).await?;
    let tx = timed(c.transaction()).await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let markers = timed(tx.query(
        "SELECT f.seq, e.project, e.type FROM webhook_fanout f JOIN events e ON e.seq = f.seq \
         ORDER BY f.seq LIMIT $1 FOR UPDATE OF f SKIP LOCKED",
        &[&limit],
    ))
    .await?;
    for row in &markers {
        let (seq, project, kind): (i64, String, String) = (row.get(0), row.get(1), row.get(2));
        let endpoints: Vec<String> = timed(tx.query(
            "SELECT record FROM webhook_endpoints WHERE project = $1",
            &[&project],
        ))
        .await?
        .into_iter()
        .map(|r| from_json::<WebhookEndpointRecord>(r.get(0)))
        .collect::<StoreResult<Vec<_>>>()?
        .into_iter()
        .filter(|e| sends(e, &kind))
        .map(|e| e.id)
        .collect();
        insert(
            &tx,
            &project,
            u64::try_from(seq).unwrap_or(0),
            &endpoints,
            now_micros,
        )
        .await?;
        timed(tx.execute("DELETE FROM webhook_fanout WHERE seq = $1", &[&seq])).await?;
    }
    timed(tx.commit()).await?;
    Ok(markers.len())
}

/// [`WebhookStore::queue_deliveries`]: the event's row share-locked until the deliveries are
/// committed, so retention, which locks an event `FOR UPDATE SKIP LOCKED` before removing
/// it, skips it meanwhile, and a queue that waited for a removal finds no event.
async fn queue(
    pool: &Pool,
    project: &str,
    seq: u64,
    endpoints: &[String],
    now_micros: i64,
) -> StoreResult<bool> {
    let mut c = client(pool).await?;
    let tx = timed(c.transaction()).await?;
    let event = timed(tx.query_opt(
        "SELECT 1 FROM events WHERE project = $1 AND seq = $2 FOR KEY SHARE",
        &[&project, &seq_i64(seq)],
    ))
    .await?;
    if event.is_none() {
        return Ok(false);
    }
    insert(&tx, project, seq, endpoints, now_micros).await?;
    timed(tx.commit()).await?;
    Ok(true)
}

/// [`WebhookStore::claim_deliveries`].
async fn claim(
    pool: &Pool,
    now_micros: i64,
    lease_until_micros: i64,
    skip: &[String],
    limit: usize,
) -> StoreResult<Vec<DeliveryRecord>> {
    let c = client(pool).await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = timed(c.query(
        &format!(
            "UPDATE webhook_deliveries SET next_micros = $2 WHERE id IN (\
             SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_micros <= $1 \
             AND NOT (endpoint_id = ANY($3)) ORDER BY next_micros LIMIT $4 \
             FOR UPDATE SKIP LOCKED) RETURNING {COLUMNS}"
        ),
        &[&now_micros, &lease_until_micros, &skip, &limit],
    ))
    .await?;
    rows.iter().map(record_of).collect()
}

/// [`WebhookStore::record_delivery`].
async fn record(pool: &Pool, d: &DeliveryRecord, claimed_until_micros: i64) -> StoreResult<bool> {
    let c = client(pool).await?;
    let attempts = i32::try_from(d.attempts).unwrap_or(i32::MAX);
    let n = timed(c.execute(
        "UPDATE webhook_deliveries SET attempts = $3, next_micros = $4, status = $5, \
         last_outcome = $6 WHERE id = $1 AND status = 'pending' AND next_micros = $2",
        &[
            &seq_i64(d.id),
            &claimed_until_micros,
            &attempts,
            &d.next_micros,
            &d.status.as_str(),
            &d.last_outcome,
        ],
    ))
    .await?;
    Ok(n == 1)
}

/// [`WebhookStore::list_deliveries`].
async fn of_event(pool: &Pool, project: &str, seq: u64) -> StoreResult<Vec<DeliveryRecord>> {
    let c = client(pool).await?;
    let rows = timed(c.query(
        &format!(
            "SELECT {COLUMNS} FROM webhook_deliveries WHERE project = $1 AND event_seq = $2 \
             ORDER BY id"
        ),
        &[&project, &seq_i64(seq)],
    ))
    .await?;
    rows.iter().map(record_of).collect()
}

/// [`WebhookStore::deliveries_pending`].
async fn pending(pool: &Pool) -> StoreResult<u64> {
    let c = client(pool).await?;
    let row = timed(c.query_one(
        "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'",
        &[],
    ))
    .await?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

#[async_trait]
impl WebhookStore for PgStore {
    async fn put_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        replace: bool,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let record = json(endpoint)?;
        let args: [&(dyn ToSql + Sync); 4] = [
            &endpoint.project,
            &endpoint.id,
            &endpoint.created_micros,
            &record,
        ];
        let sql = if replace {
            "UPDATE webhook_endpoints SET created_micros = $3, record = $4 \
             WHERE project = $1 AND id = $2"
        } else {
            "INSERT INTO webhook_endpoints (project, id, created_micros, record) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING"
        };
        self.change_audited(sql, &args, Some(&audit)).await
    }

    async fn get_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT record FROM webhook_endpoints WHERE project = $1 AND id = $2",
            &[&project, &id],
        ))
        .await?;
        row.map(|r| from_json(r.get(0))).transpose()
    }

    async fn list_webhook_endpoints(
        &self,
        project: &str,
    ) -> StoreResult<Vec<WebhookEndpointRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT record FROM webhook_endpoints WHERE project = $1 \
             ORDER BY created_micros DESC, id DESC",
            &[&project],
        ))
        .await?;
        rows.iter().map(|r| from_json(r.get(0))).collect()
    }

    async fn delete_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.change_audited(
            "DELETE FROM webhook_endpoints WHERE project = $1 AND id = $2",
            &[&project, &id],
            Some(&audit),
        )
        .await
    }

    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize> {
        fan_out(&self.pool, now_micros, limit).await
    }

    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<bool> {
        queue(&self.pool, project, seq, endpoints, now_micros).await
    }

    async fn claim_deliveries(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        claim(&self.pool, now_micros, lease_until_micros, skip, limit).await
    }

    async fn record_delivery(
        &self,
        delivery: &DeliveryRecord,
        claimed_until_micros: i64,
    ) -> StoreResult<bool> {
        record(&self.pool, delivery, claimed_until_micros).await
    }

    async fn list_deliveries(&self, project: &str, seq: u64) -> StoreResult<Vec<DeliveryRecord>> {
        of_event(&self.pool, project, seq).await
    }

    async fn deliveries_pending(&self) -> StoreResult<u64> {
        pending(&self.pool).await
    }
}
