//! HTTP/2 callers on the TLS listener (h2 by ALPN), end to end: the REST API, the proxy with
//! templates substituted in bodies sent as several DATA frames (read whole, and streamed),
//! a failed template that resets the stream without the target seeing a complete request,
//! and HTTP/1.1 on the same listener.

use crate::common::tls::{self, h2_connect, h2_request, h2_stalled, runtime, H2Reply};
use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::json;
use std::time::Duration;

/// A TLS server, a token of `user_1` and the recording target.
fn setup() -> (Server, String, Upstream) {
    let server = Server::start_with(Options {
        tls: true,
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    (server, t, Upstream::start())
}

fn ca(server: &Server) -> std::path::PathBuf {
    server.ca.clone().unwrap()
}

/// Stores [`VISA`] for `user_1` over HTTP/1.1 on the TLS listener; its id.
fn add_card(server: &Server, token: &str) -> String {
    let body = card_body("user_1", VISA, CVC).to_string();
    let request = format!(
        "POST /projects/{PROJECT}/payment-methods HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (_, answer) = tls::h1_exchange(server.port(), &ca(server), tls::H1, request.as_bytes())
        .expect("no TLS connection");
    assert_eq!(tls::h1_status(&answer), 201, "{answer}");
    let json = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(json).unwrap();
    json["id"].as_str().unwrap().to_string()
}

fn tpl(pm: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}")
}

/// A JSON body of `items` 1 KiB items, a template where `templated(i)`, and what the target
/// should receive.
fn body_with(pm: &str, items: usize, templated: &dyn Fn(usize) -> bool) -> (String, String) {
    let filler = "x".repeat(1000);
    let (sent, expected): (Vec<_>, Vec<_>) = (0..items)
        .map(|i| match templated(i) {
            true => (json!({"i": i, "v": tpl(pm)}), json!({"i": i, "v": VISA})),
            false => (json!({"i": i, "v": filler}), json!({"i": i, "v": filler})),
        })
        .unzip();
    (
        json!({ "items": sent }).to_string(),
        json!({ "items": expected }).to_string(),
    )
}

/// `body` in `n` pieces of about the same size.
fn pieces(body: &str, n: usize) -> Vec<&[u8]> {
    body.as_bytes().chunks(body.len().div_ceil(n)).collect()
}

/// Sends a proxied POST of `body` in `n` DATA frames to `target` over `sender`, with a
/// `Content-Length` when `declared`.
async fn proxy(
    sender: &mut h2::client::SendRequest<bytes::Bytes>,
    token: &str,
    target: &str,
    body: &str,
    n: usize,
    declared: bool,
) -> Result<H2Reply, String> {
    let auth = format!("Bearer {token}");
    let length = body.len().to_string();
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("svc-target-url", target),
        ("content-type", "application/json"),
    ];
    if declared {
        headers.push(("content-length", length.as_str()));
    }
    h2_request(
        sender,
        "POST",
        &format!("/projects/{PROJECT}/proxy"),
        &headers,
        &pieces(body, n),
        Duration::from_millis(20),
    )
    .await
}

/// `GET` of payment method `id` over h2 with `auth`.
async fn get(sender: &mut h2::client::SendRequest<bytes::Bytes>, auth: &str, id: &str) -> H2Reply {
    let path = format!("/projects/{PROJECT}/payment-methods/{id}");
    h2_request(
        sender,
        "GET",
        &path,
        &[("authorization", auth)],
        &[],
        Duration::ZERO,
    )
    .await
    .unwrap()
}

/// A request the proxy must refuse: answered 400 or 502, or its stream reset, but in time.
fn assert_refused(outcome: Result<H2Reply, String>, what: &str) {
    match outcome {
        Ok(r) => assert!(
            r.status == 400 || r.status == 502,
            "{what}: {} {:?}",
            r.status,
            r.body
        ),
        Err(e) => assert!(!e.contains("in time"), "{what}: {e}"),
    }
}

#[test]
fn rest_over_h2_and_http1_on_the_same_tls_listener() {
    let (server, t, _up) = setup();
    let auth = format!("Bearer {t}");
    let port = server.port();
    let created = runtime().block_on(async {
        let mut sender = h2_connect(port, &ca(&server))
            .await
            .expect("the listener did not negotiate h2");
        let body = card_body("user_1", VISA, CVC).to_string();
        let created = h2_request(
            &mut sender,
            "POST",
            &format!("/projects/{PROJECT}/payment-methods"),
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            &pieces(&body, 3),
            Duration::from_millis(20),
        )
        .await
        .unwrap();
        assert_eq!(created.status, 201, "{:?}", created.body);
        let id = created.json()["id"].as_str().unwrap().to_string();
        let got = get(&mut sender, &auth, &id).await;
        assert_eq!(got.status, 200, "{:?}", got.body);
        assert_eq!(got.json()["id"], id.as_str());
        assert_eq!(
            got.json()["card"]["details"]["last4"],
            "4242",
            "{:?}",
            got.body
        );
        // An error keeps its envelope over h2.
        let missing = get(&mut sender, &auth, "pm_missing").await;
        assert_eq!(missing.status, 404);
        assert_eq!(missing.json()["error"]["status"], 404);
        id
    });
    // HTTP/1.1 on the same listener: chosen by ALPN when the client offers only it, and
    // when it offers nothing.
    let request = format!(
        "GET /projects/{PROJECT}/payment-methods/{created} HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: {auth}\r\nConnection: close\r\n\r\n"
    );
    for alpn in [tls::H1, b"".as_slice()] {
        let (chosen, answer) = tls::h1_exchange(port, &ca(&server), alpn, request.as_bytes())
            .expect("no TLS connection");
        assert_eq!(chosen, if alpn.is_empty() { "" } else { "http/1.1" });
        assert_eq!(tls::h1_status(&answer), 200, "{answer}");
        assert!(answer.contains(&created), "{answer}");
    }
}

#[test]
fn h2_bodies_in_several_data_frames_are_substituted() {
    let (server, t, up) = setup();
    let pm = add_card(&server, &t);
    let port = server.port();
    // Read whole (≤ 64 KiB with Content-Length: the prepared path), and streamed (no
    // Content-Length; and past 64 KiB with one).
    let cases = [
        (body_with(&pm, 40, &|i| i % 13 == 0), 4, true),
        (body_with(&pm, 40, &|i| i % 13 == 0), 4, false),
        (
            body_with(&pm, 300, &|i| i == 0 || i == 150 || i == 299),
            6,
            true,
        ),
        (
            body_with(&pm, 300, &|i| i == 0 || i == 150 || i == 299),
            6,
            false,
        ),
    ];
    runtime().block_on(async {
        let mut sender = h2_connect(port, &ca(&server)).await.unwrap();
        for (k, ((body, expected), n, declared)) in cases.iter().enumerate() {
            let r = proxy(&mut sender, &t, &up.url("/pay"), body, *n, *declared)
                .await
                .unwrap();
            assert_eq!(r.status, 201, "case {k}: {:?}", r.body);
            let got = &up.requests()[k];
            assert!(
                got.body == expected.as_bytes(),
                "case {k}: the target got another body"
            );
        }
    });
}

#[test]
fn a_failed_template_on_h2_never_reaches_the_target_complete() {
    let (server, t, up) = setup();
    let pm = add_card(&server, &t);
    let port = server.port();
    // The last item names a payment method that does not exist.
    let bad = |items: usize| {
        let (mut body, _) = body_with(&pm, items, &|i| i == 0);
        body.truncate(body.len() - 2);
        body.push_str(&format!(",{{\"last\":\"{}\"}}]}}", tpl("pm_missing")));
        body
    };
    runtime().block_on(async {
        let mut sender = h2_connect(port, &ca(&server)).await.unwrap();
        // Read whole: 400 before any connection to the target.
        let r = proxy(&mut sender, &t, &up.url("/x"), &bad(20), 3, true)
            .await
            .unwrap();
        assert_eq!(r.status, 400, "{:?}", r.body);
        assert_eq!(r.json()["error"]["type"], "invalidTemplate");
        assert_eq!(up.connections(), 0, "the target was contacted");
        // Streamed: answered with an error or the stream reset; the target never has a
        // complete request.
        for (items, declared) in [(20, false), (600, true), (600, false)] {
            let mut fresh = h2_connect(port, &ca(&server)).await.unwrap();
            let outcome = proxy(&mut fresh, &t, &up.url("/x"), &bad(items), 6, declared).await;
            assert_refused(outcome, &format!("{items} items"));
        }
        // The connection of the first refusal still serves.
        let (body, _) = body_with(&pm, 2, &|_| true);
        let r = proxy(&mut sender, &t, &up.url("/ok"), &body, 2, true)
            .await
            .unwrap();
        assert_eq!(r.status, 201, "{:?}", r.body);
    });
    // The streamed ones reached the target, which saw their bodies end unfinished.
    assert!(
        eventually(Duration::from_secs(5), || up.incomplete() == 3),
        "incomplete requests at the target: {}",
        up.incomplete()
    );
    let paths: Vec<_> = up.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/ok"], "the target received a complete bad request");
}

/// A body shorter than its Content-Length on h2 (the stream ends early): refused, read
/// whole or streamed, and the target never gets a complete request.
#[test]
fn an_h2_body_shorter_than_its_content_length_never_reaches_the_target_complete() {
    let (server, t, up) = setup();
    let pm = add_card(&server, &t);
    let auth = format!("Bearer {t}");
    let target = up.url("/short");
    runtime().block_on(async {
        for items in [10, 200] {
            let (body, _) = body_with(&pm, items, &|i| i == 0);
            let declared = (body.len() + 10).to_string();
            let mut sender = h2_connect(server.port(), &ca(&server)).await.unwrap();
            let outcome = h2_request(
                &mut sender,
                "POST",
                &format!("/projects/{PROJECT}/proxy"),
                &[
                    ("authorization", &auth),
                    ("svc-target-url", &target),
                    ("content-type", "application/json"),
                    ("content-length", &declared),
                ],
                &pieces(&body, 3),
                Duration::from_millis(20),
            )
            .await;
            assert_refused(outcome, &format!("{items} items"));
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        up.requests().is_empty(),
        "the target got a complete request"
    );
}

/// A caller that stops sending its body over h2, whether the body is read whole (REST, and a
/// proxied body of at most 64 KiB with Content-Length) or streamed to the target: 408 after
/// `server.body_read_timeout`, as over HTTP/1.1 (pingora does not apply its read timeout to
/// h2 streams; paycred bounds each wait itself). The target never gets a complete request.
#[test]
fn an_h2_body_that_stops_coming_is_answered_in_bounded_time() {
    let server = Server::start_with(Options {
        tls: true,
        body_read_timeout: "1s",
        proxy_timeout: "2s",
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    let up = Upstream::start();
    let pm = add_card(&server, &t);
    let auth = format!("Bearer {t}");
    let target = up.url("/stalled");
    let (body, _) = body_with(&pm, 100, &|i| i == 0);
    let half = &body.as_bytes()[..body.len() / 2];
    let rest_path = format!("/projects/{PROJECT}/payment-methods");
    let proxy_path = format!("/projects/{PROJECT}/proxy");
    // Name, path, Content-Length, the part sent, the status wanted.
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, &'a [u8], u16);
    let cases: [Case; 3] = [
        ("rest", &rest_path, Some("100"), b"{\"entityId\": ", 408),
        ("proxy, read whole", &proxy_path, Some("60000"), half, 408),
        ("proxy, streamed", &proxy_path, None, half, 408),
    ];
    runtime().block_on(async {
        for (name, path, declared, part, want) in cases {
            let mut sender = h2_connect(server.port(), &ca(&server)).await.unwrap();
            let mut headers = vec![
                ("authorization", auth.as_str()),
                ("svc-target-url", target.as_str()),
                ("content-type", "application/json"),
            ];
            if let Some(length) = declared {
                headers.push(("content-length", length));
            }
            let r = h2_stalled(&mut sender, path, &headers, part)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.status, want, "{name}: {:?}", r.body);
            assert_eq!(r.json()["error"]["status"], want, "{name}: {:?}", r.body);
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        up.requests().is_empty(),
        "the target got a complete request"
    );
}

/// The send capacity `stream` reaches when it asks for `want` bytes and nothing is read
/// from it yet, once it stops growing (waits are bounded).
async fn capacity(stream: &mut h2::SendStream<bytes::Bytes>, want: usize) -> usize {
    stream.reserve_capacity(want);
    for _ in 0..20 {
        let grew = tokio::time::timeout(
            Duration::from_millis(100),
            std::future::poll_fn(|cx| stream.poll_capacity(cx)),
        )
        .await;
        if !matches!(grew, Ok(Some(Ok(_)))) {
            break;
        }
    }
    stream.capacity()
}

#[test]
fn an_h2_caller_may_send_more_than_64_kib_before_paycred_reads() {
    let (server, t, up) = setup();
    let port = server.port();
    let auth = format!("Bearer {t}");
    runtime().block_on(async {
        let sender = h2_connect(port, &ca(&server)).await.unwrap();
        let mut sender = sender.ready().await.unwrap();
        let mut streams = Vec::new();
        // Proxied uploads with no body yet: paycred waits for their first bytes.
        for _ in 0..5 {
            let request = http::Request::builder()
                .method("POST")
                .uri(format!("https://localhost/projects/{PROJECT}/proxy"))
                .header("authorization", auth.as_str())
                .header("svc-target-url", up.url("/pay"))
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let (_answer, stream) = sender.send_request(request, false).unwrap();
            streams.push(stream);
            sender = sender.ready().await.unwrap();
        }
        // A stream's window is 256 KiB, the connection's 1 MiB (HTTP/2's default is 64 KiB
        // for both): four streams take the whole connection window, the fifth gets none.
        let mut got = Vec::new();
        for stream in &mut streams {
            got.push(capacity(stream, 512 * 1024).await);
        }
        assert_eq!(got, [256 * 1024, 256 * 1024, 256 * 1024, 256 * 1024, 0]);
    });
}
