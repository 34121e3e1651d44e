//! The error envelope on every kind of bad request, and the service routes.

use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[test]
fn routing_errors_use_the_envelope() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    server
        .call("GET", "/nope", None, None)
        .assert_error(404, "notFound");
    server
        .call(
            "GET",
            &format!("/projects/{PROJECT}/nothing"),
            Some(&t),
            None,
        )
        .assert_error(404, "notFound");
    server
        .call("GET", "/", None, None)
        .assert_error(404, "notFound");
    let r = server.call(
        "PUT",
        &format!("/projects/{PROJECT}/payment-methods"),
        Some(&t),
        None,
    );
    r.assert_error(405, "methodNotAllowed");
    assert_eq!(r.header("Allow"), Some("GET, POST"));
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/payment-methods/pm_1"),
        Some(&t),
        None,
    );
    r.assert_error(405, "methodNotAllowed");
    assert_eq!(r.header("Allow"), Some("GET, DELETE"));
    server
        .call("POST", "/health", None, None)
        .assert_error(405, "methodNotAllowed");
}

#[test]
fn body_errors_use_the_envelope() {
    let server = Server::start_with(Options {
        rest_max_body: 4096,
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    let auth = format!("Bearer {t}");
    let path = format!("/projects/{PROJECT}/payment-methods");
    let json_headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    server
        .raw("POST", &path, &json_headers, Some(b"{\"entityId\": "))
        .assert_error(400, "invalidRequest");
    server
        .raw("POST", &path, &json_headers, Some(b"[1,2]"))
        .assert_error(400, "invalidRequest");
    server
        .raw("POST", &path, &json_headers, Some(b""))
        .assert_error(400, "invalidRequest");
    server
        .raw(
            "POST",
            &path,
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "text/plain"),
            ],
            Some(b"{}"),
        )
        .assert_error(415, "unsupportedMediaType");
    server
        .raw(
            "POST",
            &path,
            &[("Authorization", auth.as_str())],
            Some(b"{}"),
        )
        .assert_error(415, "unsupportedMediaType");
    let big = vec![b' '; 5000];
    server
        .raw("POST", &path, &json_headers, Some(&big))
        .assert_error(413, "payloadTooLarge");
    // Authentication comes before the body: no token, no body read.
    server
        .raw(
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            Some(&big),
        )
        .assert_error(401, "unauthorized");
}

/// Sends raw bytes and reads the whole answer (the server closes or we time out).
fn raw_exchange(server: &Server, parts: &[&[u8]], wait_for_continue: bool) -> String {
    let addr = server.base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(parts[0]).unwrap();
    let mut seen = Vec::new();
    if wait_for_continue {
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
        assert!(
            String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 100"),
            "{}",
            String::from_utf8_lossy(&seen)
        );
    }
    for p in &parts[1..] {
        s.write_all(p).unwrap();
    }
    let mut rest = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&rest).contains("\r\n\r\n") && rest.ends_with(b"}") {
            break;
        }
    }
    seen.extend_from_slice(&rest);
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn expect_100_continue_is_answered() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let body = card_body("user_1", VISA, CVC).to_string();
    let head = format!(
        "POST /projects/{PROJECT}/payment-methods HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    let answer = raw_exchange(&server, &[head.as_bytes(), body.as_bytes()], true);
    assert!(answer.contains("HTTP/1.1 201"), "{answer}");
}

#[test]
fn chunked_body_over_the_limit_is_refused() {
    let server = Server::start_with(Options {
        rest_max_body: 4096,
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    let head = format!(
        "POST /projects/{PROJECT}/payment-methods HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let chunk = format!("1000\r\n{}\r\n", " ".repeat(0x1000));
    let answer = raw_exchange(
        &server,
        &[
            head.as_bytes(),
            chunk.as_bytes(),
            chunk.as_bytes(),
            b"0\r\n\r\n",
        ],
        false,
    );
    assert!(answer.contains("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("payloadTooLarge"), "{answer}");
}

#[test]
fn health_and_metrics() {
    let server = Server::start();
    let h = server.call("GET", "/health", None, None);
    assert_eq!(h.status, 200);
    assert_eq!(h.json["status"], "ok");
    let t = server.token("user_1", "private");
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/payment-methods"),
        Some(&t),
        Some(&card_body("user_1", VISA, CVC)),
    );
    assert_eq!(r.status, 201);
    let m = server.metrics();
    assert_eq!(m.status, 200);
    assert!(m.header("Content-Type").unwrap().starts_with("text/plain"));
    assert!(
        m.text
            .contains("paycred_requests_total{route=\"payment_methods\",status=\"201\"} 1"),
        "{}",
        m.text
    );
    assert!(m.text.contains("paycred_store_flushes_total"));
    assert!(
        !m.text.contains("user_1") && !m.text.contains("pm_"),
        "ids in metrics: {}",
        m.text
    );
}
