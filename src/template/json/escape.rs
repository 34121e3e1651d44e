//! JSON string escapes, both ways: a template's text is JSON-unescaped before it is parsed
//! (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX` including surrogate pairs), and a
//! resolved value is escaped as the inside of a JSON string. Where escapes are in a string:
//! the end of a run of plain string bytes ([`find_stop`]) and the bytes a backslash escapes in
//! a block of 64 ([`escaped`]). And the one escape that is refused: `\u007b`, a brace that a
//! target would read as `{` ([`EscapedBraces`]).

use memchr::memmem;
use once_cell::sync::Lazy;

use crate::template::bits::find3;
use crate::template::error::NOT_UTF8;
use crate::template::held::{Encoding, ParsedCache};

/// Position of the first byte that ends a run of plain string bytes: `"` or `\\`, and in a
/// value also `{` ([`find3`]).
#[inline]
pub(super) fn find_stop(hay: &[u8], value: bool) -> Option<usize> {
    if value {
        find3(hay, b'"', b'\\', b'{')
    } else {
        find3(hay, b'"', b'\\', b'"')
    }
}

/// The escaped bytes of a block (those right after a backslash that is not itself escaped),
/// given its backslashes and whether its first byte is escaped (`carry`, 0 or 1). Returns them
/// and whether the first byte of the next block is escaped.
///
/// simdjson's trick (Langdale and Lemire, "Parsing gigabytes of JSON per second", 2019; its
/// `json_escape_scanner`): in a run of backslashes the 1st, 3rd, ... escape the next byte, so
/// which bytes are escaped depends on where each run starts. With the odd bits set around
/// them, subtracting the runs makes a borrow ripple through each run; after XOR with `ODD`,
/// the word (`code`) has a bit at every backslash that escapes and at every other byte that
/// is escaped, whether the run started at an even or odd position. A backslash that does not
/// escape is one that is escaped, hence the XOR with the backslashes. `escaped` is checked
/// against a byte loop in the tests.
#[inline]
pub(super) fn escaped(backslash: u64, carry: u64) -> (u64, u64) {
    const ODD: u64 = 0xaaaa_aaaa_aaaa_aaaa;
    // A first byte escaped by the previous block is not the start of a run.
    let potential = backslash & !carry;
    let code = ((potential << 1 | ODD).wrapping_sub(potential)) ^ ODD;
    let escaped = code ^ (backslash | carry);
    let escaping = code & backslash;
    (escaped, escaping >> 63)
}

/// Text inside a JSON string.
pub(super) struct Json;

impl Encoding for Json {
    fn parsed() -> &'static ParsedCache {
        static PARSED: ParsedCache = ParsedCache::new();
        &PARSED
    }

    #[inline]
    fn has_escapes(raw: &[u8]) -> bool {
        raw.contains(&b'\\')
    }

    /// Decodes the JSON string escapes of a template into `dst`.
    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        let text = std::str::from_utf8(raw).map_err(|_| NOT_UTF8)?;
        dst.clear();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                dst.push(c);
                continue;
            }
            let decoded = match chars.next().ok_or(BAD_ESCAPE)? {
                '"' => '"',
                '\\' => '\\',
                '/' => '/',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'u' => {
                    let first = hex4(&mut chars)?;
                    let code = match first {
                        0xd800..=0xdbff => {
                            if chars.next() != Some('\\') || chars.next() != Some('u') {
                                return Err(BAD_ESCAPE);
                            }
                            let second = hex4(&mut chars)?;
                            if !(0xdc00..=0xdfff).contains(&second) {
                                return Err(BAD_ESCAPE);
                            }
                            0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                        }
                        0xdc00..=0xdfff => return Err(BAD_ESCAPE),
                        _ => first,
                    };
                    char::from_u32(code).ok_or(BAD_ESCAPE)?
                }
                _ => return Err(BAD_ESCAPE),
            };
            dst.push(decoded);
        }
        Ok(())
    }

    /// Writes `value` as the inside of a JSON string: `"` and `\` backslash-escaped, control
    /// characters as `\u00XX`, everything else (including non-ASCII UTF-8) as is.
    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.reserve(value.len());
        let mut run = 0;
        for (i, &b) in value.iter().enumerate() {
            let escaped: [u8; 6];
            let replacement: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                0..=0x1f => {
                    escaped = [
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 0xf)],
                    ];
                    &escaped
                }
                _ => continue,
            };
            out.extend_from_slice(value.get(run..i).unwrap_or_default());
            out.extend_from_slice(replacement);
            run = i + 1;
        }
        out.extend_from_slice(value.get(run..).unwrap_or_default());
    }
}

/// What an escaped brace answers.
pub(super) const ESCAPED_BRACE: &str = "a brace written as the escape \\u007b is refused: a \
     target reads it as `{`, so it could hide a template; write braces as they are";

/// The start of the escape of `{`, `\u007b` or `\u007B`, with its last digit left out.
static ESCAPED_BRACE_START: Lazy<memmem::Finder<'static>> =
    Lazy::new(|| memmem::Finder::new(b"\\u007"));

/// Whether `bytes` holds the start of an escaped brace (`\u007`).
pub(super) fn has_escaped_braces(bytes: &[u8]) -> bool {
    ESCAPED_BRACE_START.find(bytes).is_some()
}

/// The length of an escaped brace, `\u007b`.
const ESCAPED_BRACE_LEN: usize = 6;

/// Finds the escapes of `{` (`\u007b`, `\u007B`) in a body fed chunk by chunk, wherever
/// the chunks cut them; a backslash that is itself escaped (`\\u007b`) starts none. The
/// lexer follows strings and escapes only as far as templates need, so this search runs
/// beside it, over every byte of the body.
#[derive(Debug, Clone, Default)]
pub(super) struct EscapedBraces {
    /// The body's last bytes so far, as many as an escape begun there can have.
    tail: [u8; ESCAPED_BRACE_LEN - 1],
    tail_len: usize,
    /// The backslashes right before `tail` are an odd run: `tail`'s first byte is escaped.
    odd_before: bool,
}

impl EscapedBraces {
    /// Back to the start of a body.
    pub(super) fn clear(&mut self) {
        *self = EscapedBraces::default();
    }

    /// Whether an escape may have begun in the bytes kept: they hold a backslash. When not,
    /// after a chunk without a backslash the search is where it starts
    /// ([`EscapedBraces::default`]).
    pub(super) fn pending(&self) -> bool {
        self.tail
            .get(..self.tail_len)
            .unwrap_or_default()
            .contains(&b'\\')
    }

    /// Where the last byte (`b` or `B`) of the first escaped brace is in `chunk`, wherever
    /// the escape started; `None` when there is none, and the chunk's end is then kept for
    /// the next. The bytes before it are the same however the body is cut.
    pub(super) fn find(&mut self, chunk: &[u8]) -> Option<usize> {
        if chunk.is_empty() {
            return None;
        }
        let tail = self.tail.get(..self.tail_len).unwrap_or_default();
        // An escape begun in the tail that this chunk completes.
        for s in 0..tail.len() {
            let mut bytes = tail.iter().chain(chunk).skip(s).take(ESCAPED_BRACE_LEN);
            let is_brace = bytes.by_ref().take(5).copied().eq(*b"\\u007")
                && matches!(bytes.next(), Some(b'b' | b'B'));
            if is_brace && !self.escaped(chunk, s) {
                return Some(s + ESCAPED_BRACE_LEN - 1 - tail.len());
            }
        }
        // Most chunks hold no backslash at all: a search for one byte is the cheaper way to
        // learn it (about a third of the instructions of the five-byte search over a chunk
        // without any).
        let from = memchr::memchr(b'\\', chunk).unwrap_or(chunk.len());
        let rest = chunk.get(from..).unwrap_or_default();
        for q in ESCAPED_BRACE_START.find_iter(rest).map(|q| from + q) {
            if matches!(chunk.get(q + 5), Some(b'b' | b'B')) && !self.escaped(chunk, tail.len() + q)
            {
                return Some(q + ESCAPED_BRACE_LEN - 1);
            }
        }
        let total = tail.len() + chunk.len();
        let keep = total.min(ESCAPED_BRACE_LEN - 1);
        let odd_before = self.escaped(chunk, total - keep);
        let mut kept = [0; ESCAPED_BRACE_LEN - 1];
        for (k, b) in tail.iter().chain(chunk).skip(total - keep).enumerate() {
            if let Some(slot) = kept.get_mut(k) {
                *slot = *b;
            }
        }
        *self = EscapedBraces {
            tail: kept,
            tail_len: keep,
            odd_before,
        };
        None
    }

    /// Whether the byte at `at` of the tail followed by `chunk` is escaped: the backslashes
    /// right before it are an odd run.
    fn escaped(&self, chunk: &[u8], at: usize) -> bool {
        let tail = self.tail.get(..self.tail_len).unwrap_or_default();
        let before = |k: usize| {
            if k < tail.len() {
                tail.get(k)
            } else {
                chunk.get(k - tail.len())
            }
        };
        let mut odd = false;
        for k in (0..at).rev() {
            if before(k) != Some(&b'\\') {
                return odd;
            }
            odd = !odd;
        }
        odd ^ self.odd_before
    }
}

/// The message for a malformed escape in a template.
pub(super) const BAD_ESCAPE: &str = "invalid escape sequence in template";

/// Four hex digits of a `\uXXXX` escape.
fn hex4(chars: &mut std::str::Chars<'_>) -> Result<u32, &'static str> {
    let mut code = 0;
    for _ in 0..4 {
        let digit = chars
            .next()
            .and_then(|c| c.to_digit(16))
            .ok_or(BAD_ESCAPE)?;
        code = code << 4 | digit;
    }
    Ok(code)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        let cases: [(&str, &str); 5] = [
            ("4242", "4242"),
            ("\"", "\\\""),
            ("\\", "\\\\"),
            ("\u{0}\t\u{1f}\u{7f}", "\\u0000\\u0009\\u001f\u{7f}"),
            ("é/😀", "é/😀"),
        ];
        for (value, want) in cases {
            let mut out = Vec::new();
            Json::escape_into(&mut out, value.as_bytes());
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    #[test]
    fn unescaping() {
        let cases: [(&[u8], Result<&str, &str>); 8] = [
            (br#"a\"b\\c\/d"#, Ok("a\"b\\c/d")),
            (br#"\b\f\n\r\t"#, Ok("\u{8}\u{c}\n\r\t")),
            (br#"\u00e9\u20AC\ud83d\ude00"#, Ok("é€😀")),
            (br#"\ud83d"#, Err(BAD_ESCAPE)),
            (br#"\ude00"#, Err(BAD_ESCAPE)),
            (br#"\u12"#, Err(BAD_ESCAPE)),
            (b"\\", Err(BAD_ESCAPE)),
            (b"\xff", Err("template is not valid UTF-8")),
        ];
        for (raw, want) in cases {
            let mut dst = String::new();
            let got = Json::unescape(raw, &mut dst).map(|()| dst.as_str());
            assert_eq!(got, want);
        }
    }

    #[test]
    fn escapes_match_a_byte_loop() {
        fn by_bytes(backslash: u64, carry: u64) -> (u64, u64) {
            let (mut escaped, mut next) = (0, carry);
            for k in 0..64 {
                let this = next;
                escaped |= this << k;
                next = u64::from(this == 0 && backslash >> k & 1 == 1);
            }
            (escaped, next)
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..200_000u64 {
            // xorshift; sparse and dense masks, runs of all lengths.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mask = match n % 4 {
                0 => x,
                1 => x & x.rotate_left(7),
                2 => x | x.rotate_left(3) | x.rotate_left(11),
                _ => x & x.rotate_left(5) & x.rotate_left(23),
            };
            for carry in [0, 1] {
                assert_eq!(
                    escaped(mask, carry),
                    by_bytes(mask, carry),
                    "{mask:064b} {carry}"
                );
            }
        }
    }
}
