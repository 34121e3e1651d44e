//! [`BrowserSessionStore`] on sled.
//!
//! | tree                  | key                        | value                                 |
//! |-----------------------|----------------------------|---------------------------------------|
//! | `browser_sessions`    | id                         | [`BrowserSessionRecord`] (JSON)       |
//! | `browser_by_intent`   | scope, intent id `\0`, id  | empty: an intent's sessions           |
//! | `browser_stand_ins`   | stand-in key               | the id of the `active` session holding it |
//!
//! Every change writes its event in the same transaction ([`super::events`]).

use super::{abort, events, keys, tx_error, SledStore};
use crate::audit::AuditEvent;
use crate::store::browser_sessions::{
    BrowserSessionRecord, BrowserSessionStatus, BrowserSessionStore, SessionChange,
};
use crate::store::events::{browser_session, BS_CREATED};
use crate::store::{corrupt, unavailable, Scope, StoreError, StoreResult};
use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use sled::Transactional;

/// The trees.
#[derive(Debug)]
pub struct Trees {
    pub sessions: sled::Tree,
    pub by_intent: sled::Tree,
    pub stand_ins: sled::Tree,
}

impl Trees {
    pub fn open(db: &sled::Db) -> StoreResult<Self> {
        let tree = |name: &str| db.open_tree(name).map_err(unavailable);
        Ok(Trees {
            sessions: tree("browser_sessions")?,
            by_intent: tree("browser_by_intent")?,
            stand_ins: tree("browser_stand_ins")?,
        })
    }
}

/// Prefix of an intent's sessions in `browser_by_intent`.
fn intent_prefix(scope: Scope<'_>, intent_id: &str) -> Vec<u8> {
    let mut k = keys::pi(scope, intent_id);
    k.push(0);
    k
}

fn decode(v: &[u8]) -> StoreResult<BrowserSessionRecord> {
    serde_json::from_slice(v).map_err(corrupt)
}

fn encode(s: &BrowserSessionRecord) -> Result<Vec<u8>, ConflictableTransactionError<StoreError>> {
    serde_json::to_vec(s).map_err(|e| abort(corrupt(e)))
}

/// The session `id` read inside a transaction.
fn read(
    t: &TransactionalTree,
    id: &str,
) -> Result<Option<BrowserSessionRecord>, ConflictableTransactionError<StoreError>> {
    t.get(id.as_bytes())?
        .map(|v| decode(&v).map_err(abort))
        .transpose()
}

#[async_trait]
impl BrowserSessionStore for SledStore {
    async fn insert_browser_session(
        &self,
        session: &BrowserSessionRecord,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let t = &self.browser;
        let index = intent_prefix(session.scope(), &session.intent_id);
        let mut index = index;
        index.extend_from_slice(session.id.as_bytes());
        let value = serde_json::to_vec(session).map_err(corrupt)?;
        let inserted = (
            &t.sessions,
            &t.by_intent,
            &t.stand_ins,
            &self.events,
            &self.outbox,
        )
            .transaction(
                |(t_sessions, t_by_intent, t_stand_ins, t_events, t_outbox)| {
                    let key = session.stand_in_key.as_bytes();
                    if t_sessions.get(session.id.as_bytes())?.is_some()
                        || t_stand_ins.get(key)?.is_some()
                    {
                        return Ok(false);
                    }
                    t_sessions.insert(session.id.as_bytes(), value.as_slice())?;
                    t_by_intent.insert(index.as_slice(), &[] as &[u8])?;
                    t_stand_ins.insert(key, session.id.as_bytes())?;
                    let event = browser_session(BS_CREATED, session, session.created_micros);
                    events::write(t_events, &[event])?;
                    super::audit::to_outbox(t_outbox, &audit)?;
                    Ok(true)
                },
            )
            .map_err(tx_error)?;
        if inserted {
            self.durable_audited().await?;
        }
        Ok(inserted)
    }

    async fn get_browser_session(&self, id: &str) -> StoreResult<Option<BrowserSessionRecord>> {
        self.browser
            .sessions
            .get(id.as_bytes())
            .map_err(unavailable)?
            .map(|v| decode(&v))
            .transpose()
    }

    async fn browser_session_by_stand_in(
        &self,
        stand_in_key: &str,
    ) -> StoreResult<Option<BrowserSessionRecord>> {
        let Some(id) = self
            .browser
            .stand_ins
            .get(stand_in_key.as_bytes())
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        let id = std::str::from_utf8(&id).map_err(corrupt)?;
        Ok(self
            .get_browser_session(id)
            .await?
            .filter(|s| s.status == BrowserSessionStatus::Active))
    }

    async fn list_browser_sessions(
        &self,
        scope: Scope<'_>,
        intent_id: &str,
    ) -> StoreResult<Vec<BrowserSessionRecord>> {
        let prefix = intent_prefix(scope, intent_id);
        let mut all = Vec::new();
        for item in self.browser.by_intent.scan_prefix(&prefix) {
            let (k, _) = item.map_err(unavailable)?;
            let id =
                std::str::from_utf8(k.get(prefix.len()..).unwrap_or_default()).map_err(corrupt)?;
            if let Some(s) = self.get_browser_session(id).await? {
                all.push(s);
            }
        }
        all.sort_by(|a, b| (a.created_micros, &a.id).cmp(&(b.created_micros, &b.id)));
        Ok(all)
    }

    async fn change_browser_session(
        &self,
        id: &str,
        change: SessionChange,
        now_micros: i64,
        audit: Option<AuditEvent>,
    ) -> StoreResult<Option<BrowserSessionRecord>> {
        let t = &self.browser;
        let changed = (&t.sessions, &t.stand_ins, &self.events, &self.outbox)
            .transaction(|(t_sessions, t_stand_ins, t_events, t_outbox)| {
                let Some(current) = read(t_sessions, id)? else {
                    return Ok(None);
                };
                if current.status != BrowserSessionStatus::Active {
                    return Ok(None);
                }
                let next = change.apply(&current, now_micros);
                t_sessions.insert(id.as_bytes(), encode(&next)?)?;
                if change == SessionChange::End {
                    t_stand_ins.remove(current.stand_in_key.as_bytes())?;
                }
                events::write(
                    t_events,
                    &[browser_session(change.event(), &next, now_micros)],
                )?;
                if let Some(audit) = &audit {
                    super::audit::to_outbox(t_outbox, audit)?;
                }
                Ok(Some(next))
            })
            .map_err(tx_error)?;
        if changed.is_some() {
            self.durable_audited().await?;
        }
        Ok(changed)
    }
}
