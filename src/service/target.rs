//! The target guard: `Svc-Target-URL` → a checked [`Target`] the connection goes to.
//!
//! 1. An absolute `https` URL (`http` only where the project sets `allow_http`), without
//!    userinfo; an IP-literal host must be written in canonical form (no decimal, octal or
//!    hex tricks such as `2130706433` or `0x7f.1`).
//! 2. The host is in the project's `allowed_hosts` (exact, or `*.suffix` for subdomains).
//! 3. The host is resolved asynchronously (answers are kept for [`RESOLVED_FOR`], so a busy
//!    target does not cost a DNS lookup per request) and **every** address must be public,
//!    checked on every request, unless the
//!    project sets `allow_private_networks`: loopback, private, link-local (cloud metadata),
//!    CGNAT, unique-local, multicast, documentation and reserved ranges are refused, also
//!    when embedded in IPv4-mapped, 6to4 or NAT64 IPv6 addresses.
//! 4. The connection goes to the address that was checked: there is no second lookup, so a
//!    DNS answer that changes in between (rebinding) cannot redirect it.
//!
//! A credential bound to a merchant goes further only to that merchant's hosts
//! ([`merchant_refusal`]: the proxy's targets, a browser session's hosts).

use crate::config::{ProjectConfig, ProxyConfig};
use crate::error::ApiError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Longest wait for DNS.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a DNS answer is used. The system resolver does not tell the record's TTL; a few
/// seconds keeps lookups off the request path without following a moved target late.
pub const RESOLVED_FOR: Duration = Duration::from_secs(10);

/// Recent DNS answers by (host, port): the addresses and when they were looked up.
type Resolved = (std::sync::Arc<[SocketAddr]>, std::time::Instant);
static RESOLVED: once_cell::sync::Lazy<quick_cache::sync::Cache<(String, u16), Resolved>> =
    once_cell::sync::Lazy::new(|| quick_cache::sync::Cache::new(1024));

/// The addresses of a host name: a recent answer, or a lookup.
async fn lookup(host: &str, port: u16) -> Result<std::sync::Arc<[SocketAddr]>, ApiError> {
    let key = (host.to_string(), port);
    if let Some((addrs, at)) = RESOLVED.get(&key) {
        if at.elapsed() < RESOLVED_FOR {
            return Ok(addrs);
        }
    }
    let lookup = tokio::net::lookup_host((host, port));
    let addrs: std::sync::Arc<[SocketAddr]> =
        match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(_)) | Err(_) => {
                return Err(ApiError::new(
                    crate::error::ErrorKind::BadGateway,
                    "The target host could not be resolved.",
                ))
            }
        };
    if !addrs.is_empty() {
        RESOLVED.insert(key, (addrs.clone(), std::time::Instant::now()));
    }
    Ok(addrs)
}

/// A parsed, allow-listed target URL (not yet resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    pub https: bool,
    /// Lower-case host name or canonical IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// Path and query for the upstream request line.
    pub path_and_query: String,
}

/// A target whose address passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: TargetUrl,
    pub addr: SocketAddr,
}

/// Whether a credential bound to `merchant` (a `merchant` mandate) may go to `host` (a
/// target's, or a browser session's host or `*.` pattern): `None` when the project's
/// `merchants` lists the merchant and `host` is one of its hosts; otherwise why not, naming
/// the merchant and the host (never a card value).
pub fn merchant_refusal(project: &ProjectConfig, merchant: &str, host: &str) -> Option<String> {
    match project.merchant(merchant) {
        Some(m) if m.covers(host) => None,
        Some(_) => Some(format!(
            "The credential is bound to merchant {merchant}, and {host} is not one of its \
             hosts in this project's merchants."
        )),
        None => Some(format!(
            "The credential is bound to merchant {merchant}, which this project's merchants \
             do not list: it cannot go to {host}."
        )),
    }
}

fn refuse(message: impl Into<String>) -> ApiError {
    ApiError::forbidden(message)
}

/// Parses and checks the URL against the project's rules (steps 1 and 2).
pub fn parse(raw: &str, rules: &ProxyConfig) -> Result<TargetUrl, ApiError> {
    let raw = raw.trim();
    let (scheme, rest) = raw
        .split_once("://")
        .ok_or_else(|| ApiError::invalid_field("Svc-Target-URL", "must be an absolute URL"))?;
    let https = match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" if rules.allow_http => false,
        "http" => return Err(refuse("Target URLs must use https.")),
        _ => return Err(refuse("Target URLs must use https.")),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(refuse("Target URLs must not carry credentials."));
    }
    let (host_raw, port) = split_host_port(authority)
        .ok_or_else(|| ApiError::invalid_field("Svc-Target-URL", "has no valid host"))?;
    let port = port.unwrap_or(if https { 443 } else { 80 });
    let host = canonical_host(host_raw)?;
    if !host_allowed(&host, &rules.allowed_hosts) {
        return Err(refuse(
            "The target host is not in this project's allowed_hosts.",
        ));
    }
    let tail = tail.split('#').next().unwrap_or("");
    let path_and_query = match tail {
        "" => "/".to_string(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_string(),
    };
    if path_and_query.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(ApiError::invalid_field(
            "Svc-Target-URL",
            "contains spaces or control characters",
        ));
    }
    Ok(TargetUrl {
        https,
        host,
        port,
        path_and_query,
    })
}

fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        return Some((host, port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h, Some(p.parse().ok().filter(|p| *p != 0)?))),
        None => Some((authority, None)),
    }
    .filter(|(h, _)| !h.is_empty())
}

/// A host name (lower-cased) or an IP literal in canonical form; anything that a resolver
/// might read as a number in another base is refused.
fn canonical_host(host: &str) -> Result<String, ApiError> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    // Every IPv6 literal has a colon, and nothing else may.
    if host.contains(':') {
        return match host.parse::<Ipv6Addr>() {
            Ok(ip) => Ok(ip.to_string()),
            Err(_) => Err(ApiError::invalid_field(
                "Svc-Target-URL",
                "has no valid host",
            )),
        };
    }
    let all_numeric_labels = host
        .split('.')
        .all(|l| !l.is_empty() && (l.bytes().all(|b| b.is_ascii_digit()) || l.starts_with("0x")));
    if all_numeric_labels {
        return match host.parse::<Ipv4Addr>() {
            // std reads only the canonical form: four decimal parts without leading zeros.
            Ok(_) => Ok(host),
            _ => Err(refuse("The target host is not a canonical address.")),
        };
    }
    let ok = host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !ok {
        return Err(ApiError::invalid_field(
            "Svc-Target-URL",
            "has no valid host",
        ));
    }
    Ok(host)
}

/// `api.example.com` matches itself; `*.psp.example` matches any subdomain of psp.example.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| match a.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host.ends_with(suffix)
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        }
        None => a == host,
    })
}

/// Whether an address is anything but a public unicast address.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18/15
        || a >= 240 // reserved
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] == 0) // Teredo
        || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0) // discard 100::/64
        || (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0 && s[4] == 0 && s[5] == 0) // IPv4-compatible ::a.b.c.d
        || (s[0] == 0x0064 && s[1] == 0xff9b && forbidden_v4(embedded(s[6], s[7]))) // NAT64
        || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64 64:ff9b:1::/48
        || (s[0] == 0x2002 && forbidden_v4(embedded(s[1], s[2]))) // 6to4
}

/// Resolves the host and checks every address (steps 3 and 4).
pub async fn resolve(url: TargetUrl, rules: &ProxyConfig) -> Result<Target, ApiError> {
    let addrs: std::sync::Arc<[SocketAddr]> = match url.host.parse::<IpAddr>() {
        Ok(ip) => std::sync::Arc::new([SocketAddr::new(ip, url.port)]),
        Err(_) => lookup(&url.host, url.port).await?,
    };
    let Some(first) = addrs.first().copied() else {
        return Err(ApiError::new(
            crate::error::ErrorKind::BadGateway,
            "The target host has no address.",
        ));
    };
    if !rules.allow_private_networks && addrs.iter().any(|a| is_forbidden(a.ip())) {
        return Err(refuse(
            "The target resolves to a private or reserved address.",
        ));
    }
    Ok(Target { url, addr: first })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_host_name_is_looked_up_once_per_interval() {
        let first = lookup("localhost", 8443).await.unwrap();
        assert!(!first.is_empty());
        let again = lookup("localhost", 8443).await.unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "the second answer is the kept one"
        );
    }

    fn rules(hosts: &[&str]) -> ProxyConfig {
        ProxyConfig {
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allow_http: false,
            allow_private_networks: false,
            ca_file: None,
            timeout: Duration::from_secs(30),
            response_guard: Default::default(),
            response_guard_any_card: false,
        }
    }

    #[test]
    fn urls_are_parsed_and_allow_listed() {
        let r = rules(&[
            "api.example.com",
            "*.psp.example",
            "8.8.8.8",
            "2606:4700::1111",
        ]);
        let t = parse("https://API.example.com/v1/charges?x=1#frag", &r)
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            (t.host.as_str(), t.port, t.path_and_query.as_str()),
            ("api.example.com", 443, "/v1/charges?x=1")
        );
        assert_eq!(
            parse("https://eu.psp.example:8443", &r).map(|t| (t.port, t.path_and_query)),
            Ok((8443, "/".into()))
        );
        assert!(parse("https://[2606:4700::1111]/x", &r).is_ok());
        assert!(parse("https://8.8.8.8/", &r).is_ok());
        for (bad, status) in [
            ("http://api.example.com/", 403),
            ("ftp://api.example.com/", 403),
            ("https://psp.example/", 403),
            ("https://evil.com/", 403),
            ("https://api.example.com.evil.com/", 403),
            ("https://user:pw@api.example.com/", 403),
            ("https://134744072/", 403),
            ("https://0x8.0x8.0x8.0x8/", 403),
            ("https://010.010.010.010/", 403),
            ("api.example.com/x", 400),
            ("https:///x", 400),
            ("https://api.example.com:0/", 400),
            ("https://api.example.com/a b", 400),
        ] {
            assert_eq!(parse(bad, &r).map_err(|e| e.status()), Err(status), "{bad}");
        }
    }

    #[test]
    fn forbidden_ranges() {
        let bad = [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "198.18.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2001:db8::1",
            "ff02::1",
            "::127.0.0.1",
        ];
        for ip in bad {
            let ip: IpAddr = ip.parse().unwrap_or_else(|_| unreachable!("{ip}"));
            assert!(is_forbidden(ip), "{ip} should be refused");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::",
        ] {
            let ip: IpAddr = ip.parse().unwrap_or_else(|_| unreachable!("{ip}"));
            assert!(!is_forbidden(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let allowed = vec!["*.psp.example".to_string()];
        assert!(host_allowed("a.psp.example", &allowed));
        assert!(host_allowed("a.b.psp.example", &allowed));
        assert!(!host_allowed("psp.example", &allowed));
        assert!(!host_allowed("apsp.example", &allowed));
    }
}
