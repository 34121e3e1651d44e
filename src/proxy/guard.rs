//! The response guard: card numbers kept out of a target's answer (`proxy.response_guard`).
//!
//! The answer's headers and body are scanned as they stream (in the direct exchange's
//! relay, and in pingora's response filters for the `HEAD` and upgrade requests pingora
//! proxies), for the card numbers this request's templates revealed, written as digits alone
//! or grouped by single spaces or dashes (`4242 4242 4242 4242`, `4242-4242-4242-4242`), and,
//! with `response_guard_any_card`, for any run of 13 to 19 digits that passes the Luhn check. A number split across body chunks
//! is found: a digit run that reaches a chunk's end is held back until the next chunk shows
//! where it ends (at most [`HOLD`] bytes are held).
//!
//! - `mask`: each number becomes its masked form (first 6 and last 4 digits kept, the others
//!   `*`, separators kept): the same length, so `Content-Length` and chunking stay valid.
//! - `refuse`: the first [`BUFFERED_LIMIT`] bytes of the body (all of a smaller answer,
//!   whatever its framing) are read and scanned before the head is sent, and a number there
//!   or in a header answers 502 `badGateway`. Past them the answer streams: at the first
//!   number the caller's connection is cut, so the caller gets the answer's head and the
//!   bytes before that number, never the number or anything after it.
//! - `off`: the answer is relayed as the target sent it.
//!
//! Compressed answers are never relayed unscanned: with the guard on, the target is asked
//! for `Accept-Encoding: identity`, and an answer with any other `Content-Encoding` answers
//! 502 `badGateway` (it is not decoded).
//!
//! CVCs (3 or 4 digits) cannot be told from other numbers and are not looked for.

use crate::config::{ProxyConfig, ResponseGuardMode};
use crate::domain::issuer::luhn_valid;
use crate::error::{ApiError, ErrorKind};
use crate::secret::CardNumber;
use bytes::Bytes;
use http::header;
use pingora::http::ResponseHeader;
use zeroize::Zeroizing;

/// Under `refuse`, this much of an answer's body is read and scanned before anything of it is
/// sent: all of an answer up to this size.
pub const BUFFERED_LIMIT: usize = 64 * 1024;

/// Most bytes of a digit run held back at a chunk's end: more than the longest number with a
/// separator between every digit (19 digits, 18 separators).
pub const HOLD: usize = 64;

/// Shortest run looked at: a known number has at least 12 digits, any card at least 13.
const MIN_DIGITS: usize = 12;

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
    any_card: bool,
    /// The numbers this request revealed, digits only.
    numbers: Vec<CardNumber>,
    /// Bytes held back at the end of the last chunk (the start of a digit run).
    tail: Zeroizing<Vec<u8>>,
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
            any_card: proxy.response_guard_any_card,
            numbers: Vec::new(),
            tail: Zeroizing::new(Vec::new()),
            streaming: false,
            found: 0,
            action: None,
        }
    }

    /// Whether answers are scanned at all.
    pub fn is_on(&self) -> bool {
        self.mode != ResponseGuardMode::Off
    }

    /// Starts an answer, looking for `numbers` (the request's, known once its body is
    /// substituted). Numbers shorter than 12 digits are not looked for.
    pub fn arm(&mut self, numbers: Vec<CardNumber>) {
        self.numbers = numbers
            .into_iter()
            .filter(|n| n.expose().len() >= MIN_DIGITS && n.expose().bytes().all(is_digit))
            .collect();
        self.tail.clear();
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
                if find(
                    value.as_bytes(),
                    &self.numbers,
                    self.any_card,
                    true,
                    &mut Vec::new(),
                )
                .0 == 0
                {
                    values.push(value.clone());
                    continue;
                }
                let mut bytes = Zeroizing::new(value.as_bytes().to_vec());
                let (n, _) = scan(&mut bytes, &self.numbers, self.any_card, true);
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
            let (n, keep) = find(&chunk, &self.numbers, self.any_card, end, &mut Vec::new());
            if n == 0 {
                // Nothing found: sent as it came, less the run held back.
                self.tail.extend_from_slice(&chunk[keep..]);
                return Ok((keep > 0).then(|| chunk.slice(..keep)));
            }
        }
        let mut buf = Zeroizing::new(std::mem::take(&mut *self.tail));
        buf.extend_from_slice(&chunk);
        let (n, keep) = scan(&mut buf, &self.numbers, self.any_card, end);
        if n > 0 {
            self.found += n;
            if self.mode == ResponseGuardMode::Refuse {
                return Err(self.refused());
            }
            self.action = Some(Action::Mask);
        }
        self.tail.extend_from_slice(&buf[keep..]);
        buf.truncate(keep);
        Ok((keep > 0).then(|| Bytes::from(std::mem::take(&mut *buf))))
    }

    /// Scans an answer read whole ([`ResponseGuard::buffers`]) where it lies: a refused one
    /// is never copied, so the caller's buffer, which it zeroizes, holds its only copy.
    /// Returns the bytes to send, as [`ResponseGuard::body`] at the end of the answer.
    pub fn whole(&mut self, body: &[u8]) -> Result<Option<Bytes>, ApiError> {
        if self.mode == ResponseGuardMode::Refuse && self.tail.is_empty() {
            let (n, _) = find(body, &self.numbers, self.any_card, true, &mut Vec::new());
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

/// Position of the first digit at or after `from`: 8 bytes at a time as a word (SWAR), then
/// byte by byte for the last few.
fn next_digit(buf: &[u8], mut from: usize) -> Option<usize> {
    while let Some(word) = buf.get(from..).and_then(|rest| rest.first_chunk::<8>()) {
        let hits = digit_bytes(u64::from_le_bytes(*word));
        if hits != 0 {
            // Little-endian: the lowest set bit is the first digit.
            return Some(from + hits.trailing_zeros() as usize / 8);
        }
        from += 8;
    }
    let rest = buf.get(from..)?;
    rest.iter().position(|b| is_digit(*b)).map(|k| from + k)
}

/// Bit 7 of each byte of `word` that is an ASCII digit, and no other bit: the exact
/// "byte between m and n" test (m = `/`, n = `:`), for bytes below 128 (bytes from 128 up
/// are no digits and are masked out by `!word`).
fn digit_bytes(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW7: u64 = ONES * 127;
    let low = word & LOW7;
    (ONES * (127 + u64::from(b':')) - low)
        & !word
        & (low + ONES * (127 - u64::from(b'/')))
        & (ONES * 128)
}

fn is_separator(b: u8) -> bool {
    b == b' ' || b == b'-'
}

/// Masks in place the numbers found in `buf`; returns how many, and where the bytes to hold
/// back begin (`buf.len()` when `end`).
fn scan(buf: &mut [u8], numbers: &[CardNumber], any_card: bool, end: bool) -> (usize, usize) {
    let mut starred = Vec::new();
    let (n, keep) = find(buf, numbers, any_card, end, &mut starred);
    for i in starred {
        if let Some(b) = buf.get_mut(i) {
            *b = b'*';
        }
    }
    (n, keep)
}

/// Finds the numbers in `buf`: returns how many, and where the bytes to hold back begin;
/// pushes to `starred` the positions of the digits their masks hide.
fn find(
    buf: &[u8],
    numbers: &[CardNumber],
    any_card: bool,
    end: bool,
    starred: &mut Vec<usize>,
) -> (usize, usize) {
    let len = buf.len();
    let mut found = 0;
    let mut keep = len;
    let mut digits: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < len {
        // The next digit: a run starts there.
        let Some(start) = next_digit(buf, i) else {
            break;
        };
        digits.clear();
        i = start;
        loop {
            while i < len && is_digit(buf[i]) {
                digits.push(i);
                i += 1;
            }
            if i + 1 < len && is_separator(buf[i]) && is_digit(buf[i + 1]) {
                i += 1;
                continue;
            }
            break;
        }
        // The run may go on in the next chunk: it ends at the buffer's end, or a separator
        // is the buffer's last byte.
        let open = !end && (i == len || (i + 1 == len && is_separator(buf[i])));
        if open && i - start <= HOLD {
            keep = start;
            break;
        }
        if digits.len() >= MIN_DIGITS {
            found += match_run(buf, &digits, numbers, any_card, starred);
        }
        if open {
            // A run too long to hold: what may continue it is held (masks found in it stay).
            keep = len - HOLD;
            break;
        }
    }
    (found, keep)
}

/// Finds the numbers in one run (`digits`: the positions of its digits in `buf`).
fn match_run(
    buf: &[u8],
    digits: &[usize],
    numbers: &[CardNumber],
    any_card: bool,
    starred: &mut Vec<usize>,
) -> usize {
    let value: Zeroizing<Vec<u8>> = Zeroizing::new(digits.iter().map(|&p| buf[p]).collect());
    let mut found = 0;
    for number in numbers {
        let number = number.expose().as_bytes();
        let mut from = 0;
        while let Some(at) = value
            .get(from..)
            .and_then(|rest| rest.windows(number.len()).position(|w| w == number))
        {
            star(&digits[from + at..from + at + number.len()], starred);
            found += 1;
            from += at + number.len();
        }
    }
    if found > 0 || !any_card {
        return found;
    }
    if (13..=19).contains(&value.len()) && luhn(&value) {
        star(digits, starred);
        return 1;
    }
    // Groups of adjacent digits (a date, then a card number) one by one.
    let mut g = 0;
    while g < digits.len() {
        let mut h = g + 1;
        while h < digits.len() && digits[h] == digits[h - 1] + 1 {
            h += 1;
        }
        if (13..=19).contains(&(h - g)) && luhn(&value[g..h]) {
            star(&digits[g..h], starred);
            found += 1;
        }
        g = h;
    }
    found
}

/// Positions of the digits a mask hides: all but the first 6 and the last 4.
fn star(digits: &[usize], starred: &mut Vec<usize>) {
    let hidden = digits.len().saturating_sub(4);
    starred.extend(digits.iter().take(hidden).skip(6));
}

/// The Luhn check over ASCII digits.
fn luhn(digits: &[u8]) -> bool {
    std::str::from_utf8(digits).is_ok_and(luhn_valid)
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
        g.arm(numbers.iter().map(|n| CardNumber::new(*n)).collect());
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
    fn the_word_test_finds_exactly_the_digits() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut bytes = [b'a'; 8];
                bytes[at] = b;
                bytes[(at + 3) % 8] = 0xff - b;
                let hits = digit_bytes(u64::from_le_bytes(bytes));
                for (k, byte) in bytes.iter().enumerate() {
                    let hit = hits & (0x80 << (8 * k)) != 0;
                    assert_eq!(hit, is_digit(*byte), "byte {byte:#x} at {k}");
                }
                let hay = [&[b'x'; 5][..], &bytes, b"zz"].concat();
                assert_eq!(
                    next_digit(&hay, 0),
                    hay.iter().position(|c| is_digit(*c)),
                    "{hay:?}"
                );
            }
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
        g.arm(vec![CardNumber::new("4242424242424242")]);
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
        g.arm(Vec::new());
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
}
