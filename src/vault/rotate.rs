//! Master-key rotation (`paycred master-key rotate`, docs/operations.md): everything the store
//! keeps wrapped by the master key is wrapped again by the new one, without touching card
//! data (values are sealed by data keys, and the data keys are only re-wrapped).
//!
//! What is wrapped, in the order of the [`Step`]s: each project's keyring (its data keys and
//! fingerprint key), each project's client-encryption keys, the CVC ratchet's secret, and the
//! sandbox issuer's secret. Each is one stored blob, replaced by a compare-and-swap, and each
//! wrapped key names the master key that wrapped it ([`MasterKey::wrapped_by`]). So a rotation
//! stopped anywhere (a crash, a kill) leaves every blob whole, under the old key or the new
//! one, and running it again re-wraps only what is still under the old key. A start that
//! lacks a key something is still wrapped by says which key id is missing.
//!
//! The audit head's MAC is keyed from the master key too; the command re-MACs it after these
//! steps (the store does that: [`crate::store::Store`]).

use super::master::MasterKey;
use super::{cvc, parse_keyring, SandboxFile, VaultError, SANDBOX_CONTEXT, SANDBOX_STORE_NAME};
use crate::store::Store;

/// A step of the rotation, named by [`Step::name`] in its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    DataKeys,
    ClientKeys,
    CvcRatchet,
    SandboxSecret,
}

impl Step {
    /// Every step, in the order they run.
    pub const ALL: [Step; 4] = [
        Step::DataKeys,
        Step::ClientKeys,
        Step::CvcRatchet,
        Step::SandboxSecret,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Step::DataKeys => "data-keys",
            Step::ClientKeys => "client-keys",
            Step::CvcRatchet => "cvc-ratchet",
            Step::SandboxSecret => "sandbox-secret",
        }
    }
}

/// Replaces the keyring slot `name` with what `rewrap` makes of it, by compare-and-swap
/// (read again when another process changed it meanwhile); whether it changed.
fn rewrap_slot(
    store: &dyn Store,
    name: &str,
    rewrap: impl Fn(&[u8]) -> Result<Option<Vec<u8>>, VaultError>,
) -> Result<bool, VaultError> {
    loop {
        let Some(old) = store.reload_keyring(name)? else {
            return Ok(false);
        };
        let Some(new) = rewrap(&old)? else {
            return Ok(false);
        };
        if store.swap_keyring(name, &old, &new)? {
            return Ok(true);
        }
    }
}

/// A project's keyring wrapped by `master`'s current key, if any key of it was not.
fn rewrap_keyring(
    master: &MasterKey,
    project: &str,
    bytes: &[u8],
) -> Result<Option<Vec<u8>>, VaultError> {
    let mut file = parse_keyring(bytes)?;
    let mut changed = false;
    if let Some(w) = master.rewrap(
        &format!("paycred/{project}/fingerprint"),
        &file.fingerprint_key,
    )? {
        file.fingerprint_key = w;
        changed = true;
    }
    for (id, wrapped) in &mut file.data_keys {
        if let Some(w) = master.rewrap(&format!("paycred/{project}/data/{id}"), wrapped)? {
            *wrapped = w;
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    serde_json::to_vec(&file)
        .map(Some)
        .map_err(|_| VaultError::Corrupt("keyring"))
}

/// The CVC ratchet wrapped by `master`'s current key, if it was not.
fn rewrap_cvc(master: &MasterKey, bytes: &[u8]) -> Result<Option<Vec<u8>>, VaultError> {
    let mut stored: cvc::Stored =
        serde_json::from_slice(bytes).map_err(|_| VaultError::Corrupt("cvc ratchet"))?;
    let context = cvc::Stored::context(&stored.epoch, stored.base);
    let Some(w) = master.rewrap(&context, &stored.secret)? else {
        return Ok(None);
    };
    stored.secret = w;
    serde_json::to_vec(&stored)
        .map(Some)
        .map_err(|_| VaultError::Corrupt("cvc ratchet"))
}

/// The sandbox secret wrapped by `master`'s current key, if it was not.
fn rewrap_sandbox(master: &MasterKey, bytes: &[u8]) -> Result<Option<Vec<u8>>, VaultError> {
    let mut file: SandboxFile =
        serde_json::from_slice(bytes).map_err(|_| VaultError::Corrupt("sandbox secret"))?;
    let Some(w) = master.rewrap(SANDBOX_CONTEXT, &file.secret)? else {
        return Ok(None);
    };
    file.secret = w;
    serde_json::to_vec(&file)
        .map(Some)
        .map_err(|_| VaultError::Corrupt("sandbox secret"))
}

/// Runs one step for `projects`: the number of blobs it wrapped again (0: all were under
/// `master`'s current key already).
pub fn run_step(
    step: Step,
    master: &MasterKey,
    store: &std::sync::Arc<dyn Store>,
    projects: &[&str],
) -> Result<usize, VaultError> {
    let store_ref: &dyn Store = store.as_ref();
    let mut n = 0;
    match step {
        Step::DataKeys => {
            for project in projects {
                let changed = rewrap_slot(store_ref, project, |bytes| {
                    rewrap_keyring(master, project, bytes)
                })?;
                n += usize::from(changed);
            }
        }
        Step::ClientKeys => {
            let keys = super::client_keys::ClientKeys::new(store.clone());
            for project in projects {
                n += keys.rewrap(master, project)?;
            }
        }
        Step::CvcRatchet => {
            n += usize::from(rewrap_slot(store_ref, cvc::STORE_NAME, |b| {
                rewrap_cvc(master, b)
            })?);
        }
        Step::SandboxSecret => {
            n += usize::from(rewrap_slot(store_ref, SANDBOX_STORE_NAME, |b| {
                rewrap_sandbox(master, b)
            })?);
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::SledStore;
    use crate::vault::Vault;
    use std::sync::Arc;
    use std::time::Duration;

    fn key(byte: &str) -> MasterKey {
        MasterKey::from_hex(&byte.repeat(32)).unwrap()
    }

    #[test]
    fn a_rotation_rewraps_every_key_and_the_old_key_is_not_needed_after() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SledStore::open(dir.path(), Default::default()).unwrap());
        let old = Vault::new(key("11"), store.clone(), Duration::from_secs(3600));
        let t0 = 1_800_000_000;
        old.attach_cvc_ratchet(t0).unwrap();
        old.attach_sandbox_secret().unwrap();
        let sealed = old.seal("p1", "pm/1/number", b"4242424242424242").unwrap();
        let cvc = old.seal_cvc("pm/1/cvc", &"123".into(), t0).unwrap();
        let jwk = old.client_public_key("p1").unwrap();
        let sandbox = old.sandbox_secret();
        let request: [&[u8]; 3] = [b"POST", b"/projects/p1/payment-methods", b"{}"];
        let request_fp = old.request_fingerprint("p1", &request).unwrap();
        let before = store.load_keyring("p1").unwrap();

        // A vault of the new key alone does not start on the old key's store.
        let new_only = Vault::new(key("22"), store.clone(), Duration::from_secs(3600));
        let e = new_only.check_master_key(["p1"]).unwrap_err().to_string();
        assert!(e.contains(key("11").id()), "{e}");

        let both = key("22").with_previous(key("11"));
        for step in Step::ALL {
            assert_eq!(run_step(step, &both, &store, &["p1", "p2"]).unwrap(), 1);
        }
        // Again: nothing left under the old key.
        for step in Step::ALL {
            assert_eq!(run_step(step, &both, &store, &["p1", "p2"]).unwrap(), 0);
        }
        assert_ne!(store.load_keyring("p1").unwrap(), before);

        let new = Vault::new(key("22"), store.clone(), Duration::from_secs(3600));
        new.check_master_key(["p1"]).unwrap();
        new.attach_cvc_ratchet(t0 + 60).unwrap();
        new.attach_sandbox_secret().unwrap();
        assert_eq!(
            &*new.open("p1", "pm/1/number", &sealed).unwrap(),
            b"4242424242424242"
        );
        assert_eq!(
            new.open_cvc("pm/1/cvc", &cvc, t0 + 60)
                .map(|c| c.expose().to_string()),
            Some("123".into())
        );
        assert_eq!(new.client_public_key("p1").unwrap(), jwk);
        assert_eq!(new.sandbox_secret(), sandbox);
        assert_eq!(new.request_fingerprint("p1", &request).unwrap(), request_fp);
        // And the old key alone no longer opens anything.
        let old_again = Vault::new(key("11"), store.clone(), Duration::from_secs(3600));
        assert!(old_again.check_master_key(["p1"]).is_err());
        assert!(old_again.attach_sandbox_secret().is_err());
    }
}
