//! `paycred data-key`, `client-key` and `master-key`: the keys of a deployment. On sled they
//! are worked on with the server stopped (sled opens the data directory exclusively); on
//! PostgreSQL beside the running servers, which take up a rotated key when they restart
//! (they keep keys in memory, and every key they hold keeps opening what it sealed).

use super::{ClientKeyAction, DataKeyAction};
use crate::store::Store;
use crate::vault::client_keys::ClientKeys;
use crate::vault::master::MasterKey;
use crate::vault::Vault;
use std::sync::Arc;

/// The master key and the store of `config`, for a command run with the server stopped
/// (sled opens the data directory exclusively), about a project the config names.
pub fn open_offline(
    config: &crate::config::Config,
    project: &str,
) -> Result<(MasterKey, Arc<dyn Store>), String> {
    if config.project(project).is_none() {
        return Err(format!("project {project:?} is not in the config"));
    }
    let master = MasterKey::load(&config.master_key_file).map_err(|e| e.to_string())?;
    if let crate::config::store::StoreConfig::Postgres(_) = &config.store {
        // The database is shared: the command runs beside the servers.
        return Ok((master, crate::store::open(config)?));
    }
    // Opening a missing directory would make an empty store there and act on it.
    if !config.data_dir.is_dir() {
        return Err(format!(
            "data_dir {} does not exist (relative paths start from the config file's directory)",
            config.data_dir.display()
        ));
    }
    let store =
        crate::store::SledStore::open(&config.data_dir, config.audit_hash).map_err(|e| {
            format!(
                "data_dir {}: {e} (stop the server first: the store is opened exclusively)",
                config.data_dir.display()
            )
        })?;
    Ok((master, Arc::new(store)))
}

/// Runs `paycred data-key` on the store of `config` (on sled with the server stopped; on
/// PostgreSQL while the instances run: they seal with a rotated key within
/// [`crate::vault::KEY_RECHECK`] of their store returning it); the lines to print.
pub fn data_key(
    config: &crate::config::Config,
    project: &str,
    action: DataKeyAction,
) -> Result<Vec<String>, String> {
    let (master, store) = open_offline(config, project)?;
    let vault = Vault::new(master, store, config.cvc_retention);
    if let DataKeyAction::Rotate = action {
        let id = vault.rotate_data_key(project).map_err(|e| e.to_string())?;
        return Ok(vec![format!("{id}\tcurrent")]);
    }
    let (ids, current) = vault.data_key_ids(project).map_err(|e| e.to_string())?;
    Ok(ids
        .into_iter()
        .map(|id| {
            let state = if id == current { "current" } else { "opens" };
            format!("{id}\t{state}")
        })
        .collect())
}

/// Runs `paycred client-key` on the store of `config` (on sled the server must be stopped:
/// sled holds the data directory exclusively; on PostgreSQL running instances take the change
/// up as for `data-key`). Returns the lines to print.
pub fn client_key(
    config: &crate::config::Config,
    project: &str,
    action: ClientKeyAction,
) -> Result<Vec<String>, String> {
    let (master, store) = open_offline(config, project)?;
    let keys = ClientKeys::new(store);
    match action {
        ClientKeyAction::List => {
            let list = keys.list(project).map_err(|e| e.to_string())?;
            if list.is_empty() {
                return Ok(vec![format!(
                    "{project}: no client encryption key yet (created on first use)"
                )]);
            }
            Ok(list
                .iter()
                .map(|k| {
                    let state = match (k.current, k.retired) {
                        (true, _) => "current",
                        (false, true) => "retired",
                        (false, false) => "decrypts",
                    };
                    let created = time::OffsetDateTime::from_unix_timestamp(k.created_at)
                        .map(crate::clock::iso8601)
                        .unwrap_or_default();
                    format!("{}\t{state}\t{created}", k.kid)
                })
                .collect())
        }
        ClientKeyAction::Rotate => keys
            .rotate(&master, project)
            .map(|kid| vec![format!("{kid}\tcurrent")])
            .map_err(|e| e.to_string()),
        ClientKeyAction::Retire { kid } => match keys.retire(project, &kid) {
            Ok(true) => Ok(vec![format!("{kid}\tretired")]),
            Ok(false) => Err(format!("no key {kid:?} in project {project:?}")),
            Err(e) => Err(e.to_string()),
        },
    }
}
