//! The TLS listener, on rustls: the certificate and key of `tls:`, ALPN, session tickets, and
//! each connection's handshake before the HTTP application takes it.
//!
//! [`listener`] accepts the TCP connections (a pingora service of paycred's own);
//! [`TlsAccept`] stands in front of the HTTP application, completes the handshake
//! ([`HANDSHAKE_TIMEOUT`] at most) and hands on the connection as a [`TlsStream`] (`stream`),
//! which pingora reads, writes and asks for its ALPN like its own TLS streams. rustls rather
//! than pingora's OpenSSL listener because an idle connection holds less (OpenSSL keeps
//! about 14 KiB of state a connection; rustls about 3 KiB on its unbuffered API, with
//! buffers freed while the connection idles) and a handshake costs less CPU.
//!
//! What is offered: TLS 1.3 and 1.2 with ECDHE and AEAD ciphers only (rustls has no other);
//! X25519, P-256 and P-384 key exchange; `h2` then `http/1.1` by ALPN (`http/1.1` only when
//! `tls.http2` is off; a caller that offers ALPN but none of these is refused, as RFC 7301
//! says). Resumption by stateless tickets, valid 12 hours, under a key made at start and
//! replaced every 6 hours (the previous one still opens tickets; a session resumes on the
//! same process only); no 0-RTT early data, which an attacker could replay. No client
//! certificates are asked for. A failed handshake sends its alert, is logged with the
//! caller's address and counted (`paycred_tls_handshake_failures_total`).

pub mod listener;
mod stream;

pub use stream::TlsStream;

use crate::ops::metrics::Metrics;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Longest a caller may take over its handshake: a round trip or two, so a connection that
/// opens and then says nothing is let go after this, not after the keep-alive timeout.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest the alert of a failed handshake may take to leave.
const ALERT_TIMEOUT: Duration = Duration::from_secs(1);

/// The rustls configuration of the listener: the certificate chain and key from PEM files.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    http2: bool,
) -> Result<Arc<ServerConfig>, String> {
    let certs = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls.cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls.cert_file {}: no certificate in it",
            cert_file.display()
        ));
    }
    // The key's own error text is not shown: only whether it could be read and parsed.
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|_| format!("tls.key_file {}: no PEM private key", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signer = provider.key_provider.load_private_key(key).map_err(|_| {
        format!(
            "tls.key_file {}: a key of a kind paycred cannot sign with (RSA of 2048 to 8192 \
             bits, ECDSA P-256 or P-384, or Ed25519)",
            key_file.display()
        )
    })?;
    let certified = rustls::sign::CertifiedKey::new(certs, signer);
    match certified.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(format!(
                "tls: the key in {} is not the one of the certificate in {}",
                key_file.display(),
                cert_file.display()
            ))
        }
        Err(e) => return Err(format!("tls.cert_file {}: {e}", cert_file.display())),
    }
    let resolver = rustls::sign::SingleCertAndKey::from(certified);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS: {e}"))?;
    Ok(Arc::new(config))
}

/// An HTTP application behind the listener's TLS handshake.
pub struct TlsAccept<A> {
    config: Arc<ServerConfig>,
    app: Arc<A>,
    metrics: Arc<Metrics>,
}

impl<A> TlsAccept<A> {
    pub fn new(config: Arc<ServerConfig>, app: A, metrics: Arc<Metrics>) -> Self {
        TlsAccept {
            config,
            app: Arc::new(app),
            metrics,
        }
    }

    /// The connection after its handshake; `None` when the handshake fails or times out,
    /// each noted in the log (with the caller's address) and counted in the metrics.
    async fn handshake(&self, stream: Stream) -> Option<TlsStream> {
        // The caller's address is written out only should the handshake fail.
        let socket = stream.get_socket_digest();
        let peer = || {
            socket
                .as_ref()
                .and_then(|d| d.peer_addr())
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        let accept = TlsStream::accept(self.config.clone(), stream, ALERT_TIMEOUT);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(error)) => {
                tracing::info!(peer = %peer(), %error, "TLS handshake failed");
                self.metrics.record_tls_handshake_failure("failed");
                None
            }
            Err(_) => {
                tracing::info!(peer = %peer(), "TLS handshake not finished in time");
                self.metrics.record_tls_handshake_failure("timeout");
                None
            }
        }
    }
}

#[async_trait]
impl<A> ServerApp for TlsAccept<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // Boxed: the handshake's state (over a KiB) is let go once it is done, rather than
        // sized into the future that waits while the connection idles.
        let mut stream: Stream = Box::new(Box::pin(self.handshake(stream)).await?);
        // The application may hand the connection back for its next request.
        while let Some(next) = self.app.process_new(stream, shutdown).await {
            stream = next;
        }
        None
    }

    async fn cleanup(&self) {
        self.app.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::nid::Nid;
    use openssl::pkey::PKey;
    use openssl::x509::{X509Builder, X509NameBuilder};

    /// A self-signed P-256 certificate for `localhost` and its key, as PEM files in `dir`.
    pub(super) fn pem_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", "localhost").unwrap();
        let name = name.build();
        let mut cert = X509Builder::new().unwrap();
        cert.set_version(2).unwrap();
        cert.set_subject_name(&name).unwrap();
        cert.set_issuer_name(&name).unwrap();
        cert.set_pubkey(&key).unwrap();
        let names = openssl::x509::extension::SubjectAlternativeName::new()
            .dns("localhost")
            .build(&cert.x509v3_context(None, None))
            .unwrap();
        cert.append_extension(names).unwrap();
        let now = openssl::asn1::Asn1Time::days_from_now(0).unwrap();
        let later = openssl::asn1::Asn1Time::days_from_now(2).unwrap();
        cert.set_not_before(&now).unwrap();
        cert.set_not_after(&later).unwrap();
        cert.sign(&key, openssl::hash::MessageDigest::sha256())
            .unwrap();
        let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert_file, cert.build().to_pem().unwrap()).unwrap();
        std::fs::write(&key_file, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
        (cert_file, key_file)
    }

    #[test]
    fn alpn_offers_h2_then_http1_or_http1_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pem_files(dir.path());
        let both = server_config(&cert, &key, true).unwrap();
        assert_eq!(both.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert!(both.ticketer.enabled());
        assert_eq!(both.max_early_data_size, 0);
        let h1 = server_config(&cert, &key, false).unwrap();
        assert_eq!(h1.alpn_protocols, [b"http/1.1".to_vec()]);
    }

    #[test]
    fn files_that_do_not_parse_are_named_and_the_key_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pem_files(dir.path());
        let missing = dir.path().join("missing.crt");
        let said = server_config(&missing, &key, true).unwrap_err();
        assert!(
            said.starts_with("tls.cert_file") && said.contains("missing.crt"),
            "{said}"
        );

        // A key where the certificate should be: no certificate in it.
        let said = server_config(&key, &key, true).unwrap_err();
        assert!(said.contains("no certificate"), "{said}");

        // A certificate where the key should be, and a key cut short.
        let said = server_config(&cert, &cert, true).unwrap_err();
        assert!(said.starts_with("tls.key_file"), "{said}");
        let pem = std::fs::read_to_string(&key).unwrap();
        let cut = dir.path().join("cut.key");
        std::fs::write(&cut, &pem[..pem.len() / 2]).unwrap();
        let said = server_config(&cert, &cut, true).unwrap_err();
        assert!(said.starts_with("tls.key_file"), "{said}");
        let body: String = pem.lines().nth(1).unwrap().chars().take(16).collect();
        assert!(!said.contains(&body), "{said}");
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = pem_files(dir.path());
        let other = tempfile::tempdir().unwrap();
        let (_, key) = pem_files(other.path());
        let said = server_config(&cert, &key, true).unwrap_err();
        assert!(said.contains("is not the one of the certificate"), "{said}");
        assert!(
            said.contains("tls.crt") && said.contains("tls.key"),
            "{said}"
        );
    }

    #[test]
    fn a_key_ring_cannot_sign_with_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pem_files(dir.path());
        let group = EcGroup::from_curve_name(Nid::SECP521R1).unwrap();
        let p521 = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
        std::fs::write(&key, p521.private_key_to_pem_pkcs8().unwrap()).unwrap();
        let said = server_config(&cert, &key, true).unwrap_err();
        assert!(
            said.starts_with("tls.key_file") && said.contains("cannot sign with"),
            "{said}"
        );
    }
}
