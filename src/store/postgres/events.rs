//! [`EventStore`] on PostgreSQL: the table `events` (`seq` from its sequence, so a later
//! event has a larger number), and `write_events`, which every change calls in its
//! transaction; each event gets its fan-out marker there (`webhook_fanout`,
//! [`crate::store::deliveries`]).

use super::{from_json, json, seq_i64, timed, PgStore};
use crate::store::events::{EventQuery, EventRecord, EventStore, NewEvent};
use crate::store::StoreResult;
use async_trait::async_trait;

/// Writes `events` in order, inside the transaction of the change they record.
pub(super) async fn write_events(
    tx: &tokio_postgres::Transaction<'_>,
    events: &[NewEvent],
) -> StoreResult<()> {
    for e in events {
        timed(tx.execute(
            "WITH e AS (INSERT INTO events (project, type, event) VALUES ($1, $2, $3) \
             RETURNING seq) INSERT INTO webhook_fanout (seq) SELECT seq FROM e",
            &[&e.project, &e.kind, &json(e)?],
        ))
        .await?;
    }
    Ok(())
}

#[async_trait]
impl EventStore for PgStore {
    async fn list_events(&self, query: EventQuery<'_>) -> StoreResult<Vec<EventRecord>> {
        let c = self.client().await?;
        let before = query
            .before
            .map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = timed(c.query(
            "SELECT seq, event FROM events WHERE project = $1 AND seq < $2 \
             AND ($3::text IS NULL OR type = $3) ORDER BY seq DESC LIMIT $4",
            &[&query.project, &before, &query.kind, &limit],
        ))
        .await?;
        rows.iter()
            .map(|r| {
                Ok(EventRecord {
                    seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                    event: from_json(r.get(1))?,
                })
            })
            .collect()
    }

    async fn get_event(&self, project: &str, seq: u64) -> StoreResult<Option<EventRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT event FROM events WHERE project = $1 AND seq = $2",
            &[&project, &seq_i64(seq)],
        ))
        .await?;
        row.map(|r| {
            Ok(EventRecord {
                seq,
                event: from_json(r.get(0))?,
            })
        })
        .transpose()
    }
}
