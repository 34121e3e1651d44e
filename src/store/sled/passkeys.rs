//! Passkeys and WebAuthn ceremony states in sled.
//!
//! | tree             | key              | value                                   |
//! |------------------|------------------|-----------------------------------------|
//! | `passkeys`       | scope, id        | [`PasskeyRecord`] (JSON)                |
//! | `webauthn_states`| scope, state key | [`WebauthnStateRecord`] (JSON), taken once |

use super::keys;
use crate::store::{corrupt, unavailable, Scope, StoreResult, WebauthnStateRecord};

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
            .map(|s| s.expires_micros <= now_micros)
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
    Ok((state.expires_micros > now_micros).then_some(state))
}
