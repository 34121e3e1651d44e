//! `paycred ca --out DIR`: makes an interception CA for the browser proxy
//! ([`crate::browser::ca`]), writes `ca.pem` and `ca-key.pem` (the key its owner's alone),
//! never over an existing file, and says how to configure paycred with it and how to make a
//! checkout browser trust it.

use crate::browser::ca::Ca;
use std::path::{Path, PathBuf};

/// Where the instructions point a browser when no proxy address is known.
const EXAMPLE_PROXY: &str = "127.0.0.1:8443";

/// Runs `paycred ca --out DIR`: the lines to print.
pub fn run(out: &Path) -> Result<Vec<String>, String> {
    let (cert, key) = make(out)?;
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let mut lines = vec![
        format!("wrote {cert} (the CA certificate: give it to the checkout browser)"),
        format!("wrote {key} (its private key, mode 0600: for paycred only)"),
        String::new(),
        "Configure paycred with it:".into(),
        format!(
            "  browser_proxy: {{listen: {EXAMPLE_PROXY}, ca: {{cert_file: {cert}, key_file: {key}}}}}"
        ),
        String::new(),
    ];
    lines.extend(trust_in_browser(&cert, EXAMPLE_PROXY));
    lines.extend([
        String::new(),
        format!(
            "Whoever holds {key} can intercept the TLS of every browser that trusts this CA: keep it \
             as a password."
        ),
    ]);
    Ok(lines)
}

/// Makes a CA and writes it into `dir` (never over an existing file): its certificate's and
/// key's paths.
pub fn make(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let ca = Ca::generate().map_err(|e| e.to_string())?;
    ca.write(dir).map_err(|e| e.to_string())
}

/// How to make the checkout browser trust the CA certificate `cert` and use the browser proxy
/// at `proxy`.
pub fn trust_in_browser(cert: &str, proxy: impl std::fmt::Display) -> Vec<String> {
    [
        "Trust the CA in the browser profile that runs the agent's checkout, and nowhere else:"
            .into(),
        "  Chromium or Chrome on Linux (NSS; certutil is in Debian's libnss3-tools):".into(),
        "    mkdir -p $HOME/.pki/nssdb".into(),
        "    certutil -d sql:$HOME/.pki/nssdb -N --empty-password   # a new database only".into(),
        format!("    certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n paycred -i {cert}"),
        "  Playwright (Chromium): the same, as the user (HOME) that runs the browser; launch it"
            .into(),
        format!("    with proxy: {{server: 'http://{proxy}', username, password}} of the browser"),
        "    session. Do not set ignoreHTTPSErrors: the CA is trusted, nothing is ignored.".into(),
        "  Firefox: Settings > Privacy & Security > Certificates > View Certificates >".into(),
        "    Authorities > Import, or the enterprise policy Certificates.Install.".into(),
        format!("  curl: --proxy http://{proxy} --proxy-user USER:PASSWORD --cacert {cert}"),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instructions_name_the_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let lines = run(dir.path())
            .unwrap_or_else(|e| unreachable!("{e}"))
            .join("\n");
        let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca-key.pem"));
        let (cert, key) = (cert.display(), key.display());
        assert!(run(dir.path()).is_err(), "a second CA over the first");
        for says in [
            format!("certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n paycred -i {cert}"),
            format!("cert_file: {cert}, key_file: {key}"),
            format!("--cacert {cert}"),
            "Playwright".into(),
        ] {
            assert!(lines.contains(&says), "{says}");
        }
    }
}
