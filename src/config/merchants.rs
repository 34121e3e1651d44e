//! A project's `merchants:` checked: the merchant ids its credentials may be bound to (a
//! purchase intent's `merchant` mandate, ACP's `allowance.merchant_id`) and the hosts of each.
//! The proxy sends a bound credential only to a host of its merchant, and a browser session
//! of a bound intent may ask only for those hosts.
//!
//! Host patterns are checked and matched as `browser_checkout.allowed_hosts` are
//! ([`super::host_pattern`], [`within`]): exact names, or `*.suffix` for one label
//! more.

use super::browser::within;
use super::file::MerchantFile;
use super::{host_pattern, invalid, ConfigError};

/// Longest merchant id (as a `merchant` mandate's value).
pub const MAX_ID_LEN: usize = 256;

/// One checked merchant.
#[derive(Debug, Clone, PartialEq)]
pub struct Merchant {
    /// The id a `merchant` mandate names (compared exactly).
    pub id: String,
    /// Patterns of its hosts: lower-case names, `*.suffix`, or canonical IPv6 addresses.
    pub hosts: Vec<String>,
}

impl Merchant {
    /// Whether `host` is within the merchant's hosts: a lower-case name or address (as the
    /// target guard gives it) that one of them matches, or a `*.` pattern (a browser
    /// session's) that is one of them.
    pub fn covers(&self, host: &str) -> bool {
        within(&self.hosts, host)
    }
}

/// Whether `id` may be a merchant id: 1 to [`MAX_ID_LEN`] printable ASCII characters, no
/// whitespace (the `merchant` mandate's rule).
pub fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks `merchants:` of the project at config key `project`: valid, distinct ids, each
/// with at least one host pattern.
pub fn check(project: &str, file: &[MerchantFile]) -> Result<Vec<Merchant>, ConfigError> {
    let mut merchants: Vec<Merchant> = Vec::with_capacity(file.len());
    for (i, m) in file.iter().enumerate() {
        let key = format!("{project}.merchants[{i}]");
        if !valid_id(&m.id) {
            return Err(invalid(
                format!("{key}.id"),
                "1 to 256 printable ASCII characters, no whitespace",
            ));
        }
        if merchants.iter().any(|seen| seen.id == m.id) {
            return Err(invalid(
                format!("{key}.id"),
                format!("duplicate merchant id `{}`", m.id),
            ));
        }
        if m.hosts.is_empty() {
            return Err(invalid(
                format!("{key}.hosts"),
                "must list at least one host",
            ));
        }
        let hosts = m
            .hosts
            .iter()
            .enumerate()
            .map(|(h, host)| {
                // A name with an empty label (`a..b`, a trailing dot) never equals a target's
                // host, which the guard gives without its trailing dot: refused, not kept.
                let empty_label = host.ends_with('.') || host.contains("..");
                host_pattern(host).filter(|_| !empty_label).ok_or_else(|| {
                    invalid(format!("{key}.hosts[{h}]"), "a host name or `*.suffix`")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        merchants.push(Merchant {
            id: m.id.clone(),
            hosts,
        });
    }
    Ok(merchants)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merchants of a project whose `merchants:` is `yaml`, or the error's text.
    fn merchants(yaml: &str) -> Result<Vec<Merchant>, String> {
        // A project needs a JWT key to load whole: the file shape is checked here directly.
        let text = format!("projects:\n  - id: p\n    jwt: {{keys: []}}\n    merchants: {yaml}\n");
        let file = super::super::parse(&text).map_err(|e| e.to_string())?;
        let p = file.projects.first().ok_or("no project")?;
        check("projects[0]", &p.merchants).map_err(|e| e.to_string())
    }

    #[test]
    fn merchants_are_checked() {
        let ok = merchants(
            "[{id: acme, hosts: [Shop.Acme.test, '*.pay.acme.test']}, {id: Globex/EU, hosts: ['[::1]', 127.0.0.1]}]",
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(ok[0].id, "acme");
        assert_eq!(ok[0].hosts, ["shop.acme.test", "*.pay.acme.test"]);
        assert_eq!(ok[1].hosts, ["::1", "127.0.0.1"]);
        assert!(ok[0].covers("shop.acme.test") && ok[0].covers("eu.pay.acme.test"));
        assert!(!ok[0].covers("pay.acme.test") && !ok[0].covers("a.b.pay.acme.test"));
        assert!(!ok[0].covers("evil.test") && !ok[0].covers("shop.acme.test.evil.test"));
        assert!(ok[0].covers("*.pay.acme.test") && !ok[0].covers("*.acme.test"));
        assert!(ok[1].covers("::1") && ok[1].covers("127.0.0.1"));
        assert_eq!(merchants("[]"), Ok(Vec::new()));

        let m = "projects[0].merchants";
        #[rustfmt::skip]
        let bad = [
            ("[{id: acme, hosts: ['a b']}]", format!("{m}[0].hosts[0]: a host name or `*.suffix`")),
            ("[{id: acme, hosts: [a.test, 'x/y']}]", format!("{m}[0].hosts[1]: a host name")),
            ("[{id: acme, hosts: [shop.acme.test.]}]", format!("{m}[0].hosts[0]: a host name")),
            ("[{id: acme, hosts: ['a..test']}]", format!("{m}[0].hosts[0]: a host name")),
            ("[{id: acme, hosts: []}]", format!("{m}[0].hosts: must list at least one host")),
            ("[{id: acme, hosts: [a.test]}, {id: acme, hosts: [b.test]}]",
                format!("{m}[1].id: duplicate merchant id `acme`")),
            ("[{id: 'ac me', hosts: [a.test]}]", format!("{m}[0].id: 1 to 256")),
            ("[{id: '', hosts: [a.test]}]", format!("{m}[0].id: 1 to 256")),
            ("[{id: acme}]", "hosts".to_string()),
            ("[{id: acme, hosts: [a.test], mcc: '5411'}]", "unknown field".to_string()),
        ];
        for (yaml, want) in bad {
            let Err(e) = merchants(yaml) else {
                unreachable!("{yaml}")
            };
            assert!(e.contains(&want), "{yaml}: {e}");
        }
        assert!(valid_id(&"m".repeat(MAX_ID_LEN)) && !valid_id(&"m".repeat(MAX_ID_LEN + 1)));
    }
}
