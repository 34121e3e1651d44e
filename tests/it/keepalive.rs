//! HTTP/1.1 keep-alive connections, plain and TLS: several requests on one connection (a
//! REST one and a proxied one with a template among them), a request whose first byte comes alone, one
//! in TLS records of a byte each, pipelined requests, the keep-alive timeout closing an idle connection, and a graceful stop with idle
//! connections open. (HTTP/2 on the TLS listener: the `h2` area.)

use crate::common::tls::{h1_connect, H1};
use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The longest a test waits for an answer (the keep-alive timeout is 60 s).
const WAIT: Duration = Duration::from_secs(15);

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";

fn plain(server: &Server, wait: Duration) -> TcpStream {
    let tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    tcp.set_read_timeout(Some(wait)).unwrap();
    tcp
}

fn tls_server() -> Server {
    Server::start_with(Options {
        tls: true,
        ..Options::default()
    })
}

fn tls(server: &Server, wait: Duration) -> impl Read + Write {
    h1_connect(server.port(), server.ca.as_ref().unwrap(), H1, wait).expect("no TLS connection")
}

/// Reads one answer (Content-Length or chunked): its status and body; `None` when the
/// connection closed (or failed) first.
fn answer(conn: &mut (impl Read + ?Sized)) -> Option<(u16, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let field = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let mut body = Vec::new();
    if let Some(len) = field("content-length:") {
        body.resize(len.parse().ok()?, 0);
        conn.read_exact(&mut body).ok()?;
    } else if field("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                conn.read_exact(&mut byte).ok()?;
                line.push(byte[0]);
            }
            let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            conn.read_exact(&mut chunk).ok()?;
            body.extend_from_slice(&chunk[..size]);
            if size == 0 {
                break;
            }
        }
    }
    Some((status, body))
}

/// Whether the server closed `conn` (a read gives end of file, or a reset) within its read
/// timeout, nothing else arriving first.
fn closed(conn: &mut (impl Read + ?Sized)) -> bool {
    let mut byte = [0u8; 1];
    match conn.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Sends a request of `head` (its first lines) with a JSON `body` and bearer `token`; the
/// answer.
fn send(conn: &mut (impl Read + Write), token: &str, head: &str, body: &str) -> (u16, Vec<u8>) {
    let request = format!(
        "{head}Host: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).unwrap();
    answer(conn).expect("no answer")
}

/// A card stored, a proxied request with its template, a `/health` whose first byte comes
/// alone (the rest a moment later), and another `/health`, all on the one connection `conn`.
fn requests_on_one_connection(server: &Server, conn: &mut (impl Read + Write)) {
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let card = card_body("user_1", VISA, CVC).to_string();
    let (status, stored) = send(
        conn,
        &t,
        &format!("POST /projects/{PROJECT}/payment-methods HTTP/1.1\r\n"),
        &card,
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&stored));
    let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    let pm = stored["id"].as_str().unwrap();

    let body = json!({"number": format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}")})
        .to_string();
    let target = up.url("/pay");
    let head = format!("POST /projects/{PROJECT}/proxy HTTP/1.1\r\nSvc-Target-URL: {target}\r\n");
    let (status, _) = send(conn, &t, &head, &body);
    assert!((200..300).contains(&status), "proxied: {status}");
    let seen = up.requests();
    assert_eq!(seen.len(), 1);
    assert!(String::from_utf8_lossy(&seen[0].body).contains(VISA));

    conn.write_all(&HEALTH[..1]).unwrap();
    conn.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    conn.write_all(&HEALTH[1..]).unwrap();
    assert_eq!(answer(conn).map(|a| a.0), Some(200), "the split request");

    conn.write_all(HEALTH).unwrap();
    assert_eq!(answer(conn).map(|a| a.0), Some(200), "the last request");
}

#[test]
fn plain_keep_alive_serves_each_request_on_the_same_connection() {
    let server = Server::start();
    let mut conn = plain(&server, WAIT);
    requests_on_one_connection(&server, &mut conn);
}

#[test]
fn tls_keep_alive_serves_each_request_on_the_same_connection() {
    let server = tls_server();
    let mut conn = tls(&server, WAIT);
    requests_on_one_connection(&server, &mut conn);
}

/// A request sent in TLS records of one byte each, which the TLS layer reads ahead of what
/// it has been asked for: the bytes it holds are read through the stream, so each request
/// on the connection is answered (none waits for the socket to become readable again).
#[test]
fn a_request_in_one_byte_tls_records_is_answered() {
    let server = tls_server();
    let mut conn = tls(&server, WAIT);
    for _ in 0..3 {
        for byte in HEALTH {
            conn.write_all(std::slice::from_ref(byte)).unwrap();
        }
        conn.flush().unwrap();
        assert_eq!(answer(&mut conn).map(|a| a.0), Some(200));
    }
}

/// Two requests in one write: the first is answered; the second is answered too or the
/// connection closes (paycred does not pipeline), never left waiting.
#[test]
fn pipelined_requests_are_answered_or_the_connection_closes() {
    let (server, tls_server) = (Server::start(), tls_server());
    let (mut plain_conn, mut tls_conn) = (plain(&server, WAIT), tls(&tls_server, WAIT));
    for conn in [&mut plain_conn as &mut dyn ReadWrite, &mut tls_conn] {
        conn.write_all(&[HEALTH, HEALTH].concat()).unwrap();
        assert_eq!(answer(conn).map(|a| a.0), Some(200));
        match answer(conn) {
            Some((status, _)) => assert_eq!(status, 200),
            None => assert!(closed(conn), "neither answered nor closed"),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// An idle keep-alive connection is closed once the 60 s keep-alive timeout passes (and not
/// at once).
#[test]
fn an_idle_connection_is_closed_after_the_keep_alive_timeout() {
    let server = Server::start();
    let mut conn = plain(&server, Duration::from_secs(1));
    conn.write_all(HEALTH).unwrap();
    assert_eq!(answer(&mut conn).map(|a| a.0), Some(200));
    assert!(!closed(&mut conn), "closed at once");
    conn.set_read_timeout(Some(Duration::from_secs(90)))
        .unwrap();
    assert!(closed(&mut conn), "still open after 90 s");
}

/// A graceful stop with idle connections open (one before its first request, one after it)
/// closes them and ends the server.
#[test]
fn a_graceful_stop_closes_idle_connections() {
    let mut server = Server::start();
    let mut fresh = plain(&server, WAIT);
    let mut used = plain(&server, WAIT);
    used.write_all(HEALTH).unwrap();
    assert_eq!(answer(&mut used).map(|a| a.0), Some(200));
    server.signal("TERM");
    assert!(closed(&mut fresh), "the fresh connection stayed open");
    assert!(closed(&mut used), "the used connection stayed open");
    assert!(eventually(Duration::from_secs(10), || server.exited()));
}
