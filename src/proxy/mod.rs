//! The proxy route: `ANY /projects/:projectId/proxy` forwards the caller's request to
//! `Svc-Target-URL` with credential templates in the JSON body substituted.
//!
//! - [`target`]: the URL and address checks (403 `forbidden`).
//! - [`credentials`]: the values a template names.
//! - [`substitute`]: the streaming substitution over body chunks.
//! - [`exchange`]: a prepared body sent to the target in one write, outside pingora's proxy.
//!
//! Bodies up to [`PREFLIGHT_LIMIT`] with a `Content-Length` are read and substituted
//! whole before the target is contacted, so a bad template answers 400 and the target sees
//! nothing. Larger or chunked bodies stream; a template error mid-stream aborts the
//! upstream request before its end, so the target never receives a complete request.

pub mod credentials;
pub mod exchange;
pub mod pool;
pub mod substitute;
pub mod target;

use crate::auth::Principal;
use crate::config::ProjectConfig;
use bytes::Bytes;
use pingora::prelude::HttpPeer;
use pingora::tls::x509::X509;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use substitute::Substitution;
use target::Target;

/// Bodies up to this size (with a Content-Length) are checked before the target is contacted.
pub const PREFLIGHT_LIMIT: usize = 64 * 1024;

/// The caller's credentials for paycred when `Authorization` is meant for the target.
pub const SVC_AUTHORIZATION: http::HeaderName = http::HeaderName::from_static("svc-authorization");
/// Where the request goes.
pub const SVC_TARGET_URL: http::HeaderName = http::HeaderName::from_static("svc-target-url");

/// Hop-by-hop request headers, never forwarded (besides paycred's own `Svc-*`).
const HOP_BY_HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "http2-settings",
];

/// A request header the target never sees: `Svc-*` (paycred's own) and hop-by-hop ones.
/// Header names are lowercase.
pub fn is_dropped_header(name: &http::HeaderName) -> bool {
    let name = name.as_str();
    name.starts_with("svc-") || HOP_BY_HOP_HEADERS.contains(&name)
}

/// Per-request proxy state.
pub struct ProxyCtx {
    pub principal: Arc<Principal>,
    pub project: Arc<ProjectConfig>,
    pub target: Target,
    /// `Authorization` carried paycred's token (not the target's): drop it.
    pub drop_authorization: bool,
    /// The body is JSON: templates are substituted.
    pub substitute: bool,
    /// The whole substituted body, when it was read in `request_filter` and pingora sends
    /// it.
    pub prepared: Option<Bytes>,
    /// The whole request for the target (head and substituted body), when it was read in
    /// `request_filter` and [`exchange`] sends it.
    pub request: Option<exchange::WireRequest>,
    pub substitution: Substitution,
    /// The body length changes: `Content-Length` must go (or be replaced).
    pub body_changed: bool,
}

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
/// pingora's pool, and paycred's ([`pool`], keyed by the same reuse hash), reuse a
/// connection for any peer of the same address, SNI and verification flags, whatever roots
/// verified it. A project with its own `ca_file` gets its
/// own pool group, so its connections (verified with its roots) serve no other project, and
/// no connection verified with only the system roots serves it.
pub fn peer(ctx: &ProxyCtx, ca: Option<&Arc<Box<[X509]>>>) -> HttpPeer {
    let url = &ctx.target.url;
    let mut peer = HttpPeer::new(ctx.target.addr, url.https, url.host.clone());
    let timeout = ctx.project.proxy.timeout;
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
        peer.group_key = pool_group(&ctx.project.id);
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

/// The request target (path and query) sent to the target: checked to be a valid URI path,
/// so it holds no space, CR or LF.
pub fn target_uri(target: &Target) -> Result<http::Uri, crate::error::ApiError> {
    target
        .url
        .path_and_query
        .parse::<http::Uri>()
        .map_err(|_| crate::error::ApiError::invalid_field("Svc-Target-URL", "has an invalid path"))
}

/// `Host` header value for the target.
pub fn host_header(target: &Target) -> String {
    let url = &target.url;
    let mut host = String::with_capacity(url.host.len() + 8);
    if url.host.contains(':') {
        host.extend(["[", url.host.as_str(), "]"]);
    } else {
        host.push_str(&url.host);
    }
    let default_port = if url.https { 443 } else { 80 };
    if url.port != default_port {
        // Writing to a String cannot fail.
        let _ = write!(host, ":{}", url.port);
    }
    host
}
