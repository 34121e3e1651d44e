//! The master key's providers (`master_key: {provider: pkcs11 | aws_kms, …}`), each against
//! a real token or the vendor's standard offline stand-in, never one of our own:
//!
//! - `pkcs11`: SoftHSM2 (Debian's `softhsm2`, which `scripts/setup` installs). The tests make
//!   throwaway tokens in a temp dir, with `SOFTHSM2_CONF` pointing at a config of their own,
//!   and each token's AES key through cryptoki.
//! - `aws_kms`: AWS KMS cannot be reached from here, so moto's KMS server (PyPI
//!   `moto[server]`, in the venv `scripts/moto-venv` makes under target/) stands in for it:
//!   started on 127.0.0.1 on a free port by each test and stopped after. Its IAM
//!   authentication is switched on once the test has set it up, so every request paycred
//!   sends is checked against the signature botocore (AWS's Python SDK) computes. moto's STS
//!   stands in for AWS STS for web identity credentials.
//!
//! A missing tool fails the test saying what to install; nothing is skipped.

use crate::common::*;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use cryptoki::session::UserType;
use once_cell::sync::Lazy;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's SoftHSM2 module.
const SOFTHSM_MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";
/// The user PIN of every test token.
const PIN: &str = "4821-test-pin";

/// This process's SoftHSM2 configuration: a token directory of its own. `SOFTHSM2_CONF` is
/// set for the whole test process (the tests' cryptoki calls read it), and handed to every
/// paycred they start.
struct SoftHsm {
    _dir: tempfile::TempDir,
    conf: PathBuf,
}

static SOFTHSM: Lazy<SoftHsm> = Lazy::new(|| {
    assert!(
        Path::new(SOFTHSM_MODULE).exists() && which("softhsm2-util"),
        "SoftHSM2 is missing ({SOFTHSM_MODULE}, softhsm2-util): run ./scripts/setup, which \
         installs Debian's softhsm2"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tokens")).unwrap();
    let conf = dir.path().join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n",
            dir.path().display()
        ),
    )
    .unwrap();
    std::env::set_var("SOFTHSM2_CONF", &conf);
    SoftHsm { _dir: dir, conf }
});

/// One C_Initialize of the module at a time in this process.
static CRYPTOKI: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn which(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A new token labelled `label` (user PIN [`PIN`]) holding an AES-256 key labelled `key` that
/// may wrap and unwrap and never leaves the token, made through cryptoki.
fn token(label: &str, key: &str) {
    let hsm = &*SOFTHSM;
    let out = Command::new("softhsm2-util")
        .args(["--init-token", "--free", "--label", label])
        .args(["--so-pin", "so-pin-1234", "--pin", PIN])
        .env("SOFTHSM2_CONF", &hsm.conf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "softhsm2-util: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _one = CRYPTOKI.lock().unwrap_or_else(|e| e.into_inner());
    let pkcs11 = Pkcs11::new(SOFTHSM_MODULE).unwrap();
    pkcs11
        .initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    let slot = pkcs11
        .get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| pkcs11.get_token_info(*s).unwrap().label().trim_end() == label)
        .unwrap();
    {
        let session = pkcs11.open_rw_session(slot).unwrap();
        session
            .login(UserType::User, Some(&PIN.to_string().into()))
            .unwrap();
        session
            .generate_key(
                &Mechanism::AesKeyGen,
                &[
                    Attribute::Class(ObjectClass::SECRET_KEY),
                    Attribute::KeyType(KeyType::AES),
                    Attribute::ValueLen(32.into()),
                    Attribute::Token(true),
                    Attribute::Private(true),
                    Attribute::Label(key.as_bytes().to_vec()),
                    Attribute::Wrap(true),
                    Attribute::Unwrap(true),
                    Attribute::Sensitive(true),
                    Attribute::Extractable(false),
                ],
            )
            .unwrap();
    }
    pkcs11.finalize().unwrap();
}

/// The `master_key:` of a token made by [`token`], the PIN in `DIR/pin` (written here,
/// 0600), the wrapped root key in `DIR/NAME.wrapped`.
fn pkcs11_yaml(key: &str, label: &str, dir: &Path, name: &str) -> String {
    write_private(&dir.join("pin"), &format!("{PIN}\n"));
    let d = dir.display();
    format!(
        "{key}: {{provider: pkcs11, module: {SOFTHSM_MODULE}, token_label: {label}, \
         pin_file: {d}/pin, key_label: {name}, wrapped_key_file: {d}/{name}.wrapped}}"
    )
}

/// `paycred ARGS... -c CONFIG` with the test's SoftHSM2 config; its exit and what it printed.
fn paycred(args: &[&str], config: &Path) -> (bool, String) {
    paycred_with(
        args,
        config,
        &[("SOFTHSM2_CONF", SOFTHSM.conf.display().to_string())],
    )
}

/// `paycred ARGS... -c CONFIG` with these environment variables.
fn paycred_with(args: &[&str], config: &Path, env: &[(&str, String)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(args)
        .arg("-c")
        .arg(config)
        .env_remove("PAYCRED_MASTER_KEY")
        .env_remove("PAYCRED_TEST_CRASH_AT")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `paycred master-key create -c CONFIG`, which must succeed; what it printed.
fn create(config: &Path) -> String {
    create_with(
        config,
        &[("SOFTHSM2_CONF", SOFTHSM.conf.display().to_string())],
    )
}

fn create_with(config: &Path, env: &[(&str, String)]) -> String {
    let (ok, said) = paycred_with(&["master-key", "create"], config, env);
    assert!(ok, "create: {said}");
    said
}

/// A config of only `master_key` (and `data_dir`) in `dir`, for `create` and refused starts.
fn key_config(dir: &Path, master_key_yaml: &str) -> PathBuf {
    let path = dir.join("keys.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: 127.0.0.1:{}\ndata_dir: {}/data\n{master_key_yaml}\n",
            free_port(),
            dir.display()
        ),
    )
    .unwrap();
    path
}

/// A `pan` intent's card number for `pm`: the card opened through the data keys.
fn card_number(server: &Server, pm: &str) -> String {
    let t = server.token("user_1", "private");
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(&t),
        Some(&json!({"entityId": "user_1", "credentialType": "pan", "paymentMethodId": pm,
            "mandates": [{"type": "maxAmount", "value": "100.00", "details": {"currency": "840"}}]})),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["pan"]["number"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A server on `master_key` (a `master_key: …` line) stores a card and reads it, restarts and
/// reads it again: the server (stopped) and how long its second start's unwrap took.
fn across_a_restart(master_key: String, env: Vec<(&'static str, String)>) -> (Server, f64) {
    let mut server = Server::start_with(Options {
        master_key_yaml: Some(master_key),
        env,
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    assert_eq!(card_number(&server, &pm), VISA);
    server.restart();
    assert_eq!(card_number(&server, &pm), VISA);
    let ms = unwrap_ms(&mut server);
    (server, ms)
}

/// The milliseconds the server's log says opening the root key took.
fn unwrap_ms(server: &mut Server) -> f64 {
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("root key") && l.contains(" opened by "))
        .unwrap_or_else(|| panic!("no root key line in the log:\n{log}"));
    let ms = line
        .split(" in ")
        .last()
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|n| n.trim().parse().ok());
    ms.unwrap_or_else(|| panic!("no time in {line}"))
}

/// The time of one start's unwrap of the file provider's key (reading and parsing the file),
/// for comparison with the HSM's and KMS's.
fn file_key_ms() -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k");
    write_private(&file, &paycred::vault::master::MasterKey::generate_hex());
    let provider = paycred::config::master_key::KeyProvider::File(file);
    let started = std::time::Instant::now();
    paycred::vault::provider::load(paycred::vault::provider::Which::Previous, &provider).unwrap();
    started.elapsed().as_secs_f64() * 1000.0
}

#[test]
fn with_a_softhsm_token_cards_are_stored_and_read_across_restarts() {
    token("pc-store", "paycred-root");
    let keys = tempfile::tempdir().unwrap();
    let master_key = pkcs11_yaml("master_key", "pc-store", keys.path(), "paycred-root");
    let said = create(&key_config(keys.path(), &master_key));
    assert!(said.contains("wrapped by PKCS#11 key"), "{said}");
    // The wrapped root key is all the host keeps: it names the token's key, not its value.
    let wrapped: Value =
        serde_json::from_slice(&std::fs::read(keys.path().join("paycred-root.wrapped")).unwrap())
            .unwrap();
    assert_eq!(wrapped["mechanism"], "CKM_AES_KEY_WRAP_PAD", "{wrapped}");
    assert_eq!(wrapped["wrapping_key"], "paycred-root", "{wrapped}");
    // Never replaced.
    let (ok, again) = paycred(
        &["master-key", "create"],
        &key_config(keys.path(), &master_key),
    );
    assert!(!ok && again.contains("exists"), "{again}");

    let (_, hsm) = across_a_restart(
        master_key,
        vec![("SOFTHSM2_CONF", SOFTHSM.conf.display().to_string())],
    );
    eprintln!(
        "one start's unwrap: SoftHSM2 C_UnwrapKey {hsm:.1} ms (file: {:.2} ms)",
        file_key_ms()
    );
}

#[test]
fn a_wrong_pin_key_label_token_label_or_module_stops_the_start_naming_it() {
    token("pc-fail", "paycred-root");
    token("pc-other", "paycred-root");
    let keys = tempfile::tempdir().unwrap();
    let good = pkcs11_yaml("master_key", "pc-fail", keys.path(), "paycred-root");
    create(&key_config(keys.path(), &good));
    let mut messages = Vec::new();
    let mut refused = |yaml: &str| {
        let said = refused_start(&key_config(keys.path(), yaml));
        messages.push(said.clone());
        said
    };

    write_private(&keys.path().join("wrong-pin"), "0000\n");
    let said = refused(&good.replace("/pin,", "/wrong-pin,"));
    assert!(
        said.contains("master_key: token \"pc-fail\" refused the PIN from pin_file")
            && said.contains("wrong PIN"),
        "{said}"
    );
    let said = refused(&good.replace("key_label: paycred-root", "key_label: nope"));
    assert!(
        said.contains("token \"pc-fail\" has no secret key labelled \"nope\""),
        "{said}"
    );
    let said = refused(&good.replace("token_label: pc-fail", "token_label: absent"));
    assert!(
        said.contains("has no token labelled \"absent\"") && said.contains("\"pc-fail\""),
        "{said}"
    );
    let said = refused(&good.replace(SOFTHSM_MODULE, "/usr/lib/nowhere/libpkcs11.so"));
    assert!(
        said.contains("module /usr/lib/nowhere/libpkcs11.so does not load"),
        "{said}"
    );
    // Another token's key of the same label does not open this root key.
    let said = refused(&good.replace("token_label: pc-fail", "token_label: pc-other"));
    assert!(
        said.contains("unwrapping with key \"paycred-root\" failed"),
        "{said}"
    );
    // The PIN from a variable that is not set.
    let pin_file = format!("pin_file: {}/pin", keys.path().display());
    let said = refused(&good.replace(&pin_file, "pin_env: PAYCRED_TEST_HSM_PIN"));
    assert!(
        said.contains("pin_env PAYCRED_TEST_HSM_PIN: the variable is not set"),
        "{said}"
    );
    // Neither PIN source, or both: `paycred check` says so before any start.
    for yaml in [
        good.replace(&format!("{pin_file}, "), ""),
        good.replace("pin_file:", "pin_env: X, pin_file:"),
    ] {
        let (ok, said) = paycred(&["check"], &key_config(keys.path(), &yaml));
        assert!(
            !ok && said.contains("master_key: give the PIN as pin_file"),
            "{said}"
        );
    }
    for said in &messages {
        assert!(!said.contains(PIN), "{said}");
    }
}

/// The server's config with `master_key` (a `master_key: …` line) in place of its master
/// key lines, and `previous` (also a `master_key: …` line) as its `previous_master_key`.
fn set_keys(server: &Server, master_key: &str, previous: Option<&str>) {
    let config = std::fs::read_to_string(&server.config_path).unwrap();
    let kept: String = config
        .lines()
        .filter(|l| !l.starts_with("master_key") && !l.starts_with("previous_master_key"))
        .map(|l| format!("{l}\n"))
        .collect();
    let previous = previous
        .map(|p| format!("previous_{p}\n"))
        .unwrap_or_default();
    std::fs::write(
        &server.config_path,
        format!("{master_key}\n{previous}{kept}"),
    )
    .unwrap();
}

/// `paycred master-key rotate -c CONFIG` (killed after `crash_at`, if given): whether it
/// finished, and what it printed.
fn rotate(config: &Path, env: &[(&str, String)], crash_at: Option<&str>) -> (bool, String) {
    let mut env = env.to_vec();
    if let Some(step) = crash_at {
        env.push(("PAYCRED_TEST_CRASH_AT", step.to_string()));
    }
    paycred_with(&["master-key", "rotate"], config, &env)
}

/// A server on a key file with a card stored, moved to the provider that `new_key` (given
/// the server's directory) writes as a `master_key: …` line: `create`, then `rotate` killed
/// after `crash_at` and run again (which says `then`); the key file deleted, the server
/// restarted on the new provider alone reads the card. The server, the card's payment
/// method and the new provider's line.
fn move_from_a_file(
    env: Vec<(&'static str, String)>,
    new_key: impl Fn(&Path) -> String,
    crash_at: &str,
    then: &str,
) -> (Server, String, String) {
    let mut server = Server::start_with(Options {
        env: env.clone(),
        ..Options::default()
    });
    let d = server.dir.path().to_path_buf();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    server.stop(false);
    // The new provider's root key is the new key, the file's the previous one.
    let file_key = format!(
        "master_key: {{provider: file, file: {}/master.key}}",
        d.display()
    );
    let new_key = new_key(&d);
    set_keys(&server, &new_key, Some(&file_key));
    let said = create_with(&server.config_path, &env);
    let new_id = said
        .split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string();
    let (done, said) = rotate(&server.config_path, &env, Some(crash_at));
    assert!(
        !done && said.contains(&format!("killed after {crash_at}")),
        "{said}"
    );
    let (done, said) = rotate(&server.config_path, &env, None);
    assert!(done && said.contains(then), "{said}");
    assert!(
        said.contains(&format!("wrapped by master key {new_id}")),
        "{said}"
    );
    std::fs::remove_file(d.join("master.key")).unwrap();
    set_keys(&server, &new_key, None);
    server.restart();
    assert_eq!(card_number(&server, &pm), VISA);
    server.stop(false);
    (server, pm, new_key)
}

#[test]
fn a_rotation_moves_from_a_file_to_a_softhsm_token_and_back() {
    token("pc-rotate", "paycred-root");
    let hsm_env = vec![("SOFTHSM2_CONF", SOFTHSM.conf.display().to_string())];
    let (mut server, pm, hsm_key) = move_from_a_file(
        hsm_env.clone(),
        |d| pkcs11_yaml("master_key", "pc-rotate", d, "paycred-root"),
        "after-data-keys",
        "data-keys\t0 re-wrapped",
    );
    let d = server.dir.path().to_path_buf();
    // pkcs11 → file: a new key file is the new key, the token's root key the previous one.
    let new_file = format!(
        "master_key: {{provider: file, file: {}/new.key}}",
        d.display()
    );
    set_keys(&server, &new_file, Some(&hsm_key));
    let said = create(&server.config_path);
    assert!(said.contains("written to"), "{said}");
    let (done, said) = rotate(&server.config_path, &hsm_env, None);
    assert!(done && said.contains("data-keys\t1 re-wrapped"), "{said}");
    std::fs::remove_file(d.join("paycred-root.wrapped")).unwrap();
    set_keys(&server, &new_file, None);
    server.restart();
    assert_eq!(card_number(&server, &pm), VISA);
    server.stop(false);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok && out.contains("head MAC valid"), "{out}{err}");
}

/// moto's server on 127.0.0.1: it stands in for AWS KMS, which these tests cannot reach.
/// Stopped on drop.
struct Moto {
    child: std::process::Child,
    endpoint: String,
    python: PathBuf,
}

/// The IAM user's keys and the KMS keys a [`Moto`] was set up with.
struct KmsSetup {
    access_key_id: String,
    secret_access_key: String,
    /// `alias/paycred`'s key.
    key_arn: String,
    /// Another key of the account.
    other_arn: String,
}

impl Moto {
    fn start() -> Moto {
        let venv = Command::new("./scripts/moto-venv").output().unwrap();
        assert!(
            venv.status.success(),
            "moto (PyPI moto[server]) is missing and scripts/moto-venv could not install it: {}",
            String::from_utf8_lossy(&venv.stderr)
        );
        let server = PathBuf::from(String::from_utf8_lossy(&venv.stdout).trim());
        let python = server.with_file_name("python");
        let port = free_port();
        let child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            python,
        };
        let agent = ureq::AgentBuilder::new()
            .timeout(std::time::Duration::from_secs(2))
            .build();
        assert!(
            eventually(std::time::Duration::from_secs(60), || agent
                .get(&format!("{}/moto-api/data.json", moto.endpoint))
                .call()
                .is_ok()),
            "moto_server did not answer on {}",
            moto.endpoint
        );
        moto
    }

    /// An IAM user allowed every KMS action, its access key, and two KMS keys (the first with
    /// the alias `alias/paycred`), made with boto3 (AWS's Python SDK, in moto's venv); then
    /// moto's IAM authentication is switched on: from here every request's signature is
    /// checked, as AWS checks it.
    fn setup(&self) -> KmsSetup {
        let script = r#"
import boto3, json, sys
kw = dict(endpoint_url=sys.argv[1], region_name="eu-west-1",
          aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **kw)
iam.create_user(UserName="paycred")
iam.put_user_policy(UserName="paycred", PolicyName="kms", PolicyDocument=json.dumps(
    {"Version": "2012-10-17",
     "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="paycred")["AccessKey"]
kms = boto3.client("kms", **kw)
first = kms.create_key(Description="paycred root")["KeyMetadata"]["Arn"]
other = kms.create_key(Description="another")["KeyMetadata"]["Arn"]
kms.create_alias(AliasName="alias/paycred", TargetKeyId=first)
print(json.dumps({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"],
                  "key": first, "other": other}))
"#;
        let made: Value = serde_json::from_slice(&self.boto3(script)).unwrap();
        self.authentication(true);
        KmsSetup {
            access_key_id: made["id"].as_str().unwrap().to_string(),
            secret_access_key: made["secret"].as_str().unwrap().to_string(),
            key_arn: made["key"].as_str().unwrap().to_string(),
            other_arn: made["other"].as_str().unwrap().to_string(),
        }
    }

    /// Switches moto's IAM authentication on or off.
    fn authentication(&self, on: bool) {
        self.authentication_after(if on { 0 } else { 1_000_000 });
    }

    /// Lets the next `free` requests through unchecked, then checks every request's
    /// signature and permissions.
    fn authentication_after(&self, free: u32) {
        ureq::post(&format!("{}/moto-api/reset-auth", self.endpoint))
            .send_string(&free.to_string())
            .unwrap();
    }

    /// A role that web identity assumes, allowed every KMS action: its ARN. Leaves moto's
    /// authentication off.
    fn web_identity_role(&self) -> String {
        self.authentication(false);
        let script = r#"
import boto3, json, sys
kw = dict(endpoint_url=sys.argv[1], region_name="eu-west-1",
          aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **kw)
trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
         "Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/oidc.eks"},
         "Action": "sts:AssumeRoleWithWebIdentity"}]}
arn = iam.create_role(RoleName="paycred-irsa",
                      AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
iam.put_role_policy(RoleName="paycred-irsa", PolicyName="kms", PolicyDocument=json.dumps(
    {"Version": "2012-10-17",
     "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}]}))
print(arn)
"#;
        String::from_utf8_lossy(&self.boto3(script))
            .trim()
            .to_string()
    }

    /// Runs the Python `script` (boto3) with this server's endpoint as its argument: its
    /// output.
    fn boto3(&self, script: &str) -> Vec<u8> {
        let out = Command::new(&self.python)
            .args(["-c", script, &self.endpoint])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "boto3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `master_key:` on the KMS key `key_id` of this server, the ciphertext in `dir`.
    fn yaml(&self, key_id: &str, dir: &Path) -> String {
        format!(
            "master_key: {{provider: aws_kms, key_id: \"{key_id}\", region: eu-west-1, \
             endpoint: \"{}\", wrapped_key_file: {}/root.kms}}",
            self.endpoint,
            dir.display()
        )
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment of a paycred that takes `setup`'s keys from the environment: no shared
/// credentials file (`HOME` is `home`) and no instance metadata service.
fn kms_env(setup: &KmsSetup, home: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", setup.access_key_id.clone()),
        ("AWS_SECRET_ACCESS_KEY", setup.secret_access_key.clone()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("HOME", home.display().to_string()),
    ]
}

#[test]
fn with_moto_standing_in_for_kms_cards_are_stored_and_read_across_restarts() {
    let moto = Moto::start();
    let setup = moto.setup();
    let keys = tempfile::tempdir().unwrap();
    let env = kms_env(&setup, keys.path());
    let master_key = moto.yaml("alias/paycred", keys.path());
    let said = create_with(&key_config(keys.path(), &master_key), &env);
    assert!(
        said.contains("wrapped by AWS KMS key alias/paycred"),
        "{said}"
    );
    let wrapped: Value =
        serde_json::from_slice(&std::fs::read(keys.path().join("root.kms")).unwrap()).unwrap();
    assert_eq!(wrapped["wrapping_key"], setup.key_arn.as_str(), "{wrapped}");
    assert_eq!(wrapped["mechanism"], "GenerateDataKey", "{wrapped}");

    let (mut server, kms) = across_a_restart(master_key, env);
    let log = server.log();
    assert!(
        !log.contains(&setup.secret_access_key),
        "the secret key was logged"
    );
    eprintln!(
        "one start's unwrap: moto KMS Decrypt {kms:.1} ms (file: {:.2} ms)",
        file_key_ms()
    );
}

#[test]
fn a_wrong_kms_key_bad_credentials_or_an_unreachable_endpoint_stop_the_start() {
    let moto = Moto::start();
    let setup = moto.setup();
    let keys = tempfile::tempdir().unwrap();
    let env = kms_env(&setup, keys.path());
    create_with(
        &key_config(keys.path(), &moto.yaml(&setup.key_arn, keys.path())),
        &env,
    );
    let mut messages = Vec::new();
    let mut refused = |yaml: String, env: &[(&str, String)]| {
        let said = refused_start_with(&key_config(keys.path(), &yaml), env);
        messages.push(said.clone());
        said
    };

    // Another key of the account does not open the root key; a key that does not exist
    // neither.
    let said = refused(moto.yaml(&setup.other_arn, keys.path()), &env);
    assert!(
        said.contains("master_key: Decrypt on KMS key arn:")
            && said.contains("was refused: 400 AccessDeniedException"),
        "{said}"
    );
    let said = refused(moto.yaml("alias/nope", keys.path()), &env);
    assert!(
        said.contains("was refused: 400 NotFoundException"),
        "{said}"
    );
    // Nothing listening.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let said = refused(
        moto.yaml(&setup.key_arn, keys.path())
            .replace(&moto.endpoint, &closed),
        &env,
    );
    assert!(
        said.contains(&format!(
            "Decrypt: cannot reach KMS key {} at {closed}",
            setup.key_arn
        )),
        "{said}"
    );
    // A wrong secret key: moto checks the signature as KMS does.
    let mut wrong = env.clone();
    wrong[1].1 = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWRONGSECRET".into();
    let said = refused(moto.yaml(&setup.key_arn, keys.path()), &wrong);
    assert!(said.contains("was refused: 403"), "{said}");
    // No credentials anywhere.
    let none = vec![
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ("HOME", keys.path().display().to_string()),
    ];
    let said = refused(moto.yaml(&setup.key_arn, keys.path()), &none);
    assert!(said.contains("master_key: no AWS credentials"), "{said}");
    for said in &messages {
        assert!(!said.contains(&setup.secret_access_key), "{said}");
    }
}

#[test]
fn kms_credentials_come_from_the_shared_file_or_the_instance_metadata_service() {
    let moto = Moto::start();
    let setup = moto.setup();
    let home = tempfile::tempdir().unwrap();
    let env = kms_env(&setup, home.path());
    let config = key_config(home.path(), &moto.yaml("alias/paycred", home.path()));
    create_with(&config, &env);
    // A profile of the shared credentials file (its signatures checked by moto).
    std::fs::create_dir(home.path().join(".aws")).unwrap();
    write_private(
        &home.path().join(".aws/credentials"),
        &format!(
            "[default]\naws_access_key_id = AKIANOTTHISONE\naws_secret_access_key = x\n\n\
             [paycred]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            setup.access_key_id, setup.secret_access_key
        ),
    );
    let file_env = vec![
        ("AWS_PROFILE", "paycred".to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("HOME", home.path().display().to_string()),
    ];
    let (ok, said) = paycred_with(&["check"], &config, &file_env);
    assert!(ok, "{said}");
    // The instance metadata service's role (moto serves one; its keys are not the IAM
    // user's, so moto's authentication is off for it).
    moto.authentication(false);
    let imds_env = vec![
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", moto.endpoint.clone()),
        ("HOME", home.path().join("none").display().to_string()),
    ];
    let (ok, said) = paycred_with(&["check"], &config, &imds_env);
    assert!(ok, "{said}");
}

/// A JWT-looking service account token, as EKS projects it into a pod.
const WEB_IDENTITY_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InBheWNyZWQifQ.\
    eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6cGF5OnBheWNyZWQifQ.c2lnbmF0dXJlLW5vdC1jaGVja2Vk";

/// The environment of a paycred whose only AWS credentials are web identity's (EKS IRSA):
/// the token file `token`, the role `role`, STS at `sts`; no keys in the environment, no
/// shared credentials file (`HOME` is `home`, empty), no instance metadata service.
fn web_identity_env(
    token: &Path,
    role: &str,
    sts: &str,
    home: &Path,
) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        ("AWS_ROLE_ARN", role.to_string()),
        ("AWS_ENDPOINT_URL_STS", sts.to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("HOME", home.display().to_string()),
    ]
}

/// Web identity: moto's server is the offline stand-in for AWS STS (it answers
/// `AssumeRoleWithWebIdentity` without checking the token) as for KMS. The start's one STS
/// call goes unsigned, as AWS takes it; from there moto checks every request: the start's
/// `Decrypt` passes only signed with the role's credentials (and session token) that STS
/// gave, under the role's policy.
#[test]
fn kms_credentials_come_from_a_web_identity_token() {
    let moto = Moto::start();
    moto.setup();
    let role = moto.web_identity_role();
    let keys = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let token = keys.path().join("token");
    std::fs::write(&token, WEB_IDENTITY_TOKEN).unwrap();
    let env = web_identity_env(&token, &role, &moto.endpoint, home.path());
    let master_key = moto.yaml("alias/paycred", keys.path());
    create_with(&key_config(keys.path(), &master_key), &env);

    moto.authentication_after(1);
    let mut server = Server::start_with(Options {
        master_key_yaml: Some(master_key.clone()),
        env: env.clone(),
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    assert_eq!(card_number(&server, &pm), VISA);
    let log = server.log();
    assert!(!log.contains("eyJ"), "the token was logged");
    drop(server);

    // Without its token, or with the token file but no role, the start is refused, naming
    // what is missing and never quoting the token; a role alone is not web identity (the
    // chain goes on, and here finds nothing).
    moto.authentication(false);
    let config = key_config(keys.path(), &master_key);
    let mut missing = env.clone();
    missing[0].1 = keys.path().join("no-token").display().to_string();
    let said = refused_start_with(&config, &missing);
    assert!(
        said.contains("master_key: web identity (AWS_WEB_IDENTITY_TOKEN_FILE ")
            && said.contains("no-token, role arn:aws:iam::")
            && said.contains("reading the token file failed"),
        "{said}"
    );
    let said = refused_start_with(&config, &env[1..]);
    assert!(said.contains("no AWS credentials"), "{said}");
    let mut no_role = env.clone();
    no_role.remove(1);
    let said = refused_start_with(&config, &no_role);
    assert!(
        said.contains("AWS_WEB_IDENTITY_TOKEN_FILE is set without AWS_ROLE_ARN"),
        "{said}"
    );
    // STS refusing: with its authentication on, moto refuses the unsigned call (with an
    // answer that is not STS's error XML; the unit tests read STS's error codes).
    moto.authentication(true);
    let said = refused_start_with(&config, &env);
    assert!(
        said.contains(&format!(
            "STS AssumeRoleWithWebIdentity at {} was refused: 500",
            moto.endpoint
        )),
        "{said}"
    );
    assert!(!said.contains("eyJ"), "{said}");
}

#[test]
fn a_rotation_moves_from_a_file_to_kms() {
    let moto = Moto::start();
    let setup = moto.setup();
    let home = tempfile::tempdir().unwrap();
    move_from_a_file(
        kms_env(&setup, home.path()),
        |d| moto.yaml("alias/paycred", d),
        "after-client-keys",
        "cvc-ratchet\t1 re-wrapped",
    );
}
