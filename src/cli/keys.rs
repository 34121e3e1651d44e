//! `paycred data-key`, `client-key` and `master-key [create | rotate]`: the keys of a
//! deployment. On sled they
//! are worked on with the server stopped (sled opens the data directory exclusively); on
//! PostgreSQL beside the running servers, which take up a rotated key when they restart
//! (they keep keys in memory, and every key they hold keeps opening what it sealed).

use super::{ClientKeyAction, DataKeyAction};
use crate::audit::head_mac::HeadKeys;
use crate::config::master_key::KeyProvider;
use crate::store::Store;
use crate::vault::client_keys::ClientKeys;
use crate::vault::master::MasterKey;
use crate::vault::provider::Which;
use crate::vault::Vault;
use std::path::Path;
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
    let master = load(Which::Current, &config.master_key)?;
    let store = open_store(config, master.head_keys())?;
    Ok((master, store))
}

/// The store of `config` for a command: on sled with the server stopped (sled opens the
/// data directory exclusively), on PostgreSQL beside the running servers.
pub fn open_store(
    config: &crate::config::Config,
    head_keys: HeadKeys,
) -> Result<Arc<dyn Store>, String> {
    if let crate::config::store::StoreConfig::Postgres(_) = &config.store {
        // The database is shared: the command runs beside the servers.
        return crate::store::open_with(config, head_keys);
    }
    // Opening a missing directory would make an empty store there and act on it.
    if !config.data_dir.is_dir() {
        return Err(format!(
            "data_dir {} does not exist (relative paths start from the config file's directory)",
            config.data_dir.display()
        ));
    }
    let store = crate::store::SledStore::open_with(&config.data_dir, config.audit_hash, head_keys)
        .map_err(|e| {
            format!(
                "data_dir {}: {e} (stop the server first: the store is opened exclusively)",
                config.data_dir.display()
            )
        })?;
    Ok(Arc::new(store))
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

/// A master key of `config` ([`crate::vault::provider::load`]: an HSM or KMS opens a root
/// key once).
fn load(which: Which, provider: &KeyProvider) -> Result<MasterKey, String> {
    crate::vault::provider::load(which, provider).map_err(|e| e.to_string())
}

/// The old and the new master key of a rotation: with `new_key`, the config's master key is
/// the old one and the file the new one; without, the config's `master_key` is the new one
/// and its `previous_master_key` the old one (each of any provider: a rotation between
/// providers is one of these).
fn rotation_keys(
    config: &crate::config::Config,
    new_key: Option<&Path>,
) -> Result<(MasterKey, MasterKey), String> {
    match (new_key, &config.previous_master_key) {
        (Some(new), _) => Ok((
            load(Which::Current, &config.master_key)?,
            MasterKey::from_file(new).map_err(|e| format!("{}: {e}", new.display()))?,
        )),
        (None, Some(previous)) => Ok((
            load(Which::Previous, previous)?,
            load(Which::Current, &config.master_key)?,
        )),
        (None, None) => Err(
            "give --new-key NEWFILE, or configure the new key as master_key and the old one as \
             previous_master_key"
                .into(),
        ),
    }
}

/// Runs `paycred master-key create`: a new master key for the config's `master_key` (a key
/// file, or a root key wrapped by the HSM or KMS in `wrapped_key_file`); the line to print.
pub fn create_master_key(config: &crate::config::Config) -> Result<Vec<String>, String> {
    crate::config::private::before_start();
    crate::vault::provider::create(Which::Current, &config.master_key)
        .map(|line| vec![line])
        .map_err(|e| e.to_string())
}

/// Where a test stops the rotation as a crash would: the process kills itself with SIGKILL
/// after the step `PAYCRED_TEST_CRASH_AT` names (debug builds only).
fn crash_point(step: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("PAYCRED_TEST_CRASH_AT").is_ok_and(|at| at == step) {
        eprintln!("paycred: killed after {step} (PAYCRED_TEST_CRASH_AT)");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    #[cfg(not(debug_assertions))]
    let _ = step;
}

/// Runs `paycred master-key rotate` (docs/operations.md): every step of
/// [`crate::vault::rotate`], then the audit head MACed again; the lines to print. Each step
/// prints what it re-wrapped; running it again after a crash finishes what is left.
pub fn rotate_master_key(
    config: &crate::config::Config,
    new_key: Option<&Path>,
) -> Result<Vec<String>, String> {
    use crate::vault::rotate::{run_step, Step};
    let (old, new) = rotation_keys(config, new_key)?;
    let both = new.with_previous(old);
    let (new_id, old_ids) = (
        both.id().to_string(),
        both.previous_ids().collect::<Vec<_>>().join(", "),
    );
    let store = open_store(config, both.head_keys())?;
    let projects: Vec<&str> = config.projects.keys().map(String::as_str).collect();
    crash_point("start");
    // A store that never kept the sandbox issuer's secret used the one derived from the old
    // key: it is kept now, so that the rotation carries it over.
    Vault::new(both.clone(), store.clone(), config.cvc_retention)
        .attach_sandbox_secret()
        .map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for step in Step::ALL {
        let n = run_step(step, &both, &store, &projects).map_err(|e| e.to_string())?;
        lines.push(format!("{}\t{n} re-wrapped", step.name()));
        crash_point(&format!("after-{}", step.name()));
    }
    let remaced = store.remac_audit_head().map_err(|e| e.to_string())?;
    lines.push(format!("audit-head\t{} re-MACed", usize::from(remaced)));
    crash_point("after-audit-head");
    lines.push(format!(
        "every stored key is wrapped by master key {new_id}; {old_ids} is no longer needed \
         (sled: make master_key the new key and remove previous_master_key; PostgreSQL: \
         remove previous_master_key and restart the servers one at a time)"
    ));
    Ok(lines)
}
