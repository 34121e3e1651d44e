//! Browser checkout from the command line: `paycred ca --out DIR` writes an interception CA
//! (the key its owner's alone, never over an existing file) and says how to trust it, and
//! `paycred check` loads the CA a config names, accepting a good one and naming the file of
//! a bad one, as it checks `browser_checkout` of each project.

use std::path::Path;
use std::process::{Command, Output};

fn paycred(args: &[&str], config: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_paycred"));
    cmd.args(args);
    if let Some(config) = config {
        cmd.arg("-c").arg(config);
    }
    // A master key, so that `check` gets as far as the browser settings.
    cmd.env("PAYCRED_MASTER_KEY", "11".repeat(32))
        .output()
        .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn ca_writes_a_private_key_never_over_a_file_and_says_how_to_trust_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("ca");
    let out = paycred(&["ca", "--out", out_dir.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (cert, key) = (out_dir.join("ca.pem"), out_dir.join("ca-key.pem"));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n paycred -i {}",
            cert.display()
        )),
        "{said}"
    );
    assert!(said.contains("Playwright"), "{said}");
    let pem = std::fs::read_to_string(&cert).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert!(!said.contains("PRIVATE KEY"), "{said}");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let key_before = std::fs::read(&key).unwrap();
    // Again: refused, nothing replaced.
    let again = paycred(&["ca", "--out", out_dir.to_str().unwrap()], None);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(std::fs::read(&key).unwrap(), key_before);
    assert_eq!(std::fs::read_to_string(&cert).unwrap(), pem);
    // What it wrote is a CA paycred loads.
    assert!(paycred::browser::ca::Ca::load(&cert, &key).is_ok());
}

#[test]
fn check_loads_the_browser_proxys_ca_and_checks_browser_checkout() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for d in [&a, &b] {
        assert!(paycred(&["ca", "--out", d.to_str().unwrap()], None)
            .status
            .success());
    }
    let public = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAS+dfUdbmyFT3/GCljB09GG+5I0reVaJ7DuKtkfmIe5s=\n-----END PUBLIC KEY-----\n";
    std::fs::write(dir.path().join("jwt.pem"), public).unwrap();
    let config = dir.path().join("paycred.yaml");
    let check = |ca: &str, checkout: &str| {
        std::fs::write(
            &config,
            format!(
                "data_dir: ./data\nmaster_key_file: ./master.key\n\
                 browser_proxy: {{listen: 127.0.0.1:8443, ca: {ca}}}\n\
                 projects:\n  - id: p\n    jwt: {{keys: [{{kid: k, public_key_file: jwt.pem}}]}}\n\
                 \x20   proxy: {{allow_private_networks: true}}\n\
                 \x20   browser_checkout: {checkout}\n"
            ),
        )
        .unwrap();
        let out = paycred(&["check"], Some(&config));
        (out.status.success(), text(&out.stdout) + &text(&out.stderr))
    };
    let checkout = "{allowed_hosts: [shop.test, '*.pay.test'], max_ttl: 30m, resolve: {'shop.test:443': '127.0.0.1:9443'}}";
    let (ok, said) = check("{cert_file: a/ca.pem, key_file: a/ca-key.pem}", checkout);
    assert!(ok, "{said}");
    for (ca, checkout, says) in [
        (
            "{cert_file: a/ca.pem, key_file: b/ca-key.pem}",
            checkout,
            "browser_proxy.ca: the key in",
        ),
        (
            "{cert_file: a/ca-key.pem, key_file: a/ca-key.pem}",
            checkout,
            "ca-key.pem: no PEM certificate",
        ),
        (
            "{cert_file: a/none.pem, key_file: a/ca-key.pem}",
            checkout,
            "browser_proxy.ca.cert_file: ",
        ),
        (
            "{cert_file: a/ca.pem, key_file: a/ca-key.pem}",
            "{allowed_hosts: [shop.test], max_ttl: 2d}",
            "projects[0].browser_checkout.max_ttl: must be between 1s and 24h",
        ),
        (
            "{cert_file: a/ca.pem, key_file: a/ca-key.pem}",
            "{allowed_hosts: ['shop test']}",
            "projects[0].browser_checkout.allowed_hosts[0]",
        ),
    ] {
        let (ok, said) = check(ca, checkout);
        assert!(!ok && said.contains(says), "{ca} {checkout}: {said}");
        assert!(!said.contains("PRIVATE KEY"), "{said}");
    }
}
