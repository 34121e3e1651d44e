//! [`CardTokenStore`] on sled: the tree `card_tokens`, key the scope and the token's id,
//! value the [`CardTokenRecord`] (JSON).
//!
//! What a take and the tidy-up do is [`crate::store::card_tokens`]'s rule; here they are
//! applied with compare and swap.

use super::{keys, SledStore};
use crate::store::card_tokens::{take_at, tidy_at, Tidy};
use crate::store::{
    corrupt, unavailable, CardTokenRecord, CardTokenStore, Scope, StoreResult, TokenTake,
};
use async_trait::async_trait;

/// Stores a new token, after the scope's tidy-up at its creation ([`tidy_at`]).
pub fn insert(tree: &sled::Tree, scope: Scope<'_>, rec: &CardTokenRecord) -> StoreResult<()> {
    tidy(tree, scope, rec.created_micros)?;
    let value = serde_json::to_vec(rec).map_err(corrupt)?;
    tree.insert(keys::pm(scope, &rec.id), value)
        .map_err(unavailable)?;
    Ok(())
}

/// Applies [`tidy_at`] to each of the scope's tokens.
fn tidy(tree: &sled::Tree, scope: Scope<'_>, now_micros: i64) -> StoreResult<()> {
    for item in tree.scan_prefix(keys::scope_prefix(scope)) {
        let (key, value) = item.map_err(unavailable)?;
        let Ok(old) = serde_json::from_slice::<CardTokenRecord>(&value) else {
            continue;
        };
        let replacement = match tidy_at(&old, now_micros) {
            Tidy::Keep => continue,
            Tidy::Strip(tombstone) => Some(serde_json::to_vec(&tombstone).map_err(corrupt)?),
            Tidy::Remove => None,
        };
        // A concurrent take may have changed it meanwhile; then it is left for the next tidy-up.
        let _ = tree
            .compare_and_swap(&key, Some(&value), replacement)
            .map_err(unavailable)?;
    }
    Ok(())
}

/// Takes a token as [`take_at`] says, atomically (compare and swap: a token changed
/// meanwhile is read again, unless it expired).
pub fn take(
    tree: &sled::Tree,
    scope: Scope<'_>,
    id: &str,
    now_micros: i64,
) -> StoreResult<TokenTake> {
    let key = keys::pm(scope, id);
    loop {
        let Some(current) = tree.get(&key).map_err(unavailable)? else {
            return Ok(TokenTake::Unknown);
        };
        let rec: CardTokenRecord = serde_json::from_slice(&current).map_err(corrupt)?;
        let (took, replacement) = take_at(rec, now_micros);
        let Some(replacement) = replacement else {
            return Ok(took);
        };
        let value = serde_json::to_vec(&replacement).map_err(corrupt)?;
        let swapped = tree
            .compare_and_swap(&key, Some(&current), Some(value))
            .map_err(unavailable)?;
        match took {
            // Someone else changed it meanwhile: read again.
            TokenTake::Taken(_) if swapped.is_err() => continue,
            took => return Ok(took),
        }
    }
}

#[async_trait]
impl CardTokenStore for SledStore {
    async fn insert_card_token(
        &self,
        scope: Scope<'_>,
        token: &CardTokenRecord,
    ) -> StoreResult<()> {
        insert(&self.card_tokens, scope, token)?;
        self.durable().await
    }

    async fn take_card_token(
        &self,
        scope: Scope<'_>,
        id: &str,
        now_micros: i64,
    ) -> StoreResult<TokenTake> {
        let taken = take(&self.card_tokens, scope, id, now_micros)?;
        self.durable().await?;
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::store::Sealed;

    fn rec(id: &str, created: i64) -> CardTokenRecord {
        CardTokenRecord {
            id: id.into(),
            fingerprint: "f".into(),
            masked_data: "424242******4242".into(),
            created_micros: created,
            expires_micros: created + 3_600_000_000,
            expiration_month: "12".into(),
            expiration_year: "2031".into(),
            number_sealed: Some(Sealed::from_stored("dk.sealed")),
            cvc_sealed: Some(Sealed::from_stored("cvc.sealed")),
            used: false,
        }
    }

    #[test]
    fn tokens_are_taken_once_expire_and_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path())
            .temporary(true)
            .open()
            .unwrap();
        let tree = db.open_tree("card_tokens").unwrap();
        let me = Scope {
            project: "p",
            entity: "e",
        };
        let other = Scope {
            project: "p",
            entity: "e2",
        };
        let hour = 3_600_000_000;
        insert(&tree, me, &rec("tok_a", 0)).unwrap();
        insert(&tree, me, &rec("tok_b", 0)).unwrap();
        assert_eq!(take(&tree, other, "tok_a", 1).unwrap(), TokenTake::Unknown);
        assert!(
            matches!(take(&tree, me, "tok_a", 1).unwrap(), TokenTake::Taken(r) if r.number_sealed.is_some())
        );
        assert_eq!(take(&tree, me, "tok_a", 2).unwrap(), TokenTake::Used);
        // A new token an hour later: tok_b is expired and loses its sealed data.
        insert(&tree, me, &rec("tok_c", hour + 1)).unwrap();
        let b: CardTokenRecord =
            serde_json::from_slice(&tree.get(keys::pm(me, "tok_b")).unwrap().unwrap()).unwrap();
        assert_eq!((b.number_sealed, b.cvc_sealed), (None, None));
        assert_eq!(
            take(&tree, me, "tok_b", hour + 2).unwrap(),
            TokenTake::Expired
        );
        // A day after that, the tombstones go.
        insert(&tree, me, &rec("tok_d", 26 * hour)).unwrap();
        assert!(tree.get(keys::pm(me, "tok_a")).unwrap().is_none());
        assert!(tree.get(keys::pm(me, "tok_b")).unwrap().is_none());
        assert!(tree.get(keys::pm(me, "tok_d")).unwrap().is_some());
    }
}
