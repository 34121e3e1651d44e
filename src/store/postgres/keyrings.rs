//! [`KeyringStore`] on PostgreSQL: the tables `keyrings` and `client_keys`, one row a
//! project. Key rows are read ahead into the instance's caches
//! ([`listen`](mod@super::listen)) and read from the database on a miss; the trait's methods
//! are synchronous (the vault keeps what it read), so a write or a miss waits for the
//! database on the store's runtime (`PgStore::blocking`).

use super::cache::{Change, KeyCache};
use super::{client, commit_announced, timed, PgStore, CACHE_TTL};
use crate::store::{corrupt, KeyringStore, StoreResult};
use tokio_postgres::types::ToSql;

impl KeyringStore for PgStore {
    fn load_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read_key_row(
            &self.caches.keyrings,
            "SELECT keyring FROM keyrings WHERE project = $1",
            project,
        )
    }

    fn reload_keyring(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.caches.keyrings.write().remove(project);
        self.load_keyring(project)
    }

    fn create_keyring(&self, project: &str, keyring: &[u8]) -> StoreResult<Vec<u8>> {
        let (pool, p, k) = (self.pool.clone(), project.to_string(), keyring.to_vec());
        let stored = self.blocking(async move {
            let c = client(&pool).await?;
            timed(c.execute(
                "INSERT INTO keyrings (project, keyring) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&p, &k],
            ))
            .await?;
            let row = timed(c.query_one("SELECT keyring FROM keyrings WHERE project = $1", &[&p]))
                .await?;
            Ok(row.get::<_, Vec<u8>>(0))
        })?;
        self.caches.keyrings.write().insert(
            project.to_string(),
            (stored.clone(), std::time::Instant::now()),
        );
        Ok(stored)
    }

    fn swap_keyring(&self, project: &str, expected: &[u8], keyring: &[u8]) -> StoreResult<bool> {
        let change = Change::Keyring {
            project: project.to_string(),
        };
        self.swap_row("keyrings", "keyring", change, Some(expected), keyring)
    }

    fn load_client_keys(&self, project: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read_key_row(
            &self.caches.client_keys,
            "SELECT keyset FROM client_keys WHERE project = $1",
            project,
        )
    }

    fn swap_client_keys(
        &self,
        project: &str,
        expected: Option<&[u8]>,
        keyset: &[u8],
    ) -> StoreResult<bool> {
        let change = Change::ClientKeys {
            project: project.to_string(),
        };
        self.swap_row("client_keys", "keyset", change, expected, keyset)
    }
}

impl PgStore {
    /// One key row, from `cache` (read ahead at open) while younger than [`CACHE_TTL`],
    /// else from the database (`sql` selects the value by project), then kept in `cache`.
    /// (The vault keeps what it read: it asks again only for a project it has not loaded
    /// and for a value sealed under a key it does not know.)
    fn read_key_row(
        &self,
        cache: &KeyCache,
        sql: &'static str,
        project: &str,
    ) -> StoreResult<Option<Vec<u8>>> {
        if let Some((value, read)) = cache.read().get(project) {
            if read.elapsed() < CACHE_TTL {
                return Ok(Some(value.clone()));
            }
        }
        let (pool, p) = (self.pool.clone(), project.to_string());
        let found = self.blocking(async move {
            let c = client(&pool).await?;
            let row = timed(c.query_opt(sql, &[&p])).await?;
            Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
        })?;
        if let Some(value) = &found {
            cache.write().insert(
                project.to_string(),
                (value.clone(), std::time::Instant::now()),
            );
        }
        Ok(found)
    }

    /// Replaces the key row `change` names (`table`, value column `column`) if it is still
    /// `expected` (absent for `None`), announcing the change; `false` when it changed
    /// meanwhile.
    fn swap_row(
        &self,
        table: &'static str,
        column: &'static str,
        change: Change,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let (Change::Keyring { project } | Change::ClientKeys { project }) = &change else {
            return Err(corrupt("a key row change names no project"));
        };
        let (pool, p) = (self.pool.clone(), project.clone());
        let (expected, new) = (expected.map(<[u8]>::to_vec), new.to_vec());
        let (announce, changes) = (self.announcing(), [change.clone()]);
        let swapped = self.blocking(async move {
            let mut c = client(&pool).await?;
            let tx = timed(c.transaction()).await?;
            let n = match &expected {
                Some(old) => {
                    let sql = format!("UPDATE {table} SET {column} = $3 WHERE project = $1 AND {column} = $2");
                    let params: [&(dyn ToSql + Sync); 3] = [&p, old, &new];
                    timed(tx.execute(sql.as_str(), &params)).await?
                }
                None => {
                    let sql = format!(
                        "INSERT INTO {table} (project, {column}) VALUES ($1, $2) ON CONFLICT DO NOTHING"
                    );
                    timed(tx.execute(sql.as_str(), &[&p, &new])).await?
                }
            };
            commit_announced(tx, &changes, announce).await?;
            Ok(n == 1)
        });
        self.caches.forget(&change);
        swapped
    }
}
