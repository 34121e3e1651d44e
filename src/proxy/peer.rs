//! The target as pingora connects to it: the checked address, TLS with SNI and
//! verification against the host name (and the project's extra CA roots), timeouts.

use super::target::Target;
use crate::config::ProjectConfig;
use pingora::prelude::HttpPeer;
use pingora::tls::x509::X509;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Extra CA roots per project, loaded once.
pub type CaRoots = HashMap<String, Arc<Box<[X509]>>>;

/// Loads every project's `proxy.ca_file`.
pub fn load_ca_roots(
    projects: &std::collections::BTreeMap<String, Arc<ProjectConfig>>,
) -> Result<CaRoots, String> {
    let mut roots = HashMap::new();
    for (id, p) in projects {
        if let Some(path) = &p.proxy.ca_file {
            let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let certs =
                X509::stack_from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("{}: no certificates", path.display()));
            }
            roots.insert(id.clone(), Arc::new(certs.into_boxed_slice()));
        }
    }
    Ok(roots)
}

/// The upstream peer: the checked address, TLS with SNI and verification against the
/// host name (and the project's extra roots), the project's timeout.
///
/// pingora's pool, and paycred's ([`super::direct::pool`], keyed by the same reuse hash), reuse a
/// connection for any peer of the same address, SNI and verification flags, whatever roots
/// verified it. A project with its own `ca_file` gets its
/// own pool group, so its connections (verified with its roots) serve no other project, and
/// no connection verified with only the system roots serves it.
pub fn peer(target: &Target, project: &ProjectConfig, ca: Option<&Arc<Box<[X509]>>>) -> HttpPeer {
    let url = &target.url;
    let mut peer = HttpPeer::new(target.addr, url.https, url.host.clone());
    let timeout = project.proxy.timeout;
    let o = &mut peer.options;
    o.connection_timeout = Some(timeout.min(Duration::from_secs(10)));
    o.total_connection_timeout = Some(timeout.min(Duration::from_secs(15)));
    o.read_timeout = Some(timeout);
    o.write_timeout = Some(timeout);
    o.idle_timeout = Some(Duration::from_secs(60));
    o.verify_cert = true;
    o.verify_hostname = true;
    if let Some(ca) = ca {
        o.ca = Some(ca.clone());
        peer.group_key = pool_group(&project.id);
    }
    peer
}

/// The pool group of a project with its own CA roots: never 0, the group of every peer
/// verified with the system roots.
fn pool_group(project: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    project.hash(&mut h);
    h.finish().max(1)
}
