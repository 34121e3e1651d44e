//! The schema's versions, embedded in the binary and applied in order, each in its own
//! transaction, under a session advisory lock: instances that start together wait for the
//! first one, and then find nothing left to do. `paycred migrate -c FILE` runs them alone.

use super::{client, timed};
use crate::store::{StoreError, StoreResult};
use deadpool_postgres::Pool;

/// (version, name, SQL), oldest first. A released version is never edited: a change is a new
/// version.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", include_str!("migrations/0001_initial.sql")),
    (
        2,
        "idempotency claims",
        include_str!("migrations/0002_idempotency_claims.sql"),
    ),
    (
        3,
        "intent ends",
        include_str!("migrations/0003_intent_ends.sql"),
    ),
    (
        4,
        "audit head mac",
        include_str!("migrations/0004_audit_head_mac.sql"),
    ),
    (
        5,
        "events and webhook endpoints",
        include_str!("migrations/0005_events.sql"),
    ),
    (
        6,
        "webhook deliveries",
        include_str!("migrations/0006_webhook_deliveries.sql"),
    ),
    (7, "passkeys", include_str!("migrations/0007_passkeys.sql")),
    (
        8,
        "browser sessions",
        include_str!("migrations/0008_browser_sessions.sql"),
    ),
    (
        9,
        "retention",
        include_str!("migrations/0009_retention.sql"),
    ),
    (
        10,
        "rate limit buckets",
        include_str!("migrations/0010_rate_limit_buckets.sql"),
    ),
];

/// The advisory lock that serializes migrations (any fixed number, "paycred" in ASCII).
const MIGRATION_LOCK: i64 = 0x0070_6179_6372_6564;

/// Applies the versions the database lacks; the versions applied now.
pub async fn apply(pool: &Pool) -> StoreResult<Vec<i64>> {
    let mut c = client(pool).await?;
    timed(c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])).await?;
    let applied = apply_locked(&mut c).await;
    let unlocked = timed(c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])).await;
    let applied = applied?;
    unlocked?;
    Ok(applied)
}

async fn apply_locked(c: &mut deadpool_postgres::Object) -> StoreResult<Vec<i64>> {
    timed(c.batch_execute(
        "CREATE TABLE IF NOT EXISTS paycred_migrations (\
         version bigint PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
    ))
    .await?;
    let done: Vec<i64> = timed(c.query("SELECT version FROM paycred_migrations", &[]))
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if let Some(newer) = done
        .iter()
        .find(|v| !MIGRATIONS.iter().any(|(m, _, _)| m == *v))
    {
        return Err(StoreError::Unavailable(format!(
            "the database has schema version {newer}, which this paycred does not know (a newer release migrated it)"
        )));
    }
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        let tx = timed(c.transaction()).await?;
        timed(tx.batch_execute(sql)).await?;
        timed(tx.execute(
            "INSERT INTO paycred_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        ))
        .await?;
        timed(tx.commit()).await?;
        applied.push(*version);
    }
    Ok(applied)
}
