//! The baseline of the load bench: the smallest pingora 0.9.1 proxy that forwards every
//! request to one upstream, with the same pingora version and thread count as paycred.
//! `GET /health` it answers itself (`200`, empty), as paycred does, for the TLS handshake
//! cases of benches/load/deployed.sh.
//!
//! `cargo run --release --example passthrough -- LISTEN UPSTREAM THREADS [--tls CERT KEY]
//! [--upstream-tls SNI CA_FILE]`, e.g. `passthrough 127.0.0.1:18101 127.0.0.1:18100 1`.
//!
//! `--tls`: the listener speaks TLS with that certificate and pingora's intermediate profile,
//! offering `h2` and `http/1.1` by ALPN (paycred's `tls:` listener). `--upstream-tls`: the
//! upstream is reached over TLS with SNI and the certificate verified against the host name
//! and the CA certificates of CA_FILE (a paycred project's `proxy.ca_file`); connections are
//! pooled and reused as paycred's are.

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::listeners::tls::TlsSettings;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::tls::x509::X509;
use std::net::SocketAddr;
use std::sync::Arc;

struct PassThrough {
    upstream: SocketAddr,
    /// SNI and CA roots of an upstream reached over TLS.
    upstream_tls: Option<(String, Arc<Box<[X509]>>)>,
}

#[async_trait]
impl ProxyHttp for PassThrough {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        if session.req_header().uri.path() != "/health" {
            return Ok(false);
        }
        let mut head = ResponseHeader::build(200, Some(1))?;
        head.insert_header("content-length", "0")?;
        session.write_response_header(Box::new(head), true).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let Some((sni, ca)) = &self.upstream_tls else {
            return Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())));
        };
        let mut peer = HttpPeer::new(self.upstream, true, sni.clone());
        peer.options.verify_cert = true;
        peer.options.verify_hostname = true;
        peer.options.ca = Some(ca.clone());
        Ok(Box::new(peer))
    }
}

fn usage() -> ! {
    fail("usage: passthrough LISTEN UPSTREAM_ADDR [THREADS] [--tls CERT KEY] [--upstream-tls SNI CA_FILE]")
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("{message}");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(upstream)) = (args.get(1), args.get(2).and_then(|a| a.parse().ok()))
    else {
        usage();
    };
    let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1);
    let (mut tls, mut upstream_tls) = (None, None);
    let mut rest = args.iter().skip(3).skip_while(|a| !a.starts_with("--"));
    while let Some(flag) = rest.next() {
        let (Some(a), Some(b)) = (rest.next(), rest.next()) else {
            usage();
        };
        match flag.as_str() {
            "--tls" => tls = Some((a.clone(), b.clone())),
            "--upstream-tls" => {
                let pem = std::fs::read(b).unwrap_or_else(|e| fail(format!("{b}: {e}")));
                let roots =
                    X509::stack_from_pem(&pem).unwrap_or_else(|e| fail(format!("{b}: {e}")));
                upstream_tls = Some((a.clone(), Arc::new(roots.into_boxed_slice())));
            }
            _ => usage(),
        }
    }
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: format!("/tmp/passthrough-{}.pid", std::process::id()),
        upgrade_sock: format!("/tmp/passthrough-{}.sock", std::process::id()),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service(
        &server.configuration,
        PassThrough {
            upstream,
            upstream_tls,
        },
    );
    match tls {
        Some((cert, key)) => {
            let mut settings = TlsSettings::intermediate(&cert, &key)
                .unwrap_or_else(|e| fail(format!("{cert}: {e}")));
            settings.enable_h2();
            service.add_tls_with_settings(listen, None, settings);
        }
        None => service.add_tcp(listen),
    }
    server.add_service(service);
    server.run_forever();
}
