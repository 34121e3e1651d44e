//! [`BrowserSessionStore`] on PostgreSQL: the table `browser_sessions` (migration 8), whose
//! partial unique index on `stand_in_key` keeps a stand-in number to one active session.
//! Every change writes its event in the same transaction ([`super::events`]).

use super::events::write_events;
use super::{from_json, json, timed, PgStore, OUTBOX};
use crate::audit::AuditEvent;
use crate::store::browser_sessions::{
    BrowserSessionRecord, BrowserSessionStatus, BrowserSessionStore, SessionChange,
};
use crate::store::events::{browser_session, BS_CREATED};
use crate::store::{Scope, StoreResult};
use async_trait::async_trait;

#[async_trait]
impl BrowserSessionStore for PgStore {
    async fn insert_browser_session(
        &self,
        session: &BrowserSessionRecord,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let inserted = timed(tx.execute(
            "INSERT INTO browser_sessions \
             (id, project, entity, intent_id, status, stand_in_key, created_micros, record) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
            &[
                &session.id,
                &session.project,
                &session.entity,
                &session.intent_id,
                &session.status.as_str(),
                &session.stand_in_key,
                &session.created_micros,
                &json(session)?,
            ],
        ))
        .await?;
        if inserted == 0 {
            return Ok(false);
        }
        let event = browser_session(BS_CREATED, session, session.created_micros);
        write_events(&tx, &[event]).await?;
        timed(tx.execute(OUTBOX, &[&json(&audit)?])).await?;
        timed(tx.commit()).await?;
        self.audited();
        Ok(true)
    }

    async fn get_browser_session(&self, id: &str) -> StoreResult<Option<BrowserSessionRecord>> {
        let c = self.client().await?;
        let row =
            timed(c.query_opt("SELECT record FROM browser_sessions WHERE id = $1", &[&id])).await?;
        row.map(|r| from_json(r.get(0))).transpose()
    }

    async fn browser_session_by_stand_in(
        &self,
        stand_in_key: &str,
    ) -> StoreResult<Option<BrowserSessionRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "SELECT record FROM browser_sessions WHERE stand_in_key = $1 AND status = $2",
            &[&stand_in_key, &BrowserSessionStatus::Active.as_str()],
        ))
        .await?;
        row.map(|r| from_json(r.get(0))).transpose()
    }

    async fn list_browser_sessions(
        &self,
        scope: Scope<'_>,
        intent_id: &str,
    ) -> StoreResult<Vec<BrowserSessionRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT record FROM browser_sessions \
             WHERE project = $1 AND entity = $2 AND intent_id = $3 ORDER BY created_micros, id",
            &[&scope.project, &scope.entity, &intent_id],
        ))
        .await?;
        rows.iter().map(|r| from_json(r.get(0))).collect()
    }

    async fn change_browser_session(
        &self,
        id: &str,
        change: SessionChange,
        now_micros: i64,
        audit: Option<AuditEvent>,
    ) -> StoreResult<Option<BrowserSessionRecord>> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(row) = timed(tx.query_opt(
            "SELECT record FROM browser_sessions WHERE id = $1 AND status = 'active' FOR UPDATE",
            &[&id],
        ))
        .await?
        else {
            return Ok(None);
        };
        let next = change.apply(&from_json(row.get(0))?, now_micros);
        timed(tx.execute(
            "UPDATE browser_sessions SET status = $2, record = $3 WHERE id = $1",
            &[&id, &next.status.as_str(), &json(&next)?],
        ))
        .await?;
        write_events(&tx, &[browser_session(change.event(), &next, now_micros)]).await?;
        if let Some(audit) = &audit {
            timed(tx.execute(OUTBOX, &[&json(audit)?])).await?;
        }
        timed(tx.commit()).await?;
        if audit.is_some() {
            self.audited();
        }
        Ok(Some(next))
    }
}
