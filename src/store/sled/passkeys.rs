//! [`PasskeyStore`] on sled: passkeys and WebAuthn ceremony states.
//!
//! | tree             | key              | value                                   |
//! |------------------|------------------|-----------------------------------------|
//! | `passkeys`       | scope, id        | [`PasskeyRecord`] (JSON)                |
//! | `webauthn_states`| scope, state key | [`WebauthnStateRecord`] (JSON), taken once |

use super::{keys, SledStore};
use crate::audit::AuditEvent;
use crate::store::{
    corrupt, unavailable, PasskeyRecord, PasskeyStore, Scope, StoreResult, WebauthnStateRecord,
};
use async_trait::async_trait;

/// Stores `state` under `key`, after removing the scope's expired states.
pub fn put_state(
    tree: &sled::Tree,
    scope: Scope<'_>,
    key: &str,
    state: &WebauthnStateRecord,
    now_micros: i64,
) -> StoreResult<()> {
    for item in tree.scan_prefix(keys::scope_prefix(scope)) {
        let (k, v) = item.map_err(unavailable)?;
        let expired = serde_json::from_slice::<WebauthnStateRecord>(&v)
            .map(|s| !s.live_at(now_micros))
            .unwrap_or(true);
        if expired {
            // A concurrent take may have removed it; either way it is gone.
            let _ = tree
                .compare_and_swap(&k, Some(&v), None as Option<&[u8]>)
                .map_err(unavailable)?;
        }
    }
    let value = serde_json::to_vec(state).map_err(corrupt)?;
    tree.insert(keys::pm(scope, key), value)
        .map_err(unavailable)?;
    Ok(())
}

/// Removes the state under `key` and returns it unless expired at `now_micros`.
pub fn take_state(
    tree: &sled::Tree,
    scope: Scope<'_>,
    key: &str,
    now_micros: i64,
) -> StoreResult<Option<WebauthnStateRecord>> {
    let Some(v) = tree.remove(keys::pm(scope, key)).map_err(unavailable)? else {
        return Ok(None);
    };
    let state: WebauthnStateRecord = serde_json::from_slice(&v).map_err(corrupt)?;
    Ok(state.live_at(now_micros).then_some(state))
}

#[async_trait]
impl PasskeyStore for SledStore {
    async fn put_passkey(
        &self,
        passkey: &PasskeyRecord,
        audit: Option<AuditEvent>,
    ) -> StoreResult<bool> {
        let scope = Scope {
            project: &passkey.project,
            entity: &passkey.entity,
        };
        let key = keys::pm(scope, &passkey.id);
        let value = serde_json::to_vec(passkey).map_err(corrupt)?;
        let replace = audit.is_none();
        self.change_audited(
            &self.passkeys,
            &key,
            Some((&value, replace)),
            audit.as_ref(),
        )
        .await
    }

    async fn list_passkeys(&self, scope: Scope<'_>) -> StoreResult<Vec<PasskeyRecord>> {
        let mut all = self
            .passkeys
            .scan_prefix(keys::scope_prefix(scope))
            .values()
            .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
            .collect::<StoreResult<Vec<PasskeyRecord>>>()?;
        all.sort_by(|a, b| (a.created_micros, &a.id).cmp(&(b.created_micros, &b.id)));
        Ok(all)
    }

    async fn delete_passkey(
        &self,
        scope: Scope<'_>,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let key = keys::pm(scope, id);
        self.change_audited(&self.passkeys, &key, None, Some(&audit))
            .await
    }

    async fn put_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        state: &WebauthnStateRecord,
        now_micros: i64,
    ) -> StoreResult<()> {
        put_state(&self.webauthn_states, scope, key, state, now_micros)?;
        self.durable().await
    }

    async fn take_webauthn_state(
        &self,
        scope: Scope<'_>,
        key: &str,
        now_micros: i64,
    ) -> StoreResult<Option<WebauthnStateRecord>> {
        let taken = take_state(&self.webauthn_states, scope, key, now_micros)?;
        self.durable().await?;
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use crate::audit::AuditEvent;
    use crate::store::{PasskeyRecord, PasskeyStore, SledStore};

    /// `paycred store copy` takes the passkeys along.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passkeys_are_exported() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), Default::default()).unwrap();
        let passkey = PasskeyRecord {
            id: "pk_a".into(),
            project: "p".into(),
            entity: "e".into(),
            created_micros: 1,
            last_used_micros: None,
            name: None,
            credential: serde_json::json!({"cred": {}}),
        };
        let audit = AuditEvent {
            at_micros: 1,
            action: "passkey.create".into(),
            project: "p".into(),
            entity: "e".into(),
            resource: "pk_a".into(),
        };
        assert!(store.put_passkey(&passkey, Some(audit)).await.unwrap());
        let export = store.export().unwrap();
        assert_eq!(export.passkeys, [passkey]);
        assert!(export.counts().contains(&("passkeys", "passkeys", 1)));
    }
}
