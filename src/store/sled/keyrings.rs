//! [`KeyringStore`] on sled: the trees `keyrings` (a project's keyring, wrapped by the master
//! key) and `client_keys` (its client-encryption keyset, private keys wrapped), keyed by
//! project. A swap is made durable before it returns: values sealed from then on name the
//! new key.

use super::SledStore;
use crate::store::{unavailable, KeyringStore, StoreResult};

impl KeyringStore for SledStore {
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self
            .keyrings
            .get(project)
            .map_err(unavailable)?
            .map(|v| v.to_vec()))
    }

    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>> {
        match self
            .keyrings
            .compare_and_swap(project, None as Option<&[u8]>, Some(keyring))
            .map_err(unavailable)?
        {
            Ok(()) => {
                // Made durable by the flush of the write that first uses it.
                Ok(keyring.to_vec())
            }
            Err(current) => Ok(current.current.map(|v| v.to_vec()).unwrap_or_default()),
        }
    }

    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool> {
        let swapped = swap(&self.keyrings, project, Some(expected), keyring)?;
        // Durable now: values sealed from here on name the new key.
        self.db.flush().map_err(unavailable)?;
        Ok(swapped)
    }

    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self
            .client_keys
            .get(project)
            .map_err(unavailable)?
            .map(|v| v.to_vec()))
    }

    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool> {
        let swapped = swap(&self.client_keys, project, expected, keyset)?;
        // Durable now: the keys encrypt what browsers send from here on.
        self.db.flush().map_err(unavailable)?;
        Ok(swapped)
    }
}

/// Replaces the value at `key` if it is still `expected`; `false` when it changed.
pub fn swap(
    tree: &sled::Tree,
    key: &str,
    expected: Option<&[u8]>,
    new: &[u8],
) -> StoreResult<bool> {
    Ok(tree
        .compare_and_swap(key, expected, Some(new))
        .map_err(unavailable)?
        .is_ok())
}
