//! Test harness: starts the real `paycred` binary on an ephemeral port with its own data
//! dir, master key and JWT keys, and talks HTTP to it.

pub mod chunked;
pub mod receiver;
pub mod tls;
pub mod upstream;

use once_cell::sync::Lazy;
use serde_json::Value;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Cards used by the tests (public test numbers).
pub const VISA: &str = "4242424242424242";
pub const VISA_DEBIT: &str = "4000056655665556";
pub const MASTERCARD: &str = "5555555555554444";
pub const AMEX: &str = "378282246310005";
pub const CVC: &str = "123";
pub const AMEX_CVC: &str = "7519";

/// A private key PEM and the matching public key PEM.
pub struct KeyPair {
    pub private_pem: String,
    pub public_pem: String,
}

fn rsa_pair() -> KeyPair {
    use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048).unwrap();
    KeyPair {
        private_pem: private.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
        public_pem: private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    }
}

fn ec_pair() -> KeyPair {
    use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let private = p256::SecretKey::random(&mut rand::rngs::OsRng);
    KeyPair {
        private_pem: private.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
        public_pem: private
            .public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    }
}

fn ed_pair() -> KeyPair {
    let (private, public) = paycred::auth::mint::generate_ed25519().unwrap();
    KeyPair {
        private_pem: private.to_string(),
        public_pem: public,
    }
}

/// Keys of this test process (RSA generation is slow, so once per test binary).
pub struct Keys {
    pub rsa: KeyPair,
    pub ec: KeyPair,
    pub ed: KeyPair,
    /// Project B's key.
    pub other: KeyPair,
}

pub static KEYS: Lazy<Keys> = Lazy::new(|| Keys {
    rsa: rsa_pair(),
    ec: ec_pair(),
    ed: ed_pair(),
    other: ed_pair(),
});

/// Polls `done` every 10 ms until it holds or `within` has passed; whether it held. For what
/// another thread or process does in its own time: a test waits for it, not a fixed sleep.
pub fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Project A (`proj_a`): RSA, P-256 and Ed25519 keys, pan enabled, own vault key, the response
/// guard off (its targets echo the card numbers they received, as tests check them).
/// Project B (`proj_b`): one Ed25519 key, pan disabled.
pub const PROJECT: &str = "proj_a";
pub const OTHER_PROJECT: &str = "proj_b";
/// Project `proj_guard`: private networks NOT allowed; these hosts allow-listed so that the
/// address checks (not the allow-list) are what refuses them.
pub const GUARD_PROJECT: &str = "proj_guard";
pub const GUARD_HOSTS: &str = "[localhost, 127.0.0.1, 127.1.2.3, 0.0.0.0, 10.0.0.1, 172.16.5.4, 192.168.1.1, 169.254.169.254, 100.64.0.1, \"::1\", \"fe80::1\", \"fd00:ec2::254\", \"::ffff:127.0.0.1\", \"64:ff9b::7f00:1\", \"2002:7f00:1::\", \"::\", 224.0.0.1, 255.255.255.255, 198.18.0.1, 192.0.2.1, 2130706433, 0x7f000001, 017700000001, 127.1, 0177.0.0.1, \"fc00::1\", \"::ffff:a00:1\", \"::ffff:169.254.169.254\", 240.0.0.1]";

/// Options of a test server.
#[derive(Clone)]
pub struct Options {
    pub cvc_retention: &'static str,
    pub rest_max_body: usize,
    pub extra_project_yaml: String,
    pub proxy_timeout: &'static str,
    /// `RUST_LOG` of the server; default `PAYCRED_TEST_LOG`, else `debug`.
    pub log_level: Option<&'static str>,
    /// `audit_hash` (`auto`, `sha256` or `blake3`).
    pub audit_hash: &'static str,
    /// The `metrics:` section (`KEYS_DIR` is the server's directory); by default the public
    /// `/metrics` with the bearer token [`METRICS_TOKEN`].
    pub metrics_yaml: String,
    /// `server.body_read_timeout`.
    pub body_read_timeout: &'static str,
    /// `server.head_read_timeout`.
    pub head_read_timeout: &'static str,
    /// The store the server uses.
    pub backend: Backend,
    /// The master key (64 hex characters); a new one when `None`. Servers that share a
    /// database share it.
    pub master_key: Option<String>,
    /// Serve HTTPS on `listen` with a certificate for `localhost` from a test CA made in the
    /// server's directory (`ca.pem`); [`Server::base`] is then `https://localhost:PORT`.
    pub tls: bool,
    /// Environment variables of the server process.
    pub env: Vec<(&'static str, String)>,
    /// The config's master key line(s) in place of `master_key_file: KEYS_DIR/master.key`
    /// (`KEYS_DIR` is the server's directory), e.g. a `master_key:` of another provider.
    pub master_key_yaml: Option<String>,
}

/// Which store a test server uses.
#[derive(Clone, Default, Debug)]
pub enum Backend {
    /// sled in the server's data dir.
    #[default]
    Sled,
    /// A new database of the test PostgreSQL (`paycred::store::postgres::test_cluster`).
    Postgres,
    /// This PostgreSQL database (another server's: several instances on one database).
    Database(String),
}

/// The bearer token of `/metrics` on a test server.
pub const METRICS_TOKEN: &str = "test-metrics-token-0123456789abcdef";

impl Default for Options {
    fn default() -> Self {
        Self {
            cvc_retention: "1h",
            rest_max_body: 1024 * 1024,
            extra_project_yaml: String::new(),
            proxy_timeout: "5s",
            log_level: None,
            audit_hash: "auto",
            metrics_yaml: "{bearer_token_file: KEYS_DIR/metrics.token}".into(),
            body_read_timeout: "5s",
            head_read_timeout: "10s",
            backend: Backend::Sled,
            master_key: None,
            tls: false,
            env: Vec::new(),
            master_key_yaml: None,
        }
    }
}

impl Options {
    /// The default options on `backend`.
    pub fn on(backend: Backend) -> Self {
        Self {
            backend,
            ..Self::default()
        }
    }
}

/// A running server; stopped on drop (its log is printed if the test failed).
pub struct Server {
    pub base: String,
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    child: Option<Child>,
    agent: ureq::Agent,
    log_level: String,
    /// The server's PostgreSQL database, if it uses one.
    pub database_url: Option<String>,
    /// The master key (hex).
    pub master_key: String,
    /// The test CA that signed the listener's certificate, when it serves TLS.
    pub ca: Option<PathBuf>,
    env: Vec<(&'static str, String)>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Writes a file only its owner may read, as paycred wants its master key.
pub fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(Options::default())
    }

    pub fn start_with(opts: Options) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(&d.join("rsa.pem"), &KEYS.rsa.public_pem);
        write(&d.join("ec.pem"), &KEYS.ec.public_pem);
        write(&d.join("ed.pem"), &KEYS.ed.public_pem);
        write(&d.join("other.pem"), &KEYS.other.public_pem);
        write(&d.join("metrics.token"), METRICS_TOKEN);
        let master_key = opts
            .master_key
            .clone()
            .unwrap_or_else(|| paycred::vault::master::MasterKey::generate_hex().to_string());
        write_private(&d.join("master.key"), &master_key);
        let database_url = match &opts.backend {
            Backend::Sled => None,
            Backend::Postgres => Some(
                paycred::store::postgres::test_cluster::fresh_database()
                    .unwrap_or_else(|e| panic!("no PostgreSQL for the tests: {e}")),
            ),
            Backend::Database(url) => Some(url.clone()),
        };
        let config_path = d.join("paycred.yaml");
        let mut server = Server {
            base: String::new(),
            dir,
            config_path,
            child: None,
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(),
            log_level: opts.log_level.map_or_else(
                || std::env::var("PAYCRED_TEST_LOG").unwrap_or_else(|_| "debug".into()),
                str::to_string,
            ),
            database_url,
            master_key,
            ca: None,
            env: opts.env.clone(),
        };
        if opts.tls {
            tls_files(server.dir.path());
            server.ca = Some(server.dir.path().join("ca.pem"));
        }
        server.write_config(&opts, free_port());
        server.spawn();
        server
    }

    fn write_config(&mut self, opts: &Options, port: u16) {
        let d = self.dir.path().display();
        let yaml = format!(
            "listen: 127.0.0.1:{port}\n\
             data_dir: {d}/data\n\
             {store}\
             {master_key}\n\
             cvc_retention: {retention}\n\
             rest_max_body: {max}\n\
             audit_hash: {audit_hash}\n\
             server: {{threads: 2, grace_period: 0s, graceful_shutdown_timeout: 1s, body_read_timeout: {body_read_timeout}, head_read_timeout: {head_read_timeout}}}\n\
             metrics: {metrics}\n\
             {tls}\
             projects:\n\
             \x20 - id: {PROJECT}\n\
             \x20   jwt:\n\
             \x20     keys:\n\
             \x20       - {{kid: k-rsa, public_key_file: {d}/rsa.pem}}\n\
             \x20       - {{kid: k-ec, public_key_file: {d}/ec.pem}}\n\
             \x20       - {{kid: k-ed, public_key_file: {d}/ed.pem}}\n\
             \x20     max_lifetime: 1h\n\
             \x20   pan: enabled\n\
             \x20   token_vault_key: true\n\
             \x20   proxy:\n\
             \x20     allowed_hosts: [127.0.0.1, localhost]\n\
             \x20     allow_http: true\n\
             \x20     allow_private_networks: true\n\
             \x20     timeout: {proxy_timeout}\n\
             \x20     response_guard: 'off'\n\
             \x20 - id: {GUARD_PROJECT}\n\
             \x20   jwt:\n\
             \x20     keys: [{{kid: k-ed, public_key_file: {d}/ed.pem}}]\n\
             \x20   pan: enabled\n\
             \x20   proxy:\n\
             \x20     allowed_hosts: {guard_hosts}\n\
             \x20     allow_http: true\n\
             \x20 - id: {OTHER_PROJECT}\n\
             \x20   jwt:\n\
             \x20     keys: [{{kid: k-b, public_key_file: {d}/other.pem}}]\n\
             {extra}",
            retention = opts.cvc_retention,
            max = opts.rest_max_body,
            audit_hash = opts.audit_hash,
            extra = opts.extra_project_yaml.replace("KEYS_DIR", &d.to_string()),
            master_key = opts
                .master_key_yaml
                .as_deref()
                .unwrap_or("master_key_file: KEYS_DIR/master.key")
                .replace("KEYS_DIR", &d.to_string()),
            metrics = opts.metrics_yaml.replace("KEYS_DIR", &d.to_string()),
            proxy_timeout = opts.proxy_timeout,
            body_read_timeout = opts.body_read_timeout,
            head_read_timeout = opts.head_read_timeout,
            guard_hosts = GUARD_HOSTS,
            tls = match &self.ca {
                Some(_) => format!("tls: {{cert_file: {d}/srv.pem, key_file: {d}/srv.key}}\n"),
                None => String::new(),
            },
            store = match &self.database_url {
                Some(url) => format!("store: {{kind: postgres, url: \"{url}\", pool_size: 8}}\n"),
                None => String::new(),
            },
        );
        write(&self.config_path, &yaml);
        self.base = match self.ca {
            Some(_) => format!("https://localhost:{port}"),
            None => format!("http://127.0.0.1:{port}"),
        };
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The server's whole log. Stops the server first: request lines are written in batches
    /// (every 10 ms), and only a stopped server has surely written all of them.
    pub fn log(&mut self) -> String {
        self.stop(false);
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_paycred"))
            .args(["serve", "-c"])
            .arg(&self.config_path)
            .env("RUST_LOG", &self.log_level)
            .env_remove("PAYCRED_MASTER_KEY")
            .env_remove("PAYCRED_LISTEN")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.healthy() {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("server exited with {status}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server did not become healthy:\n{}", self.log());
    }

    /// Whether `GET /health` answers 200 (over TLS, HTTP/1.1, when the listener serves it).
    fn healthy(&self) -> bool {
        match &self.ca {
            Some(ca) => tls::h1_exchange(
                self.port(),
                ca,
                tls::H1,
                b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            )
            .is_some_and(|(_, answer)| tls::h1_status(&answer) == 200),
            None => self
                .agent
                .get(&format!("{}/health", self.base))
                .call()
                .is_ok_and(|r| r.status() == 200),
        }
    }

    /// The listener's port.
    pub fn port(&self) -> u16 {
        self.base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Stops the server (SIGKILL when `kill`, else SIGTERM and wait).
    pub fn stop(&mut self, kill: bool) {
        if let Some(mut child) = self.child.take() {
            if kill {
                let _ = child.kill();
            } else {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(child.id().to_string())
                    .status();
                if eventually(Duration::from_secs(10), || {
                    matches!(child.try_wait(), Ok(Some(_)))
                }) {
                    return;
                }
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Sends the server a signal (`HUP`: reload its configuration; `QUIT`: hand its sockets
    /// over to an upgrading server).
    pub fn signal(&self, name: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{name}"))
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Whether the server process has ended.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Stops and starts again on the same data dir and port.
    pub fn restart(&mut self) {
        self.stop(false);
        self.spawn();
    }

    /// The `/metrics` page (with the test servers' bearer token).
    pub fn metrics(&self) -> Reply {
        self.call("GET", "/metrics", Some(METRICS_TOKEN), None)
    }

    /// A token of project A signed with the Ed25519 key.
    pub fn token(&self, sub: &str, role: &str) -> String {
        token_for(&KEYS.ed.private_pem, "k-ed", PROJECT, sub, role, 300)
    }

    /// Stores card `number` (cvc [`CVC`]) for `entity` with `token`; its payment method id.
    pub fn add_card(&self, token: &str, entity: &str, number: &str) -> String {
        let pm = self.call(
            "POST",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(token),
            Some(&card_body(entity, number, CVC)),
        );
        assert_eq!(pm.status, 201, "{}", pm.text);
        pm.json["id"].as_str().unwrap_or_default().to_string()
    }

    /// Sends `body` through the proxy to `target` with `token`.
    pub fn proxy_json(&self, token: &str, target: &str, body: &Value) -> Reply {
        self.raw(
            "POST",
            &format!("/projects/{PROJECT}/proxy"),
            &[
                ("Authorization", &format!("Bearer {token}")),
                ("Svc-Target-URL", target),
                ("Content-Type", "application/json"),
            ],
            Some(body.to_string().as_bytes()),
        )
    }

    /// Sends a request; returns status, headers and body (JSON when it parses).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let mut req = self
            .agent
            .request(method, &format!("{}{}", self.base, path));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let result = match body {
            Some(b) => req
                .set("Content-Type", "application/json")
                .send_string(&b.to_string()),
            None => req.call(),
        };
        Reply::of(result)
    }

    /// Like [`Self::raw`] on a new connection.
    pub fn raw_fresh(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .max_idle_connections(0)
            .build();
        let mut req = agent.request(method, &format!("{}{}", self.base, path));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        Reply::of(req.send_bytes(body))
    }

    /// Sends a raw request with explicit headers and body.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Reply {
        let mut req = self
            .agent
            .request(method, &format!("{}{}", self.base, path));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let result = match body {
            Some(b) => req.send_bytes(b),
            None => req.call(),
        };
        Reply::of(result)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed test gets the whole log (a graceful stop writes the last lines).
        if std::thread::panicking() {
            eprintln!("----- server log -----\n{}", self.log());
        }
        self.stop(true);
    }
}

/// A response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
    pub json: Value,
}

impl Reply {
    /// The reply of a request sent with ureq (an error status is a reply too).
    pub fn of(result: Result<ureq::Response, ureq::Error>) -> Reply {
        let resp = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("transport error: {e}"),
        };
        let status = resp.status();
        let headers = resp
            .headers_names()
            .into_iter()
            .map(|n| {
                let v = resp.header(&n).unwrap_or_default().to_string();
                (n, v)
            })
            .collect();
        let mut text = String::new();
        resp.into_reader()
            .take(64 * 1024 * 1024)
            .read_to_string(&mut text)
            .unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts the error envelope, `{"error": {status, type, title, message, details?}}`, with
    /// this status and type.
    pub fn assert_error(&self, status: u16, kind: &str) {
        assert_eq!(self.status, status, "body: {}", self.text);
        let e = &self.json["error"];
        assert_eq!(e["status"], status, "body: {}", self.text);
        assert_eq!(e["type"], kind, "body: {}", self.text);
        assert!(
            e["title"].as_str().is_some_and(|t| !t.is_empty()),
            "body: {}",
            self.text
        );
        assert!(e["message"].is_string(), "body: {}", self.text);
    }
}

/// A token of project B ([`OTHER_PROJECT`]) for `sub` with `role`, valid for 300 s.
pub fn other_project_token(sub: &str, role: &str) -> String {
    token_for(
        &KEYS.other.private_pem,
        "k-b",
        OTHER_PROJECT,
        sub,
        role,
        300,
    )
}

/// Mints a token with the given private key.
pub fn token_for(
    private_pem: &str,
    kid: &str,
    project: &str,
    sub: &str,
    role: &str,
    ttl: u64,
) -> String {
    paycred::auth::mint::mint(
        private_pem.as_bytes(),
        Some(kid),
        project,
        sub,
        role,
        Duration::from_secs(ttl),
        now(),
    )
    .unwrap()
}

/// A token of `project` for `sub` with `role`, signed with the Ed25519 key (`k-ed`), valid
/// for 300 s.
pub fn ed_token(project: &str, sub: &str, role: &str) -> String {
    token_for(&KEYS.ed.private_pem, "k-ed", project, sub, role, 300)
}

/// A create-payment-method body.
pub fn card_body(entity: &str, number: &str, cvc: &str) -> Value {
    serde_json::json!({
        "entityId": entity,
        "card": {"number": number, "expirationMonth": "12", "expirationYear": "2031", "cvc": cvc}
    })
}

/// The python of the venv holding Python's `standardwebhooks` (`scripts/webhooks-venv`,
/// which creates it the first time).
pub fn webhooks_python() -> String {
    let venv = Command::new("./scripts/webhooks-venv").output().unwrap();
    assert!(
        venv.status.success(),
        "{}",
        String::from_utf8_lossy(&venv.stderr)
    );
    String::from_utf8_lossy(&venv.stdout).trim().to_string()
}

/// `paycred audit -c CONFIG [--verify]` on a stopped server's store: whether it succeeded,
/// its stdout (one JSON entry per line) and its stderr.
pub fn audit_cli(server: &Server, verify: bool) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_paycred"));
    cmd.args(["audit", "-c"]).arg(&server.config_path);
    if verify {
        cmd.arg("--verify");
    }
    let out = cmd.env_remove("PAYCRED_MASTER_KEY").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `paycred ARGS -c CONFIG --project PROJECT`, whatever its outcome.
pub fn project_cli_output(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(args)
        .arg("-c")
        .arg(config)
        .args(["--project", PROJECT])
        .env_remove("PAYCRED_MASTER_KEY")
        .output()
        .unwrap()
}

/// [`project_cli_output`] on a stopped server's store; its stdout, after asserting that it
/// succeeded.
pub fn project_cli(server: &Server, args: &[&str]) -> String {
    let out = project_cli_output(&server.config_path, args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "paycred {args:?}: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A resolver for the scanners' property tests: `pm_<n>` is `values[n]`; anything else is
/// unknown.
pub struct Table<'a> {
    pub values: &'a [String],
}

impl paycred::template::Resolver for Table<'_> {
    fn resolve(
        &mut self,
        t: &paycred::template::TemplateRef,
    ) -> Result<paycred::secret::Revealed, paycred::template::ResolveError> {
        t.payment_method
            .strip_prefix("pm_")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| self.values.get(n).cloned())
            .map(|v| paycred::secret::Revealed::Number(v.into()))
            .ok_or_else(|| paycred::template::ResolveError::new("unknown payment method"))
    }
}

/// Starts `paycred serve` on `config`, expecting it to refuse: returns what it wrote to stderr
/// once it exited; panics if it keeps running (after killing it).
pub fn refused_start(config: &Path) -> String {
    refused_start_with(config, &[])
}

/// [`refused_start`] with these environment variables.
pub fn refused_start_with(config: &Path, env: &[(&str, String)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["serve", "-c"])
        .arg(config)
        .env_remove("PAYCRED_MASTER_KEY")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = eventually(Duration::from_secs(20), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(exited && !out.status.success(), "it started: {said}");
    said
}

/// The string `field` of each object of a JSON array, in order.
pub fn strings<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item[field].as_str())
        .collect()
}

/// A test CA (`ca.pem`, `ca.key`) in `d`, and a certificate for `localhost` it signed
/// (`srv.pem`, `srv.key`).
pub fn tls_files(d: &std::path::Path) {
    server_cert(d, "srv", &["localhost"]);
}

/// A certificate for `names` (`<file>.pem`, `<file>.key`) signed by the test CA in `d`, which
/// is made first if it is not there (`ca.pem`, `ca.key`).
pub fn server_cert(d: &std::path::Path, file: &str, names: &[&str]) {
    use std::process::{Command, Stdio};
    let run = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .current_dir(d)
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl {args:?}");
    };
    if !d.join("ca.pem").exists() {
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=paycred test CA",
        ]);
    }
    let (key, csr, pem) = (
        format!("{file}.key"),
        format!("{file}.csr"),
        format!("{file}.pem"),
    );
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &csr,
        "-subj",
        &format!("/CN={}", names.first().copied().unwrap_or("localhost")),
    ]);
    let sans: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    std::fs::write(
        d.join("ext.cnf"),
        format!("subjectAltName={}\n", sans.join(",")),
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        &pem,
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

/// Runs `work` with a client of the database at `url` (the test's own).
pub fn on_database<T>(url: &str, work: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (c, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        work(&c).await
    })
}

/// A `paycred serve --dev` process, killed when dropped.
pub struct DevServer(std::process::Child);

impl Drop for DevServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `paycred reload -c CONFIG`, asserting that it reached the server.
pub fn reload(config: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["reload", "-c"])
        .arg(config)
        .env_remove("PAYCRED_MASTER_KEY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `paycred serve --dev` in `dir` on `listen` and `proxy`, and waits for its health.
pub fn serve_dev(dir: &Path, listen: &str, proxy: &str) -> DevServer {
    let log = std::fs::File::create(dir.join("dev.log")).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["serve", "--dev", "--dev-dir"])
        .arg(dir.join("dev"))
        .args(["--listen", listen, "--browser-proxy-listen", proxy])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = DevServer(child);
    let up = eventually(std::time::Duration::from_secs(30), || {
        ureq::get(&format!("http://{listen}/health")).call().is_ok()
    });
    assert!(
        up,
        "{}",
        std::fs::read_to_string(dir.join("dev.log")).unwrap()
    );
    server
}

/// A `serve --dev` in a folder of its own, and a private-role token of its project `dev` for
/// `user_1`.
pub struct DevFixture {
    /// The dev folder (`dev/`) and the server's log (`dev.log`).
    pub dir: tempfile::TempDir,
    /// Stopped when the fixture is dropped.
    _server: DevServer,
    pub listen: String,
    pub token: String,
}

impl DevFixture {
    pub fn start() -> DevFixture {
        let dir = tempfile::tempdir().unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let proxy = format!("127.0.0.1:{}", free_port());
        let server = serve_dev(dir.path(), &listen, &proxy);
        let token = dev_jwt(dir.path(), "user_1", "private");
        DevFixture {
            dir,
            _server: server,
            listen,
            token,
        }
    }
}

/// A token of `serve --dev`'s project `dev` for `sub` with `role`, from `paycred jwt` with the
/// dev key `serve_dev` wrote in `dir`.
pub fn dev_jwt(dir: &Path, sub: &str, role: &str) -> String {
    let key = dir.join("dev/dev-private.pem");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["jwt", "--key", key.to_str().unwrap(), "--kid", "dev-1"])
        .args(["--project", "dev", "--sub", sub, "--role", role])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
