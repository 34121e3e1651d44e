//! A caller that stops sending its body: after `server.body_read_timeout` without a byte it
//! is answered 408 `requestTimeout` and its connection is closed, on the REST routes and on
//! both proxy paths (a small body read whole, a large one streamed to the target). A caller
//! that trickles its request's head gets the same past `server.head_read_timeout`.

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

/// Sends the head of a request line by line, `pause` apart; returns what paycred answered,
/// whether it closed the connection, and how long after the first byte it answered.
fn trickle(server: &Server, lines: &[&str], pause: Duration) -> (String, bool, Duration) {
    let addr = server.base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let mut closed = false;
    // Bounded: every line is sent, then at most 20 s of waiting for the answer.
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(pause);
        }
        if s.write_all(line.as_bytes()).is_err() {
            break;
        }
        if let Ok(n) = s.read(&mut buf) {
            closed = n == 0;
            answer.extend_from_slice(&buf[..n]);
            if closed || answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    }
    let answered = started.elapsed();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    while !closed {
        match s.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&answer).into_owned(),
        closed,
        answered,
    )
}

#[test]
fn a_trickled_head_is_answered_408_and_closed() {
    let server = Server::start_with(Options {
        head_read_timeout: "1s",
        ..Options::default()
    });
    let mut lines = vec!["GET /health HTTP/1.1\r\n"];
    lines.extend(std::iter::repeat_n("X-Slow: 1\r\n", 12));
    lines.push("\r\n");
    let (answer, closed, answered) = trickle(&server, &lines, Duration::from_millis(300));
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains("\"type\":\"requestTimeout\""), "{answer}");
    assert!(closed);
    assert!(answered < Duration::from_secs(3), "{answered:?}");
    // A head that takes less than the bound is answered as usual.
    let lines = [
        "GET /health HTTP/1.1\r\n",
        "Host: x\r\n",
        "X-Slow: 1\r\n",
        "Connection: close\r\n\r\n",
    ];
    let (answer, _, _) = trickle(&server, &lines, Duration::from_millis(150));
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    // The server still answers.
    assert_eq!(server.call("GET", "/health", None, None).status, 200);
}
