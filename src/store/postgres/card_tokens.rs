//! [`CardTokenStore`] on PostgreSQL: the table `card_tokens`, the record as `jsonb` beside
//! its expiry. A take locks the row (`FOR UPDATE`) and applies [`take_at`]; an insert first
//! tidies the scope as [`crate::store::card_tokens::tidy_at`] says, in SQL.

use super::{from_json, json, timed, PgStore};
use crate::store::card_tokens::{take_at, tombstones_kept_from};
use crate::store::{CardTokenRecord, CardTokenStore, Scope, StoreResult, TokenTake};
use async_trait::async_trait;
use std::sync::atomic::Ordering;

#[async_trait]
impl CardTokenStore for PgStore {
    async fn insert_card_token(
        &self,
        scope: Scope<'_>,
        token: &CardTokenRecord,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        // The scope's tidy-up at the token's creation (`tidy_at`, in SQL): tombstones past
        // their keep go, expired tokens lose their sealed data.
        let kept_from = tombstones_kept_from(token.created_micros);
        timed(tx.execute(
            "DELETE FROM card_tokens WHERE project = $1 AND entity = $2 AND expires_micros < $3",
            &[&scope.project, &scope.entity, &kept_from],
        ))
        .await?;
        timed(tx.execute(
            "UPDATE card_tokens SET record = record - 'number_sealed' - 'cvc_sealed' \
             WHERE project = $1 AND entity = $2 AND expires_micros <= $3 \
             AND (record ? 'number_sealed' OR record ? 'cvc_sealed')",
            &[&scope.project, &scope.entity, &token.created_micros],
        ))
        .await?;
        timed(tx.execute(
            "INSERT INTO card_tokens (project, entity, id, expires_micros, record) VALUES ($1, $2, $3, $4, $5)",
            &[&scope.project, &scope.entity, &token.id, &token.expires_micros, &json(token)?],
        ))
        .await?;
        timed(tx.commit()).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake> {
        let mut c = self.client().await?;
        let tx = timed(c.transaction()).await?;
        let Some(row) = timed(tx.query_opt(
            "SELECT record FROM card_tokens WHERE project = $1 AND entity = $2 AND id = $3 FOR UPDATE",
            &[&scope.project, &scope.entity, &id],
        ))
        .await?
        else {
            return Ok(TokenTake::Unknown);
        };
        let (took, replacement) = take_at(from_json(row.get(0))?, now_micros);
        let Some(replacement) = replacement else {
            return Ok(took);
        };
        timed(tx.execute(
            "UPDATE card_tokens SET record = $4 WHERE project = $1 AND entity = $2 AND id = $3",
            &[&scope.project, &scope.entity, &id, &json(&replacement)?],
        ))
        .await?;
        timed(tx.commit()).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(took)
    }
}
