//! The interception CA: the certificate authority a browser trusts so that the browser proxy
//! can terminate its TLS for an allowed host, and the leaf certificates it mints.
//!
//! [`Ca`] is made by paycred ([`Ca::generate`], written by `paycred ca --out DIR`) or loaded
//! from `browser_proxy.ca` ([`Ca::load`]: a PEM certificate and its PEM private key, RSA,
//! ECDSA or Ed25519, made by any tool). A loaded CA is checked by minting a leaf and
//! verifying it against the CA as a TLS client would: a certificate that cannot issue
//! (not `CA:TRUE`, no `keyCertSign`, expired) or a key that is not the certificate's is
//! refused at start, naming the file. Errors never show key material.
//!
//! A made CA: ECDSA P-256, `CN=paycred browser checkout CA <id>`, `CA:TRUE` with a path
//! length of 0, usable to sign certificates only, valid for [`CA_DAYS`] days.
//!
//! A leaf ([`Ca::mint`]): for one host, its name as a DNS subject alternative name (an IP
//! address as an IP one), `serverAuth` only, a fresh ECDSA P-256 key, valid from
//! [`BACKDATE`] before it was minted (clocks of browser and proxy disagree a little) until
//! [`LEAF_LIFETIME`] after. Signed with SHA-256 (nothing with an Ed25519 CA).
//!
//! [`Interceptor`] keeps each host's leaf, with the rustls [`ServerConfig`] that presents it,
//! in a cache of [`CACHED_HOSTS`] hosts: a host's leaf is minted once and minted again when
//! it is [`RENEW_AFTER`] old, so a leaf in use always has hours left. The configuration
//! offers `h2` and `http/1.1` by ALPN, resumes by tickets under one key shared by every
//! host, and answers only a ClientHello whose SNI is the host (or that has none, as for an
//! IP address): the browser asked the proxy for that host, and no other name is vouched for
//! on its tunnel.
//!
//! OpenSSL rather than a certificate crate: it is linked already (pingora, the store's TLS)
//! and reads every key a CA may come with; `rcgen` would add its own PEM and X.509 parsers,
//! in versions other than the ones paycred links, to load a CA it did not make.

use crate::clock::Clock;
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, PKeyRef, Private};
use openssl::stack::Stack;
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
    SubjectKeyIdentifier,
};
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::{X509Builder, X509NameBuilder, X509StoreContext, X509};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

/// How long a made CA is valid.
pub const CA_DAYS: i64 = 365;

/// How long a leaf is valid after it was minted.
pub const LEAF_LIFETIME: Duration = Duration::hours(24);

/// How long before it was minted a leaf is valid from.
pub const BACKDATE: Duration = Duration::hours(1);

/// Age at which a cached leaf is minted again.
pub const RENEW_AFTER: Duration = Duration::hours(12);

/// Hosts whose leaves are kept.
pub const CACHED_HOSTS: usize = 1024;

/// The file names `paycred ca --out DIR` writes.
pub const CERT_FILE: &str = "ca.pem";
pub const KEY_FILE: &str = "ca-key.pem";

/// A CA that cannot be made, read, written or used. Messages name the file and never show
/// key material.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no PEM certificate in it", path.display())]
    NoCertificate { path: PathBuf },
    #[error(
        "{}: no PEM private key in it (PKCS#8, or the RSA or EC key openssl writes)",
        path.display()
    )]
    NoKey { path: PathBuf },
    #[error("the key in {} is not the one of the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{}: the certificate has expired", path.display())]
    Expired { path: PathBuf },
    #[error(
        "{}: cannot issue certificates that verify ({reason}): a CA certificate has \
         basicConstraints CA:TRUE and, if it has a keyUsage, keyCertSign",
        path.display()
    )]
    NotACa { path: PathBuf, reason: String },
    #[error("{}: already exists (paycred ca never replaces a file)", path.display())]
    Exists { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a leaf certificate is minted for a host name or an IP address only")]
    NotAHost,
    #[error("certificate: {0}")]
    Crypto(String),
}

impl From<ErrorStack> for CaError {
    fn from(e: ErrorStack) -> Self {
        // OpenSSL's reasons: library, function and reason codes, no key material.
        CaError::Crypto(e.to_string())
    }
}

impl From<rustls::Error> for CaError {
    fn from(e: rustls::Error) -> Self {
        CaError::Crypto(e.to_string())
    }
}

/// An interception CA: its certificate and private key.
pub struct Ca {
    cert: X509,
    key: PKey<Private>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let subject: Vec<String> = self
            .cert
            .subject_name()
            .entries()
            .filter_map(|e| e.data().to_string().ok())
            .collect();
        f.debug_struct("Ca").field("subject", &subject).finish()
    }
}

/// A fresh ECDSA P-256 key.
fn p256() -> Result<PKey<Private>, ErrorStack> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    PKey::from_ec_key(EcKey::generate(&group)?)
}

/// A random positive serial number of 159 bits.
fn serial(builder: &mut X509Builder) -> Result<(), ErrorStack> {
    let mut n = BigNum::new()?;
    n.rand(159, MsbOption::MAYBE_ZERO, false)?;
    builder.set_serial_number(&*n.to_asn1_integer()?)
}

/// Sets validity from `from` to `until`.
fn validity(
    builder: &mut X509Builder,
    from: OffsetDateTime,
    until: OffsetDateTime,
) -> Result<(), ErrorStack> {
    builder.set_not_before(&*Asn1Time::from_unix(from.unix_timestamp())?)?;
    builder.set_not_after(&*Asn1Time::from_unix(until.unix_timestamp())?)
}

/// The digest a key signs certificates with: none for the EdDSA keys, SHA-256 for others.
fn digest(key: &PKeyRef<Private>) -> MessageDigest {
    match key.id() {
        Id::ED25519 | Id::ED448 => MessageDigest::null(),
        _ => MessageDigest::sha256(),
    }
}

impl Ca {
    /// A new CA (module doc), valid from now.
    pub fn generate() -> Result<Ca, CaError> {
        Self::generate_at(OffsetDateTime::now_utc(), CA_DAYS)
    }

    fn generate_at(now: OffsetDateTime, days: i64) -> Result<Ca, CaError> {
        let key = p256()?;
        let mut id = [0u8; 4];
        openssl::rand::rand_bytes(&mut id)?;
        let mut name = X509NameBuilder::new()?;
        name.append_entry_by_nid(Nid::ORGANIZATIONNAME, "paycred")?;
        name.append_entry_by_nid(
            Nid::COMMONNAME,
            &format!("paycred browser checkout CA {}", hex::encode(id)),
        )?;
        let name = name.build();
        let mut b = X509Builder::new()?;
        b.set_version(2)?;
        serial(&mut b)?;
        b.set_subject_name(&name)?;
        b.set_issuer_name(&name)?;
        b.set_pubkey(&key)?;
        validity(&mut b, now - BACKDATE, now + Duration::days(days))?;
        b.append_extension(BasicConstraints::new().critical().ca().pathlen(0).build()?)?;
        b.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()?,
        )?;
        let ski = SubjectKeyIdentifier::new().build(&b.x509v3_context(None, None))?;
        b.append_extension(ski)?;
        b.sign(&key, MessageDigest::sha256())?;
        Ok(Ca {
            cert: b.build(),
            key,
        })
    }

    /// The CA of `browser_proxy.ca`: the first certificate of `cert_file` and the key of
    /// `key_file`, both PEM, checked (module doc).
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Ca, CaError> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map(Zeroizing::new)
                .map_err(|source| CaError::Read {
                    path: path.to_path_buf(),
                    source,
                })
        };
        let cert = X509::from_pem(&read(cert_file)?).map_err(|_| CaError::NoCertificate {
            path: cert_file.to_path_buf(),
        })?;
        let key = PKey::private_key_from_pem(&read(key_file)?).map_err(|_| CaError::NoKey {
            path: key_file.to_path_buf(),
        })?;
        if !cert.public_key()?.public_eq(&key) {
            return Err(CaError::KeyMismatch {
                cert: cert_file.to_path_buf(),
                key: key_file.to_path_buf(),
            });
        }
        if cert.not_after() < Asn1Time::days_from_now(0)? {
            return Err(CaError::Expired {
                path: cert_file.to_path_buf(),
            });
        }
        let ca = Ca { cert, key };
        ca.check_issues(OffsetDateTime::now_utc())
            .map_err(|reason| CaError::NotACa {
                path: cert_file.to_path_buf(),
                reason,
            })?;
        Ok(ca)
    }

    /// Whether a leaf this CA mints verifies against it (OpenSSL's chain checks: signature,
    /// the CA's basic constraints and key usage, validity); the reason when not.
    fn check_issues(&self, now: OffsetDateTime) -> Result<(), String> {
        let check = || -> Result<Result<(), String>, CaError> {
            let leaf = X509::from_der(&self.mint(CHECK_HOST, now)?.cert[0])?;
            let mut store = X509StoreBuilder::new()?;
            store.add_cert(self.cert.clone())?;
            let store = store.build();
            let mut context = X509StoreContext::new()?;
            let chain = Stack::new()?;
            Ok(context.init(&store, &leaf, &chain, |c| {
                Ok(match c.verify_cert()? {
                    true => Ok(()),
                    false => Err(c.error().error_string().to_string()),
                })
            })?)
        };
        check().unwrap_or_else(|e| Err(e.to_string()))
    }

    /// The CA certificate as PEM: what a browser is told to trust.
    pub fn cert_pem(&self) -> Result<String, CaError> {
        Ok(String::from_utf8_lossy(&self.cert.to_pem()?).into_owned())
    }

    /// The private key as PKCS#8 PEM (wiped when dropped).
    pub fn key_pem(&self) -> Result<Zeroizing<Vec<u8>>, CaError> {
        Ok(Zeroizing::new(self.key.private_key_to_pem_pkcs8()?))
    }

    /// Writes [`CERT_FILE`] and [`KEY_FILE`] (the key its owner's alone, 0600) into `dir`,
    /// which is made if missing; refuses, writing nothing, when either file exists.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf), CaError> {
        let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        for path in [&cert, &key] {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(CaError::Exists { path: path.clone() });
            }
        }
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CaError::Write { path, source }
        };
        let pem = self.cert_pem()?;
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
        crate::dev::write_private(&key, &self.key_pem()?).map_err(failed(&key))?;
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&cert)
            .and_then(|mut f| std::io::Write::write_all(&mut f, pem.as_bytes()));
        if let Err(source) = written {
            let _ = std::fs::remove_file(&key);
            return Err(CaError::Write { path: cert, source });
        }
        Ok((cert, key))
    }

    /// A leaf certificate for `host` (a host name or an IP address) with a fresh key, valid
    /// from `now` − [`BACKDATE`] to `now` + [`LEAF_LIFETIME`], as rustls presents it.
    pub fn mint(&self, host: &str, now: OffsetDateTime) -> Result<Arc<CertifiedKey>, CaError> {
        let ip = host.parse::<IpAddr>().ok();
        if ip.is_none() && !crate::config::browser::is_host_name(host) {
            return Err(CaError::NotAHost);
        }
        let key = p256()?;
        let mut b = X509Builder::new()?;
        b.set_version(2)?;
        serial(&mut b)?;
        let mut subject = X509NameBuilder::new()?;
        // A common name is at most 64 characters; the SAN is what clients check.
        if host.len() <= 64 {
            subject.append_entry_by_nid(Nid::COMMONNAME, host)?;
        }
        b.set_subject_name(&subject.build())?;
        b.set_issuer_name(self.cert.subject_name())?;
        b.set_pubkey(&key)?;
        validity(&mut b, now - BACKDATE, now + LEAF_LIFETIME)?;
        b.append_extension(BasicConstraints::new().critical().build()?)?;
        b.append_extension(KeyUsage::new().critical().digital_signature().build()?)?;
        b.append_extension(ExtendedKeyUsage::new().server_auth().build()?)?;
        let context = b.x509v3_context(Some(&self.cert), None);
        let ski = SubjectKeyIdentifier::new().build(&context)?;
        let aki = AuthorityKeyIdentifier::new().keyid(false).build(&context)?;
        let mut san = SubjectAlternativeName::new();
        if host.len() > 64 {
            san.critical();
        }
        match ip {
            Some(ip) => san.ip(&ip.to_string()),
            None => san.dns(host),
        };
        let san = san.build(&context)?;
        for extension in [ski, aki, san] {
            b.append_extension(extension)?;
        }
        b.sign(&self.key, digest(&self.key))?;
        let der = CertificateDer::from(b.build().to_der()?);
        let pkcs8 = Zeroizing::new(key.private_key_to_pkcs8()?);
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.to_vec()));
        let signer = provider().key_provider.load_private_key(key)?;
        Ok(Arc::new(CertifiedKey::new(vec![der], signer)))
    }
}

/// The host of the leaf [`Ca::load`] mints to check a CA.
const CHECK_HOST: &str = "ca-check.paycred.invalid";

/// rustls's ring provider, as the TLS listener's.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The leaf of one host and the configuration that presents it.
struct HostTls {
    certified: Arc<CertifiedKey>,
    config: Arc<ServerConfig>,
    renew_at: OffsetDateTime,
}

/// Presents one host's leaf, to a ClientHello for that host (or without SNI).
#[derive(Debug)]
struct HostCert {
    host: String,
    certified: Arc<CertifiedKey>,
}

impl ResolvesServerCert for HostCert {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            Some(sni) if !sni.trim_end_matches('.').eq_ignore_ascii_case(&self.host) => None,
            _ => Some(self.certified.clone()),
        }
    }
}

/// The CA with its cache of leaves: what terminates a browser's TLS (module doc).
pub struct Interceptor {
    ca: Ca,
    clock: Arc<dyn Clock>,
    ticketer: Arc<dyn ProducesTickets>,
    leaves: quick_cache::sync::Cache<String, Arc<HostTls>>,
}

impl Interceptor {
    pub fn new(ca: Ca, clock: Arc<dyn Clock>) -> Result<Self, CaError> {
        Ok(Self {
            ca,
            clock,
            ticketer: rustls::crypto::ring::Ticketer::new()?,
            leaves: quick_cache::sync::Cache::new(CACHED_HOSTS),
        })
    }

    /// The CA.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The rustls configuration that terminates a browser's TLS for `host` (lower-case, as
    /// the `CONNECT` named it).
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        Ok(self.host(host)?.config.clone())
    }

    /// The leaf `host` is presented with now.
    pub fn certified_key(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        Ok(self.host(host)?.certified.clone())
    }

    fn host(&self, host: &str) -> Result<Arc<HostTls>, CaError> {
        let now = self.clock.now();
        if let Some(cached) = self.leaves.get(host) {
            if now < cached.renew_at {
                return Ok(cached);
            }
        }
        let certified = self.ca.mint(host, now)?;
        let resolver = HostCert {
            host: host.to_string(),
            certified: certified.clone(),
        };
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.ticketer = self.ticketer.clone();
        let entry = Arc::new(HostTls {
            certified,
            config: Arc::new(config),
            renew_at: now + RENEW_AFTER,
        });
        self.leaves.insert(host.to_string(), entry.clone());
        Ok(entry)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};

    fn verifier(ca: &Ca) -> Arc<WebPkiServerVerifier> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(ca.cert.to_der().unwrap()))
            .unwrap();
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap()
    }

    /// Whether `leaf` verifies for `name` at `at`.
    fn verifies(ca: &Ca, leaf: &CertifiedKey, name: &str, at: OffsetDateTime) -> bool {
        let name = ServerName::try_from(name.to_string()).unwrap();
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(at.unix_timestamp()).unwrap(),
        ));
        verifier(ca)
            .verify_server_cert(&leaf.cert[0], &[], &name, &[], at)
            .is_ok()
    }

    #[test]
    fn a_leaf_verifies_for_its_host_and_no_other() {
        let ca = Ca::generate().unwrap();
        let now = OffsetDateTime::now_utc();
        let cases = [
            ("shop.test", "shop.test", true),
            ("shop.test", "other.test", false),
            ("shop.test", "a.shop.test", false),
            ("pay_api.shop.test", "pay_api.shop.test", true),
            ("127.0.0.1", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.2", false),
            ("::1", "::1", true),
        ];
        for (host, name, ok) in cases {
            let leaf = ca.mint(host, now).unwrap();
            assert_eq!(verifies(&ca, &leaf, name, now), ok, "{host} as {name}");
        }
        let long = format!("{}.test", ["a".repeat(60), "b".repeat(60)].join("."));
        let leaf = ca.mint(&long, now).unwrap();
        assert!(verifies(&ca, &leaf, &long, now));
        let other = Ca::generate().unwrap();
        let leaf = ca.mint("shop.test", now).unwrap();
        assert!(!verifies(&other, &leaf, "shop.test", now));
        for bad in ["", "*.shop.test", "shop..test", "shop test", "a/b"] {
            assert!(
                matches!(ca.mint(bad, now), Err(CaError::NotAHost)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_leaf_is_short_lived_and_backdated() {
        let ca = Ca::generate().unwrap();
        let now = OffsetDateTime::now_utc();
        let leaf = ca.mint("shop.test", now).unwrap();
        let cert = X509::from_der(&leaf.cert[0]).unwrap();
        let at = |s: i64| Asn1Time::from_unix(s).unwrap();
        assert_eq!(
            cert.not_before()
                .diff(&at((now - BACKDATE).unix_timestamp()))
                .unwrap()
                .secs,
            0
        );
        assert_eq!(
            cert.not_after()
                .diff(&at((now + LEAF_LIFETIME).unix_timestamp()))
                .unwrap()
                .secs,
            0
        );
        assert!(verifies(
            &ca,
            &leaf,
            "shop.test",
            now - Duration::minutes(50)
        ));
        assert!(verifies(&ca, &leaf, "shop.test", now + Duration::hours(23)));
        assert!(!verifies(&ca, &leaf, "shop.test", now - Duration::hours(2)));
        assert!(!verifies(
            &ca,
            &leaf,
            "shop.test",
            now + Duration::hours(25)
        ));
    }

    #[test]
    fn the_cache_keeps_a_hosts_leaf_until_it_is_renewed() {
        let start = OffsetDateTime::now_utc();
        let clock = Arc::new(ManualClock::new(start));
        let interceptor = Interceptor::new(Ca::generate().unwrap(), clock.clone()).unwrap();
        let first = interceptor.certified_key("shop.test").unwrap();
        let config = interceptor.server_config("shop.test").unwrap();
        assert!(Arc::ptr_eq(
            &first,
            &interceptor.certified_key("shop.test").unwrap()
        ));
        assert!(Arc::ptr_eq(
            &config,
            &interceptor.server_config("shop.test").unwrap()
        ));
        let other = interceptor.certified_key("pay.test").unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        clock.advance(RENEW_AFTER - Duration::seconds(1));
        assert!(Arc::ptr_eq(
            &first,
            &interceptor.certified_key("shop.test").unwrap()
        ));
        clock.advance(Duration::seconds(1));
        let renewed = interceptor.certified_key("shop.test").unwrap();
        assert!(!Arc::ptr_eq(&first, &renewed));
        assert!(verifies(
            interceptor.ca(),
            &renewed,
            "shop.test",
            clock.now()
        ));
        assert_eq!(
            interceptor
                .server_config("shop.test")
                .unwrap()
                .alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    /// A TLS handshake in memory between a client trusting `ca` and `server`; the ALPN
    /// protocol agreed, or the error.
    fn handshake(
        ca: &Ca,
        server: Arc<ServerConfig>,
        sni: &str,
        alpn: &[&[u8]],
    ) -> Result<Option<Vec<u8>>, rustls::Error> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(ca.cert.to_der().unwrap()))
            .unwrap();
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
        let mut s = ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            c.write_tls(&mut buf).unwrap();
            s.read_tls(&mut buf.as_slice()).unwrap();
            s.process_new_packets()?;
            let mut buf = Vec::new();
            s.write_tls(&mut buf).unwrap();
            c.read_tls(&mut buf.as_slice()).unwrap();
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(c.alpn_protocol().map(<[u8]>::to_vec));
            }
        }
        Err(rustls::Error::General("no handshake".into()))
    }

    #[test]
    fn a_browser_trusting_the_ca_completes_a_handshake_for_the_host_only() {
        let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
        let interceptor = Interceptor::new(Ca::generate().unwrap(), clock).unwrap();
        let ca = interceptor.ca();
        let config = || interceptor.server_config("shop.test").unwrap();
        assert_eq!(
            handshake(ca, config(), "shop.test", &[b"h2", b"http/1.1"]),
            Ok(Some(b"h2".to_vec()))
        );
        assert_eq!(
            handshake(ca, config(), "SHOP.test", &[b"http/1.1"]),
            Ok(Some(b"http/1.1".to_vec()))
        );
        assert!(handshake(ca, config(), "other.test", &[b"h2"]).is_err());
        // Without SNI (an IP address): the host's leaf, which names the address.
        let ip = interceptor.server_config("127.0.0.1").unwrap();
        assert_eq!(
            handshake(ca, ip, "127.0.0.1", &[b"http/1.1"]),
            Ok(Some(b"http/1.1".to_vec()))
        );
        // A browser that does not trust the CA refuses the leaf.
        let stranger = Ca::generate().unwrap();
        assert!(handshake(&stranger, config(), "shop.test", &[b"h2"]).is_err());
    }

    #[test]
    fn a_written_ca_loads_back_and_is_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ca");
        let ca = Ca::generate().unwrap();
        let (cert, key) = ca.write(&out).unwrap();
        assert_eq!(
            (cert.clone(), key.clone()),
            (out.join(CERT_FILE), out.join(KEY_FILE))
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&key), 0o600);
        let loaded = Ca::load(&cert, &key).unwrap();
        let now = OffsetDateTime::now_utc();
        assert!(verifies(
            &ca,
            &loaded.mint("shop.test", now).unwrap(),
            "shop.test",
            now
        ));
        assert!(verifies(
            &loaded,
            &ca.mint("shop.test", now).unwrap(),
            "shop.test",
            now
        ));
        let before = std::fs::read(&key).unwrap();
        let again = Ca::generate().unwrap().write(&out);
        assert!(matches!(again, Err(CaError::Exists { .. })), "{again:?}");
        assert_eq!(std::fs::read(&key).unwrap(), before);
        // Only the key there: still refused, and no certificate written.
        std::fs::remove_file(&cert).unwrap();
        assert!(matches!(ca.write(&out), Err(CaError::Exists { .. })));
        assert!(!cert.exists());
        assert!(format!("{loaded:?}").contains("paycred browser checkout CA"));
    }

    /// A CA made by another tool: `key`, self-signed, with `extensions` (a leaf's if none).
    fn foreign(key: &PKey<Private>, ca: bool) -> X509 {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_nid(Nid::COMMONNAME, "Other CA")
            .unwrap();
        let name = name.build();
        let mut b = X509Builder::new().unwrap();
        b.set_version(2).unwrap();
        serial(&mut b).unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_issuer_name(&name).unwrap();
        b.set_pubkey(key).unwrap();
        let now = OffsetDateTime::now_utc();
        validity(&mut b, now - BACKDATE, now + Duration::days(30)).unwrap();
        if ca {
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                .unwrap();
        } else {
            b.append_extension(BasicConstraints::new().critical().build().unwrap())
                .unwrap();
        }
        let ski = SubjectKeyIdentifier::new()
            .build(&b.x509v3_context(None, None))
            .unwrap();
        b.append_extension(ski).unwrap();
        b.sign(key, digest(key)).unwrap();
        b.build()
    }

    fn files(dir: &Path, cert: &X509, key: &PKey<Private>) -> (PathBuf, PathBuf) {
        let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&c, cert.to_pem().unwrap()).unwrap();
        std::fs::write(&k, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
        (c, k)
    }

    #[test]
    fn a_ca_of_any_key_kind_loads_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let rsa = PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
        let ed = PKey::generate_ed25519().unwrap();
        for key in [&rsa, &ed, &p256().unwrap()] {
            let (c, k) = files(dir.path(), &foreign(key, true), key);
            let ca = Ca::load(&c, &k).unwrap();
            assert!(verifies(
                &ca,
                &ca.mint("shop.test", now).unwrap(),
                "shop.test",
                now
            ));
        }
        // Not a CA.
        let key = p256().unwrap();
        let (c, k) = files(dir.path(), &foreign(&key, false), &key);
        let e = Ca::load(&c, &k).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: cannot issue", c.display())),
            "{e}"
        );
        // Another certificate's key.
        let (c, _) = files(dir.path(), &foreign(&key, true), &key);
        let other = dir.path().join("other.pem");
        let other_key = p256().unwrap();
        let pem = other_key.private_key_to_pem_pkcs8().unwrap();
        std::fs::write(&other, &pem).unwrap();
        let e = Ca::load(&c, &other).unwrap_err().to_string();
        assert!(e.contains("is not the one of the certificate"), "{e}");
        // Files that are missing or hold no PEM: named, their contents not shown.
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ",
        )
        .unwrap();
        for (cert, key, says) in [
            (dir.path().join("none.pem"), other.clone(), "none.pem: "),
            (
                garbage.clone(),
                other.clone(),
                "garbage.pem: no PEM certificate",
            ),
            (
                c.clone(),
                garbage.clone(),
                "garbage.pem: no PEM private key",
            ),
            (c.clone(), dir.path().join("none-key.pem"), "none-key.pem: "),
        ] {
            let e = Ca::load(&cert, &key).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("MIIE") && !e.contains("PRIVATE"), "{e}");
        }
        // Expired.
        let old = Ca::generate_at(now - Duration::days(40), 30).unwrap();
        let (c, k) = old.write(&dir.path().join("old")).unwrap();
        let e = Ca::load(&c, &k).unwrap_err().to_string();
        assert!(e.ends_with("the certificate has expired"), "{e}");
    }
}
