//! The baseline of the load bench: the smallest pingora 0.9.1 proxy that forwards every
//! request to one upstream, with the same pingora version and thread count as paycred.
//!
//! `cargo run --release --example passthrough -- LISTEN UPSTREAM THREADS`
//! e.g. `passthrough 127.0.0.1:18101 127.0.0.1:18100 1`

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use std::net::SocketAddr;

struct PassThrough {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for PassThrough {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(upstream)) = (args.get(1), args.get(2).and_then(|a| a.parse().ok()))
    else {
        eprintln!("usage: passthrough LISTEN UPSTREAM_ADDR [THREADS]");
        std::process::exit(2);
    };
    let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1);
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
    let mut service =
        pingora::proxy::http_proxy_service(&server.configuration, PassThrough { upstream });
    service.add_tcp(listen);
    server.add_service(service);
    server.run_forever();
}
