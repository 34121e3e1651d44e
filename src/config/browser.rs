//! Browser checkout's settings checked: `browser_proxy` (the forward proxy's listener and its
//! interception CA) and each project's `browser_checkout` (the ceiling of its browser
//! sessions: hosts, longest session, blind tunnels, and a name-to-address map for tests).
//!
//! Host patterns are checked as `proxy.allowed_hosts` are ([`super::host_pattern`]), but a
//! wildcard matches one label only ([`host_matches`]): `*.shop.example` is
//! `pay.shop.example`, not `shop.example` nor `a.pay.shop.example`, as a certificate's
//! wildcard.

use super::file::{BrowserCheckoutFile, BrowserProxyFile};
use super::{duration, host_pattern, invalid, require_file, same_socket, ConfigError};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Longest `max_ttl` a project may set.
pub const MAX_TTL_CEILING: Duration = Duration::from_secs(24 * 3600);

/// The checked `browser_proxy:`.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserProxy {
    /// Where the forward proxy listens.
    pub listen: SocketAddr,
    /// The interception CA's PEM certificate.
    pub ca_cert_file: PathBuf,
    /// Its PEM private key.
    pub ca_key_file: PathBuf,
}

/// A project's checked `browser_checkout:`.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserCheckout {
    /// Patterns of the hosts a session may ask for: lower-case names, `*.suffix`, or
    /// canonical IPv6 addresses.
    pub allowed_hosts: Vec<String>,
    /// Longest session.
    pub max_ttl: Duration,
    /// Patterns of the hosts the proxy may tunnel blindly.
    pub tunnel_hosts: Vec<String>,
    /// (name, port) → the address connected to instead of the name's.
    pub resolve: BTreeMap<(String, u16), SocketAddr>,
}

impl BrowserCheckout {
    /// Whether a session may ask for `host` (lower-case).
    pub fn allows(&self, host: &str) -> bool {
        self.allowed_hosts.iter().any(|p| host_matches(p, host))
    }

    /// Whether the proxy may tunnel to `host` (lower-case) without looking inside.
    pub fn tunnels(&self, host: &str) -> bool {
        self.tunnel_hosts.iter().any(|p| host_matches(p, host))
    }

    /// The address `resolve` gives `host`:`port`, if any.
    pub fn resolved(&self, host: &str, port: u16) -> Option<SocketAddr> {
        self.resolve.get(&(host.to_string(), port)).copied()
    }
}

/// Whether `host` is a host name: dot-separated labels of 1 to 63 letters, digits, `-` or
/// `_`, 253 characters at most (no wildcard, no trailing dot).
pub fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Whether `host` (lower-case) is `pattern`, or one label more than a `*.suffix` pattern.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|h| h.strip_suffix('.'))
            .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        None => pattern == host,
    }
}

/// Whether a host a browser session asks for (a lower-case name, or a `*.` pattern) is
/// within `patterns` ([`within`]; an address is not a name a session may ask for).
pub fn covers(patterns: &[String], host: &str) -> bool {
    (host.starts_with("*.") || is_host_name(host)) && within(patterns, host)
}

/// Whether `host` (a lower-case name or address, or a `*.` pattern) is within `patterns`: a
/// name or address one of them matches, or a pattern that is one of them.
pub fn within(patterns: &[String], host: &str) -> bool {
    match host.strip_prefix("*.") {
        Some(_) => patterns.iter().any(|p| p == host),
        None => patterns.iter().any(|p| host_matches(p, host)),
    }
}

/// Checks `browser_proxy:`: a listener apart from `taken` (the other listeners), CA files
/// that exist (`paycred check` reads them and checks the CA: `crate::browser::ca`).
pub fn proxy(
    file: Option<&BrowserProxyFile>,
    taken: &[SocketAddr],
) -> Result<Option<BrowserProxy>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let listen: SocketAddr = file.listen.parse().map_err(|_| {
        invalid(
            "browser_proxy.listen",
            "must be an address like 127.0.0.1:8443",
        )
    })?;
    if listen.port() == 0 {
        // Sessions hand the browser this address as their proxy's.
        return Err(invalid(
            "browser_proxy.listen",
            "must name its port: browser sessions give it to the browser",
        ));
    }
    if taken.iter().any(|t| same_socket(*t, listen)) {
        return Err(invalid(
            "browser_proxy.listen",
            "must differ from `listen` and `metrics.listen`",
        ));
    }
    require_file("browser_proxy.ca.cert_file", &file.ca.cert_file)?;
    require_file("browser_proxy.ca.key_file", &file.ca.key_file)?;
    Ok(Some(BrowserProxy {
        listen,
        ca_cert_file: file.ca.cert_file.clone(),
        ca_key_file: file.ca.key_file.clone(),
    }))
}

/// Checks `browser_checkout:` of the project at config key `project`, whose
/// `proxy.allow_private_networks` is `private_networks`.
pub fn checkout(
    project: &str,
    file: Option<&BrowserCheckoutFile>,
    private_networks: bool,
) -> Result<Option<BrowserCheckout>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let key = format!("{project}.browser_checkout");
    let patterns = |name: &str, hosts: &[String]| -> Result<Vec<String>, ConfigError> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                host_pattern(host).ok_or_else(|| {
                    invalid(format!("{key}.{name}[{i}]"), "a host name or `*.suffix`")
                })
            })
            .collect()
    };
    let allowed_hosts = patterns("allowed_hosts", &file.allowed_hosts)?;
    if allowed_hosts.is_empty() {
        return Err(invalid(
            format!("{key}.allowed_hosts"),
            "must list at least one host",
        ));
    }
    let tunnel_hosts = patterns("tunnel_hosts", &file.tunnel_hosts)?;
    let max_ttl = duration(&format!("{key}.max_ttl"), &file.max_ttl)?;
    if max_ttl < Duration::from_secs(1) || max_ttl > MAX_TTL_CEILING {
        return Err(invalid(
            format!("{key}.max_ttl"),
            "must be between 1s and 24h",
        ));
    }
    if !file.resolve.is_empty() && !private_networks {
        return Err(invalid(
            format!("{key}.resolve"),
            format!(
                "is honoured only where `{project}.proxy.allow_private_networks` is true \
                 (tests and local development)"
            ),
        ));
    }
    let mut resolve = BTreeMap::new();
    for (name, address) in &file.resolve {
        let at = format!("{key}.resolve[{name:?}]");
        let (host, port) = name
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok().filter(|p| *p != 0)?)))
            .filter(|(h, _)| !h.starts_with("*.") && host_pattern(h).is_some())
            .ok_or_else(|| {
                invalid(
                    &at,
                    "the key must be a host name and port like shop.test:443",
                )
            })?;
        let address: SocketAddr = address
            .parse()
            .map_err(|_| invalid(&at, "must be an address and port like 127.0.0.1:8443"))?;
        resolve.insert((host.to_ascii_lowercase(), port), address);
    }
    Ok(Some(BrowserCheckout {
        allowed_hosts,
        max_ttl,
        tunnel_hosts,
        resolve,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_wildcard_matches_one_label() {
        let cases = [
            ("shop.test", "shop.test", true),
            ("shop.test", "a.shop.test", false),
            ("*.shop.test", "pay.shop.test", true),
            ("*.shop.test", "shop.test", false),
            ("*.shop.test", "a.pay.shop.test", false),
            ("*.shop.test", "payshop.test", false),
            ("*.shop.test", ".shop.test", false),
            ("::1", "::1", true),
        ];
        for (pattern, host, want) in cases {
            assert_eq!(host_matches(pattern, host), want, "{pattern} {host}");
        }
    }

    const PROJECT: &str = "projects:\n  - id: p\n    jwt: {keys: []}\n";

    fn project(browser: &str, proxy: &str) -> Result<Option<BrowserCheckout>, String> {
        // A project needs a JWT key to load whole: the file shape is checked here directly.
        let yaml = format!("{PROJECT}    proxy: {proxy}\n    browser_checkout: {browser}\n");
        let file = super::super::parse(&yaml).map_err(|e| e.to_string())?;
        let p = file.projects.first().ok_or("no project")?;
        checkout(
            "projects[0]",
            p.browser_checkout.as_ref(),
            p.proxy.allow_private_networks,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn browser_checkout_is_checked() {
        let ok = project(
            "{allowed_hosts: [Shop.Test, '*.pay.test'], tunnel_hosts: [cdn.test], resolve: {'shop.test:443': '127.0.0.1:9443', 'PAY.test:8443': '[::1]:9444'}}",
            "{allow_private_networks: true}",
        )
        .unwrap_or_else(|e| unreachable!("{e}"))
        .unwrap_or_else(|| unreachable!());
        assert_eq!(ok.allowed_hosts, ["shop.test", "*.pay.test"]);
        assert_eq!(ok.max_ttl, Duration::from_secs(15 * 60));
        assert!(ok.allows("shop.test") && ok.allows("api.pay.test") && !ok.allows("pay.test"));
        assert!(ok.tunnels("cdn.test") && !ok.tunnels("shop.test"));
        assert_eq!(
            ok.resolved("shop.test", 443),
            Some(SocketAddr::from(([127, 0, 0, 1], 9443)))
        );
        assert!(ok.resolved("pay.test", 8443).is_some());
        assert_eq!(ok.resolved("shop.test", 8443), None);
        assert_eq!(
            project("{allowed_hosts: [a.test], max_ttl: 24h}", "{}").map(|c| c.map(|c| c.max_ttl)),
            Ok(Some(MAX_TTL_CEILING))
        );
        let b = "projects[0].browser_checkout";
        for (browser, proxy, says) in [
            ("{allowed_hosts: []}", "{}", format!("{b}.allowed_hosts: must list")),
            ("{allowed_hosts: ['a b']}", "{}", format!("{b}.allowed_hosts[0]: a host name")),
            ("{allowed_hosts: [a.test], tunnel_hosts: ['x/y']}", "{}", format!("{b}.tunnel_hosts[0]: a host name")),
            ("{allowed_hosts: [a.test], max_ttl: 25h}", "{}", format!("{b}.max_ttl: must be between")),
            ("{allowed_hosts: [a.test], max_ttl: 0s}", "{}", format!("{b}.max_ttl: must be between")),
            ("{allowed_hosts: [a.test], max_ttl: soon}", "{}", format!("{b}.max_ttl: `soon`")),
            (
                "{allowed_hosts: [a.test], resolve: {'a.test:443': '127.0.0.1:1'}}",
                "{}",
                format!("{b}.resolve: is honoured only where `projects[0].proxy.allow_private_networks`"),
            ),
            (
                "{allowed_hosts: [a.test], resolve: {'a.test': '127.0.0.1:1'}}",
                "{allow_private_networks: true}",
                format!("{b}.resolve[\"a.test\"]: the key"),
            ),
            (
                "{allowed_hosts: [a.test], resolve: {'*.a.test:443': '127.0.0.1:1'}}",
                "{allow_private_networks: true}",
                format!("{b}.resolve[\"*.a.test:443\"]: the key"),
            ),
            (
                "{allowed_hosts: [a.test], resolve: {'a.test:443': 'localhost:1'}}",
                "{allow_private_networks: true}",
                format!("{b}.resolve[\"a.test:443\"]: must be an address"),
            ),
            ("{allowed_hosts: [a.test], colour: red}", "{}", "colour".to_string()),
            ("{tunnel_hosts: [a.test]}", "{}", "allowed_hosts".to_string()),
        ] {
            let e = project(browser, proxy).err().unwrap_or_default();
            assert!(e.contains(&says), "{browser}: {e:?} does not say {says:?}");
        }
        assert_eq!(project("null", "{}"), Ok(None));
    }

    #[test]
    fn browser_proxy_is_checked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca-key.pem"));
        for f in [&cert, &key] {
            std::fs::write(f, "").unwrap_or_else(|e| unreachable!("{e}"));
        }
        let load = |listen: &str, cert: &std::path::Path| {
            let yaml = format!(
                "listen: 127.0.0.1:8080\nmetrics: {{listen: 127.0.0.1:9464}}\nbrowser_proxy: {{listen: {listen}, ca: {{cert_file: {}, key_file: {}}}}}",
                cert.display(),
                key.display()
            );
            Config::from_yaml(&yaml)
                .map(|c| c.browser_proxy.map(|b| b.listen.to_string()))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            load("127.0.0.1:8443", &cert),
            Ok(Some("127.0.0.1:8443".into()))
        );
        for (listen, file, says) in [
            (
                "8443",
                cert.clone(),
                "browser_proxy.listen: must be an address",
            ),
            (
                "127.0.0.1:8080",
                cert.clone(),
                "browser_proxy.listen: must differ",
            ),
            (
                "127.0.0.1:0",
                cert.clone(),
                "browser_proxy.listen: must name its port",
            ),
            (
                "0.0.0.0:9464",
                cert.clone(),
                "browser_proxy.listen: must differ",
            ),
            (
                "127.0.0.1:8443",
                dir.path().join("none.pem"),
                "browser_proxy.ca.cert_file: ",
            ),
        ] {
            let e = load(listen, &file).err().unwrap_or_default();
            assert!(e.contains(says), "{listen}: {e}");
        }
        assert_eq!(
            Config::from_yaml("{}").map(|c| c.browser_proxy).ok(),
            Some(None)
        );
        assert!(Config::from_yaml("browser_proxy: {listen: 127.0.0.1:1}").is_err());
    }
}
