//! Templates in form-encoded and XML bodies, end to end against real client encodings: a body
//! written by Python's `urllib.parse.urlencode` (Stripe-style nested keys) and a SOAP envelope
//! as CyberSource's SOAP toolkit documents it, substituted on both paths (read whole,
//! streamed), received by a target that parses it with `urllib.parse.parse_qs` or
//! `xml.etree`; refused templates never reach the target.

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
    post(server, token, target, FORM, body)
}

fn post(server: &Server, token: &str, target: &str, content_type: &str, body: &str) -> Reply {
    let auth = format!("Bearer {token}");
    server.raw(
        "POST",
        &format!("/projects/{PROJECT}/proxy"),
        &[
            ("Authorization", auth.as_str()),
            ("Svc-Target-URL", target),
            ("Content-Type", content_type),
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
            let refused = (field.to_string(), *message);
            assert_refused(&server, &t, &up, FORM, &body, pad == 0, &refused);
        }
    }
    assert_target_got_nothing(&up);
}

/// Sends `body` (`whole`: up to 64 KiB, else streamed) and checks that it is refused: 400
/// `invalidTemplate` naming the field with the message when read whole; when streamed, 400,
/// or 502 once the target has the head, or the connection dropped while the body is sent.
fn assert_refused(
    server: &Server,
    token: &str,
    up: &Upstream,
    content_type: &str,
    body: &str,
    whole: bool,
    (field, message): &(String, &str),
) {
    if whole {
        let r = post(server, token, &up.url("/x"), content_type, body);
        r.assert_error(400, "invalidTemplate");
        assert_eq!(r.json["error"]["details"]["field"], *field, "{}", r.text);
        assert!(r.text.contains(message), "{}", r.text);
    } else {
        let answer = raw_post(server, token, &up.url("/x"), content_type, body);
        assert!(
            answer.is_empty()
                || answer.starts_with("HTTP/1.1 400")
                || answer.starts_with("HTTP/1.1 502"),
            "{answer}"
        );
    }
}

fn assert_target_got_nothing(up: &Upstream) {
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        up.requests().is_empty(),
        "the target received a complete request"
    );
}

const FORM: &str = "application/x-www-form-urlencoded";

/// Sends a POST on a raw connection and reads what comes back (empty when paycred dropped
/// the connection while the body was being sent).
fn raw_post(server: &Server, token: &str, target: &str, content_type: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "POST /projects/{PROJECT}/proxy HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Svc-Target-URL: {target}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body.as_bytes());
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer
}

/// A CyberSource SOAP toolkit request (card authorization), with `card` in place of the
/// `<card>` element's children, `pad` bytes of comments before it, and `extra` at the end
/// of the request message.
fn soap(card: &str, pad: usize, extra: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/">
  <soapenv:Header>
    <wsse:Security soapenv:mustUnderstand="1" xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd">
      <wsse:UsernameToken>
        <wsse:Username>merchant_1</wsse:Username>
        <wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0&#35;PasswordText">transaction-key &amp; more</wsse:Password>
      </wsse:UsernameToken>
    </wsse:Security>
  </soapenv:Header>
  <soapenv:Body>
    <requestMessage xmlns="urn:schemas-cybersource-com:transaction-data-1.219">
      <merchantID>merchant_1</merchantID>
      <merchantReferenceCode>MRC-14344</merchantReferenceCode>
      <billTo>
        <firstName>Jane</firstName>
        <lastName>Smith</lastName>
        <street1>1295 Charleston Road</street1>
        <city>Mountain View</city>
        <state>CA</state>
        <postalCode>94043</postalCode>
        <country>US</country>
        <email>jsmith@example.com</email>
      </billTo>
      <item id="0"><unitPrice>12.34</unitPrice></item>
      <purchaseTotals><currency>USD</currency></purchaseTotals>
      <comments>{}</comments>
      <card>{card}</card>
      <ccAuthService run="true"/>{extra}
    </requestMessage>
  </soapenv:Body>
</soapenv:Envelope>
"#,
        "p".repeat(pad)
    )
}

const CARD_PATH: &str = "/Envelope/Body/requestMessage/card";

/// The `<card>` element's children with templates of `pm` (the CVC's in a CDATA section), and
/// a template in an attribute, quoted with XML references as a serializer writes them.
fn templated_card(pm: &str) -> (String, String) {
    let card = format!(
        "<accountNumber>{}</accountNumber><expirationMonth>{}</expirationMonth>\
         <expirationYear>{}</expirationYear><cvNumber><![CDATA[{}]]></cvNumber>",
        tpl(pm, "$.number"),
        tpl(pm, "$.expirationMonth"),
        tpl(pm, "$.expirationYear"),
        tpl(pm, "$.cvc"),
    );
    let attr = format!(
        r#"<merchantDefinedData><mddField id="1" check="{}"/></merchantDefinedData>"#,
        tpl(pm, "$.expirationYear").replace('\'', "&apos;")
    );
    (card, attr)
}

/// The value at `path` in the target's parse (`xml.etree`'s paths and values).
fn value_at<'a>(items: &'a [(String, String)], path: &str) -> Option<&'a str> {
    items
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, v)| v.as_str())
}

/// The parse the target answered (`xml.etree`'s paths and values), checked for the card's
/// substituted values; returns it for more checks.
fn card_received(answer: &Value, case: &str) -> Vec<(String, String)> {
    assert!(answer["error"].is_null(), "{case}: {}", answer["error"]);
    let items: Vec<(String, String)> = serde_json::from_value(answer["xml"].clone())
        .unwrap_or_else(|_| panic!("{case}: {answer}"));
    let get = |path: &str| value_at(&items, path);
    assert_eq!(
        get(&format!("{CARD_PATH}/accountNumber")),
        Some(VISA),
        "{case}"
    );
    assert_eq!(get(&format!("{CARD_PATH}/expirationMonth")), Some("12"));
    assert_eq!(get(&format!("{CARD_PATH}/expirationYear")), Some("2031"));
    assert_eq!(get(&format!("{CARD_PATH}/cvNumber")), Some(CVC));
    assert_eq!(
        get("/Envelope/Body/requestMessage/merchantDefinedData/mddField/@check"),
        Some("2031")
    );
    assert!(!answer["raw"].as_str().unwrap().contains("{{"), "{case}");
    items
}

#[test]
fn soap_envelopes_are_substituted_on_both_paths() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let target = ParsingTarget::start();
    let (card, attr) = templated_card(&pm);
    for (pad, content_type) in [
        (0, "text/xml; charset=utf-8"),
        (200 * 1024, "text/xml"),
        (0, "application/soap+xml; charset=utf-8"),
        (200 * 1024, "application/soap+xml"),
    ] {
        let body = soap(&card, pad, &attr);
        let r = post(&server, &t, &target.url(), content_type, &body);
        assert_eq!(r.status, 200, "{}", r.text);
        let items = card_received(&r.json, &format!("pad {pad}"));
        let get = |path: &str| value_at(&items, path);
        assert_eq!(
            get("/Envelope/Header/Security/UsernameToken/Password"),
            Some("transaction-key & more")
        );
        assert_eq!(
            get("/Envelope/Body/requestMessage/comments").map(str::len),
            (pad > 0).then_some(pad)
        );
    }
}

#[test]
fn xml_templates_that_cannot_be_substituted_never_reach_the_target() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let up = Upstream::start();
    let number = tpl(&pm, "$.number");
    let xxe = r#"<!DOCTYPE foo [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>"#;
    let cases = [
        (
            format!(
                "<accountNumber>{}</accountNumber>",
                tpl("pm_unknown", "$.number")
            ),
            "",
            format!("{CARD_PATH}/accountNumber"),
            "unknown payment method",
        ),
        (
            format!(
                r#"<accountNumber type="{}">1</accountNumber>"#,
                tpl("pm_unknown", "$.cvc")
            ),
            "",
            format!("{CARD_PATH}/accountNumber/@type"),
            "unknown payment method",
        ),
        (
            format!("<accountNumber>{}</accountNumber>", &number[..20]),
            "",
            format!("{CARD_PATH}/accountNumber"),
            "unterminated template",
        ),
        (
            format!("<!-- {number} --><accountNumber>1</accountNumber>"),
            "",
            CARD_PATH.to_string(),
            "comments",
        ),
        (
            format!("<accountNumber {number}=\"1\"/>"),
            "",
            format!("{CARD_PATH}/accountNumber"),
            "attribute name",
        ),
        (
            format!("<accountNumber>{number}</accountNumber>"),
            xxe,
            "/".to_string(),
            "DOCTYPE",
        ),
        (
            "<accountNumber>&#123;&#123; x }}</accountNumber>".to_string(),
            "",
            format!("{CARD_PATH}/accountNumber"),
            "character reference",
        ),
    ];
    for (card, prolog, field, message) in &cases {
        for pad in [0, 200 * 1024] {
            let body = format!("{prolog}{}", soap(card, pad, ""));
            let refused = (field.clone(), *message);
            assert_refused(&server, &t, &up, "text/xml", &body, pad == 0, &refused);
        }
    }
    assert_target_got_nothing(&up);
}

/// Sends a POST on a raw connection with its body in `pieces`, each written apart: a chunk of
/// its own (`Transfer-Encoding: chunked`) or, under one `Content-Length`, a write of its own.
/// Returns the answer's status code and its JSON body.
fn post_in_pieces(
    server: &Server,
    token: &str,
    target: &str,
    pieces: &[&str],
    chunked: bool,
) -> (u16, Value) {
    use crate::common::upstream::{read_chunked, read_head};
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        format!("Content-Length: {}", pieces.concat().len())
    };
    let head = format!(
        "POST /projects/{PROJECT}/proxy HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Svc-Target-URL: {target}\r\nContent-Type: text/xml; charset=utf-8\r\n{framing}\r\n\
         Connection: close\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).unwrap();
    for piece in pieces {
        if chunked {
            let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
            conn.write_all(chunk.as_bytes()).unwrap();
        } else {
            conn.write_all(piece.as_bytes()).unwrap();
        }
        conn.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if chunked {
        conn.write_all(b"0\r\n\r\n").unwrap();
    }
    let mut reader = BufReader::new(conn);
    let head = read_head(&mut reader).unwrap();
    let status = head[9..12].parse().unwrap();
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if lower.contains("transfer-encoding: chunked") {
        assert!(read_chunked(&mut reader, &mut body), "{head}");
    } else {
        reader.read_to_end(&mut body).unwrap();
    }
    (status, serde_json::from_slice(&body).unwrap())
}

/// A SOAP envelope sent in pieces cut inside each of its templates, chunked (streamed through
/// pingora, under and over the read-whole limit) and under a `Content-Length` (read whole,
/// the direct exchange): the target parses the same substituted values every way.
#[test]
fn soap_envelopes_with_templates_split_across_chunks_are_substituted() {
    let server = Server::start();
    let t = server.token("user_1", "private");
    let pm = server.add_card(&t, "user_1", VISA);
    let target = ParsingTarget::start();
    let (card, attr) = templated_card(&pm);
    for (pad, chunked) in [(0, true), (200 * 1024, true), (0, false)] {
        let body = soap(&card, pad, &attr);
        // Cut inside every template: after its first `{`, and in its middle.
        let mut cuts: Vec<usize> = body
            .match_indices("{{")
            .flat_map(|(at, _)| [at + 1, at + 30])
            .collect();
        assert_eq!(cuts.len(), 10);
        cuts.push(body.len());
        let mut from = 0;
        let pieces: Vec<&str> = cuts
            .iter()
            .map(|&to| {
                let piece = &body[from..to];
                from = to;
                piece
            })
            .collect();
        let (status, answer) = post_in_pieces(&server, &t, &target.url(), &pieces, chunked);
        assert_eq!(status, 200, "{answer}");
        card_received(&answer, &format!("pad {pad}, chunked {chunked}"));
    }
}
