//! The checked `master_key:` and `previous_master_key:` sections: where the master key comes
//! from. `file` reads 32 bytes (64 hex characters) from a file; `pkcs11` and `aws_kms` keep
//! only a wrapped root key on the host, which a key that never leaves the HSM or KMS opens
//! once at start ([`crate::vault::provider`]). `master_key_file` and
//! `previous_master_key_file` are the `file` provider written the short way.
//!
//! What is checked here needs no HSM, KMS or network: `paycred check` refuses a section that
//! could not work (a missing PIN source, two of them, an endpoint in the clear to another
//! host) before a start tries it. Secrets (the PIN, AWS credentials) are never held here:
//! only where they are read from.

use super::{invalid, require_file, ConfigError};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// `master_key:` (and `previous_master_key:`) as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "provider", rename_all = "snake_case", deny_unknown_fields)]
pub enum MasterKeyFile {
    /// The key itself in a file.
    File {
        /// File holding the 32-byte key as 64 hex characters, its owner's alone (0600).
        file: PathBuf,
    },
    /// A root key wrapped by an AES key in a PKCS#11 token (an HSM).
    Pkcs11 {
        /// The vendor's PKCS#11 library (e.g. `/usr/lib/softhsm/libsofthsm2.so`).
        module: PathBuf,
        /// The label of the token that holds the key.
        token_label: String,
        /// A file holding the user PIN (its owner's alone); or `pin_env`.
        #[serde(default)]
        pin_file: Option<PathBuf>,
        /// The environment variable holding the user PIN; or `pin_file`.
        #[serde(default)]
        pin_env: Option<String>,
        /// The label of the token's AES key that wraps and unwraps the root key.
        key_label: String,
        /// The root key wrapped by the token's key (not secret: only the token opens it).
        wrapped_key_file: PathBuf,
    },
    /// A root key from AWS KMS's `GenerateDataKey`, opened with `Decrypt`.
    AwsKms {
        /// The KMS key: its id, ARN, alias (`alias/paycred`) or alias ARN.
        key_id: String,
        /// The AWS region of the key, e.g. `eu-west-1`.
        region: String,
        /// Another endpoint than the region's (a VPC endpoint): `https://host[:port]`.
        #[serde(default)]
        endpoint: Option<String>,
        /// The root key as KMS encrypted it (not secret: only KMS opens it).
        wrapped_key_file: PathBuf,
    },
}

impl MasterKeyFile {
    /// Its relative paths made relative to `base`, the config file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let at = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        match self {
            MasterKeyFile::File { file } => at(file),
            MasterKeyFile::Pkcs11 {
                module,
                pin_file,
                wrapped_key_file,
                ..
            } => {
                at(module);
                if let Some(pin) = pin_file {
                    at(pin);
                }
                at(wrapped_key_file);
            }
            MasterKeyFile::AwsKms {
                wrapped_key_file, ..
            } => at(wrapped_key_file),
        }
    }
}

/// Where a master key comes from, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProvider {
    /// The key in this file (or, for `master_key`, in `PAYCRED_MASTER_KEY` when it is set).
    File(PathBuf),
    Pkcs11(Pkcs11Provider),
    AwsKms(AwsKmsProvider),
}

/// `provider: pkcs11`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkcs11Provider {
    pub module: PathBuf,
    pub token_label: String,
    /// Where the user PIN is read from at start.
    pub pin: SecretSource,
    pub key_label: String,
    pub wrapped_key_file: PathBuf,
}

/// `provider: aws_kms`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsKmsProvider {
    pub key_id: String,
    pub region: String,
    /// `scheme://host[:port]`, without a trailing slash: the region's endpoint unless
    /// `endpoint` names another.
    pub endpoint: String,
    pub wrapped_key_file: PathBuf,
}

/// Where a secret is read from: never the secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    Env(String),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "pin_file {}", path.display()),
            SecretSource::Env(name) => write!(f, "pin_env {name}"),
        }
    }
}

impl KeyProvider {
    /// The provider's name as written after `provider:`.
    pub fn name(&self) -> &'static str {
        match self {
            KeyProvider::File(_) => "file",
            KeyProvider::Pkcs11(_) => "pkcs11",
            KeyProvider::AwsKms(_) => "aws_kms",
        }
    }

    /// The file that holds the key or its wrapped root key.
    pub fn key_file(&self) -> &Path {
        match self {
            KeyProvider::File(file) => file,
            KeyProvider::Pkcs11(p) => &p.wrapped_key_file,
            KeyProvider::AwsKms(p) => &p.wrapped_key_file,
        }
    }
}

/// The master key from `master_key_file` (`key_file`) or `master_key` (`section`), under the
/// config key `key` (`master_key` or `previous_master_key`); `None` when neither is given.
pub fn check(
    key: &str,
    key_file: Option<PathBuf>,
    section: Option<MasterKeyFile>,
    data_dir: &Path,
) -> Result<Option<KeyProvider>, ConfigError> {
    let provider = match (key_file, section) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                key,
                format!(
                    "give {key}_file or {key}, not both ({key}_file: F is {key}: \
                     {{provider: file, file: F}})"
                ),
            ))
        }
        (None, None) => return Ok(None),
        (Some(file), None) => {
            if file.starts_with(data_dir) {
                return Err(invalid(
                    format!("{key}_file"),
                    "must not be inside data_dir",
                ));
            }
            KeyProvider::File(file)
        }
        (None, Some(section)) => provider(key, section, data_dir)?,
    };
    Ok(Some(provider))
}

fn provider(
    key: &str,
    section: MasterKeyFile,
    data_dir: &Path,
) -> Result<KeyProvider, ConfigError> {
    let field = |name: &str| format!("{key}.{name}");
    let non_empty = |name: &str, value: String| {
        if value.trim().is_empty() {
            Err(invalid(field(name), "must not be empty"))
        } else {
            Ok(value)
        }
    };
    Ok(match section {
        MasterKeyFile::File { file } => {
            if file.starts_with(data_dir) {
                return Err(invalid(field("file"), "must not be inside data_dir"));
            }
            KeyProvider::File(file)
        }
        MasterKeyFile::Pkcs11 {
            module,
            token_label,
            pin_file,
            pin_env,
            key_label,
            wrapped_key_file,
        } => {
            let token_label = non_empty("token_label", token_label)?;
            // A token's label is 32 bytes, padded with spaces.
            if token_label.len() > 32 {
                return Err(invalid(field("token_label"), "must be at most 32 bytes"));
            }
            let pin = match (pin_file, pin_env) {
                (Some(file), None) => {
                    require_file(&field("pin_file"), &file)?;
                    SecretSource::File(file)
                }
                (None, Some(var)) => SecretSource::Env(env_name(&field("pin_env"), var)?),
                _ => {
                    return Err(invalid(
                        key,
                        "give the PIN as pin_file (a file only paycred's user can read) or \
                         pin_env (an environment variable), one of them",
                    ))
                }
            };
            KeyProvider::Pkcs11(Pkcs11Provider {
                module,
                token_label,
                pin,
                key_label: non_empty("key_label", key_label)?,
                wrapped_key_file,
            })
        }
        MasterKeyFile::AwsKms {
            key_id,
            region,
            endpoint,
            wrapped_key_file,
        } => {
            let region = non_empty("region", region)?;
            if !is_region(&region) {
                return Err(invalid(field("region"), "is not a region like eu-west-1"));
            }
            let endpoint = match endpoint {
                None => format!("https://kms.{region}.amazonaws.com"),
                Some(url) => aws_endpoint(&url).map_err(|m| invalid(field("endpoint"), m))?,
            };
            KeyProvider::AwsKms(AwsKmsProvider {
                key_id: non_empty("key_id", key_id)?,
                region,
                endpoint,
                wrapped_key_file,
            })
        }
    })
}

/// An environment variable's name: letters, digits and `_`, not starting with a digit.
fn env_name(key: &str, name: String) -> Result<String, ConfigError> {
    let ok = name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(name)
    } else {
        Err(invalid(
            key,
            "must name an environment variable (A-Z, 0-9, _)",
        ))
    }
}

/// Whether `name` looks like an AWS region (`eu-west-1`): lowercase letters, digits, `-`.
pub fn is_region(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// An AWS endpoint (KMS's, or STS's for web identity): `https://host[:port]` (a trailing `/`
/// dropped); `http://` only to a loopback address, since KMS's answer to `Decrypt` carries the
/// root key and STS's carries credentials.
pub fn aws_endpoint(url: &str) -> Result<String, String> {
    let url = url.trim_end_matches('/');
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("must be a URL like https://kms.eu-west-1.amazonaws.com")?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err("must be scheme://host[:port], without a path".into());
    }
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => v6.split_once(']').unwrap_or((v6, "")),
        None => rest.rsplit_once(':').unwrap_or((rest, "")),
    };
    let port = port.strip_prefix(':').unwrap_or(port);
    if !port.is_empty() && port.parse::<u16>().is_err() {
        return Err("has a port that is not a number".into());
    }
    match scheme {
        "https" => Ok(url.to_string()),
        "http" if is_loopback(host) => Ok(url.to_string()),
        "http" => Err(
            "must be https:// (KMS's and STS's answers carry keys); http:// only to a loopback \
             address"
                .into(),
        ),
        _ => Err("must be https://host[:port]".into()),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::Config;

    fn err(yaml: &str) -> String {
        match Config::from_yaml(yaml) {
            Ok(_) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_provider_is_checked_and_errors_name_the_key() {
        let pkcs11 = "{provider: pkcs11, module: /m.so, token_label: t, key_label: k, \
                      wrapped_key_file: /w";
        let kms = "{provider: aws_kms, key_id: alias/k, wrapped_key_file: /w";
        let cases = [
            (
                "master_key_file: /k\nmaster_key: {provider: file, file: /k}".to_string(),
                "master_key: give master_key_file or master_key, not both",
            ),
            (
                "master_key: {provider: hsm}".into(),
                "master_key.provider: unknown variant `hsm`",
            ),
            (
                format!("master_key: {pkcs11}}}"),
                "master_key: give the PIN",
            ),
            (
                format!("master_key: {pkcs11}, pin_env: A, pin_file: /p}}"),
                "master_key: give the PIN",
            ),
            (
                format!("master_key: {pkcs11}, pin_env: 1A}}"),
                "master_key.pin_env: must name",
            ),
            (
                format!("master_key: {pkcs11}, pin_file: /nonexistent/pin}}"),
                "master_key.pin_file: /nonexistent/pin is not a readable file",
            ),
            (
                format!("master_key: {pkcs11}, pin_env: P, file: /k}}"),
                "unknown field `file`",
            ),
            (
                format!("previous_master_key: {pkcs11}, pin_env: P, token_label: \"\"}}")
                    .replace("token_label: t, ", ""),
                "previous_master_key.token_label: must not be empty",
            ),
            (
                format!("master_key: {kms}, region: EU}}"),
                "master_key.region: is not a region",
            ),
            (
                format!(
                    "master_key: {kms}, region: eu-west-1, endpoint: \"http://kms.internal\"}}"
                ),
                "master_key.endpoint: must be https://",
            ),
            (format!("master_key: {kms}}}"), "missing field `region`"),
            (
                "data_dir: /d\nmaster_key: {provider: file, file: /d/k}".into(),
                "master_key.file: must not be inside data_dir",
            ),
            (
                "data_dir: /d\nprevious_master_key_file: /d/k".into(),
                "previous_master_key_file: must not be inside data_dir",
            ),
        ];
        for (yaml, said) in cases {
            let e = err(&yaml);
            assert!(e.contains(said), "{yaml:?} gave {e:?}, expected {said:?}");
        }
        let c = Config::from_yaml(&format!(
            "master_key: {kms}, region: eu-west-1}}\n\
             previous_master_key: {{provider: file, file: /old.key}}"
        ))
        .unwrap();
        let KeyProvider::AwsKms(p) = &c.master_key else {
            unreachable!("{:?}", c.master_key)
        };
        assert_eq!(p.endpoint, "https://kms.eu-west-1.amazonaws.com");
        assert_eq!(
            c.previous_master_key,
            Some(KeyProvider::File("/old.key".into()))
        );
        // Neither key: the file `./master.key`, as before any provider existed.
        let c = Config::from_yaml("{}").unwrap();
        assert_eq!(c.master_key, KeyProvider::File("./master.key".into()));
    }

    #[test]
    fn kms_endpoints_are_https_or_loopback() {
        assert_eq!(
            aws_endpoint("https://vpce-1.kms.eu-west-1.vpce.amazonaws.com/").unwrap(),
            "https://vpce-1.kms.eu-west-1.vpce.amazonaws.com"
        );
        assert_eq!(
            aws_endpoint("http://127.0.0.1:5000").unwrap(),
            "http://127.0.0.1:5000"
        );
        assert!(aws_endpoint("http://[::1]:5000").is_ok());
        assert!(aws_endpoint("http://localhost").is_ok());
        assert!(aws_endpoint("http://kms.internal:80").is_err());
        assert!(aws_endpoint("https://host/path").is_err());
        assert!(aws_endpoint("https://host:port").is_err());
        assert!(aws_endpoint("kms.eu-west-1.amazonaws.com").is_err());
        assert!(aws_endpoint("ftp://host").is_err());
    }
}
