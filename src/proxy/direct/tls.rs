//! TLS to targets for the direct exchange: the handshake verifies the target as pingora's
//! connector does (the system's roots or the project's `proxy.ca_file`, the host name, SNI,
//! ALPN `http/1.1`), at TLS 1.2 or later, reads ahead (a read takes what the socket holds,
//! not a record's header and then its body), and resumes the last session the same peer gave,
//! so a new connection to a target it already spoke with skips the certificate exchange and
//! its verification.
//!
//! Sessions are kept per peer ([`PeerKey`]: address, SNI, verification and pool group), so a
//! session verified with one project's own roots never serves a peer verified otherwise. A
//! peer keeps its newest session, replaced as the target issues new ones (TLS 1.3 tickets
//! arrive after the handshake); the target decides how long a session lasts, and OpenSSL
//! does not offer one past its lifetime. At most [`MAX_PEERS`] peers are remembered.

use super::pool::PeerKey;
use pingora::prelude::HttpPeer;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::tls::client::handshake;
use pingora::protocols::Stream;
use pingora::tls::ext::{add_host, clear_error_stack, ssl_set_verify_cert_store};
use pingora::tls::ssl::{
    SslConnector, SslMethod, SslSession, SslSessionCacheMode, SslVerifyMode, SslVersion,
};
use pingora::tls::x509::store::X509StoreBuilder;
use pingora::upstreams::peer::Peer;
use pingora::{Error, ErrorType, OrErr, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Peers whose last session is kept; a new peer past this replaces one of them.
pub const MAX_PEERS: usize = 1024;

/// Sessions by peer, shared with the connector's new-session callback.
type Sessions = Arc<Mutex<HashMap<PeerKey, SslSession>>>;

/// Makes TLS connections to targets over connected TCP streams, resuming sessions.
pub struct TargetTls {
    connector: SslConnector,
    sessions: Sessions,
    /// Where a connection's peer key rides on its `Ssl`, for the new-session callback.
    key_index: openssl::ex_data::Index<pingora::tls::ssl::Ssl, PeerKey>,
}

impl TargetTls {
    /// A connector trusting the system's roots (a peer may bring its own, see [`Self::connect`]).
    pub fn new() -> Result<Self> {
        let key_index = pingora::tls::ssl::Ssl::new_ex_index()
            .or_err(ErrorType::InternalError, "TLS session index")?;
        let sessions: Sessions = Arc::default();
        let mut builder = SslConnector::builder(SslMethod::tls_client())
            .or_err(ErrorType::InternalError, "TLS connector")?;
        builder
            .set_min_proto_version(Some(SslVersion::TLS1_2))
            .or_err(ErrorType::InternalError, "TLS versions")?;
        builder
            .set_default_verify_paths()
            .or_err(ErrorType::InternalError, "TLS roots")?;
        // Sessions are kept here only (per peer, below): OpenSSL's own cache would also keep
        // every one, and sweep them all every 255 handshakes.
        builder.set_session_cache_mode(
            SslSessionCacheMode::CLIENT | SslSessionCacheMode::NO_INTERNAL_STORE,
        );
        // A read takes what the socket holds rather than a record header, then its body: the
        // target's answer in one or two reads, not two per record.
        builder.set_read_ahead(true);
        let keep = sessions.clone();
        builder.set_new_session_callback(move |ssl, session| {
            if let Some(key) = ssl.ex_data(key_index).copied() {
                let mut sessions = keep.lock().unwrap_or_else(PoisonError::into_inner);
                if sessions.len() >= MAX_PEERS && !sessions.contains_key(&key) {
                    let Some(old) = sessions.keys().next().copied() else {
                        return;
                    };
                    sessions.remove(&old);
                }
                sessions.insert(key, session);
            }
        });
        Ok(TargetTls {
            connector: builder.build(),
            sessions,
            key_index,
        })
    }

    /// The TLS handshake with `peer` over `tcp`, bounded by the peer's connection timeout,
    /// resuming the session `key` gave last if there is one.
    pub async fn connect(&self, peer: &HttpPeer, key: PeerKey, tcp: Stream) -> Result<Stream> {
        let mut conf = self
            .connector
            .configure()
            .or_err(ErrorType::InternalError, "TLS configuration")?;
        if let Some(roots) = peer.get_ca() {
            let mut store = X509StoreBuilder::new().or_err(ErrorType::InternalError, "CA")?;
            for ca in roots.iter() {
                store
                    .add_cert(ca.clone())
                    .or_err(ErrorType::InternalError, "CA")?;
            }
            ssl_set_verify_cert_store(&mut conf, &store.build())
                .or_err(ErrorType::InternalError, "CA store")?;
        }
        let sni = peer.sni();
        if sni.is_empty() {
            // An address without a name has nothing to verify: targets always have a host
            // name, so this is refused rather than sent unverified.
            return Error::e_explain(ErrorType::InvalidCert, "target without a host name");
        }
        add_host(conf.param_mut(), sni).or_err(ErrorType::InternalError, "TLS host name")?;
        // The name is verified through `add_host`; OpenSSL's own setting would replace it.
        conf.set_verify_hostname(false);
        conf.set_verify(SslVerifyMode::PEER);
        conf.set_alpn_protos(b"\x08http/1.1")
            .or_err(ErrorType::InternalError, "ALPN")?;
        conf.set_ex_data(self.key_index, key);
        if let Some(session) = self.session(key) {
            resume(&mut conf, &session)?;
        }
        // pingora's connector makes a plain TCP connection as its own stream type.
        let tcp = tcp
            .into_any()
            .downcast::<L4Stream>()
            .map_err(|_| Error::explain(ErrorType::InternalError, "not a TCP connection"))?;
        clear_error_stack();
        let shake = handshake(conf, sni, *tcp, None);
        let tls = match peer.connection_timeout() {
            Some(limit) => tokio::time::timeout(limit, shake)
                .await
                .map_err(|_| Error::explain(ErrorType::ConnectTimedout, "TLS handshake"))??,
            None => shake.await?,
        };
        Ok(Box::new(tls))
    }

    /// The newest session `key` gave, if any.
    fn session(&self, key: PeerKey) -> Option<SslSession> {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.get(&key).cloned()
    }
}

/// Offers `session` in the handshake `conf` is about to make.
#[allow(unsafe_code)]
fn resume(conf: &mut pingora::tls::ssl::SslRef, session: &SslSession) -> Result<()> {
    // SAFETY: OpenSSL requires a session to be resumed only by an `Ssl` of the context that
    // made it. Every session here was made by a connection of `TargetTls::connector` (its
    // new-session callback is the only place sessions are kept), and `conf` comes from that
    // same connector.
    unsafe { conf.set_session(session) }.or_err(ErrorType::InternalError, "TLS session")
}
