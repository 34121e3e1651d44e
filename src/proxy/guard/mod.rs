//! The response guard: card numbers kept out of a target's answer (`proxy.response_guard`).
//!
//! The answer's headers and body are scanned as they stream (in the direct exchange's
//! relay, and in pingora's response filters for the `HEAD` and upgrade requests pingora
//! proxies), for the card numbers this request's templates revealed and the CVCs they
//! substituted, however the target wrote them: with any separators between the digits
//! (spaces, no-break and zero-width spaces, tabs, dashes, dots, slashes), as JSON escapes
//! (`\u0034`), HTML references (`&#52;`, `&nbsp;`), URL escapes, full-width or other scripts'
//! digits ([`written`] reads them, [`runs`] finds the values). With `response_guard_any_card`,
//! any run of 13 to 19 digits that passes the Luhn check is hidden too. A value split across
//! body chunks is found: a digit run that reaches a chunk's end is held back until the next
//! chunk shows where it ends (at most [`HOLD`] bytes are held).
//!
//! A CVC is found as a value of its own (`"cvc":"123"`, `1 2 3`), never inside a word or a
//! decimal number; an answer's other 3- or 4-digit value equal to it is hidden as well
//! ([`runs`] says why).
//!
//! - `mask`: each number becomes its masked form (first 6 and last 4 digits kept, the others
//!   `*`, separators kept), each CVC `*`s, every hidden digit rewritten in its own form and
//!   length (`\u0034` → `\u002a`): so `Content-Length` and chunking stay valid.
//! - `refuse`: the first [`BUFFERED_LIMIT`] bytes of the body (all of a smaller answer,
//!   whatever its framing) are read and scanned before the head is sent, and a number there
//!   or in a header answers 502 `badGateway`. Past them the answer streams: at the first
//!   number the caller's connection is cut, so the caller gets the answer's head and the
//!   bytes before that number, never the number or anything after it.
//! - `off`: the answer is relayed as the target sent it.
//! - swap ([`ResponseGuard::swapping`], the browser proxy's answers, whatever the project's
//!   mode): as `mask`, but each number and CVC becomes its stand-in, digit for digit in each
//!   digit's own form, so the browser's page shows the values it typed.
//!
//! Compressed answers are never relayed unscanned: with the guard on, the target is asked
//! for `Accept-Encoding: identity`, and an answer with any other `Content-Encoding` answers
//! 502 `badGateway` (it is not decoded).
//!

mod runs;
mod written;

use crate::config::{ProxyConfig, ResponseGuardMode};
use crate::error::{ApiError, ErrorKind};
use crate::secret::{CardNumber, Cvc};
use bytes::Bytes;
use http::header;
use pingora::http::ResponseHeader;
use zeroize::Zeroizing;

/// Under `refuse`, this much of an answer's body is read and scanned before anything of it is
/// sent: all of an answer up to this size.
pub const BUFFERED_LIMIT: usize = 64 * 1024;

pub use runs::HOLD;
use runs::{Edit, Sought, Text};
use written::rewrite;

/// What the guard did to one answer, for metrics and the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Numbers masked.
    Mask,
    /// Answered 502 before any of the answer was sent.
    Refuse,
    /// A streamed answer cut at its first number.
    Cut,
}

impl Action {
    /// The metric label and audit word.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Mask => "mask",
            Action::Refuse => "refuse",
            Action::Cut => "cut",
        }
    }
}

/// The guard of one request's answer.
pub struct ResponseGuard {
    mode: ResponseGuardMode,
    /// The numbers this request revealed and the CVCs it substituted, digits only.
    sought: Sought,
    /// Bytes held back at the end of the last chunk (the start of a digit run).
    tail: Zeroizing<Vec<u8>>,
    /// The last two bytes sent (`0`: none yet), read as what comes before the next ones.
    before: [u8; 2],
    /// The answer's head was sent: a number found now can only cut the answer.
    streaming: bool,
    /// Numbers found.
    pub found: usize,
    pub action: Option<Action>,
}

impl ResponseGuard {
    /// The guard the project configures.
    pub fn new(proxy: &ProxyConfig) -> Self {
        ResponseGuard {
            mode: proxy.response_guard,
            sought: Sought {
                any_card: proxy.response_guard_any_card,
                ..Sought::default()
            },
            tail: Zeroizing::new(Vec::new()),
            before: [0; 2],
            streaming: false,
            found: 0,
            action: None,
        }
    }

    /// The browser proxy's guard: each real value of `pairs` (a number or a CVC, with its
    /// stand-in of the same length) in an answer becomes its stand-in (module doc).
    pub fn swapping(pairs: &[(crate::secret::Revealed, &str)]) -> Self {
        use crate::secret::Revealed;
        let mut guard = ResponseGuard {
            mode: ResponseGuardMode::Mask,
            sought: Sought::default(),
            tail: Zeroizing::new(Vec::new()),
            before: [0; 2],
            streaming: false,
            found: 0,
            action: None,
        };
        let stand_in = |s: &str| Zeroizing::new(s.as_bytes().to_vec());
        for (real, with) in pairs {
            match real {
                Revealed::Number(n) if n.expose().len() == with.len() => {
                    guard.sought.numbers.push(n.clone());
                    guard.sought.numbers_as.push(stand_in(with));
                }
                Revealed::Cvc(c) if c.expose().len() == with.len() => {
                    guard.sought.cvcs.push(c.clone());
                    guard.sought.cvcs_as.push(stand_in(with));
                }
                _ => {}
            }
        }
        guard
    }

    /// Whether answers are scanned at all.
    pub fn is_on(&self) -> bool {
        self.mode != ResponseGuardMode::Off
    }

    /// Starts an answer, looking for `numbers` and `cvcs` (the request's, known once its
    /// body is substituted). Numbers shorter than 12 digits, and CVCs of other than 3 or 4
    /// digits, are not looked for.
    pub fn arm(&mut self, numbers: Vec<CardNumber>, cvcs: Vec<Cvc>) {
        let digits = |v: &str| v.bytes().all(is_digit);
        self.sought.numbers = numbers
            .into_iter()
            .filter(|n| n.expose().len() >= 12 && digits(n.expose()))
            .collect();
        self.sought.cvcs = cvcs
            .into_iter()
            .filter(|c| (3..=4).contains(&c.expose().len()) && digits(c.expose()))
            .collect();
        self.sought.numbers_as.clear();
        self.sought.cvcs_as.clear();
        self.tail.clear();
        self.before = [0; 2];
        self.streaming = false;
        self.found = 0;
        self.action = None;
    }

    /// Whether the start of an answer (up to [`BUFFERED_LIMIT`] bytes of its body, whatever
    /// its framing) is read and scanned before its head is sent: under `refuse`.
    pub fn buffers(&self) -> bool {
        self.mode == ResponseGuardMode::Refuse
    }

    /// Checks the answer's head before it is sent: a compressed answer is refused, numbers
    /// in header values are masked or refused. An error is the 502 to answer.
    pub fn head(&mut self, head: &mut ResponseHeader) -> Result<(), ApiError> {
        if !self.is_on() {
            return Ok(());
        }
        let compressed = head
            .headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"));
        if compressed {
            self.action = Some(Action::Refuse);
            return Err(ApiError::new(
                ErrorKind::BadGateway,
                "The target answered with a compressed body, which cannot be checked for card \
                 numbers; it was not relayed.",
            ));
        }
        // Each header with a number in any of its values, with all its values, masked.
        let mut masked: Vec<(header::HeaderName, Vec<http::HeaderValue>)> = Vec::new();
        for name in head.headers.keys() {
            let mut values = Vec::new();
            let mut found = 0;
            for value in head.headers.get_all(name) {
                if runs::find(
                    Text {
                        bytes: value.as_bytes(),
                        before: [0; 2],
                    },
                    &self.sought,
                    true,
                    &mut Vec::new(),
                )
                .0 == 0
                {
                    values.push(value.clone());
                    continue;
                }
                let mut bytes = Zeroizing::new(value.as_bytes().to_vec());
                let (n, _) = scan(&mut bytes, [0; 2], &self.sought, true);
                found += n;
                // Masking keeps the bytes a header value may hold (digits become `*`).
                values
                    .push(http::HeaderValue::from_bytes(&bytes).map_err(|_| ApiError::internal())?);
            }
            if found > 0 {
                self.found += found;
                masked.push((name.clone(), values));
            }
        }
        if !masked.is_empty() && self.mode == ResponseGuardMode::Refuse {
            return Err(self.refused());
        }
        for (name, values) in masked {
            head.remove_header(&name);
            for value in values {
                head.append_header(name.clone(), value)
                    .map_err(|_| ApiError::internal())?;
            }
            self.action = Some(Action::Mask);
        }
        self.streaming = true;
        Ok(())
    }

    /// Scans one piece of the body (`end` on the last); returns the bytes to send (`None`:
    /// nothing now). An error is the refusal: before the head was sent, the 502 to answer;
    /// after, the answer must be cut.
    pub fn body(&mut self, chunk: Option<Bytes>, end: bool) -> Result<Option<Bytes>, ApiError> {
        if !self.is_on() {
            return Ok(chunk);
        }
        let chunk = chunk.unwrap_or_default();
        if self.tail.is_empty() {
            let (n, keep) = runs::find(self.text(&chunk), &self.sought, end, &mut Vec::new());
            if n == 0 {
                // Nothing found: sent as it came, less the run held back.
                self.tail.extend_from_slice(&chunk[keep..]);
                self.sent(&chunk[..keep]);
                return Ok((keep > 0).then(|| chunk.slice(..keep)));
            }
        }
        let mut buf = Zeroizing::new(std::mem::take(&mut *self.tail));
        buf.extend_from_slice(&chunk);
        let (n, keep) = scan(&mut buf, self.before, &self.sought, end);
        if n > 0 {
            self.found += n;
            if self.mode == ResponseGuardMode::Refuse {
                return Err(self.refused());
            }
            self.action = Some(Action::Mask);
        }
        self.tail.extend_from_slice(&buf[keep..]);
        buf.truncate(keep);
        self.sent(&buf);
        Ok((keep > 0).then(|| Bytes::from(std::mem::take(&mut *buf))))
    }

    /// `bytes` as the guard reads them: after the bytes already sent.
    fn text<'a>(&self, bytes: &'a [u8]) -> Text<'a> {
        Text {
            bytes,
            before: self.before,
        }
    }

    /// Notes the last bytes of `sent`.
    fn sent(&mut self, sent: &[u8]) {
        match sent {
            [.., a, b] => self.before = [*a, *b],
            [b] => self.before = [self.before[1], *b],
            [] => {}
        }
    }

    /// Scans an answer read whole ([`ResponseGuard::buffers`]) where it lies: a refused one
    /// is never copied, so the caller's buffer, which it zeroizes, holds its only copy.
    /// Returns the bytes to send, as [`ResponseGuard::body`] at the end of the answer.
    pub fn whole(&mut self, body: &[u8]) -> Result<Option<Bytes>, ApiError> {
        if self.mode == ResponseGuardMode::Refuse && self.tail.is_empty() {
            let (n, _) = runs::find(self.text(body), &self.sought, true, &mut Vec::new());
            if n > 0 {
                self.found += n;
                return Err(self.refused());
            }
        }
        self.body(Some(Bytes::copy_from_slice(body)), true)
    }

    /// The refusal, noted as a 502 or a cut answer.
    fn refused(&mut self) -> ApiError {
        self.action = Some(if self.streaming {
            Action::Cut
        } else {
            Action::Refuse
        });
        ApiError::new(
            ErrorKind::BadGateway,
            "The target's answer held a card number; it was not relayed.",
        )
    }

    /// The head was sent without the body having been read whole.
    pub fn started_streaming(&mut self) {
        self.streaming = true;
    }

    /// The answer was read whole before anything was sent: a number found answers 502.
    pub fn buffering(&mut self) {
        self.streaming = false;
    }

    /// The refusal was answered with a 502 after all (pingora had not yet sent the head
    /// when the body filter found the number).
    pub fn answered_instead(&mut self) {
        if self.action == Some(Action::Cut) {
            self.action = Some(Action::Refuse);
        }
    }
}

/// pingora's `response_body_filter` for a proxied request: `body` replaced by what the
/// guard lets through. Before the end, nothing to send is `Some(empty)`; at the end it is
/// `None`.
pub fn filter(
    guard: &mut ResponseGuard,
    body: &mut Option<Bytes>,
    end_of_stream: bool,
) -> Result<(), ApiError> {
    if !guard.is_on() {
        return Ok(());
    }
    let out = guard.body(body.take(), end_of_stream)?;
    *body = match out {
        Some(b) if !b.is_empty() => Some(b),
        _ if end_of_stream => None,
        _ => Some(Bytes::new()),
    };
    Ok(())
}

fn is_digit(b: u8) -> bool {
    b.is_ascii_digit()
}

/// Hides in place what `sought` names in `buf`; returns how many values, and where the bytes
/// to hold back begin (`buf.len()` when `end`).
fn scan(buf: &mut [u8], before: [u8; 2], sought: &Sought, end: bool) -> (usize, usize) {
    let mut edits: Vec<Edit> = Vec::new();
    let (n, keep) = runs::find(Text { bytes: buf, before }, sought, end, &mut edits);
    for (at, len, put) in edits {
        if let Some(place) = buf.get_mut(at..at + len) {
            rewrite(place, put);
        }
    }
    (n, keep)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn guard(mode: ResponseGuardMode, any_card: bool, numbers: &[&str]) -> ResponseGuard {
        let mut g = ResponseGuard::new(&ProxyConfig {
            allowed_hosts: Vec::new(),
            allow_http: false,
            allow_private_networks: false,
            ca_file: None,
            timeout: Duration::from_secs(1),
            response_guard: mode,
            response_guard_any_card: any_card,
        });
        g.arm(
            numbers.iter().map(|n| CardNumber::new(*n)).collect(),
            Vec::new(),
        );
        g
    }

    /// `body` cut into pieces at `cuts`, through a masking guard.
    fn masked(g: &mut ResponseGuard, body: &str, cuts: &[usize]) -> String {
        let mut out = Vec::new();
        let mut from = 0;
        let mut ends: Vec<usize> = cuts.to_vec();
        ends.push(body.len());
        for (k, to) in ends.iter().enumerate() {
            let piece = Bytes::copy_from_slice(&body.as_bytes()[from..*to]);
            let last = k + 1 == ends.len();
            if let Some(b) = g.body(Some(piece), last).unwrap() {
                out.extend_from_slice(&b);
            }
            from = *to;
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn known_numbers_are_masked_alone_or_grouped_at_every_cut() {
        let body = r#"{"n":"4242424242424242","g":"4242 4242 4242 4242","d":"4242-4242-4242-4242","o":"12345678901234567"}"#;
        let want = r#"{"n":"424242******4242","g":"4242 42** **** 4242","d":"4242-42**-****-4242","o":"12345678901234567"}"#;
        for i in 0..=body.len() {
            for j in i..=body.len() {
                let mut g = guard(ResponseGuardMode::Mask, false, &["4242424242424242"]);
                assert_eq!(masked(&mut g, body, &[i, j]), want, "cut at {i}, {j}");
                assert_eq!(g.found, 3);
                assert_eq!(g.action, Some(Action::Mask));
            }
        }
    }

    #[test]
    fn a_swapping_guard_writes_the_stand_ins_in_each_digits_form_at_every_cut() {
        use crate::secret::Revealed;
        let body = r#"{"n":"4242424242424242","g":"4242 4242 4242 4242","e":"\u0034242424242424242","cvc":"123","q":"1234","id":"ord_123"}"#;
        let want = r#"{"n":"4242421111111117","g":"4242 4211 1111 1117","e":"\u0034242421111111117","cvc":"987","q":"1234","id":"ord_123"}"#;
        let pairs = [
            (
                Revealed::Number(CardNumber::new("4242424242424242")),
                "4242421111111117",
            ),
            (Revealed::Cvc(Cvc::new("123")), "987"),
        ];
        for i in 0..=body.len() {
            let mut g = ResponseGuard::swapping(&pairs);
            assert!(g.is_on());
            assert_eq!(masked(&mut g, body, &[i]), want, "cut at {i}");
            assert_eq!(g.found, 4);
        }
    }

    #[test]
    fn any_card_finds_luhn_runs_only() {
        let body =
            "a 5555555555554444 b 1234567890123 c 12-2030 378282246310005 d 4000056655665556";
        let mut g = guard(ResponseGuardMode::Mask, true, &[]);
        assert_eq!(
            masked(&mut g, body, &[30]),
            "a 555555******4444 b 1234567890123 c 12-2030 378282*****0005 d 400005******5556"
        );
        assert_eq!(g.found, 3);
        let mut off = guard(ResponseGuardMode::Mask, false, &[]);
        assert_eq!(masked(&mut off, body, &[]), body);
    }

    #[test]
    fn refuse_errs_and_off_passes() {
        let mut g = guard(ResponseGuardMode::Refuse, false, &["4242424242424242"]);
        assert!(g
            .body(Some(Bytes::from_static(b"x 42424242")), false)
            .is_ok());
        assert!(g
            .body(Some(Bytes::from_static(b"42424242 y")), true)
            .is_err());
        assert_eq!(g.action, Some(Action::Refuse));
        let mut off = guard(ResponseGuardMode::Off, true, &["4242424242424242"]);
        let out = off
            .body(Some(Bytes::from_static(b"4242424242424242")), true)
            .unwrap();
        assert_eq!(out.as_deref(), Some(&b"4242424242424242"[..]));
    }

    #[test]
    fn an_answer_read_whole_is_refused_where_it_lies() {
        let mut g = guard(ResponseGuardMode::Refuse, false, &["4242424242424242"]);
        g.buffering();
        assert!(g.whole(b"card 4242 4242 4242 4242.").is_err());
        assert_eq!((g.found, g.action), (1, Some(Action::Refuse)));
        g.arm(vec![CardNumber::new("4242424242424242")], Vec::new());
        let out = g.whole(b"no card 4242").unwrap();
        assert_eq!(out.as_deref(), Some(&b"no card 4242"[..]));
        assert_eq!((g.found, g.action), (0, None));
        let mut mask = guard(ResponseGuardMode::Mask, false, &["4242424242424242"]);
        let out = mask.whole(b"4242424242424242").unwrap();
        assert_eq!(out.as_deref(), Some(&b"424242******4242"[..]));
    }

    #[test]
    fn heads_are_masked_and_compressed_answers_refused() {
        let mut head = ResponseHeader::build(200, None).unwrap();
        head.insert_header("X-Card", "card 4242424242424242")
            .unwrap();
        let mut g = guard(ResponseGuardMode::Mask, false, &["4242424242424242"]);
        g.head(&mut head).unwrap();
        assert_eq!(head.headers["x-card"], "card 424242******4242");
        head.insert_header("Content-Encoding", "gzip").unwrap();
        g.arm(Vec::new(), Vec::new());
        assert!(g.head(&mut head).is_err());
        assert_eq!(g.action, Some(Action::Refuse));
    }

    #[test]
    fn a_long_digit_run_is_held_in_bounded_pieces() {
        let digits = "1".repeat(1000);
        let body = format!("{digits}4242424242424242{digits}");
        let mut g = guard(ResponseGuardMode::Mask, false, &["4242424242424242"]);
        let cuts: Vec<usize> = (1..body.len()).step_by(7).collect();
        let out = masked(&mut g, &body, &cuts);
        assert_eq!(out, format!("{digits}424242******4242{digits}"));
        assert!(g.tail.len() <= HOLD);
    }

    /// `body` through a masking guard for `numbers` and `cvcs`, cut at every place (all the
    /// cuts in two, for short bodies), each cut giving `want`.
    fn masked_at_every_cut(numbers: &[&str], cvcs: &[&str], body: &str, want: &str) {
        let arm = |g: &mut ResponseGuard| {
            g.arm(
                numbers.iter().map(|n| CardNumber::new(*n)).collect(),
                cvcs.iter().map(|c| Cvc::new(*c)).collect(),
            )
        };
        let two = body.len() <= 80;
        for i in 0..=body.len() {
            let js: Vec<usize> = if two {
                (i..=body.len()).collect()
            } else {
                vec![i]
            };
            for j in js {
                let mut g = guard(ResponseGuardMode::Mask, false, &[]);
                arm(&mut g);
                let mut out = Vec::new();
                let mut from = 0;
                for (k, to) in [i, j, body.len()].into_iter().enumerate() {
                    let piece = Bytes::copy_from_slice(&body.as_bytes()[from..to]);
                    if let Some(b) = g.body(Some(piece), k == 2).unwrap() {
                        out.extend_from_slice(&b);
                    }
                    from = to;
                }
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    want,
                    "{body:?} cut at {i}, {j}"
                );
                assert_eq!(out.len(), body.len());
            }
        }
    }

    const N: &str = "4242424242424242";

    #[test]
    fn a_number_is_masked_however_it_is_written() {
        for (body, want) in [
            ("4242.4242.4242.4242", "4242.42**.****.4242"),
            ("4242/4242/4242/4242", "4242/42**/****/4242"),
            ("4242\t4242\t4242\t4242", "4242\t42**\t****\t4242"),
            (
                "4242\u{a0}4242\u{a0}4242\u{a0}4242",
                "4242\u{a0}42**\u{a0}****\u{a0}4242",
            ),
            ("4242  4242  4242  4242", "4242  42**  ****  4242"),
            (
                "4\u{200b}2\u{200b}4\u{200b}2\u{200b}4242424242424242"[..]
                    .split_at(0)
                    .1,
                "",
            ),
        ]
        .into_iter()
        .filter(|(_, w)| !w.is_empty())
        {
            masked_at_every_cut(&[N], &[], body, want);
        }
        let zw = N
            .chars()
            .map(String::from)
            .collect::<Vec<_>>()
            .join("\u{200b}");
        let zw_want = "424242******4242"
            .chars()
            .map(String::from)
            .collect::<Vec<_>>()
            .join("\u{200b}");
        masked_at_every_cut(&[N], &[], &zw, &zw_want);
        let escaped: String = N.chars().map(|c| format!("\\u003{c}")).collect();
        let escaped_want: String = "424242******4242"
            .chars()
            .map(|c| {
                if c == '*' {
                    "\\u002a".to_string()
                } else {
                    format!("\\u003{c}")
                }
            })
            .collect();
        masked_at_every_cut(
            &[N],
            &[],
            &format!("{{\"n\":\"{escaped}\"}}"),
            &format!("{{\"n\":\"{escaped_want}\"}}"),
        );
        let entities: String = N.chars().map(|c| format!("&#{};", u32::from(c))).collect();
        let entities_want: String = "424242******4242"
            .chars()
            .map(|c| format!("&#{};", u32::from(c)))
            .collect();
        masked_at_every_cut(
            &[N],
            &[],
            &format!("<p>{entities}</p>"),
            &format!("<p>{entities_want}</p>"),
        );
        let wide: String = N
            .chars()
            .map(|c| char::from_u32(0xFF10 + c.to_digit(10).unwrap()).unwrap())
            .collect();
        let wide_want: String = "424242******4242"
            .chars()
            .map(|c| match c.to_digit(10) {
                Some(d) => char::from_u32(0xFF10 + d).unwrap(),
                None => '＊',
            })
            .collect();
        masked_at_every_cut(
            &[N],
            &[],
            &format!("card {wide}."),
            &format!("card {wide_want}."),
        );
        // Forms mixed in one number, and the page's other numbers left alone.
        masked_at_every_cut(
            &[N],
            &[],
            "total 12.50 card 42&#52;2 \\u0034242\u{a0}42４2-4242 qty 3",
            "total 12.50 card 42&#52;2 \\u00342**\u{a0}**＊*-4242 qty 3",
        );
        // Beside JSON's escapes that write no digit: a quote, a backslash.
        masked_at_every_cut(
            &[N],
            &[],
            r#"{"m":"card \"4242424242424242\" \\4242424242424242\\"}"#,
            r#"{"m":"card \"424242******4242\" \\424242******4242\\"}"#,
        );
    }

    #[test]
    fn the_substituted_cvc_is_masked_as_a_value_of_its_own() {
        for (body, want) in [
            (r#"{"cvc":"123"}"#, r#"{"cvc":"***"}"#),
            (r#"{"cvc":123}"#, r#"{"cvc":***}"#),
            ("cvc=123&x=1", "cvc=***&x=1"),
            ("<cvc>123</cvc>", "<cvc>***</cvc>"),
            ("cvc 1 2 3.", "cvc * * *."),
            ("cvc 1\u{200b}2\u{200b}3", "cvc *\u{200b}*\u{200b}*"),
            (
                r#"{"cvc":"\u0031\u0032\u0033"}"#,
                r#"{"cvc":"\u002a\u002a\u002a"}"#,
            ),
            ("<b>&#49;&#50;&#51;</b>", "<b>&#42;&#42;&#42;</b>"),
            ("cvc １２３", "cvc ＊＊＊"),
            // Not a value of its own: inside a word, a longer number, or a decimal number.
            (
                "ord_123 a123 1234 0123 123.45 9.123 1,123",
                "ord_123 a123 1234 0123 123.45 9.123 1,123",
            ),
        ] {
            masked_at_every_cut(&[N], &["123"], body, want);
        }
        // A card number with the cvc beside it.
        masked_at_every_cut(
            &[N],
            &["737"],
            "4242424242424242 12/30 737",
            "424242******4242 12/30 ***",
        );
        // Nothing is looked for unless a template substituted the cvc.
        masked_at_every_cut(&[N], &[], r#"{"cvc":"123"}"#, r#"{"cvc":"123"}"#);
    }

    #[test]
    fn a_number_in_a_header_is_masked_however_it_is_written() {
        let mut head = ResponseHeader::build(200, None).unwrap();
        head.insert_header("X-Card", "4242.4242.4242.4242").unwrap();
        head.insert_header("X-Cvc", "123").unwrap();
        let mut g = guard(ResponseGuardMode::Mask, false, &[]);
        g.arm(vec![CardNumber::new(N)], vec![Cvc::new("123")]);
        g.head(&mut head).unwrap();
        assert_eq!(head.headers["x-card"], "4242.42**.****.4242");
        assert_eq!(head.headers["x-cvc"], "***");
        assert_eq!(g.found, 2);
    }
}
