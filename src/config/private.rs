//! The files that hold card data or the key to it are their owner's alone: the process
//! creates files and directories with umask 077 (the data directory 0700, sled's files 0600),
//! and a data directory, master key file or HSM PIN file that anyone else may read or write
//! stops the start with a message that says how to fix it.

use std::path::Path;

use super::master_key::{KeyProvider, SecretSource};
use super::{invalid, ConfigError};

/// Files and directories this process creates from now on can be read by their owner only.
pub fn before_start() {
    #[cfg(unix)]
    {
        use nix::sys::stat::{umask, Mode};
        umask(Mode::from_bits_truncate(0o077));
    }
}

/// Refuses the secret files of the master key `provider` (config key `key`: `master_key` or
/// `previous_master_key`) that anyone but their owner may read or write: a key file (unless
/// `from_env`: the key is in the environment instead), a PIN file.
pub fn key_files(key: &str, provider: &KeyProvider, from_env: bool) -> Result<(), ConfigError> {
    match provider {
        KeyProvider::File(file) if !from_env => owner_only(&format!("{key}_file"), file, "600"),
        KeyProvider::Pkcs11(p) => match &p.pin {
            SecretSource::File(file) => owner_only(&format!("{key}.pin_file"), file, "600"),
            SecretSource::Env(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Refuses a data directory that its group or others may enter, read or write.
pub fn data_dir(dir: &Path) -> Result<(), ConfigError> {
    owner_only("data_dir", dir, "700")
}

/// Refuses `path` (config key `key`) when its group or others have any access to it; `fix`
/// is the mode that `chmod` should give it.
fn owner_only(key: &str, path: &Path, fix: &str) -> Result<(), ConfigError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A missing file is reported by whoever reads it, with what to do about it.
        let Ok(meta) = std::fs::metadata(path) else {
            return Ok(());
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(invalid(
                key,
                format!(
                    "{} can be read or written by other users (mode {mode:o}): it holds card \
                     data or the key to it. Run `chmod -R go-rwx {}` (mode {fix}) as the user \
                     paycred runs as",
                    path.display(),
                    path.display(),
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = (key, path, fix);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn shared_files_are_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("master.key");
        std::fs::write(&key, "k").unwrap();
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        for m in [0o644, 0o640, 0o604, 0o620] {
            mode(&key, m).unwrap();
            let e = owner_only("master_key_file", &key, "600")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("master_key_file: ") && e.contains("chmod -R go-rwx"),
                "{e}"
            );
        }
        mode(&key, 0o600).unwrap();
        assert!(owner_only("master_key_file", &key, "600").is_ok());
        mode(dir.path(), 0o755).unwrap();
        assert!(data_dir(dir.path()).is_err());
        mode(dir.path(), 0o700).unwrap();
        assert!(data_dir(dir.path()).is_ok());
        // Missing: whoever reads it says so.
        assert!(data_dir(&dir.path().join("none")).is_ok());
    }
}
