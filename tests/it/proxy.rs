//! The proxy end to end: a recording target on 127.0.0.1, templates substituted in small
//! (checked before any connection) and multi-MiB (streamed) bodies, fail-closed errors, both
//! auth headers, the target guard with listeners that prove no connection was made.

use crate::common::upstream::{AfterAnswer, KeepAliveTls, Scripted, Upstream};
use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn tpl(pm: &str, kind: &str, path: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: '{kind}' | json: '{path}' }}}}")
}

fn proxy_path() -> String {
    format!("/projects/{PROJECT}/proxy")
}

fn setup() -> (Server, Upstream, String, String) {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let id = server.add_card(&t, "user_1", VISA);
    (server, Upstream::start(), t, id)
}

fn post(server: &Server, token: &str, target: &str, body: &[u8], extra: &[(&str, &str)]) -> Reply {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Svc-Target-URL", target),
        ("Content-Type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    server.raw("POST", &proxy_path(), &headers, Some(body))
}

fn fresh_post(server: &Server, token: &str, target: &str) -> Reply {
    let auth = format!("Bearer {token}");
    server.raw_fresh(
        "POST",
        &proxy_path(),
        &[
            ("Authorization", &auth),
            ("Svc-Target-URL", target),
            ("Content-Type", "application/json"),
        ],
        b"{}",
    )
}

#[test]
fn four_templates_in_a_small_body_are_substituted() {
    let (mut server, up, t, pm) = setup();
    let body = json!({
        "amount": 1000,
        "card": {
            "number": tpl(&pm, "pan", "$.number"),
            "exp": format!("{}/{}", tpl(&pm, "pan", "$.card.expirationMonth"), tpl(&pm, "pan", "$.expirationYear")),
            "cvc": tpl(&pm, "pan", "$.cvc"),
        },
        "note": "caf\u{e9} \"quoted\" {not a template}",
    });
    let r = post(
        &server,
        &t,
        &up.url("/v1/charges?capture=true"),
        body.to_string().as_bytes(),
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.header("X-Target"),
        Some("recorded"),
        "the target's response passes through"
    );
    let reqs = up.requests();
    assert_eq!(reqs.len(), 1);
    let got = &reqs[0];
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, "/v1/charges?capture=true");
    assert_eq!(
        got.header("Host"),
        Some(format!("127.0.0.1:{}", up.port)).as_deref()
    );
    assert!(got.header("Svc-Target-URL").is_none());
    assert!(
        got.header("Authorization").is_none(),
        "paycred's token is never forwarded"
    );
    let sent: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(sent["card"]["number"], VISA);
    assert_eq!(sent["card"]["exp"], "12/2031");
    assert_eq!(sent["card"]["cvc"], CVC);
    assert_eq!(sent["note"], body["note"]);
    assert_eq!(
        got.header("Content-Length"),
        Some(got.body.len().to_string()).as_deref()
    );
    assert!(!server.log().contains(VISA));
}

#[test]
fn a_deleted_payment_method_stops_resolving_at_once() {
    let (server, up, t, pm) = setup();
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    // Used (and so cached by the store) before the delete.
    for _ in 0..3 {
        assert_eq!(
            post(&server, &t, &up.url("/c"), body.as_bytes(), &[]).status,
            201
        );
    }
    let del = server.call(
        "DELETE",
        &format!("/projects/{PROJECT}/payment-methods/{pm}"),
        Some(&t),
        None,
    );
    assert_eq!(del.status, 204);
    let r = post(&server, &t, &up.url("/c"), body.as_bytes(), &[]);
    r.assert_error(400, "invalidTemplate");
    assert!(r.text.contains("unknown payment method"), "{}", r.text);
    assert_eq!(
        up.requests().len(),
        3,
        "the target saw nothing after the delete"
    );
}

#[test]
fn svc_authorization_leaves_the_callers_authorization_to_the_target() {
    let (server, up, t, pm) = setup();
    let body = json!({"pan": tpl(&pm, "pan", "$.number")}).to_string();
    let svc = format!("Bearer {t}");
    let target = up.url("/pay");
    let headers = [
        ("Svc-Authorization", svc.as_str()),
        ("Authorization", "Bearer target-api-key"),
        ("Svc-Target-URL", target.as_str()),
        ("Svc-Trace", "x"),
        ("Content-Type", "application/json"),
        ("X-Merchant", "m1"),
    ];
    let r = server.raw("POST", &proxy_path(), &headers, Some(body.as_bytes()));
    assert_eq!(r.status, 201, "{}", r.text);
    let got = &up.requests()[0];
    assert_eq!(got.header("Authorization"), Some("Bearer target-api-key"));
    assert_eq!(got.header("X-Merchant"), Some("m1"));
    // Names keep the caller's spelling, as pingora's own proxy sends them.
    let names: Vec<&str> = got.headers.iter().map(|(n, _)| n.as_str()).collect();
    for name in [
        "Authorization",
        "X-Merchant",
        "Content-Type",
        "Host",
        "Content-Length",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert!(
        got.headers
            .iter()
            .all(|(n, _)| !n.to_ascii_lowercase().starts_with("svc-")),
        "{:?}",
        got.headers
    );
}

#[test]
fn a_bad_template_in_a_small_body_never_reaches_the_target() {
    let (server, up, t, pm) = setup();
    let cases = [
        (
            json!({"card": {"number": tpl("pm_unknown", "pan", "$.number")}}),
            "card.number",
        ),
        (
            json!({"items": [{"pan": "{{ paymentMethod: x | type: 'pan' }}"}]}),
            "items[0].pan",
        ),
        (json!({"a": tpl(&pm, "pan", "$.cryptogram")}), "a"),
        (json!({"a": tpl(&pm, "virtualCard", "$.number")}), "a"),
        (json!({"a": tpl(&pm, "bogus", "$.number")}), "a"),
        (json!({"a": "{{ unterminated"}), "a"),
    ];
    for (body, field) in cases {
        let r = post(&server, &t, &up.url("/x"), body.to_string().as_bytes(), &[]);
        r.assert_error(400, "invalidTemplate");
        assert_eq!(r.json["error"]["details"]["field"], field, "{}", r.text);
        assert!(
            r.json["error"]["details"]["template"]
                .as_str()
                .unwrap()
                .starts_with("{{"),
            "{}",
            r.text
        );
    }
    // Another entity's payment method is unknown to this caller.
    let t2 = server.token("user_2", "private");
    let r = post(
        &server,
        &t2,
        &up.url("/x"),
        json!({"n": tpl(&pm, "pan", "$.number")})
            .to_string()
            .as_bytes(),
        &[],
    );
    r.assert_error(400, "invalidTemplate");
    assert_eq!(up.connections(), 0, "the target was contacted");
}

/// Templates where none may be (a key, between tokens, a brace written `\u007b`) and a body
/// that ends before its JSON does after a substitution: 400 `invalidTemplate` naming the field,
/// and the target is never contacted; read whole or streamed.
#[test]
fn templates_out_of_place_and_unfinished_bodies_are_refused() {
    let (server, up, t, pm) = setup();
    let pan = tpl(&pm, "pan", "$.number");
    let cases = [
        (
            format!(r#"{{"{pan}":"x"}}"#),
            r#"["{"]"#,
            "cannot be in an object key",
        ),
        (
            format!(r#"{{"a":"{pan}","b{pan}":1}}"#),
            r#"["b{"]"#,
            "cannot be in an object key",
        ),
        (
            format!(r#"{{"a":{pan}}}"#),
            "a",
            "inside a JSON string value",
        ),
        (format!(r#"[1,{pan}]"#), "[1]", "inside a JSON string value"),
        (
            r#"{"a":"\u007b{ paymentMethod: x }}"}"#.to_string(),
            "a",
            "\\u007b",
        ),
        (r#"{"a":"\u007B\u007B x }}"}"#.to_string(), "a", "\\u007b"),
        (
            format!(r#"{{"a":"{pan}","b":["x""#),
            "$",
            "ends before its JSON does",
        ),
        (format!(r#"{{"a":"{pan}"#), "$", "ends before its JSON does"),
    ];
    for (body, field, message) in &cases {
        let r = post(&server, &t, &up.url("/x"), body.as_bytes(), &[]);
        r.assert_error(400, "invalidTemplate");
        assert_eq!(
            r.json["error"]["details"]["field"], *field,
            "{body}: {}",
            r.text
        );
        let said = r.json["error"]["message"].as_str().unwrap();
        assert!(said.contains(message), "{body}: {said}");
        assert!(!r.text.contains(VISA), "the answer holds the card number");
    }
    assert_eq!(up.connections(), 0, "the target was contacted");
    // Streamed: 2 MiB bodies whose last item is out of place, or that end unfinished; with
    // templates at the start, middle and end, or at the start only (the rest of such a body
    // goes on unlexed until something needs the lexer).
    let (body, _) = big_body(&pm, 2 * 1024 * 1024);
    let (early, _) = big_body_with(&pm, 2 * 1024 * 1024, &|i, _| i == 0);
    for body in [body, early] {
        let open = body.trim_end_matches("]}").to_string();
        for streamed in [
            format!("{open},{{\"k{pan}\":1}}]}}"),
            format!("{open},{pan}]}}"),
            format!("{open},\"\\u007b\"]}}"),
            format!("{open},{{\"last\":\"{pan}\"}}"),
            format!("{open},{{\"last\":\"x\"}}"),
            format!("{open},\"x]}}"),
        ] {
            let conn = raw_proxy_post(&server, &t, &up.url("/big"), streamed.len());
            refused_as_it_streams(conn, streamed.as_bytes());
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        up.requests().is_empty(),
        "the target received a complete request"
    );
}

/// Writes `body` on `conn` (a request head written) and checks that paycred refused it: the
/// refusal may come while the body is still being sent, so paycred answers 400 (or 502 once
/// the target has the head) or drops the connection.
fn refused_as_it_streams(mut conn: std::net::TcpStream, body: &[u8]) {
    use std::io::{Read, Write};
    let _ = conn.write_all(body);
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(
        answer.is_empty()
            || answer.starts_with("HTTP/1.1 400")
            || answer.starts_with("HTTP/1.1 502"),
        "{answer}"
    );
}

/// A connection to paycred on which the head of a proxy POST (JSON, `Connection: close`)
/// has been written; the test writes the body.
fn raw_proxy_post(server: &Server, token: &str, target: &str, len: usize) -> std::net::TcpStream {
    raw_post(server, &proxy_path(), token, target, len)
}

/// [`raw_proxy_post`] to the proxy route `path` (another project's).
fn raw_post(
    server: &Server,
    path: &str,
    token: &str,
    target: &str,
    len: usize,
) -> std::net::TcpStream {
    use std::io::Write;
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Svc-Target-URL: {target}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\
         Connection: close\r\n\r\n",
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn
}

/// A body of about `size` bytes with templates at its start, middle and end, and what the
/// target should receive.
fn big_body(pm: &str, size: usize) -> (String, String) {
    big_body_with(pm, size, &|i, n| i == 0 || i == n / 2 || i == n - 1)
}

/// A body of about `size` bytes in `n` items of 1 KiB; item `i` is a template when
/// `templated(i, n)`.
fn big_body_with(
    pm: &str,
    size: usize,
    templated: &dyn Fn(usize, usize) -> bool,
) -> (String, String) {
    let filler = "x".repeat(1000);
    let n = size / 1024;
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for i in 0..n {
        let (v, e) = if templated(i, n) {
            (tpl(pm, "pan", "$.number"), VISA.to_string())
        } else {
            (filler.clone(), filler.clone())
        };
        items.push(json!({"i": i, "v": v}));
        expected.push(json!({"i": i, "v": e}));
    }
    (
        json!({"items": items}).to_string(),
        json!({"items": expected}).to_string(),
    )
}

/// Writes `body` in three pieces apart in time, so that paycred reads it in more than one
/// chunk, and returns the answer.
fn send_in_thirds(conn: std::net::TcpStream, body: &str) -> String {
    let third = body.len() / 3;
    send_cut(conn, body, &[third, 2 * third])
}

/// Writes `body` cut at `cuts` (ascending), the pieces apart in time, and returns the answer.
fn send_cut(mut conn: std::net::TcpStream, body: &str, cuts: &[usize]) -> String {
    use std::io::{Read, Write};
    let mut from = 0;
    for &to in cuts.iter().chain([&body.len()]) {
        conn.write_all(&body.as_bytes()[from..to]).unwrap();
        conn.flush().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        from = to;
    }
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer
}

#[test]
fn a_streamed_body_cut_after_its_braces_reaches_the_target_whole() {
    let (server, up, t, pm) = setup();
    let (body, expected) = big_body_with(&pm, 200 * 1024, &|i, n| i == 0 || i == n - 1);
    // Pieces that end just after a `{` (held back and sent with the piece after it, which
    // goes on unlexed), the last one inside the last template's `{{`.
    let mut cuts: Vec<usize> = [40, 80, 120, 160]
        .iter()
        .map(|k| k * 1024 + body[k * 1024..].find('{').unwrap() + 1)
        .collect();
    cuts.push(body.rfind("{{").unwrap() + 1);
    let conn = raw_proxy_post(&server, &t, &up.url("/braces"), body.len());
    let answer = send_cut(conn, &body, &cuts);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let got = &up.requests()[0];
    assert!(got.body == expected.as_bytes(), "the streamed body differs");
}

#[test]
fn a_small_body_sent_in_pieces_is_read_whole_and_substituted() {
    let (server, up, t, pm) = setup();
    // Just under the 64 KiB read-whole limit: templates at the start, middle and end; then
    // only at the start, so that the later pieces go to the target as they were read.
    let bodies = [
        big_body(&pm, 60 * 1024),
        big_body_with(&pm, 60 * 1024, &|i, _| i == 0),
    ];
    for (k, (body, expected)) in bodies.iter().enumerate() {
        assert!(body.len() < 64 * 1024);
        let conn = raw_proxy_post(&server, &t, &up.url("/pieces"), body.len());
        let answer = send_in_thirds(conn, body);
        assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
        let got = &up.requests()[k];
        assert!(
            got.body == expected.as_bytes(),
            "body {k}: the substituted body differs"
        );
        assert_eq!(
            got.header("Content-Length"),
            Some(expected.len().to_string()).as_deref()
        );
    }
}

#[test]
fn a_multi_mib_body_streams_with_templates_at_start_middle_and_end() {
    let (server, up, t, pm) = setup();
    // And with templates at the start only, the rest of the body unlexed.
    for (k, (body, expected)) in [
        big_body(&pm, 3 * 1024 * 1024),
        big_body_with(&pm, 3 * 1024 * 1024, &|i, _| i == 0),
    ]
    .into_iter()
    .enumerate()
    {
        let r = post(&server, &t, &up.url("/big"), body.as_bytes(), &[]);
        assert_eq!(r.status, 201, "{}", r.text);
        let got = &up.requests()[k];
        assert_eq!(got.body.len(), expected.len());
        assert!(got.body == expected.as_bytes(), "the streamed body differs");
    }
}

#[test]
fn a_bad_template_at_the_end_of_a_streamed_body_leaves_the_target_an_incomplete_request() {
    let (server, up, t, pm) = setup();
    let (mut body, _) = big_body(&pm, 2 * 1024 * 1024);
    body.truncate(body.len() - 2);
    body.push_str(&format!(
        ",{{\"last\":\"{}\"}}]}}",
        tpl("pm_missing", "pan", "$.number")
    ));
    let r = post(&server, &t, &up.url("/big"), body.as_bytes(), &[]);
    assert!(
        r.status == 400 || r.status == 502,
        "{} {}",
        r.status,
        r.text
    );
    if r.status == 400 {
        r.assert_error(400, "invalidTemplate");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        up.requests().is_empty(),
        "the target received a complete request"
    );
}

/// A body of another format passes byte for byte, read whole or streamed, unless it holds a
/// `{{`: a template there would reach the target unsubstituted, so it is 400
/// `invalidTemplate` and the target never receives a complete request.
#[test]
fn other_bodies_pass_through_byte_for_byte_unless_they_hold_a_template() {
    let (server, up, t, _pm) = setup();
    let auth = format!("Bearer {t}");
    let target = up.url("/raw");
    let send = |body: &[u8], content_type: &str| {
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("Svc-Target-URL", target.as_str()),
        ];
        if !content_type.is_empty() {
            headers.push(("Content-Type", content_type));
        }
        server.raw("PUT", &proxy_path(), &headers, Some(body))
    };
    let mut big = b"{ plain } text { ".repeat(10_000);
    big.extend_from_slice(&[0, 255, b'}', b'{']);
    for (k, (body, content_type)) in [
        (&b"plain { text } with {braces} {"[..], "text/plain"),
        (&big, "application/octet-stream"),
        (&big, ""),
    ]
    .into_iter()
    .enumerate()
    {
        let r = send(body, content_type);
        assert_eq!(r.status, 201, "{}", r.text);
        let got = &up.requests()[k];
        assert_eq!(got.method, "PUT");
        assert!(got.body == body, "body {k} changed");
    }
    let template = b"plain {{ paymentMethod: pm | type: 'pan' | json: '$.number' }} text";
    let r = send(template, "text/plain");
    r.assert_error(400, "invalidTemplate");
    assert!(
        r.text.contains("only in JSON, form-encoded and XML"),
        "{}",
        r.text
    );
    assert_eq!(up.requests().len(), 3, "the target received the template");
    // Streamed: the `{{` at the end of a large body, cut between its braces or not.
    for end in [&b"{"[..], b"{{ x }}"] {
        let mut body = b"{ plain } text ".repeat(10_000);
        body.extend_from_slice(b"{");
        body.extend_from_slice(end);
        let conn = raw_post(&server, &proxy_path(), &t, &target, body.len());
        refused_as_it_streams(conn, &body);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        up.requests().len(),
        3,
        "the target received a complete request"
    );
}

#[test]
fn caller_errors() {
    let (server, up, t, _pm) = setup();
    let auth = format!("Bearer {t}");
    server
        .raw(
            "POST",
            &proxy_path(),
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            Some(b"{}"),
        )
        .assert_error(400, "invalidRequest");
    let target = up.url("/x");
    server
        .raw(
            "POST",
            &proxy_path(),
            &[("Svc-Target-URL", &target)],
            Some(b"{}"),
        )
        .assert_error(401, "unauthorized");
    let public = server.token("user_1", "public");
    post(&server, &public, &target, b"{}", &[]).assert_error(403, "forbidden");
    post(&server, &t, "https://evil.example/x", b"{}", &[]).assert_error(403, "forbidden");
    assert_eq!(up.connections(), 0);
}

#[test]
fn small_bodies_reuse_one_connection_to_the_target() {
    let (server, up, t, pm) = setup();
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    for _ in 0..5 {
        let r = post(&server, &t, &up.url("/c"), body.as_bytes(), &[]);
        assert_eq!(r.status, 201, "{}", r.text);
    }
    assert_eq!(up.requests().len(), 5);
    assert_eq!(up.connections(), 1, "the pooled connection is reused");
    assert_target_connections(&server, 1, 4);
}

/// `/metrics` counts `opened` connections to targets and `reused` idle ones.
fn assert_target_connections(server: &Server, opened: u64, reused: u64) {
    let metrics = server.metrics().text;
    for line in [
        format!("paycred_target_connections_opened_total {opened}"),
        format!("paycred_target_connections_reused_total {reused}"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}: {metrics}");
    }
}

#[test]
fn a_target_that_closes_after_each_answer_still_gets_every_request() {
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        AfterAnswer::Close,
    );
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    for _ in 0..4 {
        let r = post(&server, &t, &target.url("/c"), body.as_bytes(), &[]);
        assert_eq!((r.status, r.text.as_str()), (200, "ok"));
    }
    assert_eq!(target.answered(), 4, "each request reached the target once");
    assert_eq!(
        target.connections(),
        4,
        "a connection the target closes is not pooled"
    );
}

/// The target closes each connection 100 ms after its answer, without saying so in a header
/// (an idle timeout shorter than paycred's): the connection goes into the pool open, and is
/// closed while it waits there. The pool sees the close before the next request would take
/// it, so even a POST without an `Idempotency-Key`, which is never sent twice, goes out on a
/// new connection and succeeds.
#[test]
fn a_connection_the_target_closed_while_idle_is_not_reused() {
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        AfterAnswer::CloseAfter(Duration::from_millis(100)),
    );
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    for i in 1..=3 {
        let r = post(&server, &t, &target.url("/c"), body.as_bytes(), &[]);
        assert_eq!((r.status, r.text.as_str()), (200, "ok"));
        // The target has closed it, and paycred's runtime has had time to see that.
        assert!(
            target.wait_closed_idle(i),
            "the target did not close connection {i}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!((target.answered(), target.dropped()), (3, 0));
    assert_eq!(target.connections(), 3);
    assert_target_connections(&server, 3, 0);
}

#[test]
fn a_pooled_connection_the_target_drops_is_retried_on_a_new_one_when_replayable() {
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        AfterAnswer::DropNextRequest,
    );
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    for _ in 0..3 {
        let r = post(
            &server,
            &t,
            &target.url("/c"),
            body.as_bytes(),
            &[("Idempotency-Key", "k1")],
        );
        assert_eq!((r.status, r.text.as_str()), (200, "ok"));
    }
    // Requests 2 and 3 each went out on the reused connection, were dropped, and were sent
    // once more on a new one: harmless, the target can tell by the Idempotency-Key.
    assert_eq!((target.answered(), target.dropped()), (3, 2));
    assert_eq!(target.connections(), 3);
}

#[test]
fn a_post_the_target_may_have_taken_is_never_sent_twice() {
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        AfterAnswer::DropNextRequest,
    );
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    let first = post(&server, &t, &target.url("/c"), body.as_bytes(), &[]);
    assert_eq!(first.status, 200);
    // The target read the whole second request, then closed without an answer: it may have
    // charged the card, so paycred answers 502 rather than send it again.
    let second = post(&server, &t, &target.url("/c"), body.as_bytes(), &[]);
    second.assert_error(502, "badGateway");
    assert_eq!((target.answered(), target.dropped()), (1, 1));
    assert_eq!(target.connections(), 1);
}

#[test]
fn a_switch_of_protocols_nobody_asked_for_is_502() {
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
        AfterAnswer::KeepOpen,
    );
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    let r = post(&server, &t, &target.url("/c"), body.as_bytes(), &[]);
    r.assert_error(502, "badGateway");
}

#[test]
fn a_head_or_upgrade_request_with_a_body_is_refused_before_the_target_is_contacted() {
    let (server, up, t, pm) = setup();
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    let auth = format!("Bearer {t}");
    let target = up.url("/h");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Svc-Target-URL", target.as_str()),
        ("Content-Type", "application/json"),
    ];
    // A HEAD answer has no body: the status says it.
    let r = server.raw("HEAD", &proxy_path(), &headers, Some(body.as_bytes()));
    assert_eq!((r.status, r.text.as_str()), (400, ""));
    let upgrade = [
        ("Authorization", auth.as_str()),
        ("Svc-Target-URL", target.as_str()),
        ("Content-Type", "application/json"),
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
    ];
    let r = server.raw("POST", &proxy_path(), &upgrade, Some(body.as_bytes()));
    r.assert_error(400, "invalidRequest");
    assert!(up.requests().is_empty(), "the target saw nothing");
    // Without a body, a HEAD request is proxied.
    let r = server.raw("HEAD", &proxy_path(), &headers, None);
    assert_eq!(r.status, 201);
    let reqs = up.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "HEAD");
}

#[test]
fn informational_answers_are_skipped_and_a_chunked_answer_is_relayed() {
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
          HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\nX-Custom: yes\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        AfterAnswer::KeepOpen,
    );
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    for _ in 0..2 {
        let r = post(&server, &t, &target.url("/c"), body.as_bytes(), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(r.text, "hello world");
        assert_eq!(r.header("X-Custom"), Some("yes"));
    }
    assert_eq!(
        target.connections(),
        1,
        "a chunked answer leaves the connection reusable"
    );
}

/// What a caller receives when the target answers `answer` and then closes the connection.
fn relayed_until_the_target_closes(answer: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let (server, _up, t, pm) = setup();
    let target = Scripted::start(answer, AfterAnswer::Close);
    let body = json!({"n": tpl(&pm, "pan", "$.number")}).to_string();
    let mut conn = raw_proxy_post(&server, &t, &target.url("/c"), body.len());
    conn.write_all(body.as_bytes()).unwrap();
    let mut got = Vec::new();
    // Ends at the close: the caller never waits for bytes that will not come.
    let _ = conn.read_to_end(&mut got);
    assert_eq!(target.answered(), 1);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_target_that_dies_mid_answer_cuts_the_callers_response() {
    let text =
        relayed_until_the_target_closes(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.ends_with("only part"),
        "the response stops where the target's did: {text}"
    );
}

#[test]
fn a_chunked_answer_cut_short_never_looks_complete_to_the_caller() {
    let text = relayed_until_the_target_closes(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("hello"), "{text}");
    assert!(
        !text.contains("\r\n0\r\n\r\n"),
        "the caller must not get the chunked terminator: {text}"
    );
}

#[test]
fn target_down_is_502_and_slow_is_504() {
    let server = Server::start_with(Options {
        // Long enough for the hang-up thread below to run on a slow machine: a timeout
        // first would answer 504.
        proxy_timeout: "3s",
        ..Options::default()
    });
    let t = server.token("user_1", "private");
    // A target that accepts and hangs up without answering (a closed port could be reused
    // by a parallel test's listener).
    let hangup = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hangup.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in hangup.incoming().take(4) {
            drop(conn);
        }
    });
    // A fresh connection: on a reused keep-alive connection the caller sometimes sees a reset
    // instead of this 502 (noted on the proxy issue, not yet explained).
    fresh_post(&server, &t, &format!("http://127.0.0.1:{port}/x")).assert_error(502, "badGateway");
    let up = Upstream::start();
    up.set_delay(Duration::from_secs(6));
    post(&server, &t, &up.url("/slow"), b"{}", &[]).assert_error(504, "gatewayTimeout");
}

#[test]
fn forbidden_targets_are_refused_without_a_connection() {
    let server = Server::start();
    let up = Upstream::start();
    let t = token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        GUARD_PROJECT,
        "user_1",
        "private",
        300,
    );
    let p = up.port;
    let targets = vec![
        format!("http://127.0.0.1:{p}/"),
        format!("http://localhost:{p}/"),
        format!("http://127.1.2.3:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://[64:ff9b::7f00:1]:{p}/"),
        format!("http://[2002:7f00:1::]:{p}/"),
        format!("http://[::]:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://017700000001:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://0177.0.0.1:{p}/"),
        "http://10.0.0.1/".into(),
        "http://172.16.5.4/".into(),
        "http://192.168.1.1/".into(),
        "http://169.254.169.254/latest/meta-data/".into(),
        "http://100.64.0.1/".into(),
        "http://[fe80::1]/".into(),
        "http://[fd00:ec2::254]/".into(),
        "http://[fc00::1]/".into(),
        "http://[::ffff:a00:1]/".into(),
        "http://[::ffff:169.254.169.254]/".into(),
        "http://224.0.0.1/".into(),
        "http://255.255.255.255/".into(),
        "http://198.18.0.1/".into(),
        "http://192.0.2.1/".into(),
        "http://240.0.0.1/".into(),
        format!("http://user:pw@127.0.0.1:{p}/"),
        format!("ftp://127.0.0.1:{p}/"),
        "http://not-allowed.example/".into(),
    ];
    assert!(targets.len() >= 30);
    for target in &targets {
        let r = post(&server, &t, target, b"{}", &[]);
        assert_eq!(r.status, 403, "{target}: {}", r.text);
        r.assert_error(403, "forbidden");
    }
    assert_eq!(up.connections(), 0, "a forbidden target was connected to");
}

/// The YAML of a project whose targets may be `localhost` (TLS tests), with `ca_line`.
fn tls_project(id: &str, ca_line: &str) -> String {
    format!(
        "  - id: {id}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: {keys}/ed.pem}}]\n    pan: enabled\n    proxy:\n      allowed_hosts: [localhost]\n      allow_private_networks: true\n{ca_line}",
        keys = "KEYS_DIR"
    )
}

/// A paycred whose projects (`(id, trusts the test CA)`) may reach `localhost`, and a TLS
/// target made by `start` from the certificate and key of a test CA made in `dir`.
struct TlsTargets<T> {
    server: Server,
    target: T,
    url: String,
}

impl<T> TlsTargets<T> {
    fn start(
        dir: &std::path::Path,
        projects: &[(&str, bool)],
        start: impl Fn(&std::path::Path, &std::path::Path) -> T,
        port: impl Fn(&T) -> u16,
    ) -> Self {
        crate::common::tls_files(dir);
        let target = start(&dir.join("srv.pem"), &dir.join("srv.key"));
        let ca = format!("      ca_file: {}\n", dir.join("ca.pem").display());
        let extra: String = projects
            .iter()
            .map(|(id, trusted)| tls_project(id, if *trusted { &ca } else { "" }))
            .collect();
        let server = Server::start_with(Options {
            extra_project_yaml: extra,
            ..Options::default()
        });
        let url = format!("https://localhost:{}/", port(&target));
        TlsTargets {
            server,
            target,
            url,
        }
    }

    /// A proxied `GET` of the target by `project`'s `user_1`.
    fn call(&self, project: &str) -> Reply {
        let t = ed_token(project, "user_1", "private");
        self.server.raw(
            "GET",
            &format!("/projects/{project}/proxy"),
            &[
                ("Authorization", &format!("Bearer {t}")),
                ("Svc-Target-URL", &self.url),
            ],
            None,
        )
    }
}

/// A TLS target with a certificate for `localhost` signed by a test CA made here, keeping
/// connections open. Trusted through the project's `ca_file`: the request goes through. A
/// project without that root: 502 (verification fails, nothing is sent), also right after
/// the first project's requests left a verified connection in the pool (a project with its
/// own roots has its own pool group).
#[test]
fn https_targets_are_verified_against_the_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let case = TlsTargets::start(
        dir.path(),
        &[("proj_tls", true), ("proj_untrusted", false)],
        KeepAliveTls::start,
        |t| t.port,
    );
    for (project, want) in [
        ("proj_tls", 200),
        ("proj_tls", 200),
        ("proj_untrusted", 502),
    ] {
        // pingora puts a connection back in its pool just after the answer went out: give
        // it a moment, so the next request finds it there.
        std::thread::sleep(Duration::from_millis(100));
        let r = case.call(project);
        assert_eq!(r.status, want, "{project}: {}", r.text);
        if want == 502 {
            r.assert_error(502, "badGateway");
        }
    }
    // The trusted project's second request reused its connection (so the pooled one was
    // there for the untrusted project too); the untrusted one was answered by nobody.
    assert_eq!(case.target.answered(), 2);
    assert_eq!(case.target.connections(), 2);
}

/// A new connection to a TLS target paycred spoke with before resumes the session that
/// target gave: the target closes each connection after its answer, so every request makes
/// a new one. Sessions are kept per peer and verification: another project with its own CA
/// roots makes a full handshake first, and a project without those roots is still refused
/// (502, nothing sent) though sessions with the same address exist.
#[test]
fn new_connections_to_a_tls_target_resume_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let case = TlsTargets::start(
        dir.path(),
        &[
            ("proj_tls", true),
            ("proj_tls2", true),
            ("proj_untrusted", false),
        ],
        KeepAliveTls::start_closing,
        |t| t.port,
    );
    for (project, want) in [
        ("proj_tls", 200),
        ("proj_tls", 200),
        ("proj_tls", 200),
        ("proj_tls2", 200),
        ("proj_untrusted", 502),
        ("proj_tls2", 200),
    ] {
        let r = case.call(project);
        assert_eq!(r.status, want, "{project}: {}", r.text);
    }
    assert_eq!(case.target.answered(), 5);
    assert_eq!(case.target.resumed(), [false, true, true, false, true]);
}

/// A TLS target whose answers come in many records (the head a record per line, 100 KB of
/// body in records of 1,000 bytes): each answer reaches the caller whole and in order, and
/// the next request reuses the connection, so nothing of one answer is left over for the
/// next or lost in a read that took several records at once.
#[test]
fn answers_in_many_tls_records_arrive_whole_on_a_reused_connection() {
    let dir = tempfile::tempdir().unwrap();
    let case = TlsTargets::start(
        dir.path(),
        &[("proj_tls", true)],
        KeepAliveTls::start_in_pieces,
        |t| t.port,
    );
    let want = crate::common::upstream::pieces_body();
    for _ in 0..3 {
        // As above: the connection goes back to the pool just after the answer.
        std::thread::sleep(Duration::from_millis(100));
        let r = case.call("proj_tls");
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(
            r.text.as_bytes() == want.as_slice(),
            "the answer's body differs"
        );
    }
    assert_eq!(case.target.answered(), 3);
    assert_eq!(case.target.connections(), 1);
}

fn create_intent(server: &Server, t: &str, pm: &str, kind: &str, mandates: Value) -> Value {
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/purchase-intents"),
        Some(t),
        Some(&json!({"entityId": "user_1", "credentialType": kind, "paymentMethodId": pm, "mandates": mandates})),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json
}

#[test]
fn intent_templates_resolve_the_newest_active_intent_and_count_one_use_per_request() {
    let (server, up, t, pm) = setup();
    // A virtual card that may be used twice.
    let vc = create_intent(
        &server,
        &t,
        &pm,
        "virtual-card",
        json!([{"type": "usageLimit", "value": "2", "details": {"count": 2}}]),
    );
    assert_eq!(vc["status"], "active", "{vc}");
    // A network token: the first one of a payment method needs verification.
    let nt = create_intent(
        &server,
        &t,
        &pm,
        "network-token",
        json!([{"type": "maxAmount", "value": "10"}, {"type": "currency", "value": "USD"}]),
    );
    assert_eq!(nt["status"], "verify", "{nt}");
    let body = json!({
        "vc": {"number": tpl(&pm, "virtualCard", "$.number"), "cvc": tpl(&pm, "virtualCard", "$.card.cvc"), "again": tpl(&pm, "virtualCard", "$.number")},
    })
    .to_string();
    // Two requests, each naming the intent twice: one use each.
    for _ in 0..2 {
        let r = post(&server, &t, &up.url("/pay"), body.as_bytes(), &[]);
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let sent: Value = serde_json::from_slice(&up.requests()[0].body).unwrap();
    assert_eq!(sent["vc"]["number"], vc["card"]["number"]);
    assert_eq!(sent["vc"]["again"], vc["card"]["number"]);
    assert_eq!(sent["vc"]["cvc"], vc["card"]["cvc"]);
    assert_ne!(
        sent["vc"]["number"], VISA,
        "a virtual card is never the stored number"
    );
    // The usage limit is used up: no active intent any more, and the target sees nothing.
    let r = post(&server, &t, &up.url("/pay"), body.as_bytes(), &[]);
    r.assert_error(400, "invalidTemplate");
    assert_eq!(up.requests().len(), 2);
    let got = server.call(
        "GET",
        &format!(
            "/projects/{PROJECT}/purchase-intents/{}",
            vc["id"].as_str().unwrap()
        ),
        Some(&t),
        None,
    );
    assert_eq!(got.json["status"], "expired", "{}", got.text);

    // The network token resolves only once verified.
    let nt_body = json!({"token": tpl(&pm, "networkToken", "$.token.number"), "cryptogram": tpl(&pm, "networkToken", "$.cryptogram")}).to_string();
    post(&server, &t, &up.url("/pay"), nt_body.as_bytes(), &[])
        .assert_error(400, "invalidTemplate");
    let public = server.token("user_1", "public");
    let verify = format!(
        "/projects/{PROJECT}/purchase-intents/{}/verify",
        nt["id"].as_str().unwrap()
    );
    let v = server.call(
        "POST",
        &verify,
        Some(&public),
        Some(&json!({"code": "123456"})),
    );
    assert_eq!(v.json["status"], "active", "{}", v.text);
    let r = post(&server, &t, &up.url("/pay"), nt_body.as_bytes(), &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    let sent: Value = serde_json::from_slice(&up.requests()[2].body).unwrap();
    let active = server.call(
        "GET",
        &format!(
            "/projects/{PROJECT}/purchase-intents/{}",
            nt["id"].as_str().unwrap()
        ),
        Some(&t),
        None,
    );
    assert_eq!(sent["token"], active.json["token"]["number"]);
    assert_eq!(sent["cryptogram"], active.json["token"]["cryptogram"]);
}

/// An HTTPS target that takes one request on one connection and hands back its body,
/// framed by `Content-Length` or `chunked` (decoded).
fn one_https_request(dir: &std::path::Path) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    use std::io::{Read, Write};
    let mut acceptor = SslAcceptor::mozilla_intermediate(SslMethod::tls()).unwrap();
    acceptor
        .set_private_key_file(dir.join("srv.key"), SslFiletype::PEM)
        .unwrap();
    acceptor
        .set_certificate_chain_file(dir.join("srv.pem"))
        .unwrap();
    let acceptor = acceptor.build();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut tls = acceptor.accept(tcp).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let mut more = |got: &mut Vec<u8>| {
            let n = tls.read(&mut buf).unwrap();
            assert!(n > 0, "closed before the request ended");
            got.extend_from_slice(&buf[..n]);
        };
        let (head_len, length) = loop {
            more(&mut got);
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let httparse::Status::Complete(len) = req.parse(&got).unwrap() {
                let length = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map(|h| {
                        std::str::from_utf8(h.value)
                            .unwrap()
                            .parse::<usize>()
                            .unwrap()
                    });
                break (len, length);
            }
        };
        let body = match length {
            Some(length) => {
                while got.len() < head_len + length {
                    more(&mut got);
                }
                got.split_off(head_len)
            }
            None => loop {
                if let Some(body) = dechunk(&got[head_len..]) {
                    break body;
                }
                more(&mut got);
            },
        };
        let mut tls = tls;
        tls.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        tls.flush().unwrap();
        body
    });
    (port, target)
}

/// A whole `chunked` body decoded, `None` while it has not ended (panics if malformed).
fn dechunk(mut wire: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = wire.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&wire[..line]).unwrap(), 16).unwrap();
        wire = &wire[line + 2..];
        if size == 0 {
            return (wire.len() >= 2).then(|| {
                assert_eq!(&wire[..2], b"\r\n", "trailers or bytes after the end");
                body
            });
        }
        body.extend_from_slice(wire.get(..size)?);
        let end = wire.get(size..size + 2)?;
        assert_eq!(end, b"\r\n", "a chunk not ended by CRLF");
        wire = &wire[size + 2..];
    }
}

/// A body sent in pieces goes to an https target whole and in order: read whole (60 KiB,
/// templates only at its start, so the later pieces leave as they were read) and streamed
/// (300 KiB, templates at its start, middle and end, re-framed `chunked` in record-sized
/// chunks).
#[test]
fn bodies_in_pieces_reach_an_https_target_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::common::tls_files(d);
    let ca = d.join("ca.pem").display().to_string();
    let server = Server::start_with(Options {
        extra_project_yaml: tls_project("proj_tls", &format!("      ca_file: {ca}\n")),
        ..Options::default()
    });
    let t = token_for(
        &KEYS.ed.private_pem,
        "k-ed",
        "proj_tls",
        "user_1",
        "private",
        300,
    );
    let pm = server.call(
        "POST",
        "/projects/proj_tls/payment-methods",
        Some(&t),
        Some(&card_body("user_1", VISA, CVC)),
    );
    assert_eq!(pm.status, 201, "{}", pm.text);
    let pm = pm.json["id"].as_str().unwrap().to_string();
    let first: &dyn Fn(usize, usize) -> bool = &|i, _| i == 0;
    let spread: &dyn Fn(usize, usize) -> bool = &|i, n| i == 0 || i == n / 2 || i + 1 == n;
    for (size, templated) in [(60 * 1024, first), (300 * 1024, spread)] {
        let (body, expected) = big_body_with(&pm, size, templated);
        let (port, target) = one_https_request(d);
        let conn = raw_post(
            &server,
            "/projects/proj_tls/proxy",
            &t,
            &format!("https://localhost:{port}/pieces"),
            body.len(),
        );
        let answer = send_in_thirds(conn, &body);
        assert!(answer.starts_with("HTTP/1.1 201"), "{size}: {answer}");
        let got = target.join().unwrap();
        assert!(
            got == expected.as_bytes(),
            "{size}: the body the target got differs"
        );
    }
}

/// Sends one proxy request on its own connection, its body framed by `Content-Length` or
/// chunked (in two chunks), and returns the answer's status line.
fn framed_request(
    server: &Server,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    chunked: bool,
) -> String {
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: paycred.test\r\n",
        proxy_path()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let mut wire = head.into_bytes();
    if chunked {
        wire.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        let (a, b) = body.split_at(body.len() / 2);
        for piece in [a, b] {
            wire.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            wire.extend_from_slice(piece);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
    } else {
        wire.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        wire.extend_from_slice(body);
    }
    conn.write_all(&wire).unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer.lines().next().unwrap_or_default().to_string()
}

/// The same requests sent with a body read whole before the target is contacted (the
/// direct exchange: small, with `Content-Length`) and with a streamed body (chunked, or
/// larger than the preflight limit; pingora forwards it): the target sees the same headers
/// and the same body either way. Only the framing differs.
#[test]
fn a_prepared_and_a_streamed_body_reach_the_target_with_the_same_headers_and_body() {
    let (server, up, t, pm) = setup();
    let auth = format!("Bearer {t}");
    let target = up.url("/charges?x=1");
    let small = json!({"n": tpl(&pm, "pan", "$.number"), "pad": "x"}).to_string();
    let (large, large_expected) = big_body(&pm, 200 * 1024);
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [u8]);
    let cases: Vec<Case> = vec![
        (
            "POST",
            vec![
                ("Authorization", auth.as_str()),
                ("Svc-Target-URL", target.as_str()),
                ("Content-Type", "application/json"),
                ("Connection", "close, X-Hop"),
                ("X-Hop", "must not pass"),
                ("Keep-Alive", "timeout=5"),
                ("X-Request-Id", "r-1"),
                ("X-Multi", "a"),
                ("X-Multi", "b"),
                ("Idempotency-Key", "idem-1"),
            ],
            small.as_bytes(),
        ),
        (
            "PUT",
            vec![
                ("Svc-Authorization", auth.as_str()),
                ("Authorization", "Basic dGFyZ2V0OmtleQ=="),
                ("Svc-Target-URL", target.as_str()),
                ("Content-Type", "application/merge-patch+json"),
                ("Connection", "close"),
                ("Accept", "application/json"),
            ],
            small.as_bytes(),
        ),
        (
            "PATCH",
            vec![
                ("Authorization", auth.as_str()),
                ("Svc-Target-URL", target.as_str()),
                ("Content-Type", "application/json"),
                ("Connection", "close, X-Hop"),
                ("X-Hop", "no"),
                ("X-Request-Id", "r-large"),
            ],
            large.as_bytes(),
        ),
    ];
    let framing = ["content-length", "transfer-encoding"];
    for (method, headers, body) in &cases {
        let before = up.requests().len();
        for chunked in [false, true] {
            let status = framed_request(&server, method, headers, body, chunked);
            assert!(
                status.contains(" 201 "),
                "{method} chunked={chunked}: {status}"
            );
        }
        let reqs = up.requests();
        assert_eq!(reqs.len(), before + 2, "{method}");
        let (prepared, streamed) = (&reqs[before], &reqs[before + 1]);
        let seen = |r: &crate::common::upstream::Recorded| {
            let mut h: Vec<(String, String)> = r
                .headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
                .filter(|(n, _)| !framing.contains(&n.as_str()))
                .collect();
            h.sort();
            h
        };
        assert_eq!(seen(prepared), seen(streamed), "{method}: headers");
        assert_eq!(prepared.method, *method);
        assert_eq!(streamed.method, *method);
        assert_eq!(prepared.path, "/charges?x=1");
        assert_eq!(prepared.path, streamed.path);
        assert_eq!(prepared.body, streamed.body, "{method}: body");
        let names: Vec<String> = seen(prepared).into_iter().map(|(n, _)| n).collect();
        for dropped in [
            "x-hop",
            "keep-alive",
            "connection",
            "svc-target-url",
            "svc-authorization",
        ] {
            assert!(
                !names.contains(&dropped.to_string()),
                "{method}: {dropped} forwarded"
            );
        }
        if *method == "PUT" {
            assert_eq!(
                prepared.header("Authorization"),
                Some("Basic dGFyZ2V0OmtleQ==")
            );
        } else {
            assert!(
                !names.contains(&"authorization".to_string()),
                "paycred's token forwarded"
            );
        }
        let expected = if body.len() > 64 * 1024 {
            serde_json::from_str::<Value>(&large_expected).unwrap()
        } else {
            json!({"n": VISA, "pad": "x"})
        };
        assert_eq!(
            serde_json::from_slice::<Value>(&prepared.body).unwrap(),
            expected
        );
    }
    // A Connection header pingora's own proxy refuses is refused on both paths alike.
    let before = up.requests().len();
    let refused = [
        ("Authorization", auth.as_str()),
        ("Svc-Target-URL", target.as_str()),
        ("Content-Type", "application/json"),
        ("Connection", "close, Host"),
    ];
    for chunked in [false, true] {
        let status = framed_request(&server, "POST", &refused, small.as_bytes(), chunked);
        assert!(status.contains(" 400 "), "chunked={chunked}: {status}");
    }
    assert_eq!(
        up.requests().len(),
        before,
        "the target saw a refused request"
    );
}

/// A target that answers a large streamed body early (a 413 after the head) and reads the
/// rest before closing, as servers with a lingering close do: the caller gets its answer.
#[test]
fn an_early_answer_to_a_streamed_body_is_relayed() {
    use std::io::{BufRead, Read, Write};
    let (server, _up, t, pm) = setup();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut writer = conn.try_clone().unwrap();
        let mut reader = std::io::BufReader::new(conn);
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            if reader.read_line(&mut head).unwrap_or(0) == 0 {
                break;
            }
        }
        writer
            .write_all(
                b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large",
            )
            .unwrap();
        // Drains what is still coming, then closes.
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        head
    });
    let filler = "x".repeat(1 << 20);
    let body = json!({"n": tpl(&pm, "pan", "$.number"), "pad": filler}).to_string();
    let mut conn = raw_proxy_post(
        &server,
        &t,
        &format!("http://127.0.0.1:{port}/upload"),
        body.len(),
    );
    let mut sender = conn.try_clone().unwrap();
    let writing = std::thread::spawn(move || {
        let _ = sender.write_all(body.as_bytes());
    });
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.ends_with("too large"), "{text}");
    writing.join().unwrap();
    let head = target.join().unwrap();
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
}
