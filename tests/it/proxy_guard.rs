//! The response guard end to end: a target on 127.0.0.1 answers with the card number the
//! request substituted (in a header, in the body, split across chunks, chunked or with a
//! `Content-Length`, gzip-encoded), through both paths (a small body through the direct
//! exchange, a large one through pingora), under each project's `proxy.response_guard`.

use crate::common::upstream::{read_chunked, read_head, Upstream};
use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MASKED: &str = "424242******4242";

/// Projects with each guard setting (their cards are their own).
fn projects() -> String {
    let project = |id: &str, guard: &str| {
        format!(
            "  - id: {id}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    \
             pan: enabled\n    proxy:\n      allowed_hosts: [127.0.0.1]\n      allow_http: true\n      \
             allow_private_networks: true\n{guard}"
        )
    };
    [
        // The default: mask.
        project("proj_mask", ""),
        project("proj_refuse", "      response_guard: refuse\n"),
        project("proj_off", "      response_guard: 'off'\n"),
        project(
            "proj_any",
            "      response_guard: mask\n      response_guard_any_card: true\n",
        ),
    ]
    .concat()
}

fn server() -> Server {
    Server::start_with(Options {
        extra_project_yaml: projects(),
        ..Options::default()
    })
}

/// A caller of one project, with a stored Visa there (cards are each project's own).
struct Caller<'a> {
    server: &'a Server,
    project: &'static str,
    token: String,
    pm: String,
}

impl<'a> Caller<'a> {
    fn new(server: &'a Server, project: &'static str) -> Self {
        let token = ed_token(project, "user_1", "private");
        let pm = server.call(
            "POST",
            &format!("/projects/{project}/payment-methods"),
            Some(&token),
            Some(&card_body("user_1", VISA, CVC)),
        );
        assert_eq!(pm.status, 201, "{}", pm.text);
        let pm = pm.json["id"].as_str().unwrap().to_string();
        Caller {
            server,
            project,
            token,
            pm,
        }
    }

    /// A body with the card number's template; padded past the preflight limit when
    /// `streamed`, so that pingora proxies it.
    fn body(&self, streamed: bool) -> Vec<u8> {
        let pad = if streamed { 70 * 1024 } else { 0 };
        json!({
            "number": format!("{{{{ paymentMethod: {} | type: 'pan' | json: '$.number' }}}}", self.pm),
            "pad": "p".repeat(pad),
        })
        .to_string()
        .into_bytes()
    }

    /// Proxies a request to a new target that answers `answer`; the reply and the target.
    fn send(&self, answer: Vec<Vec<u8>>, streamed: bool) -> (Reply, Target) {
        self.send_body(answer, self.body(streamed))
    }

    /// A body with the card number's and the cvc's templates.
    fn body_with_cvc(&self) -> Vec<u8> {
        let field = |f: &str| {
            format!(
                "{{{{ paymentMethod: {} | type: 'pan' | json: '$.{f}' }}}}",
                self.pm
            )
        };
        json!({"number": field("number"), "cvc": field("cvc")})
            .to_string()
            .into_bytes()
    }

    /// As [`Self::send`], with this body.
    fn send_body(&self, answer: Vec<Vec<u8>>, body: Vec<u8>) -> (Reply, Target) {
        let target = Target::start(answer);
        // A connection of its own: a refused answer closes it.
        let reply = self.server.raw_fresh(
            "POST",
            &format!("/projects/{}/proxy", self.project),
            &[
                ("Authorization", &format!("Bearer {}", self.token)),
                ("Svc-Target-URL", &target.url()),
                ("Content-Type", "application/json"),
                ("Accept-Encoding", "gzip"),
            ],
            &body,
        );
        (reply, target)
    }

    /// As [`Self::send`], on a connection of its own: everything the server sends on it
    /// until it closes it.
    fn send_raw(&self, answer: Vec<Vec<u8>>, streamed: bool) -> String {
        let target = Target::start(answer);
        let port: u16 = self
            .server
            .base
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let body = self.body(streamed);
        let mut req = format!(
            "POST /projects/{}/proxy HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Authorization: Bearer {}\r\nSvc-Target-URL: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            self.project,
            self.token,
            target.url(),
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn.write_all(&req).unwrap();
        let mut got = Vec::new();
        let _ = conn.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    }
}

/// The guard's counter of `action` on `/metrics`.
fn guarded(server: &Server, action: &str) -> u64 {
    let text = server.metrics().text;
    let prefix = format!("paycred_response_guard_total{{action=\"{action}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{prefix} in {text}"))
}

/// A target that reads each request whole (any framing), records its head, and answers with
/// `answer`'s pieces, each written and flushed on its own.
struct Target {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Target {
    fn start(answer: Vec<Vec<u8>>) -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        std::thread::spawn(move || {
            // Bounded: the tests here make a handful of requests each.
            for conn in listener.incoming().take(16) {
                let Ok(conn) = conn else { continue };
                let answer = answer.clone();
                let seen = seen.clone();
                std::thread::spawn(move || serve(conn, &answer, &seen));
            }
        });
        Target { port, heads }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/charges", self.port)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve(conn: TcpStream, answer: &[Vec<u8>], seen: &Mutex<Vec<String>>) {
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let Some(head) = read_head(&mut reader) else {
            return;
        };
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if lower.contains("transfer-encoding: chunked") {
            if !read_chunked(&mut reader, &mut body) {
                return;
            }
        } else if let Some(len) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            body.resize(len, 0);
            if reader.read_exact(&mut body).is_err() {
                return;
            }
        }
        seen.lock().unwrap().push(head);
        for piece in answer {
            if writer
                .write_all(piece)
                .and_then(|()| writer.flush())
                .is_err()
            {
                return;
            }
            // Lets each piece arrive on its own (a chunk boundary on the proxy's side).
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An answer with a `Content-Length`: the number in a header and twice in the body, the
/// second time grouped, split between two writes.
fn length_answer() -> Vec<Vec<u8>> {
    let body = format!(
        r#"{{"card":"{VISA}","grouped":"4242 4242 4242 4242","order":"1234567890123456"}}"#
    );
    let (a, b) = body.split_at(body.find("4242 42").unwrap() + 7);
    vec![
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Card: {VISA}\r\n\
             Content-Length: {}\r\n\r\n{a}",
            body.len()
        )
        .into_bytes(),
        b.as_bytes().to_vec(),
    ]
}

/// A chunked answer with the number split across two chunks.
fn chunked_answer() -> Vec<Vec<u8>> {
    let (a, b) = VISA.split_at(7);
    let first = format!("{{\"card\":\"{a}");
    let second = format!("{b}\",\"order\":\"1234567890123456\"}}");
    vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec(),
        format!("{:x}\r\n{first}\r\n", first.len()).into_bytes(),
        format!("{:x}\r\n{second}\r\n0\r\n\r\n", second.len()).into_bytes(),
    ]
}

fn masked_length_body() -> String {
    format!(r#"{{"card":"{MASKED}","grouped":"4242 42** **** 4242","order":"1234567890123456"}}"#)
}

fn masked_chunked_body() -> String {
    format!(r#"{{"card":"{MASKED}","order":"1234567890123456"}}"#)
}

#[test]
fn numbers_are_masked_on_both_paths_and_the_target_is_asked_for_identity() {
    let server = server();
    let caller = Caller::new(&server, "proj_mask");
    for streamed in [false, true] {
        let (r, target) = caller.send(length_answer(), streamed);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.text, masked_length_body(), "streamed {streamed}");
        assert_eq!(r.header("X-Card"), Some(MASKED));
        let length = masked_length_body().len().to_string();
        assert_eq!(r.header("Content-Length"), Some(length.as_str()));
        let head = target.heads()[0].to_ascii_lowercase();
        assert!(head.contains("\r\naccept-encoding: identity\r\n"), "{head}");
        assert!(!head.contains("gzip"), "{head}");

        let (r, _target) = caller.send(chunked_answer(), streamed);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.text, masked_chunked_body(), "streamed {streamed}");
    }
    assert_eq!(guarded(&server, "mask"), 4);
}

#[test]
fn off_relays_the_answer_as_it_came() {
    let server = server();
    let caller = Caller::new(&server, "proj_off");
    for streamed in [false, true] {
        let (r, target) = caller.send(length_answer(), streamed);
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.text.contains(VISA) && r.text.contains("4242 4242 4242 4242"));
        assert_eq!(r.header("X-Card"), Some(VISA));
        // The caller's encoding is the target's business when nothing is scanned.
        assert!(target.heads()[0].to_ascii_lowercase().contains("gzip"));
    }
    assert_eq!(guarded(&server, "mask"), 0);
}

#[test]
fn refuse_answers_502_before_any_of_a_small_answer() {
    let server = server();
    let caller = Caller::new(&server, "proj_refuse");
    let in_body_only = {
        let mut a = length_answer();
        a[0] = String::from_utf8(a[0].clone())
            .unwrap()
            .replace(&format!("X-Card: {VISA}"), "X-Card: none")
            .into_bytes();
        a
    };
    // A number in a header, or anywhere in an answer of at most 64 KiB (with a
    // Content-Length or chunked, split across the target's writes), is refused before any of
    // the answer is sent, whichever way the request's own body went.
    for streamed in [false, true] {
        for answer in [length_answer(), in_body_only.clone(), chunked_answer()] {
            let (r, _target) = caller.send(answer, streamed);
            r.assert_error(502, "badGateway");
            assert!(!r.text.contains("4242"), "{}", r.text);
            assert!(!r.text.contains("order"), "{}", r.text);
            assert!(r.header("X-Card").is_none());
        }
    }
    // In a longer answer, a number within its first 64 KiB too.
    for streamed in [false, true] {
        let (r, _target) = caller.send(long_answer(FILLER_BEFORE_EARLY), streamed);
        r.assert_error(502, "badGateway");
        assert!(!r.text.contains("xxxx"), "{}", r.text);
    }
    assert_eq!(guarded(&server, "refuse"), 8);
}

#[test]
fn refuse_cuts_a_long_answer_before_a_number_past_its_first_64_kib() {
    let server = server();
    let caller = Caller::new(&server, "proj_refuse");
    for streamed in [false, true] {
        let text = caller.send_raw(long_answer(FILLER_BEFORE_LATE), streamed);
        assert!(!text.contains("4242424"), "{text}");
        assert!(!text.contains("order"), "{text}");
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        // What went before the number, never the number or what follows, and no chunked
        // terminator: the answer is visibly cut.
        assert!(text.contains("\"card\":\""), "{text}");
        assert!(!text.ends_with("0\r\n\r\n"), "{text}");
    }
    assert_eq!(guarded(&server, "cut"), 2);
    assert_eq!(guarded(&server, "refuse"), 0);
}

/// Filler bytes before the number in [`long_answer`]: 1 KiB (inside the first 64 KiB of the
/// answer), and 80 KiB (past them).
const FILLER_BEFORE_EARLY: usize = 1024;
const FILLER_BEFORE_LATE: usize = 80 * 1024;

/// A chunked answer of about 100 KiB: `filler` bytes of `x`, then the number split across two
/// chunks, then more filler.
fn long_answer(filler: usize) -> Vec<Vec<u8>> {
    let (a, b) = VISA.split_at(7);
    let first = format!("{{\"pad\":\"{}\",\"card\":\"{a}", "x".repeat(filler));
    let second = format!(
        "{b}\",\"order\":\"1234567890123456\",\"more\":\"{}\"}}",
        "x".repeat(100 * 1024 - filler)
    );
    vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec(),
        format!("{:x}\r\n{first}\r\n", first.len()).into_bytes(),
        format!("{:x}\r\n{second}\r\n0\r\n\r\n", second.len()).into_bytes(),
    ]
}

#[test]
fn a_compressed_answer_is_refused() {
    let server = server();
    let caller = Caller::new(&server, "proj_mask");
    // `{"card":"4242424242424242"}`, gzip-encoded (Python's `gzip.compress`).
    let gzip: &[u8] = &[
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xab, 0x56, 0x4a, 0x4e, 0x2c,
        0x4a, 0x51, 0xb2, 0x52, 0x32, 0x31, 0x42, 0x85, 0x4a, 0xb5, 0x00, 0x30, 0x8e, 0x57, 0x03,
        0x1b, 0x00, 0x00, 0x00,
    ];
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n\
         Content-Length: {}\r\n\r\n",
        gzip.len()
    )
    .into_bytes();
    answer.extend_from_slice(gzip);
    for streamed in [false, true] {
        let (r, _target) = caller.send(vec![answer.clone()], streamed);
        r.assert_error(502, "badGateway");
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("compressed"), "{}", r.text);
    }
}

#[test]
fn any_card_masks_other_luhn_numbers_and_leaves_other_digits() {
    let server = server();
    let body =
        format!(r#"{{"other":"{MASTERCARD}","order":"1234567890123456","phone":"+1 555 0100"}}"#);
    let answer = vec![format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()];
    for (project, want) in [("proj_any", "555555******4444"), ("proj_mask", MASTERCARD)] {
        let (r, _target) = Caller::new(&server, project).send(answer.clone(), false);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json["other"], want, "{project}");
        assert_eq!(r.json["order"], "1234567890123456");
        assert_eq!(r.json["phone"], "+1 555 0100");
    }
}

#[test]
fn the_guard_is_audited_with_counts_only() {
    let mut server = server();
    let (r, _target) = Caller::new(&server, "proj_mask").send(length_answer(), false);
    assert_eq!(r.status, 200, "{}", r.text);
    std::thread::sleep(Duration::from_millis(300));
    server.stop(false);
    let (ok, out, err) = audit_cli(&server, true);
    assert!(ok, "{err}");
    let guard: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"]["action"] == "proxy.guard")
        .collect();
    assert_eq!(guard.len(), 1, "{out}");
    assert_eq!(
        guard[0]["event"]["resource"],
        "host=127.0.0.1 action=mask found=3"
    );
    assert!(!out.contains("4242424242"), "{out}");
}

/// An answer without numbers passes as it came (the recording target's).
#[test]
fn an_answer_without_numbers_passes() {
    let server = server();
    let caller = Caller::new(&server, "proj_refuse");
    let upstream = Upstream::start();
    let r = server.raw(
        "POST",
        "/projects/proj_refuse/proxy",
        &[
            ("Authorization", &format!("Bearer {}", caller.token)),
            ("Svc-Target-URL", &upstream.url("/x")),
            ("Content-Type", "application/json"),
        ],
        Some(&caller.body(false)),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.json["received"].is_u64());
}

/// An answer of `body` with a `Content-Length`, split in two writes at `cut`.
fn answer_of(body: &str, cut: usize) -> Vec<Vec<u8>> {
    let (a, b) = body.as_bytes().split_at(cut.min(body.len()));
    vec![
        [
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
            a,
        ]
        .concat(),
        b.to_vec(),
    ]
}

/// The card number written another way: each digit through `digit`, `sep` between groups
/// of four.
fn written(number: &str, digit: impl Fn(char) -> String, sep: &str) -> String {
    number
        .chars()
        .collect::<Vec<_>>()
        .chunks(4)
        .map(|g| g.iter().map(|&c| digit(c)).collect::<String>())
        .collect::<Vec<_>>()
        .join(sep)
}

#[test]
fn a_number_or_the_substituted_cvc_is_masked_however_the_target_writes_it() {
    let server = server();
    let caller = Caller::new(&server, "proj_mask");
    let plain = |c: char| c.to_string();
    let zero_width = |c: char| format!("{c}\u{200b}");
    let json = |c: char| format!("\\u{:04x}", u32::from(c));
    let entity = |c: char| format!("&#{};", u32::from(c));
    let wide = |c: char| {
        char::from_u32(0xFF10 + c.to_digit(10).unwrap())
            .unwrap()
            .to_string()
    };
    let cases: Vec<(&str, String)> = vec![
        ("dots", written(VISA, plain, ".")),
        ("slashes", written(VISA, plain, "/")),
        ("tabs", written(VISA, plain, "\t")),
        ("no-break spaces", written(VISA, plain, "\u{a0}")),
        ("double spaces", written(VISA, plain, "  ")),
        ("zero-width spaces", written(VISA, zero_width, "")),
        ("JSON escapes", written(VISA, json, "")),
        ("HTML references", written(VISA, entity, "")),
        ("full-width digits", written(VISA, wide, " ")),
    ];
    for (form, number) in &cases {
        let body = format!("{{\"card\":\"{number}\",\"cvc\":\"{CVC}\",\"qty\":\"2\"}}");
        let (r, _target) =
            caller.send_body(answer_of(&body, body.len() / 2), caller.body_with_cvc());
        assert_eq!(r.status, 200, "{form}: {}", r.text);
        assert_eq!(r.text.len(), body.len(), "{form}");
        let digits: String = r
            .text
            .chars()
            .filter_map(|c| {
                c.to_digit(10)
                    .or_else(|| u32::from(c).checked_sub(0xFF10).filter(|d| *d < 10))
            })
            .map(|d| char::from_digit(d, 10).unwrap())
            .collect();
        // What the digits of the answer still say: the number's first 6 and last 4, the 2.
        assert!(!digits.contains(VISA), "{form}: {}", r.text);
        assert!(
            !r.text.contains(&format!("\"{CVC}\"")),
            "{form}: {}",
            r.text
        );
        assert!(r.text.contains("\"qty\":\"2\""), "{form}: {}", r.text);
        if *form != "JSON escapes" && *form != "HTML references" {
            assert_eq!(digits, "4242424242".to_string() + "2", "{form}: {}", r.text);
        }
    }
    // Escaped forms keep their escapes: `\u002a`, `&#42;`.
    let body = format!("{{\"card\":\"{}\"}}", written(VISA, json, ""));
    let (r, _target) = caller.send_body(answer_of(&body, 9), caller.body_with_cvc());
    assert_eq!(r.text.matches("\\u002a").count(), 6, "{}", r.text);
    // The cvc is masked only as a value of its own.
    let body = format!("{{\"cvc\":\"{CVC}\",\"id\":\"ord_{CVC}\",\"price\":\"{CVC}.50\"}}");
    let (r, _target) = caller.send_body(answer_of(&body, 10), caller.body_with_cvc());
    assert_eq!(
        r.text,
        format!("{{\"cvc\":\"***\",\"id\":\"ord_{CVC}\",\"price\":\"{CVC}.50\"}}")
    );
    // Without a cvc template the cvc is not looked for.
    let (r, _target) = caller.send_body(answer_of(&body, 10), caller.body(false));
    assert_eq!(r.text, body);
}
