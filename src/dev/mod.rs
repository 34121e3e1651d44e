//! `paycred serve --dev`: a ready local setup in `./paycred-dev` — a master key, a project
//! `dev` with a fresh Ed25519 key pair (private key kept there for `paycred jwt`), data
//! in `./paycred-dev/data`, localhost targets allowed, and browser pages of the origins given
//! with `--allow-origin` (default [`DEFAULT_ORIGINS`]) allowed to call the public role's
//! routes; the browser checkout proxy on its own address with an interception CA in
//! [`BROWSER_CA_DIR`] (made by the command line, which may use the browser proxy's code),
//! and browser sessions for hosts of `localhost`. A second run reuses the keys, the CA and
//! the data.
//!
//! May import: `auth::mint`, `vault::master`, `secret`, `config`, `http`, `error`. Only the edge (the
//! `/demo` page) and the command line use it.

pub mod demo;

use crate::auth::mint::generate_ed25519;
use crate::secret::KeyMaterial;
use crate::vault::master::MasterKey;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Origins allowed by default: the Vite dev server's, where a frontend is usually developed.
pub const DEFAULT_ORIGINS: [&str; 2] = ["http://localhost:5173", "http://127.0.0.1:5173"];

/// The directory, in the dev setup's, of the browser proxy's interception CA (`ca.pem`,
/// `ca-key.pem`).
pub const BROWSER_CA_DIR: &str = "browser-ca";

/// Files of the development setup.
#[derive(Debug, Clone)]
pub struct DevSetup {
    pub dir: PathBuf,
    pub config_file: PathBuf,
    pub private_key: PathBuf,
    /// The origins whose pages may call the public role's routes.
    pub origins: Vec<String>,
}

/// Writes a new file readable by its owner only (0600), on disk when it returns. An existing
/// file is left alone (an error): replacing a master key would make every card sealed under it
/// unreadable. A write that fails removes what it created, so that a retry can succeed.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    let written = file.write_all(contents).and_then(|()| file.sync_all());
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// Creates what is missing of the development setup in `dir`; its config allows browser pages
/// of `origins` (none given: [`DEFAULT_ORIGINS`]) and has the browser proxy listen on
/// `browser_proxy` with the CA in [`BROWSER_CA_DIR`].
pub fn prepare(
    dir: &Path,
    listen: SocketAddr,
    browser_proxy: SocketAddr,
    origins: &[String],
) -> Result<DevSetup, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let master = dir.join("master.key");
    if !master.exists() {
        write_private(&master, MasterKey::generate_hex().as_bytes())?;
    }
    let private_key = dir.join("dev-private.pem");
    let public_key = dir.join("dev-public.pem");
    if !private_key.exists() || !public_key.exists() {
        let (private, public) = generate_ed25519()?;
        let _ = std::fs::remove_file(&private_key);
        write_private(&private_key, private.as_bytes())?;
        std::fs::write(&public_key, public)?;
    }
    let metrics_token = dir.join("metrics.token");
    if !metrics_token.exists() {
        let token = zeroize::Zeroizing::new(hex::encode(KeyMaterial::random().expose()));
        write_private(&metrics_token, token.as_bytes())?;
    }
    let origins: Vec<String> = match origins {
        [] => DEFAULT_ORIGINS.iter().map(|o| o.to_string()).collect(),
        given => given.to_vec(),
    };
    // As JSON strings: a YAML double-quoted scalar, whatever the flag held.
    let quoted: Vec<String> = origins
        .iter()
        .map(|o| serde_json::Value::from(o.as_str()).to_string())
        .collect();
    // Passkeys on localhost (a secure context over http): the demo page on this port, and the
    // allowed origins on localhost.
    let own = format!("http://localhost:{}", listen.port());
    let mut passkey_origins = vec![serde_json::Value::from(own.as_str()).to_string()];
    for o in &origins {
        let on_localhost = o
            .strip_prefix("http://localhost")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'));
        if on_localhost && *o != own {
            passkey_origins.push(serde_json::Value::from(o.as_str()).to_string());
        }
    }
    let config_file = dir.join("paycred.yaml");
    let config = format!(
        "# Written by `paycred serve --dev`: a local development setup. Not for production.\n\
         # Relative paths start from this file's directory.\n\
         listen: {listen}\n\
         data_dir: data\n\
         master_key_file: master.key\n\
         cvc_retention: 1h\n\
         projects:\n\
         \x20 - id: dev\n\
         \x20   jwt:\n\
         \x20     keys: [{{kid: dev-1, public_key_file: dev-public.pem}}]\n\
         \x20     max_lifetime: 1h\n\
         \x20   pan: enabled\n\
         \x20   token_vault_key: true\n\
         \x20   proxy:\n\
         \x20     allowed_hosts: [localhost, 127.0.0.1]\n\
         \x20     allow_http: true\n\
         \x20     allow_private_networks: true\n\
         \x20   # Browser pages that may call the public role's routes (--allow-origin).\n\
         \x20   cors:\n\
         \x20     allowed_origins: [{origins}]\n\
         \x20   # Passkeys beside the one-time code, on localhost (open the demo as localhost).\n\
         \x20   verification:\n\
         \x20     passkeys: {{rp_id: localhost, origins: [{passkey_origins}]}}\n\
         \x20   # Browser sessions for checkout pages on localhost (the browser proxy below).\n\
         \x20   browser_checkout: {{allowed_hosts: [localhost], max_ttl: 1h}}\n\
         # The browser checkout proxy, with the interception CA made on the first run.\n\
         browser_proxy:\n\
         \x20 listen: {browser_proxy}\n\
         \x20 ca: {{cert_file: {BROWSER_CA_DIR}/ca.pem, key_file: {BROWSER_CA_DIR}/ca-key.pem}}\n\
         # /metrics for a caller with the bearer token in metrics.token.\n\
         metrics: {{bearer_token_file: metrics.token}}\n\
         # The demo page at /demo, with a route that mints tokens with the dev key (dev only).\n\
         demo: {{project: dev, kid: dev-1, private_key_file: dev-private.pem}}\n",
        origins = quoted.join(", "),
        passkey_origins = passkey_origins.join(", "),
    );
    std::fs::write(&config_file, config)?;
    Ok(DevSetup {
        dir: dir.to_path_buf(),
        config_file,
        private_key,
        origins,
    })
}

/// The copy-paste example printed at start.
pub fn banner(setup: &DevSetup, listen: SocketAddr) -> String {
    let key = setup.private_key.display();
    format!(
        "paycred dev server on http://{listen} (project `dev`, files in {dir})\n\
         Demo page (card encryption, verification in the browser): http://{listen}/demo\n\
         Pages of these origins may call it from the browser (CORS; set with --allow-origin): {origins}\n\
         \n\
         Try it:\n\
         \x20 TOKEN=$(paycred jwt --key {key} --kid dev-1 --project dev --sub user_1 --role private)\n\
         \x20 curl -s -X POST http://{listen}/projects/dev/payment-methods \\\n\
         \x20   -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n\
         \x20   -d '{{\"entityId\":\"user_1\",\"card\":{{\"number\":\"4242424242424242\",\"expirationMonth\":\"12\",\"expirationYear\":\"2030\",\"cvc\":\"123\"}}}}'\n\
         \x20 curl -s http://{listen}/projects/dev/payment-methods -H \"Authorization: Bearer $TOKEN\"\n\
         \n\
         Metrics: curl -s http://{listen}/metrics -H \"Authorization: Bearer $(cat {dir}/metrics.token)\"\n",
        dir = setup.dir.display(),
        origins = setup.origins.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The written config loads, with the origins given (or the default ones) allowed.
    #[test]
    fn the_dev_config_allows_the_origins_given() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap_or_else(|_| unreachable!());
        let browser_proxy: SocketAddr = "127.0.0.1:8081".parse().unwrap_or_else(|_| unreachable!());
        // The CA's files are the command line's to make; the config only names them.
        let ca = dir.path().join(BROWSER_CA_DIR);
        std::fs::create_dir_all(&ca).unwrap_or_else(|e| unreachable!("{e}"));
        for file in ["ca.pem", "ca-key.pem"] {
            std::fs::write(ca.join(file), "").unwrap_or_else(|e| unreachable!("{e}"));
        }
        let origins = |given: &[String]| {
            let setup = prepare(dir.path(), listen, browser_proxy, given)
                .unwrap_or_else(|e| unreachable!("{e}"));
            let config = crate::config::Config::load(&setup.config_file)
                .unwrap_or_else(|e| unreachable!("{e}"));
            let project = config.project("dev").unwrap_or_else(|| unreachable!());
            (setup.origins, project.cors_allowed_origins.clone())
        };
        let (shown, loaded) = origins(&[]);
        assert_eq!(loaded, DEFAULT_ORIGINS.map(String::from).to_vec());
        assert_eq!(shown, loaded);
        let given = vec![
            "http://localhost:3001".to_string(),
            "https://a.example".to_string(),
        ];
        assert_eq!(origins(&given).1, given);
        // Passkeys on localhost: this port's page and the given localhost origins.
        let config = crate::config::Config::load(&dir.path().join("paycred.yaml"))
            .unwrap_or_else(|e| unreachable!("{e}"));
        let passkeys = config
            .project("dev")
            .and_then(|p| p.passkeys.clone())
            .unwrap_or_else(|| unreachable!());
        assert_eq!(passkeys.rp_id, "localhost");
        assert_eq!(
            passkeys.origins,
            ["http://localhost:8080", "http://localhost:3001"]
        );
        // The browser proxy on its address; sessions for localhost pages.
        let proxy = config
            .browser_proxy
            .clone()
            .unwrap_or_else(|| unreachable!());
        assert_eq!(proxy.listen, browser_proxy);
        assert_eq!(proxy.ca_cert_file, ca.join("ca.pem"));
        let checkout = config
            .project("dev")
            .and_then(|p| p.browser_checkout.clone())
            .unwrap_or_else(|| unreachable!());
        assert!(checkout.allows("localhost") && !checkout.allows("example.com"));
    }
}
