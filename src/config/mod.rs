//! Configuration: one YAML file (`conf/paycred.yaml` documents every key), read into the
//! serde structs of [`file`](mod@file) and checked by [`Config::from_file`] into a [`Config`] that
//! the rest of the service trusts. Unknown keys and bad values stop the start with a
//! message that names the key; `paycred check` runs the same code.
//!
//! YAML is read by serde-saphyr (pure Rust, maintained, line and column in its errors) through
//! serde_path_to_error, which names the key.
//!
//! May import: `audit::chain` (the hash setting), `error`. Everything else may import it.

pub mod browser;
pub mod cors;
pub mod file;
pub mod keys;
pub mod master_key;
pub mod merchants;
pub mod passkeys;
pub mod private;
pub mod rate_limits;
pub mod retention;
pub mod store;

use crate::audit::chain::HashFunction;
use file::{FileConfig, ProjectFile};
use jsonwebtoken::{Algorithm, DecodingKey};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// The checked `demo:` section (development only: the `/demo` page).
pub type DemoConfig = file::DemoFile;

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub tls: Option<TlsConfig>,
    pub data_dir: PathBuf,
    /// Which store holds the data (`store:`).
    pub store: store::StoreConfig,
    /// Where the master key comes from (`master_key`, or `master_key_file`).
    pub master_key: master_key::KeyProvider,
    /// The key a rotation moves away from (`previous_master_key`, or
    /// `previous_master_key_file`).
    pub previous_master_key: Option<master_key::KeyProvider>,
    pub cvc_retention: Duration,
    pub rest_max_body: usize,
    /// What new audit-log entries are hashed with (`audit_hash`; `auto` resolved).
    pub audit_hash: HashFunction,
    pub server: ServerSettings,
    pub projects: BTreeMap<String, Arc<ProjectConfig>>,
    /// Where `/metrics` is served.
    pub metrics: MetricsConfig,
    /// Development only: the `/demo` page and its token-minting session route.
    pub demo: Option<DemoConfig>,
    /// The browser checkout's forward proxy (`browser_proxy`); `None`: none.
    pub browser_proxy: Option<browser::BrowserProxy>,
    /// How long what ages out is kept (`retention`).
    pub retention: retention::Retention,
}

/// The checked `metrics:` section. Neither set: `/metrics` is served nowhere.
#[derive(Debug, Clone, Default)]
pub struct MetricsConfig {
    /// A separate listener that serves only `/metrics`.
    pub listen: Option<SocketAddr>,
    /// The bearer token `/metrics` asks for on the public listener.
    pub bearer_token: Option<crate::secret::BearerToken>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// The listener offers `h2` by ALPN (and `http/1.1`); otherwise HTTP/1.1 only.
    pub http2: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    pub threads: usize,
    pub grace_period: Duration,
    pub graceful_shutdown_timeout: Duration,
    pub upstream_keepalive_pool_size: usize,
    /// Longest wait for the next bytes of a request body, REST or proxied.
    pub body_read_timeout: Duration,
    /// Longest an HTTP/1.x request head may take to arrive whole, from its first bytes.
    pub head_read_timeout: Duration,
}

/// One project (tenant).
#[derive(Debug)]
pub struct ProjectConfig {
    pub id: String,
    pub jwt_keys: Vec<JwtKey>,
    pub jwt_max_lifetime: Duration,
    pub pan_enabled: bool,
    pub token_vault_key: bool,
    pub proxy: ProxyConfig,
    pub rate_limits: rate_limits::RateLimits,
    /// Origins whose pages may call the public role's routes (`cors.allowed_origins`).
    pub cors_allowed_origins: Vec<String>,
    /// Passkeys (`verification.passkeys`); `None`: off.
    pub passkeys: Option<passkeys::Passkeys>,
    /// Browser checkout (`browser_checkout`); `None`: no browser sessions.
    pub browser_checkout: Option<browser::BrowserCheckout>,
    /// The merchants credentials may be bound to (`merchants`), and their hosts.
    pub merchants: Vec<merchants::Merchant>,
}

impl ProjectConfig {
    /// The merchant `id` of the project's `merchants`, if it lists it.
    pub fn merchant(&self, id: &str) -> Option<&merchants::Merchant> {
        self.merchants.iter().find(|m| m.id == id)
    }
}

/// A project's JWT verification key. The algorithm comes from the key, never the token.
pub struct JwtKey {
    pub kid: String,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

impl std::fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish()
    }
}

/// A project's proxy rules.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub allowed_hosts: Vec<String>,
    pub allow_http: bool,
    pub allow_private_networks: bool,
    pub ca_file: Option<PathBuf>,
    pub timeout: Duration,
    pub response_guard: ResponseGuardMode,
    /// Also look for any Luhn-valid 13-19 digit run in answers.
    pub response_guard_any_card: bool,
}

/// What the proxy does with card numbers in a target's answer (`proxy.response_guard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseGuardMode {
    /// Relayed as the target sent it.
    Off,
    /// Each number replaced by its masked form, of the same length.
    #[default]
    Mask,
    /// The answer is not relayed: 502 `badGateway`.
    Refuse,
}

/// The YAML text as the file's shape (no checks yet). An error names the key
/// (`serde_path_to_error`) and its line and column (serde-saphyr, without the snippet: the
/// message stays one line).
fn parse(text: &str) -> Result<FileConfig, ConfigError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let mut path = None;
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    })
    .map_err(|e| ConfigError::Parse {
        // Where the key itself is the problem (a duplicate), the path ends in `?`.
        path: match path.as_deref().map(|p| p.trim_end_matches(['?', '.'])) {
            None | Some("") => "config".into(),
            Some(p) => p.into(),
        },
        message: e.to_string(),
    })
}

/// `file` with its `listen` replaced by `listen` (the value of [`LISTEN_ENV`]), if any.
fn with_listen(mut file: FileConfig, listen: Option<String>) -> Result<FileConfig, ConfigError> {
    if let Some(listen) = listen {
        listen
            .parse::<SocketAddr>()
            .map_err(|_| invalid(LISTEN_ENV, "must be an address like 0.0.0.0:8080"))?;
        file.listen = listen;
    }
    Ok(file)
}

/// Replaces the file's `listen` when set: the container image sets it to `0.0.0.0:8080`, so
/// one config file serves both a host (loopback) and a container (all interfaces).
pub const LISTEN_ENV: &str = "PAYCRED_LISTEN";

/// Replaces the file's `data_dir` when set (a path from the working directory, not from the
/// config file): the container image sets it to its data volume, so the config can be
/// mounted read-only.
pub const DATA_DIR_ENV: &str = "PAYCRED_DATA_DIR";

impl Config {
    /// Reads and checks a configuration file, with [`LISTEN_ENV`] and [`DATA_DIR_ENV`] applied.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut file = with_listen(parse(&text)?, std::env::var(LISTEN_ENV).ok())?;
        file.resolve_paths(path.parent().unwrap_or(Path::new(".")));
        if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|d| !d.is_empty()) {
            file.data_dir = PathBuf::from(dir);
        }
        Self::checked(file, std::env::var(store::DATABASE_URL_ENV).ok())
    }

    /// Parses and checks YAML text.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        Self::from_file(parse(text)?)
    }

    /// Checks the parsed file.
    pub fn from_file(file: FileConfig) -> Result<Config, ConfigError> {
        Self::checked(file, None)
    }

    /// Checks the parsed file, with `database_url` (from [`store::DATABASE_URL_ENV`]) in
    /// place of `store.url` when given.
    fn checked(file: FileConfig, database_url: Option<String>) -> Result<Config, ConfigError> {
        let store = store::check(file.store, database_url)?;
        let listen: SocketAddr = file
            .listen
            .parse()
            .map_err(|_| invalid("listen", "must be an address like 127.0.0.1:8080"))?;
        let tls = match file.tls {
            Some(t) => {
                require_file("tls.cert_file", &t.cert_file)?;
                require_file("tls.key_file", &t.key_file)?;
                Some(TlsConfig {
                    cert_file: t.cert_file,
                    key_file: t.key_file,
                    http2: t.http2,
                })
            }
            None => None,
        };
        let master_key = master_key::check(
            "master_key",
            file.master_key_file,
            file.master_key,
            &file.data_dir,
        )?
        .unwrap_or_else(|| master_key::KeyProvider::File(file::default_master_key_file()));
        let previous_master_key = master_key::check(
            "previous_master_key",
            file.previous_master_key_file,
            file.previous_master_key,
            &file.data_dir,
        )?;
        let cvc_retention = duration("cvc_retention", &file.cvc_retention)?;
        if cvc_retention.is_zero() || cvc_retention > Duration::from_secs(24 * 3600) {
            return Err(invalid("cvc_retention", "must be between 1s and 24h"));
        }
        if !(1024..=64 * 1024 * 1024).contains(&file.rest_max_body) {
            return Err(invalid(
                "rest_max_body",
                "must be between 1024 and 67108864 bytes",
            ));
        }
        let audit_hash = HashFunction::configured(&file.audit_hash)
            .ok_or_else(|| invalid("audit_hash", "must be auto, sha256 or blake3"))?;
        let s = &file.server;
        if !(1..=256).contains(&s.threads) {
            return Err(invalid("server.threads", "must be between 1 and 256"));
        }
        let server = ServerSettings {
            threads: s.threads,
            grace_period: duration("server.grace_period", &s.grace_period)?,
            graceful_shutdown_timeout: duration(
                "server.graceful_shutdown_timeout",
                &s.graceful_shutdown_timeout,
            )?,
            upstream_keepalive_pool_size: s.upstream_keepalive_pool_size,
            body_read_timeout: duration("server.body_read_timeout", &s.body_read_timeout)?,
            head_read_timeout: duration("server.head_read_timeout", &s.head_read_timeout)?,
        };
        if !(Duration::from_millis(100)..=Duration::from_secs(300))
            .contains(&server.head_read_timeout)
        {
            return Err(invalid(
                "server.head_read_timeout",
                "must be between 100ms and 5m",
            ));
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(300))
            .contains(&server.body_read_timeout)
        {
            return Err(invalid(
                "server.body_read_timeout",
                "must be between 100ms and 5m",
            ));
        }
        let mut projects = BTreeMap::new();
        for (i, p) in file.projects.into_iter().enumerate() {
            let key = format!("projects[{i}]");
            let project = project(&key, p)?;
            if projects.contains_key(&project.id) {
                return Err(invalid(format!("{key}.id"), "duplicate project id"));
            }
            projects.insert(project.id.clone(), Arc::new(project));
        }
        if let Some(demo) = &file.demo {
            // `/demo/session` mints private tokens for whoever asks.
            if !listen.ip().is_loopback() {
                return Err(invalid(
                    "demo",
                    "hands out tokens to anyone who asks: development only, with `listen` on a loopback address",
                ));
            }
            if !projects.contains_key(&demo.project) {
                return Err(invalid("demo.project", "is not one of the projects"));
            }
            require_file("demo.private_key_file", &demo.private_key_file)?;
        }
        let metrics = metrics(&file.metrics.unwrap_or_default(), listen)?;
        let taken: Vec<SocketAddr> = std::iter::once(listen).chain(metrics.listen).collect();
        let browser_proxy = browser::proxy(file.browser_proxy.as_ref(), &taken)?;
        let retention = retention::check(&file.retention)?;
        Ok(Config {
            metrics,
            browser_proxy,
            retention,
            demo: file.demo,
            listen,
            tls,
            data_dir: file.data_dir,
            store,
            master_key,
            previous_master_key,
            cvc_retention,
            rest_max_body: file.rest_max_body,
            audit_hash,
            server,
            projects,
        })
    }

    /// The project named in a path, if configured.
    pub fn project(&self, id: &str) -> Option<&Arc<ProjectConfig>> {
        self.projects.get(id)
    }
}

/// Shortest bearer token `/metrics` accepts.
const MIN_METRICS_TOKEN: usize = 32;

/// Checks `metrics:`: a listener other than the public one, a token file that holds a token.
fn metrics(file: &file::MetricsFile, public: SocketAddr) -> Result<MetricsConfig, ConfigError> {
    let listen = match &file.listen {
        None => None,
        Some(l) => {
            let addr: SocketAddr = l
                .parse()
                .map_err(|_| invalid("metrics.listen", "must be an address like 127.0.0.1:9464"))?;
            if same_socket(addr, public) {
                return Err(invalid("metrics.listen", "must differ from `listen`"));
            }
            Some(addr)
        }
    };
    let bearer_token = match &file.bearer_token_file {
        None => None,
        Some(path) => {
            let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                invalid(
                    "metrics.bearer_token_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?);
            let token = text.trim();
            if token.len() < MIN_METRICS_TOKEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(
                    "metrics.bearer_token_file",
                    format!("must hold one token of at least {MIN_METRICS_TOKEN} printable characters (e.g. `openssl rand -hex 32`)"),
                ));
            }
            Some(crate::secret::BearerToken::new(token))
        }
    };
    Ok(MetricsConfig {
        listen,
        bearer_token,
    })
}

/// Whether two listeners would take the same socket (the same port, on the same address or
/// on all of them).
fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// A host pattern of an allow-list as written (`api.example.com`, `*.psp.example`, an IPv6
/// address with or without brackets) in the form it is matched in: lower-case, an IPv6
/// address canonical. `None` when it is none of these.
fn host_pattern(host: &str) -> Option<String> {
    if let Ok(ip) = host
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<std::net::Ipv6Addr>()
    {
        return Some(ip.to_string());
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    ok.then(|| host.to_ascii_lowercase())
}

/// Ids of projects, entities and resources: what may appear in a path.
pub fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

fn project(key: &str, p: ProjectFile) -> Result<ProjectConfig, ConfigError> {
    if !valid_id(&p.id) {
        return Err(invalid(
            format!("{key}.id"),
            "1-128 characters of A-Z a-z 0-9 _ - .",
        ));
    }
    if p.jwt.keys.is_empty() {
        return Err(invalid(
            format!("{key}.jwt.keys"),
            "at least one key is required",
        ));
    }
    let mut jwt_keys = Vec::new();
    for (j, k) in p.jwt.keys.iter().enumerate() {
        let kkey = format!("{key}.jwt.keys[{j}]");
        if k.kid.is_empty() || jwt_keys.iter().any(|x: &JwtKey| x.kid == k.kid) {
            return Err(invalid(
                format!("{kkey}.kid"),
                "must be non-empty and unique",
            ));
        }
        let pem = std::fs::read(&k.public_key_file).map_err(|e| {
            invalid(
                format!("{kkey}.public_key_file"),
                format!("cannot read {}: {e}", k.public_key_file.display()),
            )
        })?;
        let (alg, decoding) = keys::public_key(&pem).map_err(|e| {
            invalid(
                format!("{kkey}.public_key_file"),
                format!("{}: {e}", k.public_key_file.display()),
            )
        })?;
        jwt_keys.push(JwtKey {
            kid: k.kid.clone(),
            alg,
            key: decoding,
        });
    }
    let jwt_max_lifetime = duration(&format!("{key}.jwt.max_lifetime"), &p.jwt.max_lifetime)?;
    let pan_enabled = match p.pan.as_str() {
        "enabled" => true,
        "disabled" => false,
        _ => {
            return Err(invalid(
                format!("{key}.pan"),
                "must be `enabled` or `disabled`",
            ))
        }
    };
    let mut allowed_hosts = Vec::new();
    for (h, host) in p.proxy.allowed_hosts.iter().enumerate() {
        allowed_hosts.push(host_pattern(host).ok_or_else(|| {
            invalid(
                format!("{key}.proxy.allowed_hosts[{h}]"),
                "a host name or `*.suffix`",
            )
        })?);
    }
    if let Some(ca) = &p.proxy.ca_file {
        require_file(&format!("{key}.proxy.ca_file"), ca)?;
    }
    let rate_limits = rate_limits::validate(key, p.rate_limits.as_ref())
        .map_err(|(k, message)| invalid(k, message))?;
    let cors_allowed_origins =
        cors::validate(key, &p.cors).map_err(|(k, message)| invalid(k, message))?;
    let passkeys = passkeys::validate(key, p.verification.passkeys.as_ref())
        .map_err(|(k, message)| invalid(k, message))?;
    let browser_checkout = browser::checkout(
        key,
        p.browser_checkout.as_ref(),
        p.proxy.allow_private_networks,
    )?;
    let merchants = merchants::check(key, &p.merchants)?;
    let timeout = duration(&format!("{key}.proxy.timeout"), &p.proxy.timeout)?;
    if timeout.is_zero() {
        return Err(invalid(format!("{key}.proxy.timeout"), "must be positive"));
    }
    Ok(ProjectConfig {
        id: p.id,
        jwt_keys,
        jwt_max_lifetime,
        pan_enabled,
        token_vault_key: p.token_vault_key,
        rate_limits,
        cors_allowed_origins,
        passkeys,
        browser_checkout,
        merchants,
        proxy: ProxyConfig {
            allowed_hosts,
            allow_http: p.proxy.allow_http,
            allow_private_networks: p.proxy.allow_private_networks,
            ca_file: p.proxy.ca_file,
            timeout,
            response_guard: p.proxy.response_guard,
            response_guard_any_card: p.proxy.response_guard_any_card,
        },
    })
}

/// Classifies a PEM public key and builds its decoding key; the algorithm is the key's.
fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text).map_err(|_| {
        invalid(
            key,
            format!("`{text}` is not a duration like 30s, 5m or 1h"),
        )
    })
}

fn require_file(key: &str, path: &Path) -> Result<(), ConfigError> {
    if path.is_file() {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("{} is not a readable file", path.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `yaml` is refused with (`ok` when it is not).
    pub(in crate::config) fn err(yaml: &str) -> String {
        match Config::from_yaml(yaml) {
            Ok(_) => String::from("ok"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn relative_paths_start_from_the_config_files_directory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let conf = dir.path().join("conf");
        std::fs::create_dir_all(conf.join("keys")).unwrap_or_else(|e| unreachable!("{e}"));
        // An Ed25519 public key (a public key: nothing secret in a test file).
        let public = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAS+dfUdbmyFT3/GCljB09GG+5I0reVaJ7DuKtkfmIe5s=\n-----END PUBLIC KEY-----\n";
        std::fs::write(conf.join("keys/k.pem"), public).unwrap_or_else(|e| unreachable!("{e}"));
        let file = conf.join("paycred.yaml");
        std::fs::write(
            &file,
            "data_dir: ./data\nmaster_key_file: /etc/paycred/master.key\nprojects:\n  - id: p1\n    jwt: {keys: [{kid: k1, public_key_file: keys/k.pem}]}\n",
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        // The working directory is not the config's: the key is found all the same.
        let c = Config::load(&file).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.data_dir, conf.join("./data"));
        assert_eq!(
            c.master_key,
            master_key::KeyProvider::File(PathBuf::from("/etc/paycred/master.key"))
        );
        // Read as text, the same file resolves from the working directory and fails.
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(Config::from_yaml(&text).is_err());
    }

    #[test]
    fn defaults_apply_to_an_empty_file() {
        let c = Config::from_yaml("{}").unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.cvc_retention, Duration::from_secs(3600));
        assert_eq!(c.rest_max_body, 1024 * 1024);
        assert_eq!(c.audit_hash, HashFunction::fastest());
        assert!(c.projects.is_empty());
    }

    #[test]
    fn the_listen_variable_replaces_the_files_listen() {
        let listen = |file: &str, var: Option<&str>| {
            let file = with_listen(parse(file)?, var.map(str::to_string))?;
            Config::from_file(file).map(|c| c.listen.to_string())
        };
        assert_eq!(listen("{}", None).ok().as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(
            listen("listen: 127.0.0.1:9000", Some("0.0.0.0:8080"))
                .ok()
                .as_deref(),
            Some("0.0.0.0:8080")
        );
        assert_eq!(
            listen("{}", Some("[::]:8443")).ok().as_deref(),
            Some("[::]:8443")
        );
        match listen("{}", Some("8080")) {
            Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, LISTEN_ENV),
            other => unreachable!("{other:?}"),
        }
    }

    #[test]
    fn audit_hash_pins_a_function_or_takes_the_faster() {
        let hash = |yaml: &str| {
            Config::from_yaml(yaml)
                .unwrap_or_else(|e| unreachable!("{e}"))
                .audit_hash
        };
        assert_eq!(hash("audit_hash: sha256"), HashFunction::Sha256);
        assert_eq!(hash("audit_hash: blake3"), HashFunction::Blake3);
        assert_eq!(hash("audit_hash: auto"), HashFunction::fastest());
        assert!(err("audit_hash: SHA256").contains("must be auto, sha256 or blake3"));
    }

    #[test]
    fn the_response_guard_masks_unless_told_otherwise() {
        let guard = |proxy: &str| {
            let yaml = format!("projects:\n  - id: p\n    jwt: {{keys: []}}\n    proxy: {proxy}");
            let file = parse(&yaml).unwrap_or_else(|e| unreachable!("{e}"));
            file.projects
                .first()
                .map(|p| (p.proxy.response_guard, p.proxy.response_guard_any_card))
        };
        assert_eq!(guard("{}"), Some((ResponseGuardMode::Mask, false)));
        assert_eq!(
            guard("{response_guard: off}"),
            Some((ResponseGuardMode::Off, false))
        );
        assert_eq!(
            guard("{response_guard: refuse, response_guard_any_card: true}"),
            Some((ResponseGuardMode::Refuse, true))
        );
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("listen: nope", "listen"),
            ("bogus: 1", "bogus"),
            ("server: {threads: 0}", "server.threads"),
            ("server: {colour: red}", "colour"),
            ("cvc_retention: forever", "cvc_retention"),
            ("audit_hash: md5", "audit_hash"),
            ("data_dir: /d\nmaster_key_file: /d/k", "master_key_file"),
            (
                "data_dir: /d\nmaster_key_file: /k\nprevious_master_key_file: /d/old",
                "previous_master_key_file",
            ),
            ("projects: [{id: 'a b', jwt: {keys: []}}]", "projects[0].id"),
            (
                "projects: [{id: p, jwt: {keys: []}}]",
                "projects[0].jwt.keys",
            ),
            (
                "projects: [{id: p, jwt: {keys: [{kid: k, public_key_file: /nonexistent}]}}]",
                "projects[0].jwt.keys[0].public_key_file",
            ),
            ("projects: [{id: p, jwt: {keys: [], extra: 1}}]", "extra"),
            ("server:\n  threads: many", "server.threads: "),
            ("\"unclosed", "config: "),
            ("listen: a\nlisten: b", "listen"),
            ("projects:\n  - id: p\n    jwt: {keys: []}\n    proxy: {timeout: [1]}", "projects[0].proxy.timeout"),
            ("projects:\n  - id: p\n    jwt: {keys: []}\n    proxy: {response_guard: maybe}", "projects[0].proxy.response_guard"),
            (
                "projects: [{id: p, jwt: {keys: []}, cors: {allowed_origin: []}}]",
                "allowed_origin",
            ),
            (
                "listen: 0.0.0.0:8080\ndemo: {project: p, kid: k, private_key_file: /k.pem}",
                "demo: hands out tokens to anyone who asks: development only, with `listen` on a loopback address",
            ),
        ];
        for (yaml, key) in cases {
            let e = err(yaml);
            assert!(
                e.contains(key),
                "{yaml:?} gave {e:?}, expected it to name {key}"
            );
        }
        // The YAML's own errors say where, in one line.
        assert_eq!(
            err("server:\n  threads: many"),
            "server.threads: invalid u64 at line 2, column 12"
        );
        assert!(err("server:\n  threads: 1\n  threads: 2").starts_with("server: duplicate"));
    }

    #[test]
    fn ids() {
        assert!(valid_id("proj_123"));
        assert!(!valid_id(""));
        assert!(!valid_id("a/b"));
        assert!(!valid_id(&"x".repeat(129)));
    }

    #[test]
    fn the_tls_listener_offers_http2_unless_told_otherwise() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        for f in [&cert, &key] {
            std::fs::write(f, "").unwrap_or_else(|e| unreachable!("{e}"));
        }
        let http2 = |extra: &str| {
            let yaml = format!(
                "tls: {{cert_file: {}, key_file: {}{extra}}}",
                cert.display(),
                key.display()
            );
            Config::from_yaml(&yaml)
                .map(|c| c.tls.map(|t| t.http2))
                .map_err(|e| e.to_string())
        };
        assert_eq!(http2(""), Ok(Some(true)));
        assert_eq!(http2(", http2: false"), Ok(Some(false)));
        assert_eq!(http2(", http2: true"), Ok(Some(true)));
        assert!(http2(", http2: maybe").is_err());
    }
}
