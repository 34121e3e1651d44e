//! The configuration file as written: serde structs that refuse unknown keys.
//!
//! Every field has its default here; `super::validate` turns these into a checked
//! [`super::Config`]. `conf/paycred.yaml` documents every key.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address the one listener binds, e.g. `127.0.0.1:8080`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Serve HTTPS on `listen` with this certificate and key.
    #[serde(default)]
    pub tls: Option<TlsFile>,
    /// Directory of the embedded sled store (and the pid file with either store).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Which store holds the data: `sled` (embedded, in `data_dir`) or `postgres`.
    #[serde(default)]
    pub store: StoreFile,
    /// File holding the 32-byte master key (64 hex characters): `master_key: {provider:
    /// file, file: …}` written the short way. The environment variable `PAYCRED_MASTER_KEY`
    /// takes precedence. Never inside `data_dir`. Neither this nor `master_key`: `./master.key`.
    #[serde(default)]
    pub master_key_file: Option<PathBuf>,
    /// Where the master key comes from: `provider: file`, `pkcs11` (an HSM) or `aws_kms`
    /// (docs/operations.md); or `master_key_file`.
    #[serde(default)]
    pub master_key: Option<super::master_key::MasterKeyFile>,
    /// The master key before a rotation, still opening what it wrapped while
    /// `paycred master-key rotate` re-wraps it (docs/operations.md). Never inside `data_dir`.
    #[serde(default)]
    pub previous_master_key_file: Option<PathBuf>,
    /// The master key a rotation moves away from, in the shape of `master_key` (any
    /// provider); or `previous_master_key_file`.
    #[serde(default)]
    pub previous_master_key: Option<super::master_key::MasterKeyFile>,
    /// How long a CVC stays readable after it was stored, e.g. `1h`.
    #[serde(default = "default_cvc_retention")]
    pub cvc_retention: String,
    /// Largest request body accepted by the REST routes, in bytes.
    #[serde(default = "default_rest_max_body")]
    pub rest_max_body: usize,
    /// Hash function of new audit-log entries: `auto` (SHA-256 where the CPU has SHA
    /// instructions, BLAKE3 elsewhere), `sha256` or `blake3`.
    #[serde(default = "default_audit_hash")]
    pub audit_hash: String,
    /// Server process settings.
    #[serde(default)]
    pub server: ServerFile,
    /// The projects (tenants) this service answers for.
    #[serde(default)]
    pub projects: Vec<ProjectFile>,
    /// Where `/metrics` is served. Neither key: nowhere (the public `/metrics` is 404).
    /// (`metrics:` with every key commented out is the same as none.)
    #[serde(default)]
    pub metrics: Option<MetricsFile>,
    /// Development only: serve the demo page at `/demo` (see `crate::dev::demo`).
    #[serde(default)]
    pub demo: Option<DemoFile>,
    /// The browser checkout's forward proxy; absent: none.
    #[serde(default)]
    pub browser_proxy: Option<BrowserProxyFile>,
    /// How long events, finished webhook deliveries and ended intents are kept.
    #[serde(default)]
    pub retention: RetentionFile,
}

/// `retention:` durations like `30d`, `720h` (`super::retention`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionFile {
    /// Events, counted from their creation.
    #[serde(default = "default_retention")]
    pub events: String,
    /// Webhook deliveries delivered or failed, counted from their last attempt.
    #[serde(default = "default_retention")]
    pub deliveries: String,
    /// Purchase intents ended (expired, used up, canceled, unavailable), counted from their end.
    #[serde(default = "default_retention")]
    pub ended_intents: String,
}

impl Default for RetentionFile {
    fn default() -> Self {
        RetentionFile {
            events: default_retention(),
            deliveries: default_retention(),
            ended_intents: default_retention(),
        }
    }
}

fn default_retention() -> String {
    "30d".into()
}

/// `browser_proxy:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserProxyFile {
    /// Address the forward proxy listens on, e.g. `127.0.0.1:8443`.
    pub listen: String,
    /// The interception CA its leaf certificates are minted from.
    pub ca: BrowserCaFile,
}

/// `browser_proxy.ca:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserCaFile {
    /// PEM CA certificate (`paycred ca --out DIR` writes `ca.pem`).
    pub cert_file: PathBuf,
    /// PEM private key of that certificate (`ca-key.pem`).
    pub key_file: PathBuf,
}

/// `projects[].browser_checkout:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserCheckoutFile {
    /// Hosts a browser session may put real card values into: exact names or `*.suffix`
    /// (one label more).
    pub allowed_hosts: Vec<String>,
    /// Longest browser session, e.g. `15m`.
    #[serde(default = "default_browser_max_ttl")]
    pub max_ttl: String,
    /// Other hosts the proxy may tunnel without looking inside (never substituted).
    #[serde(default)]
    pub tunnel_hosts: Vec<String>,
    /// `"name:port": "address:port"`: where the proxy connects for a name instead of asking
    /// DNS (as curl's `--connect-to`); only where `proxy.allow_private_networks` is true.
    #[serde(default)]
    pub resolve: std::collections::BTreeMap<String, String>,
}

fn default_browser_max_ttl() -> String {
    "15m".into()
}

/// `metrics:`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsFile {
    /// A separate plain-HTTP listener that serves only `/metrics`, e.g. `127.0.0.1:9464`.
    #[serde(default)]
    pub listen: Option<String>,
    /// A file holding a bearer token: `/metrics` on the public listener then answers a
    /// request whose `Authorization` is `Bearer <token>`.
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
}

/// `tls:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// Offer HTTP/2 by ALPN next to HTTP/1.1 (`false`: HTTP/1.1 only).
    #[serde(default = "default_true")]
    pub http2: bool,
}

fn default_true() -> bool {
    true
}

/// `store:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreFile {
    /// `sled` (default) or `postgres`.
    #[serde(default = "default_store_kind")]
    pub kind: String,
    /// `postgres://user:password@host:port/dbname?sslmode=…`; `PAYCRED_DATABASE_URL` takes
    /// precedence.
    #[serde(default)]
    pub url: Option<String>,
    /// Most connections open at once.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// TLS to PostgreSQL (`sslmode=require` in the URL: the certificate and host name are
    /// verified against these CAs, else the system's).
    #[serde(default)]
    pub tls: Option<StoreTlsFile>,
    /// PostgreSQL: the longest a cached record is served after it was read (`0s`: no cache).
    #[serde(default = "default_cache_ttl")]
    pub cache_ttl: String,
}

impl Default for StoreFile {
    fn default() -> Self {
        Self {
            kind: default_store_kind(),
            url: None,
            pool_size: default_pool_size(),
            tls: None,
            cache_ttl: default_cache_ttl(),
        }
    }
}

/// `store.tls:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreTlsFile {
    /// PEM CA certificates that sign the database server's certificate (else the system's).
    pub ca_file: PathBuf,
}

fn default_store_kind() -> String {
    "sled".into()
}
fn default_pool_size() -> usize {
    16
}

fn default_cache_ttl() -> String {
    "5s".into()
}

/// `server:` — pingora's process settings that paycred exposes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    /// Worker threads of the service.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// After SIGTERM, how long the listener keeps accepting before it stops (e.g. `1s`).
    #[serde(default = "default_grace_period")]
    pub grace_period: String,
    /// After the grace period, how long in-flight requests get to finish (e.g. `5s`).
    #[serde(default = "default_shutdown_timeout")]
    pub graceful_shutdown_timeout: String,
    /// Idle connections kept to targets per worker thread, all targets together: in
    /// paycred's pool (bodies it sends itself) and as many in pingora's (streamed requests).
    #[serde(default = "default_keepalive_pool")]
    pub upstream_keepalive_pool_size: usize,
    /// Longest wait for the next bytes of a request body (e.g. `5s`): past it, 408.
    #[serde(default = "default_body_read_timeout")]
    pub body_read_timeout: String,
    /// Longest an HTTP/1.x request's head may take to arrive whole, from its first bytes
    /// (e.g. `10s`): past it, 408 and the connection closed.
    #[serde(default = "default_head_read_timeout")]
    pub head_read_timeout: String,
}

impl Default for ServerFile {
    fn default() -> Self {
        Self {
            threads: default_threads(),
            grace_period: default_grace_period(),
            graceful_shutdown_timeout: default_shutdown_timeout(),
            upstream_keepalive_pool_size: default_keepalive_pool(),
            body_read_timeout: default_body_read_timeout(),
            head_read_timeout: default_head_read_timeout(),
        }
    }
}

/// One entry of `projects:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    /// Project id: the JWT `iss` and the `:projectId` of every path.
    pub id: String,
    /// How the project's JWTs are verified.
    pub jwt: JwtFile,
    /// `enabled`: the project may issue `pan` credentials (PCI environments only).
    #[serde(default = "default_pan")]
    pub pan: String,
    /// `true`: the project has its own token-vault key; create returns `token`.
    #[serde(default)]
    pub token_vault_key: bool,
    /// Proxy rules.
    #[serde(default)]
    pub proxy: ProxyFile,
    /// Requests per second per project and per entity; none when absent.
    #[serde(default)]
    pub rate_limits: Option<RateLimitsFile>,
    /// Browser pages of other origins that may call the routes of the public role.
    #[serde(default)]
    pub cors: CorsFile,
    /// How end users verify purchase intents beside the one-time code.
    #[serde(default)]
    pub verification: VerificationFile,
    /// Browser checkout: the hosts and longest session of the project's browser sessions;
    /// absent: none.
    #[serde(default)]
    pub browser_checkout: Option<BrowserCheckoutFile>,
    /// The merchants credentials may be bound to, and their hosts.
    #[serde(default)]
    pub merchants: Vec<MerchantFile>,
}

/// One of `projects[].merchants:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MerchantFile {
    /// The merchant's id, as a `merchant` mandate (ACP's `merchant_id`) names it.
    pub id: String,
    /// Its hosts: exact names or `*.suffix` (one label more).
    pub hosts: Vec<String>,
}

/// `projects[].verification:`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationFile {
    /// Passkeys (WebAuthn); absent: no passkeys in this project.
    #[serde(default)]
    pub passkeys: Option<PasskeysFile>,
}

/// `projects[].verification.passkeys:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeysFile {
    /// The relying party: the domain passkeys are bound to (`shop.example`).
    pub rp_id: String,
    /// The exact origins of the pages that register and use passkeys, each on `rp_id` or
    /// a subdomain of it.
    pub origins: Vec<String>,
}

/// `projects[].cors:`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorsFile {
    /// Exact origins (`https://shop.example`, `http://localhost:5173`); no wildcard.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

/// `projects[].jwt:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtFile {
    /// Public keys; the token's `kid` header picks one.
    pub keys: Vec<JwtKeyFile>,
    /// Longest accepted `exp - iat`, e.g. `1h`.
    #[serde(default = "default_max_lifetime")]
    pub max_lifetime: String,
}

/// `projects[].jwt.keys[]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtKeyFile {
    /// Key id, matched against the token header's `kid`.
    pub kid: String,
    /// PEM public key (RSA → RS256, P-256 → ES256, Ed25519 → EdDSA): SPKI, PKCS#1 or a
    /// certificate ([`super::keys`]).
    pub public_key_file: PathBuf,
}

/// `projects[].proxy:`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFile {
    /// Target hosts: exact names or `*.suffix`.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Allow `http://` targets (tests and local development only).
    #[serde(default)]
    pub allow_http: bool,
    /// Allow targets resolving to loopback/private ranges (tests and local development only).
    #[serde(default)]
    pub allow_private_networks: bool,
    /// Extra PEM roots for targets with a private CA.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Longest wait for a target, e.g. `30s`.
    #[serde(default = "default_proxy_timeout")]
    pub timeout: String,
    /// What to do with card numbers in a target's answer: `off`, `mask` or `refuse`.
    #[serde(default)]
    pub response_guard: super::ResponseGuardMode,
    /// Also look for any Luhn-valid 13-19 digit run, not only this request's numbers.
    #[serde(default)]
    pub response_guard_any_card: bool,
}

impl Default for ProxyFile {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            allow_http: false,
            allow_private_networks: false,
            ca_file: None,
            timeout: default_proxy_timeout(),
            response_guard: super::ResponseGuardMode::default(),
            response_guard_any_card: false,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}
impl FileConfig {
    /// Every relative path of the file made relative to `base`, the directory of the config
    /// file (as nginx resolves paths from its prefix), so that a config means the same files
    /// from whatever directory paycred is started.
    pub fn resolve_paths(&mut self, base: &Path) {
        let at = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        at(&mut self.data_dir);
        if self.master_key.is_none() {
            at(self
                .master_key_file
                .get_or_insert_with(default_master_key_file));
        }
        for section in [&mut self.master_key, &mut self.previous_master_key]
            .into_iter()
            .flatten()
        {
            section.resolve_paths(base);
        }
        if let Some(previous) = &mut self.previous_master_key_file {
            at(previous);
        }
        if let Some(tls) = &mut self.store.tls {
            at(&mut tls.ca_file);
        }
        if let Some(tls) = &mut self.tls {
            at(&mut tls.cert_file);
            at(&mut tls.key_file);
        }
        for project in &mut self.projects {
            for key in &mut project.jwt.keys {
                at(&mut key.public_key_file);
            }
            if let Some(ca) = project.proxy.ca_file.as_mut() {
                at(ca);
            }
        }
        if let Some(demo) = &mut self.demo {
            at(&mut demo.private_key_file);
        }
        if let Some(browser) = &mut self.browser_proxy {
            at(&mut browser.ca.cert_file);
            at(&mut browser.ca.key_file);
        }
        if let Some(token) = self
            .metrics
            .as_mut()
            .and_then(|m| m.bearer_token_file.as_mut())
        {
            at(token);
        }
    }
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("./data")
}
/// The master key file when neither `master_key_file` nor `master_key` is given.
pub fn default_master_key_file() -> PathBuf {
    PathBuf::from("./master.key")
}
fn default_body_read_timeout() -> String {
    "5s".into()
}
fn default_head_read_timeout() -> String {
    "10s".into()
}

fn default_cvc_retention() -> String {
    "1h".into()
}
fn default_audit_hash() -> String {
    "auto".into()
}

fn default_rest_max_body() -> usize {
    1024 * 1024
}
fn default_threads() -> usize {
    2
}
fn default_grace_period() -> String {
    "1s".into()
}
fn default_shutdown_timeout() -> String {
    "5s".into()
}
fn default_keepalive_pool() -> usize {
    128
}
fn default_pan() -> String {
    "disabled".into()
}
fn default_max_lifetime() -> String {
    "1h".into()
}
fn default_proxy_timeout() -> String {
    "30s".into()
}

/// `projects[].rate_limits:` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsFile {
    /// Limit of the whole project (all its entities together).
    #[serde(default)]
    pub project: Option<LimitFile>,
    /// Limit of each entity (JWT `sub`) of the project.
    #[serde(default)]
    pub entity: Option<LimitFile>,
    /// What a request is answered while the store that shares the limits between instances
    /// (PostgreSQL) does not answer: `allow` (the default) or `deny`.
    #[serde(default)]
    pub on_store_error: Option<String>,
}

/// One limit as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitFile {
    /// Sustained requests per second (may be fractional, e.g. 0.5).
    pub per_second: f64,
    /// Requests allowed at once above the sustained rate; default: `per_second` (at least 1).
    #[serde(default)]
    pub burst: Option<u32>,
}

/// `demo:` in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoFile {
    /// Project the demo works in.
    pub project: String,
    /// `kid` of that project's JWT key that `private_key_file` belongs to.
    pub kid: String,
    /// PEM private key matching one of the project's `jwt.keys` (dev only).
    pub private_key_file: PathBuf,
}
