//! A caller that stops sending its body: after `server.body_read_timeout` without a byte it
//! is answered 408 `requestTimeout` and its connection is closed, on the REST routes and on
//! both proxy paths (a small body read whole, a large one streamed to the target).

use crate::common::upstream::Upstream;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Writes `head` and the first `sent` bytes of a body of `len`, then waits: returns what
/// paycred answered and whether it closed the connection.
fn stall(server: &Server, head: &str, len: usize, sent: usize) -> (String, bool) {
    let addr = server.base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!("{head}Content-Length: {len}\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(
        &b"{\"a\":\""
            .iter()
            .copied()
            .chain(std::iter::repeat(b'x'))
            .take(sent)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

#[test]
fn a_stalled_body_is_408_and_frees_the_connection() {
    let server = Server::start_with(Options {
        body_read_timeout: "1s",
        ..Options::default()
    });
    let up = Upstream::start();
    let t = server.token("user_1", "private");
    let rest = format!(
        "POST /projects/{PROJECT}/payment-methods HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {t}\r\nContent-Type: application/json\r\n"
    );
    let proxy = format!(
        "POST /projects/{PROJECT}/proxy HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
         Svc-Target-URL: {}\r\nContent-Type: application/json\r\n",
        up.url("/slow")
    );
    for (what, head, len, sent) in [
        ("REST", &rest, 1000, 10),
        ("proxy, read whole", &proxy, 1000, 10),
        ("proxy, streamed", &proxy, 1 << 20, 100 * 1024),
    ] {
        let (answer, closed) = stall(&server, head, len, sent);
        assert!(answer.starts_with("HTTP/1.1 408"), "{what}: {answer}");
        assert!(answer.contains("\"requestTimeout\""), "{what}: {answer}");
        assert!(closed, "{what}: the connection stayed open");
    }
    assert!(
        up.requests().is_empty(),
        "the target received a complete request"
    );
}
