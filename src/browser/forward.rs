//! The browser proxy: its listener ([`BrowserProxy`], a pingora service of its own on
//! `browser_proxy.listen`, whose socket an upgrade hands over as the other listeners') and
//! what it does with each connection.
//!
//! 1. The `CONNECT` head is read and checked ([`super::connect`]); its `Proxy-Authorization`
//!    must name a live browser session (else 407).
//! 2. A host the session allows is **intercepted**: its address is checked first (the
//!    project's `browser_checkout.resolve` where the project allows private networks, else
//!    DNS and the proxy's target guard: no loopback, private, link-local or metadata address
//!    unless the project allows private networks), then `200`, then the browser's TLS is
//!    terminated with the host's leaf ([`super::ca::Interceptor`]), and the tunnel speaks
//!    h2 or HTTP/1.1 as the browser chose by ALPN ([`super::http2`], [`super::http1`]). Each
//!    request in it is read whole and goes through the one exchange ([`Intercepted`]'s
//!    [`Exchange`], whatever the protocol): its stand-ins
//!    swapped for the real values ([`super::swap`]); one that swapped a value counts a use of the intent as
//!    the API proxy does (usage limit and expiry hold; a refused use answers an error and
//!    the host sees nothing) and a use of the session. It goes to the host over TLS verified
//!    against the system roots or the project's `proxy.ca_file` (a certificate that does not
//!    verify: 502, nothing sent), and the answer comes back through the response guard in
//!    its swap mode: the real number and CVC become the stand-ins, written to the
//!    protocol's [`super::message::Sink`] as it is read.
//! 3. Another host the project's `browser_checkout.tunnel_hosts` names is **tunnelled**
//!    blindly, never to a loopback, private, link-local or metadata address, and nothing in
//!    it is swapped.
//! 4. Anything else: 403, and the connection closes.
//!
//! Plain-HTTP proxy requests are refused (405) by [`super::connect::parse`]: nothing is ever
//! swapped outside TLS. Errors answer paycred's error envelope; none repeats what the browser
//! sent or carries a card value.

use super::ca::Interceptor;
use super::connect::{self, ESTABLISHED};
use super::message::{Answer, Exchange, Head, Request, Sink};
use super::tls::BrowserTls;
use super::{http1, http2};
use crate::app::App;
use crate::config::browser::{host_matches, BrowserCheckout};
use crate::config::ProjectConfig;
use crate::domain::card::standin::StandIns;
use crate::error::{ApiError, ErrorKind};
use crate::proxy::guard::ResponseGuard;
use crate::proxy::{peer, CaRoots};
use crate::service::browser_sessions as sessions;
use crate::service::target::{self, Target, TargetUrl};
use crate::store::{BrowserSessionRecord, SessionChange};
use async_trait::async_trait;
use bytes::Bytes;
use openssl::x509::X509;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::server::{ListenFds, ShutdownWatch};
use pingora::services::Service;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Longest a browser may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a tunnel is kept open with no request in it.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest the connection to a host (or a tunnel's) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the proxy runs under now: the application and the proxy's CA roots of the running
/// configuration; `None` once the server is gone.
pub type Current = Box<dyn Fn() -> Option<(Arc<App>, CaRoots)> + Send + Sync>;

/// The browser proxy's listener (module doc).
pub struct BrowserProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    interceptor: Interceptor,
    current: Current,
    connector: Connector,
}

impl BrowserProxy {
    pub fn new(addr: SocketAddr, interceptor: Interceptor, current: Current) -> Self {
        BrowserProxy {
            addr,
            shared: Arc::new(Shared {
                interceptor,
                current,
                connector: Connector::new(None),
            }),
        }
    }
}

#[async_trait]
impl Service for BrowserProxy {
    async fn start_service(
        &mut self,
        fds: Option<ListenFds>,
        mut shutdown: ShutdownWatch,
        _listeners_per_fd: usize,
    ) {
        let key = self.addr.to_string();
        let listener = match crate::http::listening_socket(self.addr, &key, fds).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("browser_proxy.listen {}: {e}", self.addr);
                std::process::exit(1);
            }
        };
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        let _ = tcp.set_nodelay(true);
                        tokio::spawn(serve(self.shared.clone(), tcp));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "browser proxy accept");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = shutdown.changed() => break,
            }
        }
    }

    fn name(&self) -> &str {
        "paycred-browser"
    }

    fn listen_addresses(&self) -> Option<Vec<String>> {
        Some(vec![self.addr.to_string()])
    }
}

/// Answers `error` on a connection before any tunnel, and closes it.
async fn refuse(mut tcp: TcpStream, error: &ApiError) {
    let _ = tcp.write_all(&connect::answer(error)).await;
    let _ = tcp.shutdown().await;
}

fn forbidden(message: &str) -> ApiError {
    ApiError::new(ErrorKind::Forbidden, message)
}

fn bad_gateway(message: &str) -> ApiError {
    ApiError::new(ErrorKind::BadGateway, message)
}

/// One browser connection, from its `CONNECT` on.
async fn serve(shared: Arc<Shared>, mut tcp: TcpStream) {
    let Some((app, roots)) = (shared.current)() else {
        return;
    };
    let deadline = Instant::now() + app.config.server.head_read_timeout;
    let head = match connect::read_head(&mut tcp, deadline).await {
        Ok(head) => head,
        Err(e) => return refuse(tcp, &e).await,
    };
    let asked = match connect::parse(head.head()) {
        Ok(c) => c,
        Err(e) => return refuse(tcp, &e).await,
    };
    let session = match sessions::authenticate(&app, &asked.username, asked.password.expose()).await
    {
        Ok(Some(s)) => s,
        Ok(None) => return refuse(tcp, &connect::unauthenticated()).await,
        Err(e) => return refuse(tcp, &e).await,
    };
    let project = app.config.project(&session.project).cloned();
    let Some((project, checkout)) =
        project.and_then(|p| p.browser_checkout.clone().map(|c| (p, c)))
    else {
        return refuse(
            tcp,
            &forbidden("Browser checkout is not enabled for the session's project."),
        )
        .await;
    };
    let (host, port) = (asked.host.as_str(), asked.port);
    if session.allowed_hosts.iter().any(|p| host_matches(p, host)) {
        let target = match address(&project, &checkout, host, port).await {
            Ok(t) => t,
            Err(e) => return refuse(tcp, &e).await,
        };
        let at = Intercepted {
            roots: roots.get(&project.id).cloned(),
            app,
            shared,
            project,
            session: session.id.clone(),
            target,
        };
        at.run(tcp, head.rest()).await;
    } else if checkout.tunnels(host) {
        tunnel(tcp, host, port, head.rest()).await;
    } else {
        refuse(tcp, &forbidden("This browser session may not reach that host, and the project does not tunnel to it.")).await;
    }
}

/// The address an intercepted host is reached at: the project's `resolve` map where it
/// allows private networks, else DNS through the target guard.
async fn address(
    project: &ProjectConfig,
    checkout: &BrowserCheckout,
    host: &str,
    port: u16,
) -> Result<Target, ApiError> {
    let url = TargetUrl {
        https: true,
        host: host.to_string(),
        port,
        path_and_query: "/".into(),
    };
    match checkout.resolved(host, port) {
        Some(addr) if project.proxy.allow_private_networks => Ok(Target { url, addr }),
        _ => target::resolve(url, &project.proxy).await,
    }
}

/// A blind tunnel to `host`:`port`, never to a loopback, private, link-local or metadata
/// address (whatever the project allows its API proxy).
async fn tunnel(mut tcp: TcpStream, host: &str, port: u16, early: &[u8]) {
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(a) => a.collect(),
        Err(_) => Vec::new(),
    };
    let Some(first) = addrs.first().copied() else {
        return refuse(tcp, &bad_gateway("The host has no address.")).await;
    };
    if addrs.iter().any(|a| target::is_forbidden(a.ip())) {
        return refuse(
            tcp,
            &forbidden(
                "The host resolves to a private or reserved address: it is never tunnelled.",
            ),
        )
        .await;
    }
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(first)).await;
    let Ok(Ok(mut upstream)) = upstream else {
        return refuse(tcp, &bad_gateway("The host could not be reached.")).await;
    };
    if tcp.write_all(ESTABLISHED).await.is_err() || upstream.write_all(early).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
}

/// An intercepted tunnel to one host of a session.
struct Intercepted {
    app: Arc<App>,
    shared: Arc<Shared>,
    /// The project's own CA roots for its hosts, if it has any.
    roots: Option<Arc<Box<[X509]>>>,
    project: Arc<ProjectConfig>,
    session: String,
    target: Target,
}

impl Intercepted {
    async fn run(self, mut tcp: TcpStream, early: &[u8]) {
        let host = self.target.url.host.as_str();
        let config = match self.shared.interceptor.server_config(host) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "no leaf for an intercepted host");
                return refuse(tcp, &ApiError::internal()).await;
            }
        };
        if tcp.write_all(ESTABLISHED).await.is_err() {
            return;
        }
        let accepted =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, BrowserTls::accept(tcp, config, early)).await;
        let Ok(Ok(tls)) = accepted else {
            tracing::debug!("browser proxy: the browser's TLS handshake did not complete");
            return;
        };
        let server = &self.app.config.server;
        let (head_within, body_within) = (server.head_read_timeout, server.body_read_timeout);
        if tls.alpn() == Some(b"h2") {
            http2::serve(tls, Arc::new(self), IDLE_TIMEOUT, head_within, body_within).await;
        } else {
            http1::serve(tls, &self, IDLE_TIMEOUT, head_within, body_within).await;
        }
    }

    /// The live session and its card, or the error to answer (the session ended: 403; its
    /// intent has no credential any more: 409).
    async fn card(&self) -> Result<(BrowserSessionRecord, StandIns), ApiError> {
        let app = &self.app;
        let ended = || forbidden("The browser session has ended.");
        let session = app
            .store
            .get_browser_session(&self.session)
            .await?
            .ok_or_else(ended)?;
        let (session, intent) = sessions::settled_with_intent(app, session).await?;
        let Some(intent) = intent.filter(|_| session.live_at(app.now_micros())) else {
            return Err(ended());
        };
        let card = sessions::card_of(app, &session, &intent)
            .await?
            .ok_or_else(|| ApiError::new(ErrorKind::Conflict, "The purchase intent has ended."))?;
        Ok((session, card))
    }

    /// Counts the use of a request that carried the real values against its intent (refused:
    /// the session is settled, and the refusal answered). Durable before anything is sent.
    async fn count_use(&self, session: &BrowserSessionRecord) -> Result<(), ApiError> {
        let app = &self.app;
        let used = crate::service::intents::record_proxy_use(
            app,
            &session.project,
            &session.entity,
            &session.intent_id,
        )
        .await;
        if let Err(e) = used {
            sessions::settled(app, session.clone()).await?;
            return Err(e);
        }
        Ok(())
    }

    /// Records a counted use on the session (its `uses`, event and audit entry). It runs while
    /// the request goes to the host: the intent's count, which bounds the credential, is
    /// already durable, and this one is the session's account of it; a store that fails it
    /// is logged, and the answer still relayed.
    async fn record_session_use(&self, session: &BrowserSessionRecord) {
        let app = &self.app;
        let audit = crate::audit::AuditEvent {
            at_micros: app.now_micros(),
            action: "browserSession.use".into(),
            project: session.project.clone(),
            entity: session.entity.clone(),
            resource: session.id.clone(),
        };
        let recorded = app
            .store
            .change_browser_session(
                &session.id,
                SessionChange::Use,
                app.now_micros(),
                Some(audit),
            )
            .await;
        if let Err(e) = recorded {
            tracing::error!(error = %e, "browser proxy: a session's use was not recorded");
        }
    }
}

#[async_trait]
impl Exchange for Intercepted {
    /// One request: swapped, counted, sent; its answer relayed through the guard.
    async fn exchange(&self, request: Request, sink: &mut dyn Sink) -> Result<(), Answer> {
        let (session, card) = self.card().await?;
        let (path, query) = match request.target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (request.target.as_str(), None),
        };
        let swapped =
            super::swap::swap(&request.body, request.header("content-type"), query, &card)
                .map_err(ApiError::from)?;
        let counted = swapped.replaced > 0;
        if counted {
            self.count_use(&session).await?;
        }
        let target = match &swapped.query {
            Some(q) => zeroize::Zeroizing::new(format!("{path}?{}", q.as_str())),
            None => zeroize::Zeroizing::new(path.to_string()),
        };
        let head = upstream_head(&request, &target, &self.target, swapped.body.len())?;
        let peer = peer::peer(&self.target, &self.project, self.roots.as_ref());
        let exchanged = async {
            let (mut up, _) = self
                .shared
                .connector
                .get_http_session(&peer)
                .await
                .map_err(|_| bad_gateway("The host could not be reached over TLS verified for its name; nothing was sent."))?;
            let sent = async {
                up.write_request_header(Box::new(head)).await?;
                if !swapped.body.is_empty() {
                    up.write_request_body(Bytes::copy_from_slice(&swapped.body), true)
                        .await?;
                }
                up.finish_request_body().await?;
                up.read_response_header().await
            }
            .await;
            Ok::<_, ApiError>((up, sent))
        };
        let session_use = async {
            if counted {
                self.record_session_use(&session).await;
            }
        };
        let ((), exchanged) = tokio::join!(session_use, exchanged);
        let (mut up, sent) = exchanged?;
        let answer_head = match (sent, up.response_header()) {
            (Ok(()), Some(h)) => h.clone(),
            _ => {
                up.shutdown().await;
                return Err(bad_gateway("The host did not answer.").into());
            }
        };
        let mut answer_head = answer_head;
        let mut guard = ResponseGuard::swapping(&card.pairs());
        guard.head(&mut answer_head)?;
        let body = !(request.method.eq_ignore_ascii_case("HEAD")
            || matches!(answer_head.status.as_u16(), 100..=199 | 204 | 304));
        // Headers the host's `Connection` names are its connection's too.
        let nominated: Vec<String> = answer_head
            .headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .collect();
        let headers = answer_head
            .headers
            .iter()
            .filter(|(n, _)| {
                !RESPONSE_HOP_BY_HOP.contains(&n.as_str())
                    && !nominated.iter().any(|t| t == n.as_str())
            })
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let out = Head {
            status: answer_head.status.as_u16(),
            headers,
            body,
            length: answer_head
                .headers
                .contains_key(http::header::CONTENT_LENGTH),
        };
        sink.head(out).await.map_err(|_| Answer::Cut)?;
        let mut end = !body;
        while !end {
            let chunk = up.read_response_body().await.map_err(|_| Answer::Cut)?;
            end = chunk.is_none() || up.response_done();
            let out = guard.body(chunk, end).map_err(|_| Answer::Cut)?;
            if let Some(out) = out.filter(|o| !o.is_empty()) {
                sink.data(out).await.map_err(|_| Answer::Cut)?;
            }
            if end {
                sink.end().await.map_err(|_| Answer::Cut)?;
            }
        }
        self.shared
            .connector
            .release_http_session(up, &peer, Some(IDLE_TIMEOUT))
            .await;
        Ok(())
    }
}

/// Response headers of the host's connection, never relayed (the framing is the proxy's).
const RESPONSE_HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
];

/// The request to the host: the browser's method, the swapped target, its headers but the
/// hop-by-hop ones and the framing (written for the swapped body), and `Accept-Encoding:
/// identity` (the guard reads the answer).
fn upstream_head(
    request: &Request,
    target: &str,
    to: &Target,
    body_len: usize,
) -> Result<RequestHeader, ApiError> {
    let bad = |_| ApiError::invalid_request("The request head cannot be forwarded.");
    let mut head =
        RequestHeader::build(request.method.as_str(), target.as_bytes(), None).map_err(bad)?;
    let nominated: Vec<String> = request
        .header("connection")
        .map(|v| {
            v.split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default();
    for (name, value) in &request.headers {
        let lower = name.to_ascii_lowercase();
        let dropped = crate::proxy::forward::HOP_BY_HOP.contains(&lower.as_str())
            || nominated.contains(&lower)
            || matches!(
                lower.as_str(),
                "host" | "content-length" | "transfer-encoding" | "accept-encoding"
            );
        if !dropped {
            head.append_header(name.clone(), value.as_slice())
                .map_err(bad)?;
        }
    }
    head.insert_header("host", crate::proxy::forward::host_header(to))
        .map_err(bad)?;
    head.insert_header("accept-encoding", "identity")
        .map_err(bad)?;
    if body_len > 0 || request.header("content-length").is_some() {
        head.insert_header("content-length", body_len.to_string())
            .map_err(bad)?;
    }
    Ok(head)
}
