//! [`PasskeyStore`] on PostgreSQL: the tables `passkeys` and `webauthn_states` (a ceremony's
//! state, taken once by a `DELETE … RETURNING`).

use super::{from_json, json, timed, PgStore};
use crate::audit::AuditEvent;
use crate::store::{PasskeyRecord, PasskeyStore, Scope, StoreResult, WebauthnStateRecord};
use async_trait::async_trait;
use tokio_postgres::types::ToSql;

#[async_trait]
impl PasskeyStore for PgStore {
    async fn put_passkey(
        &self,
        passkey: &PasskeyRecord,
        audit: Option<AuditEvent>,
    ) -> StoreResult<bool> {
        let record = json(passkey)?;
        let args: [&(dyn ToSql + Sync); 5] = [
            &passkey.project,
            &passkey.entity,
            &passkey.id,
            &passkey.created_micros,
            &record,
        ];
        let sql = match audit {
            None => {
                "UPDATE passkeys SET record = $5 \
                 WHERE project = $1 AND entity = $2 AND id = $3 AND created_micros = $4"
            }
            Some(_) => {
                "INSERT INTO passkeys (project, entity, id, created_micros, record) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
            }
        };
        self.change_audited(sql, &args, audit.as_ref()).await
    }

    async fn list_passkeys(&self, scope: Scope<'_>) -> StoreResult<Vec<PasskeyRecord>> {
        let c = self.client().await?;
        let rows = timed(c.query(
            "SELECT record FROM passkeys WHERE project = $1 AND entity = $2 \
             ORDER BY created_micros, id",
            &[&scope.project, &scope.entity],
        ))
        .await?;
        rows.iter().map(|r| from_json(r.get(0))).collect()
    }

    async fn delete_passkey(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        self.change_audited(
            "DELETE FROM passkeys WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id],
            Some(&audit),
        )
        .await
    }

    async fn put_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        state: &WebauthnStateRecord,
        now_micros: i64,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        timed(tx.execute(
            "DELETE FROM webauthn_states \
             WHERE project = $1 AND entity = $2 AND expires_micros <= $3",
            &[&scope.project, &scope.entity, &now_micros],
        ))
        .await?;
        timed(tx.execute(
            "INSERT INTO webauthn_states (project, entity, key, expires_micros, record) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, entity, key) \
             DO UPDATE SET expires_micros = $4, record = $5",
            &[
                &scope.project,
                &scope.entity,
                &key,
                &state.expires_micros,
                &json(state)?,
            ],
        ))
        .await?;
        timed(tx.commit()).await?;
        Ok(())
    }

    async fn take_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<WebauthnStateRecord>> {
        let c = self.client().await?;
        let row = timed(c.query_opt(
            "DELETE FROM webauthn_states WHERE project = $1 AND entity = $2 AND key = $3 \
             RETURNING record",
            &[&scope.project, &scope.entity, &key],
        ))
        .await?;
        let state: Option<WebauthnStateRecord> = row.map(|r| from_json(r.get(0))).transpose()?;
        Ok(state.filter(|s| s.live_at(now_micros)))
    }
}
