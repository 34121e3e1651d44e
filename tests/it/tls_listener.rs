//! The TLS listener's own behaviour: a session resumed on a new connection by its ticket,
//! TLS 1.2 served as well as 1.3, a failed handshake's alert sent, a caller that speaks no
//! TLS or never finishes its handshake let go without disturbing the others, and a key that
//! is not the certificate's refused at start. (Requests over TLS: the `keepalive` and `h2` areas.)

use crate::common::tls::{h1_status, H1};
use crate::common::*;
use openssl::ssl::{SslConnector, SslMethod, SslSession, SslStream, SslVerifyMode, SslVersion};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

fn tls_server() -> Server {
    Server::start_with(Options {
        tls: true,
        ..Options::default()
    })
}

/// A client of `server` trusting its CA, offering HTTP/1.1, up to TLS `max`.
fn connector(server: &Server, max: SslVersion) -> SslConnector {
    let mut builder = SslConnector::builder(SslMethod::tls_client()).unwrap();
    builder.set_ca_file(server.ca.as_ref().unwrap()).unwrap();
    builder.set_verify(SslVerifyMode::PEER);
    builder.set_alpn_protos(H1).unwrap();
    builder.set_max_proto_version(Some(max)).unwrap();
    builder.build()
}

/// Offers `session` on `ssl`'s handshake.
#[allow(unsafe_code)]
fn resume(ssl: &mut openssl::ssl::SslRef, session: &SslSession) {
    // SAFETY: OpenSSL's contract is that the session came from the same context; every
    // session here was made by a connection of the same `SslConnector`.
    unsafe { ssl.set_session(session) }.unwrap();
}

/// `GET /health` over a new connection (resuming `session` if given): the connection after
/// the whole answer was read, and the answer's status.
fn health(
    connector: &SslConnector,
    server: &Server,
    session: Option<&SslSession>,
) -> (SslStream<TcpStream>, u16) {
    let tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let mut ssl = connector
        .configure()
        .unwrap()
        .into_ssl("localhost")
        .unwrap();
    if let Some(session) = session {
        resume(&mut ssl, session);
    }
    let mut tls = SslStream::new(ssl, tcp).unwrap();
    tls.connect().expect("handshake");
    tls.write_all(HEALTH).unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    let status = h1_status(&String::from_utf8_lossy(&answer));
    (tls, status)
}

/// Two connections to a new TLS server, up to TLS `max`, the second offering the first's
/// session: each is answered; the version the first spoke, and whether the second resumed.
fn resumed_on_a_second_connection(max: SslVersion) -> (String, bool) {
    let server = tls_server();
    let client = connector(&server, max);
    let (first, status) = health(&client, &server, None);
    assert_eq!(status, 200);
    assert!(!first.ssl().session_reused());
    // TLS 1.3 tickets come after the handshake; the whole answer has been read by now.
    let session = first.ssl().session().expect("a session").to_owned();
    let (second, status) = health(&client, &server, Some(&session));
    assert_eq!(status, 200);
    (
        first.ssl().version_str().to_string(),
        second.ssl().session_reused(),
    )
}

#[test]
fn a_new_connection_resumes_the_session_of_an_earlier_one() {
    assert_eq!(
        resumed_on_a_second_connection(SslVersion::TLS1_3),
        ("TLSv1.3".to_string(), true)
    );
}

#[test]
fn tls_1_2_is_served_and_resumes_too() {
    assert_eq!(
        resumed_on_a_second_connection(SslVersion::TLS1_2),
        ("TLSv1.2".to_string(), true)
    );
}

/// Reads until the peer closes; `false` when `wait` passed first.
fn closed_within(tcp: &mut TcpStream, wait: Duration) -> bool {
    tcp.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 1024];
    let start = Instant::now();
    while start.elapsed() < wait {
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
    false
}

#[test]
fn a_caller_that_speaks_no_tls_is_let_go_and_others_are_served() {
    let server = tls_server();
    let mut tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    tcp.write_all(HEALTH).unwrap();
    assert!(closed_within(&mut tcp, WAIT), "still open");
    let (_, status) = health(&connector(&server, SslVersion::TLS1_3), &server, None);
    assert_eq!(status, 200);
}

/// A caller whose ALPN names nothing paycred speaks gets the `no_application_protocol`
/// alert before the close, not a bare close.
#[test]
fn a_failed_handshake_sends_its_alert() {
    let server = tls_server();
    let mut builder = SslConnector::builder(SslMethod::tls_client()).unwrap();
    builder.set_ca_file(server.ca.as_ref().unwrap()).unwrap();
    builder.set_alpn_protos(b"\x06spdy/3").unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let said = match builder.build().connect("localhost", tcp) {
        Ok(_) => panic!("the handshake succeeded"),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("no application protocol"), "{said}");
}

/// A connection that opens and sends nothing is closed once the handshake timeout (10 s)
/// passes, not at once and not only after the keep-alive timeout (60 s); the listener serves
/// others meanwhile.
#[test]
fn a_handshake_that_never_comes_is_given_up() {
    let server = tls_server();
    let mut silent = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    let (_, status) = health(&connector(&server, SslVersion::TLS1_3), &server, None);
    assert_eq!(status, 200);
    assert!(
        !closed_within(&mut silent, Duration::from_secs(2)),
        "closed at once"
    );
    assert!(
        closed_within(&mut silent, Duration::from_secs(30)),
        "still open after 32 s"
    );
}

#[test]
fn a_key_that_is_not_the_certificates_is_refused_at_start() {
    let mut server = tls_server();
    server.stop(false);
    // The CA's key with the server's certificate: both files parse, they do not match.
    let config = std::fs::read_to_string(&server.config_path).unwrap();
    assert!(config.contains("srv.key"), "{config}");
    std::fs::write(&server.config_path, config.replace("srv.key", "ca.key")).unwrap();
    let said = refused_start(&server.config_path);
    assert!(said.contains("is not the one of the certificate"), "{said}");
    assert!(!said.contains("PRIVATE KEY"), "{said}");
}
