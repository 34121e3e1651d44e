//! `paycred ca --out DIR`: makes an interception CA for the browser proxy
//! ([`crate::browser::ca`]), writes `ca.pem` and `ca-key.pem` (the key its owner's alone),
//! never over an existing file, and says how to configure paycred with it and how to make a
//! checkout browser trust it.

use crate::browser::ca::Ca;
use std::path::Path;

/// Runs `paycred ca --out DIR`: the lines to print.
pub fn run(out: &Path) -> Result<Vec<String>, String> {
    let ca = Ca::generate().map_err(|e| e.to_string())?;
    let (cert, key) = ca.write(out).map_err(|e| e.to_string())?;
    Ok(trust(
        &cert.display().to_string(),
        &key.display().to_string(),
    ))
}

/// What to do with a CA written to `cert` and `key`.
fn trust(cert: &str, key: &str) -> Vec<String> {
    [
        format!("wrote {cert} (the CA certificate: give it to the checkout browser)"),
        format!("wrote {key} (its private key, mode 0600: for paycred only)"),
        String::new(),
        "Configure paycred with it:".into(),
        format!("  browser_proxy: {{listen: 127.0.0.1:8443, ca: {{cert_file: {cert}, key_file: {key}}}}}"),
        String::new(),
        "Trust it in the browser profile that runs the agent's checkout, and nowhere else:".into(),
        "  Chromium or Chrome on Linux (NSS; certutil is in Debian's libnss3-tools):".into(),
        "    mkdir -p $HOME/.pki/nssdb".into(),
        "    certutil -d sql:$HOME/.pki/nssdb -N --empty-password   # a new database only".into(),
        format!("    certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n paycred -i {cert}"),
        "  Playwright (Chromium): the same, as the user (HOME) that runs the browser; launch it".into(),
        "    with proxy: {server: 'http://127.0.0.1:8443', username, password} of the browser".into(),
        "    session. Do not set ignoreHTTPSErrors: the CA is trusted, nothing is ignored.".into(),
        "  Firefox: Settings > Privacy & Security > Certificates > View Certificates >".into(),
        "    Authorities > Import, or the enterprise policy Certificates.Install.".into(),
        format!("  curl: --proxy http://127.0.0.1:8443 --proxy-user USER:PASSWORD --cacert {cert}"),
        String::new(),
        format!(
            "Whoever holds {key} can intercept the TLS of every browser that trusts this CA: keep it \
             as a password."
        ),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instructions_name_the_files() {
        let lines = trust("/x/ca.pem", "/x/ca-key.pem").join("\n");
        for says in [
            "certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n paycred -i /x/ca.pem",
            "cert_file: /x/ca.pem, key_file: /x/ca-key.pem",
            "--cacert /x/ca.pem",
            "Playwright",
        ] {
            assert!(lines.contains(says), "{says}");
        }
    }
}
