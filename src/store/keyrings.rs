//! [`KeyringStore`]: the key rows, each wrapped by the master key: a project's keyring of
//! data keys (`vault`), and its client-encryption keyset (`vault::client_keys`). The vault
//! keeps what it read in its own cache, so these calls are synchronous.

use super::StoreResult;

/// Keyrings and client-encryption keysets, by project.
pub trait KeyringStore: Send + Sync + 'static {
    /// The project's wrapped keyring, if one was created.
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// The project's wrapped keyring as the store holds it now, past any cache of the
    /// store's own (a value sealed under a key this process does not know yet).
    fn reload_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.load_keyring(project)
    }

    /// Stores a keyring unless one exists; returns the one that is stored.
    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>>;

    /// Replaces the keyring if it still is `expected` (durable when it returns); `false` when
    /// it changed meanwhile.
    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool>;

    /// The project's client-encryption keyset (private keys wrapped), if created.
    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Replaces the keyset if it still is `expected`; `false` when it changed meanwhile.
    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool>;
}
