//! Where an intent's end is stored on PostgreSQL: [`end_row`] writes an end inside the
//! transaction of the change that ends the intent, and [`DUE`] finds the intents the
//! finalizer ends. Every end is a conditional update of a row locked `FOR UPDATE`, so
//! instances that race end an intent once.

use super::{json, timed};
use crate::store::events;
use crate::store::{IntentEnd, IntentRecord, Scope, Sealed, StoreResult};

/// Ends `rec` (read `FOR UPDATE` in `tx`) with `end` at `at_micros`: the ended record, its
/// final status and its event (`purchase_intent.expired`, `.exhausted` or `.canceled`).
/// Whatever else is written with an end is written here, in the same transaction.
pub(super) async fn end_row(
    tx: &tokio_postgres::Transaction<'_>,
    scope: Scope<'_>,
    rec: &mut IntentRecord,
    end: IntentEnd,
    at_micros: i64,
) -> StoreResult<()> {
    rec.finish(end);
    timed(tx.execute(
        "DELETE FROM intent_keys WHERE project = $1 AND entity = $2 AND id = $3",
        &[&scope.project, &scope.entity, &rec.id],
    ))
    .await?;
    timed(tx.execute(
        "UPDATE intents SET status = $4, record = $5 WHERE project = $1 AND entity = $2 AND id = $3",
        &[
            &scope.project,
            &scope.entity,
            &rec.id,
            &rec.status.as_str(),
            &json(&*rec)?,
        ],
    ))
    .await?;
    super::write_events(tx, &[events::intent_ended(rec, end, at_micros)]).await
}

/// Intents stored live whose end is due at `$1` (past `expiresAt`, or a used-up limit whose
/// end did not follow its use), at most `$2`; the end as `expired` or `exhausted`.
pub(super) const DUE: &str = "\
    (SELECT project, entity, id, 'expired' AS due FROM intents \
     WHERE status IN ('active', 'verify') AND expires_micros <= $1 LIMIT $2) \
    UNION ALL \
    (SELECT project, entity, id, 'exhausted' AS due FROM intents \
     WHERE status = 'active' AND usage_limit IS NOT NULL AND uses >= usage_limit LIMIT $2)";

/// Stores the wrapped key of `rec`'s credential in `intent_keys`, in the transaction that
/// creates the intent.
pub(super) async fn insert_key(
    tx: &tokio_postgres::Transaction<'_>,
    rec: &IntentRecord,
    key: &Sealed,
) -> StoreResult<()> {
    timed(tx.execute(
        "INSERT INTO intent_keys (project, entity, id, key) VALUES ($1, $2, $3, $4) \
         ON CONFLICT DO NOTHING",
        &[&rec.project, &rec.entity, &rec.id, &key.to_stored()],
    ))
    .await?;
    Ok(())
}

/// The advisory lock whoever vacuums `intent_keys` holds ("pcvacuum" in ASCII).
const VACUUM_LOCK: i64 = 0x7063_7661_6375_756d;

/// Removes the dead rows of `intent_keys` (the keys of ended intents) from the table's pages:
/// `VACUUM` of that small table, by the one instance that holds [`VACUUM_LOCK`] now (the
/// others skip it). `VACUUM` does not run in a transaction: a pooled connection in autocommit.
pub(super) async fn vacuum_keys(c: &deadpool_postgres::Object) -> StoreResult<bool> {
    let locked: bool = timed(c.query_one("SELECT pg_try_advisory_lock($1)", &[&VACUUM_LOCK]))
        .await?
        .get(0);
    if !locked {
        return Ok(false);
    }
    let vacuumed = timed(c.batch_execute("VACUUM intent_keys")).await;
    timed(c.execute("SELECT pg_advisory_unlock($1)", &[&VACUUM_LOCK])).await?;
    vacuumed?;
    Ok(true)
}
