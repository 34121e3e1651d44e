//! [`CardTokenStore`] on sled: the tree `card_tokens`, key the scope and the token's id,
//! value the [`CardTokenRecord`] (JSON).
//!
//! A consumed token stays as a tombstone without its sealed card data, so a second use is told
//! apart from an unknown id.

use super::{keys, SledStore};
use crate::store::{
    unavailable, CardTokenRecord, CardTokenStore, Scope, StoreError, StoreResult, TokenTake,
};
use async_trait::async_trait;

/// How long a spent (used or expired) token's tombstone is kept, so that a late second use
/// is still told "used" or "expired" rather than "unknown".
pub const TOMBSTONE_KEEP_MICROS: i64 = 24 * 3600 * 1_000_000;

/// Stores a new token, and tidies the entity's older ones first: expired tokens lose their
/// sealed card data, and tombstones older than [`TOMBSTONE_KEEP_MICROS`] go.
pub fn insert(tree: &sled::Tree, scope: Scope<'_>, rec: &CardTokenRecord) -> StoreResult<()> {
    sweep(tree, scope, rec.created_micros)?;
    let value = serde_json::to_vec(rec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    tree.insert(keys::pm(scope, &rec.id), value)
        .map_err(unavailable)?;
    Ok(())
}

/// Drops the sealed data of the scope's expired tokens and removes old tombstones.
fn sweep(tree: &sled::Tree, scope: Scope<'_>, now_micros: i64) -> StoreResult<()> {
    for item in tree.scan_prefix(keys::scope_prefix(scope)) {
        let (key, value) = item.map_err(unavailable)?;
        let Ok(old) = serde_json::from_slice::<CardTokenRecord>(&value) else {
            continue;
        };
        if old.expires_micros > now_micros {
            continue;
        }
        let replacement = if now_micros - old.expires_micros > TOMBSTONE_KEEP_MICROS {
            None
        } else if old.number_sealed.is_some() || old.cvc_sealed.is_some() {
            let tombstone = CardTokenRecord {
                number_sealed: None,
                cvc_sealed: None,
                ..old
            };
            Some(serde_json::to_vec(&tombstone).map_err(|e| StoreError::Corrupt(e.to_string()))?)
        } else {
            continue;
        };
        // A concurrent take may have changed it meanwhile; then it is left for the next sweep.
        let _ = tree
            .compare_and_swap(&key, Some(&value), replacement)
            .map_err(unavailable)?;
    }
    Ok(())
}

/// Marks an unused, unexpired token used, atomically (compare and swap), and drops its
/// sealed data from the stored record.
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
        let rec: CardTokenRecord =
            serde_json::from_slice(&current).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if rec.used {
            return Ok(TokenTake::Used);
        }
        if now_micros >= rec.expires_micros {
            // Expired: its card data goes now.
            let tombstone = CardTokenRecord {
                number_sealed: None,
                cvc_sealed: None,
                ..rec
            };
            let value =
                serde_json::to_vec(&tombstone).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let _ = tree
                .compare_and_swap(&key, Some(&current), Some(value))
                .map_err(unavailable)?;
            return Ok(TokenTake::Expired);
        }
        let tombstone = CardTokenRecord {
            number_sealed: None,
            cvc_sealed: None,
            used: true,
            ..rec.clone()
        };
        let value =
            serde_json::to_vec(&tombstone).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        match tree
            .compare_and_swap(&key, Some(&current), Some(value))
            .map_err(unavailable)?
        {
            Ok(()) => return Ok(TokenTake::Taken(Box::new(rec))),
            // Someone else changed it meanwhile: read again.
            Err(_) => continue,
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
