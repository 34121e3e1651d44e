//! Where the master key comes from (`master_key: {provider: …}`, docs/operations.md).
//!
//! - `file`: the key itself, 64 hex characters in a file (or `PAYCRED_MASTER_KEY`).
//! - `pkcs11` ([`pkcs11`]) and `aws_kms` ([`aws_kms`]): **the master key never leaves the
//!   HSM or KMS.** paycred's root key (the 32 bytes a [`MasterKey`] holds: they wrap the data
//!   keys and derive the audit head's MAC keys and the like) is made once, by
//!   `paycred master-key create`, and kept on the host only wrapped by the provider's key, in
//!   `wrapped_key_file` ([`WrappedKey`]). That file is not secret: only the HSM or KMS opens
//!   it. At start it is opened once ([`load`]): one PKCS#11 `C_UnwrapKey` under
//!   `CKM_AES_KEY_WRAP_PAD`, or one KMS `Decrypt` of what `GenerateDataKey` gave. The root
//!   key is then held in memory, zeroized on drop, as a file's key is, and nothing after the
//!   start calls the HSM or KMS: sealing and opening card data cost what they cost with a
//!   file, and an HSM or KMS that goes away stops nothing but the next start.
//!
//! A root key has an id ([`MasterKey::id`]) like a file's key, and everything it wraps names
//! that id; so a move between providers is a master-key rotation ([`super::rotate`]): the new
//! provider's root key is the new key, the old provider's the previous one.
//!
//! Errors name the config key, the module, token, key label or KMS key, and never the PIN,
//! a credential or key material.

pub mod aws_credentials;
pub mod aws_kms;
pub mod pkcs11;

use super::master::{MasterKey, MASTER_KEY_ENV};
use super::VaultError;
use crate::config::master_key::KeyProvider;
use crate::secret::KeyMaterial;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;
use zeroize::Zeroizing;

/// Which of a config's master keys: what errors and logs call it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// `master_key` (or `master_key_file`): wraps everything new.
    Current,
    /// `previous_master_key` (or `previous_master_key_file`): a rotation moves away from it.
    Previous,
}

impl Which {
    /// The config key.
    pub fn key(self) -> &'static str {
        match self {
            Which::Current => "master_key",
            Which::Previous => "previous_master_key",
        }
    }
}

/// `wrapped_key_file`'s JSON: a root key as a provider wrapped it, and what opens it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrappedKey {
    /// `pkcs11` or `aws_kms`.
    pub provider: String,
    /// The provider's key that wrapped it: a token key's label, a KMS key's ARN.
    pub wrapping_key: String,
    /// How it was wrapped: `CKM_AES_KEY_WRAP_PAD`, or KMS's `GenerateDataKey`.
    pub mechanism: String,
    /// The root key's id ([`MasterKey::id`]; a hash prefix, not the key).
    pub id: String,
    /// The wrapped key, base64.
    pub wrapped: String,
}

/// Opens the master key `provider` describes: reads a file's key, or has the HSM or KMS open
/// the wrapped root key (once; it is logged with how long it took).
pub fn load(which: Which, provider: &KeyProvider) -> Result<MasterKey, VaultError> {
    let key = which.key();
    if let KeyProvider::File(file) = provider {
        return match which {
            Which::Current => MasterKey::load(file),
            Which::Previous => MasterKey::from_file(file).map_err(|e| {
                VaultError::MasterKey(format!("previous_master_key_file {}: {e}", file.display()))
            }),
        };
    }
    if which == Which::Current && std::env::var_os(MASTER_KEY_ENV).is_some() {
        return Err(VaultError::MasterKey(format!(
            "{MASTER_KEY_ENV} is set, but {key}.provider is {}: the variable only replaces a \
             key file; unset it",
            provider.name()
        )));
    }
    let file = provider.key_file();
    let wrapped = read_wrapped(key, provider)?;
    let started = Instant::now();
    let root = match provider {
        KeyProvider::Pkcs11(p) => pkcs11::unwrap(p, &wrapped.bytes),
        KeyProvider::AwsKms(p) => aws_kms::decrypt(p, &wrapped.bytes),
        KeyProvider::File(_) => Err("not a wrapped key".into()),
    }
    .map_err(|e| VaultError::MasterKey(format!("{key}: {e}")))?;
    let took = started.elapsed();
    let master = MasterKey::from_key(root);
    if master.id() != wrapped.id {
        return Err(VaultError::MasterKey(format!(
            "{key}.wrapped_key_file {}: names root key {}, but holds {}: the file was altered",
            file.display(),
            wrapped.id,
            master.id()
        )));
    }
    tracing::info!(
        master_key = master.id(),
        provider = provider.name(),
        micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        "{key}: root key {} opened by {} in {:.1} ms",
        master.id(),
        describe(provider),
        took.as_secs_f64() * 1000.0
    );
    Ok(master)
}

/// Makes a new master key for `provider` (`paycred master-key create`): a file's new key, or
/// a root key wrapped by the HSM or KMS in `wrapped_key_file`. Never replaces a file. The
/// line to print.
pub fn create(which: Which, provider: &KeyProvider) -> Result<String, VaultError> {
    let key = which.key();
    let file = provider.key_file();
    if file.exists() {
        return Err(VaultError::MasterKey(format!(
            "{key}: {} exists: a master key is never replaced (what it wraps would not open); \
             to rotate, see docs/operations.md",
            file.display()
        )));
    }
    let (root, bytes, wrapping_key, mechanism) = match provider {
        KeyProvider::File(_) => {
            let hex = MasterKey::generate_hex();
            write_new(file, hex.as_bytes())
                .map_err(|e| VaultError::MasterKey(format!("{key}: {}: {e}", file.display())))?;
            let id = MasterKey::from_hex(&hex)?.id().to_string();
            return Ok(format!("master key {id} written to {}", file.display()));
        }
        KeyProvider::Pkcs11(p) => pkcs11::wrap_new(p)
            .map(|(root, bytes)| (root, bytes, p.key_label.clone(), pkcs11::MECHANISM)),
        KeyProvider::AwsKms(p) => {
            aws_kms::generate(p).map(|(root, bytes, arn)| (root, bytes, arn, aws_kms::MECHANISM))
        }
    }
    .map_err(|e| VaultError::MasterKey(format!("{key}: {e}")))?;
    let id = MasterKey::from_key(root).id().to_string();
    let json = serde_json::to_vec_pretty(&WrappedKey {
        provider: provider.name().into(),
        wrapping_key,
        mechanism: mechanism.into(),
        id: id.clone(),
        wrapped: B64.encode(&bytes),
    })
    .map_err(|_| VaultError::Corrupt("wrapped key"))?;
    write_new(file, &json).map_err(|e| {
        VaultError::MasterKey(format!("{key}.wrapped_key_file {}: {e}", file.display()))
    })?;
    Ok(format!(
        "root key {id} made and wrapped by {}, in {}",
        describe(provider),
        file.display()
    ))
}

/// What holds the key, for messages: never a secret.
pub fn describe(provider: &KeyProvider) -> String {
    match provider {
        KeyProvider::File(file) => format!("file {}", file.display()),
        KeyProvider::Pkcs11(p) => format!(
            "PKCS#11 key {:?} on token {:?} ({})",
            p.key_label,
            p.token_label,
            p.module.display()
        ),
        KeyProvider::AwsKms(p) => format!("AWS KMS key {} ({})", p.key_id, p.endpoint),
    }
}

/// A wrapped key file, read and checked against the provider.
struct ReadWrapped {
    id: String,
    bytes: Zeroizing<Vec<u8>>,
}

fn read_wrapped(key: &str, provider: &KeyProvider) -> Result<ReadWrapped, VaultError> {
    let file = provider.key_file();
    let problem = |what: String| {
        VaultError::MasterKey(format!("{key}.wrapped_key_file {}: {what}", file.display()))
    };
    let text = std::fs::read(file).map_err(|e| {
        problem(format!(
            "cannot read it ({e}); a new deployment makes it with `paycred master-key create -c \
             CONFIG`"
        ))
    })?;
    let wrapped: WrappedKey = serde_json::from_slice(&text)
        .map_err(|e| problem(format!("is not a wrapped root key ({e})")))?;
    if wrapped.provider != provider.name() {
        return Err(problem(format!(
            "holds a root key wrapped by provider {}, but {key}.provider is {}",
            wrapped.provider,
            provider.name()
        )));
    }
    let bytes = B64
        .decode(wrapped.wrapped.as_bytes())
        .map_err(|_| problem("its `wrapped` is not base64".into()))?;
    Ok(ReadWrapped {
        id: wrapped.id,
        bytes: Zeroizing::new(bytes),
    })
}

/// Writes a new file that only its owner may read (never replacing one).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// 32 bytes a provider returned as a root key.
fn root_key(bytes: &[u8]) -> Result<KeyMaterial, String> {
    let mut key = Zeroizing::new([0u8; 32]);
    if bytes.len() != 32 {
        return Err(format!(
            "the root key opened to {} bytes, not 32",
            bytes.len()
        ));
    }
    key.copy_from_slice(bytes);
    Ok(KeyMaterial::from(key))
}
