//! Templates in form-encoded bodies, end to end against real client encodings: a body
//! written by Python's `urllib.parse.urlencode` (Stripe-style nested keys), substituted on
//! both paths (read whole, streamed), received by a target that parses it with
//! `urllib.parse.parse_qs`; refused templates never reach the target.

use crate::common::upstream::Upstream;
use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn tpl(pm: &str, path: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '{path}' }}}}")
}

/// The Python target (`targets/parsing_target.py`), stopped when dropped.
struct ParsingTarget {
    child: Child,
    port: u16,
}

impl ParsingTarget {
    fn start() -> ParsingTarget {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/targets/parsing_target.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap();
        ParsingTarget { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/payment_methods", self.port)
    }
}

impl Drop for ParsingTarget {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `urllib.parse.urlencode(pairs)`, by Python itself.
fn urlencode(pairs: &Value) -> String {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, urllib.parse; \
             sys.stdout.write(urllib.parse.urlencode(json.load(sys.stdin)))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(pairs.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn post_form(server: &Server, token: &str, target: &str, body: &str) -> Reply {
    let auth = format!("Bearer {token}");
    server.raw(
        "POST",
        &format!("/projects/{PROJECT}/proxy"),
        &[
            ("Authorization", auth.as_str()),
            ("Svc-Target-URL", target),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(body.as_bytes()),
    )
}

#[test]
fn python_urlencoded_forms_are_substituted_on_both_paths() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let target = ParsingTarget::start();
    let note = "a&b=c {x} 100% + ünï";
    for pad in [0, 200 * 1024] {
        let body = urlencode(&json!({
            "amount": "2000",
            "card[number]": tpl(&pm, "$.number"),
            "card[exp]": format!("{}/{}", tpl(&pm, "$.expirationMonth"), tpl(&pm, "$.expirationYear")),
            "card[cvc]": tpl(&pm, "$.cvc"),
            "metadata[note]": note,
            "metadata[pad]": "p".repeat(pad),
        }));
        assert!(body.contains("%7B%7B+paymentMethod"), "{body}");
        let r = post_form(&server, &t, &target.url(), &body);
        assert_eq!(r.status, 200, "{}", r.text);
        let form = &r.json["form"];
        assert!(r.json["error"].is_null(), "{}", r.json["error"]);
        assert_eq!(form["card[number]"], json!([VISA]), "pad {pad}");
        assert_eq!(form["card[exp]"], json!(["12/2031"]));
        assert_eq!(form["card[cvc]"], json!([CVC]));
        assert_eq!(form["metadata[note]"], json!([note]));
        assert_eq!(form["amount"], json!(["2000"]));
        assert_eq!(form["metadata[pad]"][0].as_str().map(str::len), Some(pad));
    }
}

#[test]
fn form_templates_that_cannot_be_substituted_never_reach_the_target() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let up = Upstream::start();
    let cases = [
        (
            urlencode(&json!({"a": "1", "card[number]": tpl("pm_unknown", "$.number")})),
            "card[number]",
            "unknown payment method",
        ),
        (
            urlencode(&json!({"a": "1", tpl(&pm, "$.number"): "x"})),
            "{",
            "cannot be in a form key",
        ),
        (
            format!("card%5Bnumber%5D={}&b=1", &tpl(&pm, "$.number")[..20]),
            "card[number]",
            "unterminated template",
        ),
    ];
    for (body, field, message) in &cases {
        for pad in [0, 200 * 1024] {
            let body = format!("pad={}&{body}", "p".repeat(pad));
            if pad == 0 {
                let r = post_form(&server, &t, &up.url("/x"), &body);
                r.assert_error(400, "invalidTemplate");
                assert_eq!(r.json["error"]["details"]["field"], *field, "{}", r.text);
                assert!(r.text.contains(message), "{}", r.text);
            } else {
                // Streamed: refused as it streams (400, or 502 once the target has the head),
                // or the connection dropped while the body is still being sent.
                let answer = raw_form_post(&server, &t, &up.url("/x"), &body);
                assert!(
                    answer.is_empty()
                        || answer.starts_with("HTTP/1.1 400")
                        || answer.starts_with("HTTP/1.1 502"),
                    "{answer}"
                );
            }
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        up.requests().is_empty(),
        "the target received a complete request"
    );
}

/// Sends a form POST on a raw connection and reads what comes back (empty when paycred
/// dropped the connection while the body was being sent).
fn raw_form_post(server: &Server, token: &str, target: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "POST /projects/{PROJECT}/proxy HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Svc-Target-URL: {target}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body.as_bytes());
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer
}
