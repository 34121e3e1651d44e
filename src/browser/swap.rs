//! The swap: a browser's request to an allowed host with every whole stand-in value replaced
//! by the real one ([`swap`]).
//!
//! **Where values are.** By the body's `Content-Type`:
//!
//! | type | a value is |
//! |---|---|
//! | `application/json`, `*/*+json` | a string (its escapes decoded); a number for the CVC only |
//! | `application/x-www-form-urlencoded` | a field's value, `+` and `%XX` decoded |
//! | `multipart/form-data` (its `boundary`) | a part's content; parts with a `filename` are files and are left alone |
//! | `text/plain` or none | as JSON when the body is a JSON object or array (`fetch` with a string body sends `text/plain`) |
//! | anything else | nothing: the body passes as it is |
//!
//! and the URL's query parameters, decoded as a form. A body that does not parse as its type
//! (JSON that is not JSON, multipart without its closing delimiter) is not swapped at all.
//!
//! **What is replaced.** A *whole* value, never a part of one:
//!
//! - the stand-in number, written as its digits alone or grouped by single spaces or dashes
//!   (`4242 4242 4242 4242`, `4242-4242-4242-4242`): the real number comes out with the same
//!   separators at the same places. Under any field name.
//! - the stand-in CVC, its digits alone, only under a field whose name is a CVC's: the name's
//!   last segment (`card[cvc]` → `cvc`, `card.cvc` → `cvc`), lower-cased without `_`, `-` and
//!   spaces, is one of [`CVC_NAMES`]. A `quantity=737` or a postal code equal to the stand-in
//!   CVC stays as it is, and so does the CVC in a field named otherwise. The name alone
//!   decides (a request need not carry the number as well), so that a form that sends the
//!   CVC again on its own still gets the real one. `cid` is not a CVC's name here: it is as
//!   often a client's or a campaign's id.
//!
//! A JSON number is considered for the CVC only (a number of 13 to 19 digits does not
//! survive a script's arithmetic, so forms send card numbers as strings): a number equal to
//! the stand-in CVC under a CVC's name becomes the real CVC as a script would have written
//! it, leading zeros dropped.
//!
//! **How.** Each replaced value keeps its encoding: a digit written `%34` or `\u0034` comes
//! out as `%3X` or `\u003X` of the real digit, a separator as it was written, and every byte
//! outside the replaced values is kept. So a swap never changes a body's length, but for a
//! JSON-number CVC whose real value starts with `0`.
//!
//! Bodies are small in a checkout: one larger than [`MAX_BODY`] is refused (413).

use super::standin::StandIns;
use crate::error::{ApiError, ErrorKind};
use zeroize::Zeroizing;

/// Largest request body swapped; a larger one is refused (413 `payloadTooLarge`).
pub const MAX_BODY: usize = 1024 * 1024;

/// Deepest JSON nesting read; a deeper body is not swapped.
const MAX_DEPTH: usize = 128;

/// Most characters of a value that can still be a card number: 19 digits, 18 separators.
const MAX_CHARS: usize = 37;

/// The names of a CVC field, normalised: the last segment of the name, lower-cased, without
/// `_`, `-` and spaces.
pub const CVC_NAMES: &[&str] = &[
    "cvc",
    "cvv",
    "cvc2",
    "cvv2",
    "cvd",
    "cvn",
    "cvn2",
    "csc",
    "cccsc",
    "cccvc",
    "cccvv",
    "cvccode",
    "cvvcode",
    "cvcnumber",
    "cvvnumber",
    "cardcvc",
    "cardcvv",
    "cardcvc2",
    "cardcvv2",
    "cardcsc",
    "cardcid",
    "cardcode",
    "securitycode",
    "cardsecuritycode",
    "cardverificationcode",
    "cardverificationvalue",
];

/// Why a request was not swapped. Messages never carry a card value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    #[error("the request body is larger than {MAX_BODY} bytes")]
    TooLarge,
}

impl From<SwapError> for ApiError {
    fn from(e: SwapError) -> Self {
        match e {
            SwapError::TooLarge => ApiError::new(
                ErrorKind::PayloadTooLarge,
                format!("A browser checkout request body is at most {MAX_BODY} bytes."),
            ),
        }
    }
}

/// A request after the swap. With real values in it, both buffers are wiped when dropped.
pub struct Swapped {
    /// The body to send.
    pub body: Zeroizing<Vec<u8>>,
    /// The query to send (without `?`), when the request had one.
    pub query: Option<Zeroizing<String>>,
    /// Values replaced: 0 when the request goes on unchanged (and counts no use).
    pub replaced: usize,
}

impl std::fmt::Debug for Swapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swapped")
            .field("body_len", &self.body.len())
            .field("has_query", &self.query.is_some())
            .field("replaced", &self.replaced)
            .finish()
    }
}

/// `body` (of type `content_type`) and `query` with every whole stand-in value of `card`
/// replaced by its real value: see the module doc.
pub fn swap(
    body: &[u8],
    content_type: Option<&str>,
    query: Option<&str>,
    card: &StandIns,
) -> Result<Swapped, SwapError> {
    let values = Values {
        number: (card.number(), card.real_number().expose()),
        cvc: card
            .cvc()
            .zip(card.real_cvc())
            .map(|(stand_in, real)| (stand_in, real.expose())),
    };
    swap_values(body, content_type, query, &values)
}

/// The values looked for, each with what it becomes.
struct Values<'a> {
    number: (&'a str, &'a str),
    cvc: Option<(&'a str, &'a str)>,
}

fn swap_values(
    body: &[u8],
    content_type: Option<&str>,
    query: Option<&str>,
    values: &Values<'_>,
) -> Result<Swapped, SwapError> {
    if body.len() > MAX_BODY {
        return Err(SwapError::TooLarge);
    }
    let mut edits = Vec::new();
    match body_type(content_type) {
        BodyType::Json => json(body, values, &mut edits),
        BodyType::Sniff => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if matches!(first, Some(b'{' | b'[')) {
                json(body, values, &mut edits);
            }
        }
        BodyType::Form => form(body, values, &mut edits),
        BodyType::Multipart(boundary) => multipart(body, boundary.as_bytes(), values, &mut edits),
        BodyType::Other => {}
    }
    let mut replaced = edits.len();
    let body = apply(body, &edits);
    let query = query.map(|q| {
        let mut edits = Vec::new();
        form(q.as_bytes(), values, &mut edits);
        replaced += edits.len();
        // Only ASCII digits were replaced by ASCII digits: still UTF-8.
        let bytes = apply(q.as_bytes(), &edits);
        Zeroizing::new(String::from_utf8_lossy(&bytes).into_owned())
    });
    Ok(Swapped {
        body,
        query,
        replaced,
    })
}

/// One replaced value: its raw bytes `start..end` become `with`.
struct Edit {
    start: usize,
    end: usize,
    with: Zeroizing<Vec<u8>>,
}

/// `src` with `edits` (in order, not overlapping) made.
fn apply(src: &[u8], edits: &[Edit]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(src.len()));
    let mut at = 0;
    for edit in edits {
        out.extend_from_slice(src.get(at..edit.start).unwrap_or_default());
        out.extend_from_slice(&edit.with);
        at = edit.end;
    }
    out.extend_from_slice(src.get(at..).unwrap_or_default());
    out
}

/// What a body's `Content-Type` says to look in.
enum BodyType {
    Json,
    Form,
    Multipart(String),
    /// `text/plain` or none: JSON if it looks like it.
    Sniff,
    Other,
}

fn body_type(content_type: Option<&str>) -> BodyType {
    let Some(content_type) = content_type else {
        return BodyType::Sniff;
    };
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" => BodyType::Json,
        m if m.ends_with("+json") && m.contains('/') => BodyType::Json,
        "application/x-www-form-urlencoded" => BodyType::Form,
        "text/plain" => BodyType::Sniff,
        "multipart/form-data" => {
            let boundary = parameters(parts.collect::<Vec<_>>().join(";").as_str())
                .into_iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("boundary"))
                .map(|(_, v)| v);
            match boundary {
                Some(b) if (1..=70).contains(&b.len()) => BodyType::Multipart(b),
                _ => BodyType::Other,
            }
        }
        _ => BodyType::Other,
    }
}

/// `key=value` parameters separated by `;` (a value may be a quoted string with `\`
/// escapes), as in `Content-Type` and `Content-Disposition`.
fn parameters(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let (mut key, mut value, mut has_value) = (String::new(), String::new(), false);
        for c in chars.by_ref() {
            match c {
                '=' => {
                    has_value = true;
                    break;
                }
                ';' => break,
                c => key.push(c),
            }
        }
        while has_value && chars.peek() == Some(&' ') {
            chars.next();
        }
        let quoted = has_value && chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        }
        for c in chars.by_ref() {
            match c {
                ';' => break,
                c if has_value && !quoted => value.push(c),
                _ => {}
            }
        }
        found.push((key.trim().to_string(), value.trim().to_string()));
    }
    found
}

/// One character of a value as decoded (a digit, `' '` or `'-'`), with the end of its raw
/// bytes in the body. A digit's raw bytes end in that digit however it is written (`4`,
/// `%34`, `\u0034`): that last byte is what a swap changes.
#[derive(Clone, Copy)]
struct Char {
    c: u8,
    end: usize,
}

/// Whether a name is a CVC field's (see [`CVC_NAMES`]).
pub fn is_cvc_name(name: &str) -> bool {
    let last = name
        .trim_end_matches(']')
        .rsplit(['[', ']', '.'])
        .next()
        .unwrap_or_default();
    let normal: String = last
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    CVC_NAMES.contains(&normal.as_str())
}

/// What the value of `chars` (raw bytes `start..end`, under the field `name`) becomes, if
/// it is a whole stand-in.
fn edit(
    src: &[u8],
    start: usize,
    end: usize,
    chars: &[Char],
    name: impl FnOnce() -> String,
    values: &Values<'_>,
) -> Option<Edit> {
    let digits: Zeroizing<Vec<u8>> = Zeroizing::new(
        chars
            .iter()
            .filter(|ch| ch.c.is_ascii_digit())
            .map(|ch| ch.c)
            .collect(),
    );
    let grouped = chars.first()?.c.is_ascii_digit()
        && chars.last()?.c.is_ascii_digit()
        && chars
            .windows(2)
            .all(|w| w[0].c.is_ascii_digit() || w[1].c.is_ascii_digit());
    let separated = digits.len() != chars.len();
    let to = if grouped && *digits == *values.number.0.as_bytes() {
        values.number.1
    } else {
        match values.cvc {
            Some((from, to))
                if !separated && *digits == *from.as_bytes() && is_cvc_name(&name()) =>
            {
                to
            }
            _ => return None,
        }
    };
    if to.len() != digits.len() || !to.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut with = Zeroizing::new(src.get(start..end)?.to_vec());
    let digit_ends = chars
        .iter()
        .filter(|ch| ch.c.is_ascii_digit())
        .map(|ch| ch.end);
    for (raw_end, real) in digit_ends.zip(to.bytes()) {
        *with.get_mut(raw_end.checked_sub(start + 1)?)? = real;
    }
    Some(Edit { start, end, with })
}

/// Whether a decoded byte may be part of a card number.
fn number_char(c: u8) -> bool {
    c.is_ascii_digit() || c == b' ' || c == b'-'
}

fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// The characters of a value whose raw bytes are `start..end`, each read by `decode` (the
/// byte at a position stands for, and how many raw bytes it takes). `None` when one cannot
/// be in a card number, or there are too many.
fn chars(
    start: usize,
    end: usize,
    decode: impl Fn(usize) -> Option<(u8, usize)>,
) -> Option<Vec<Char>> {
    let mut chars = Vec::new();
    let mut at = start;
    while at < end {
        let (c, len) = decode(at)?;
        if !number_char(c) || chars.len() == MAX_CHARS {
            return None;
        }
        at += len;
        chars.push(Char { c, end: at });
    }
    Some(chars)
}

/// The characters of a form value (raw bytes `start..end`): `+` is a space, `%XX` a byte.
fn form_chars(src: &[u8], start: usize, end: usize) -> Option<Vec<Char>> {
    chars(start, end, |at| {
        Some(match src[at] {
            b'+' => (b' ', 1),
            b'%' => match (
                src.get(at + 1).and_then(|&b| hex(b)),
                src.get(at + 2).and_then(|&b| hex(b)),
            ) {
                (Some(hi), Some(lo)) if at + 3 <= end => (hi * 16 + lo, 3),
                _ => (b'%', 1),
            },
            b => (b, 1),
        })
    })
}

/// A form field's name decoded (`+` and `%XX`), for telling a CVC's field.
fn form_name(raw: &[u8]) -> String {
    let decoded: Vec<u8> = form_urlencoded::parse(&[b"n=", raw].concat())
        .next()
        .map(|(_, v)| v.into_owned().into_bytes())
        .unwrap_or_default();
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Edits of a form (`name=value&…`): the body of `application/x-www-form-urlencoded`, or a
/// URL's query.
fn form(src: &[u8], values: &Values<'_>, edits: &mut Vec<Edit>) {
    let mut start = 0;
    for field in src.split(|&b| b == b'&') {
        let end = start + field.len();
        if let Some(eq) = field.iter().position(|&b| b == b'=') {
            let value_start = start + eq + 1;
            if let Some(chars) = form_chars(src, value_start, end) {
                let name = || form_name(&field[..eq]);
                edits.extend(edit(src, value_start, end, &chars, name, values));
            }
        }
        start = end + 1;
    }
}

/// Edits of a `multipart/form-data` body: each part's content, files aside. A body whose
/// parts do not end with the closing delimiter gets none.
fn multipart(src: &[u8], boundary: &[u8], values: &Values<'_>, edits: &mut Vec<Edit>) {
    let delimiter = [b"--", boundary].concat();
    let next_delimiter = [b"\r\n--", boundary].concat();
    let mut found = Vec::new();
    // The first delimiter opens the body, or ends a preamble's line.
    let mut at = if src.starts_with(&delimiter) {
        delimiter.len()
    } else {
        match find(src, &next_delimiter, 0) {
            Some(i) => i + next_delimiter.len(),
            None => return,
        }
    };
    loop {
        if src[at..].starts_with(b"--") {
            break;
        }
        // Transport padding, then the line's end.
        while matches!(src.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        if !src[at..].starts_with(b"\r\n") {
            return;
        }
        let headers_start = at + 2;
        let content_start = if src[headers_start..].starts_with(b"\r\n") {
            headers_start + 2
        } else {
            match find(src, b"\r\n\r\n", headers_start) {
                Some(i) => i + 4,
                None => return,
            }
        };
        let Some(content_end) = find(src, &next_delimiter, content_start) else {
            return;
        };
        let headers = String::from_utf8_lossy(&src[headers_start..content_start]);
        if let Some(name) = part_name(&headers) {
            let chars = chars(content_start, content_end, |at| Some((src[at], 1)));
            if let Some(chars) = chars {
                found.extend(edit(
                    src,
                    content_start,
                    content_end,
                    &chars,
                    || name,
                    values,
                ));
            }
        }
        at = content_end + next_delimiter.len();
    }
    edits.append(&mut found);
}

/// The field name of a part that is not a file, from its `Content-Disposition: form-data`.
fn part_name(headers: &str) -> Option<String> {
    let disposition = headers.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(value)
    })?;
    let params = parameters(disposition.split_once(';').map_or("", |(_, p)| p));
    if params
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("filename"))
    {
        return None;
    }
    params
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("name"))
        .map(|(_, v)| v)
}

/// Where `needle` is in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    memchr::memmem::find(hay.get(from..)?, needle).map(|i| i + from)
}

/// Edits of a JSON body; none when it is not JSON.
fn json(src: &[u8], values: &Values<'_>, edits: &mut Vec<Edit>) {
    let mut reader = Json {
        src,
        at: 0,
        values,
        edits: Vec::new(),
    };
    let read = reader.value(None, 0).and_then(|()| {
        reader.space();
        if reader.at == src.len() {
            Ok(())
        } else {
            Err(NotJson)
        }
    });
    if read.is_ok() {
        edits.append(&mut reader.edits);
    }
}

/// The body is not JSON (or nests deeper than [`MAX_DEPTH`]).
struct NotJson;

/// A JSON reader that checks the syntax and finds the values to replace.
struct Json<'s, 'v> {
    src: &'s [u8],
    at: usize,
    values: &'v Values<'v>,
    edits: Vec<Edit>,
}

impl Json<'_, '_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Result<(), NotJson> {
        if self.peek() == Some(b) {
            self.at += 1;
            Ok(())
        } else {
            Err(NotJson)
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), NotJson> {
        if self.src[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(NotJson)
        }
    }

    /// A value, member `name` of an object (none in an array or at the top).
    fn value(&mut self, name: Option<&str>, depth: usize) -> Result<(), NotJson> {
        if depth > MAX_DEPTH {
            return Err(NotJson);
        }
        self.space();
        match self.peek().ok_or(NotJson)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => {
                let (start, end) = self.string()?;
                if let Some(chars) = self.string_chars(start, end) {
                    let name = || name.unwrap_or_default().to_string();
                    self.edits
                        .extend(edit(self.src, start, end, &chars, name, self.values));
                }
                Ok(())
            }
            b'-' | b'0'..=b'9' => {
                let (start, end) = self.number()?;
                self.number_edit(start, end, name);
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => Err(NotJson),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), NotJson> {
        self.eat(b'{')?;
        self.space();
        if self.eat(b'}').is_ok() {
            return Ok(());
        }
        loop {
            self.space();
            let (start, end) = self.string()?;
            let key = json_text(&self.src[start..end]);
            self.space();
            self.eat(b':')?;
            self.value(Some(&key), depth + 1)?;
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(NotJson),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), NotJson> {
        self.eat(b'[')?;
        self.space();
        if self.eat(b']').is_ok() {
            return Ok(());
        }
        loop {
            self.value(None, depth + 1)?;
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(NotJson),
            }
        }
    }

    /// A string; the raw bytes between its quotes.
    fn string(&mut self) -> Result<(usize, usize), NotJson> {
        self.eat(b'"')?;
        let start = self.at;
        loop {
            match self.peek().ok_or(NotJson)? {
                b'"' => {
                    self.at += 1;
                    return Ok((start, self.at - 1));
                }
                b'\\' => {
                    let escape = self.src.get(self.at + 1).copied().ok_or(NotJson)?;
                    self.at += match escape {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' => {
                            let four = self.src.get(self.at + 2..self.at + 6).ok_or(NotJson)?;
                            if !four.iter().all(u8::is_ascii_hexdigit) {
                                return Err(NotJson);
                            }
                            6
                        }
                        _ => return Err(NotJson),
                    };
                }
                0..=0x1f => return Err(NotJson),
                _ => self.at += 1,
            }
        }
    }

    /// The characters of a string's raw bytes `start..end` (its escapes checked).
    fn string_chars(&self, start: usize, end: usize) -> Option<Vec<Char>> {
        chars(start, end, |at| match self.src[at] {
            b'\\' if self.src.get(at + 1) == Some(&b'u') => {
                let code = self.src[at + 2..at + 6]
                    .iter()
                    .try_fold(0u32, |acc, &b| Some(acc * 16 + u32::from(hex(b)?)))?;
                Some((u8::try_from(code).ok()?, 6))
            }
            b'\\' => None,
            b => Some((b, 1)),
        })
    }

    fn number(&mut self) -> Result<(usize, usize), NotJson> {
        let start = self.at;
        let digits = |r: &mut Self| {
            let from = r.at;
            while matches!(r.peek(), Some(b'0'..=b'9')) {
                r.at += 1;
            }
            if r.at == from {
                Err(NotJson)
            } else {
                Ok(())
            }
        };
        let _ = self.eat(b'-');
        if self.eat(b'0').is_err() {
            digits(self)?;
        }
        if self.eat(b'.').is_ok() {
            digits(self)?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            digits(self)?;
        }
        Ok((start, self.at))
    }

    /// A number equal to the stand-in CVC under a CVC's name becomes the real one as a
    /// script writes a number: leading zeros dropped.
    fn number_edit(&mut self, start: usize, end: usize, name: Option<&str>) {
        let Some((from, to)) = self.values.cvc else {
            return;
        };
        if self.src[start..end] != *from.as_bytes() || !name.is_some_and(is_cvc_name) {
            return;
        }
        let trimmed = to.trim_start_matches('0');
        let written = if trimmed.is_empty() { "0" } else { trimmed };
        self.edits.push(Edit {
            start,
            end,
            with: Zeroizing::new(written.as_bytes().to_vec()),
        });
    }
}

/// A JSON string's raw text decoded (a key, to tell a CVC's field); escapes that make no
/// character become U+FFFD.
fn json_text(raw: &[u8]) -> String {
    let quoted = [b"\"", raw, b"\""].concat();
    serde_json::from_slice::<String>(&quoted)
        .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::secret::{CardNumber, Cvc};
    use proptest::prelude::*;

    /// Stand-in 4242424242424242 (real 4000056655665556), stand-in CVC 737 (real 123).
    const STAND_IN: &str = "4242424242424242";
    const REAL: &str = "4000056655665556";
    const CVC_IN: &str = "737";
    const CVC_REAL: &str = "123";

    fn card() -> StandIns {
        StandIns::from_stored(
            CardNumber::new(REAL),
            STAND_IN.into(),
            Some((Cvc::new(CVC_REAL), CVC_IN.into())),
        )
        .unwrap()
    }

    fn run(body: &str, content_type: Option<&str>) -> (String, usize) {
        let out = swap(body.as_bytes(), content_type, None, &card()).unwrap();
        (String::from_utf8(out.body.to_vec()).unwrap(), out.replaced)
    }

    const JSON: Option<&str> = Some("application/json");
    const FORM: Option<&str> = Some("application/x-www-form-urlencoded");

    #[test]
    fn json_values() {
        let cases: &[(&str, Option<&str>, &str, usize)] = &[
            (
                r#"{"number":"4242424242424242"}"#,
                JSON,
                r#"{"number":"4000056655665556"}"#,
                1,
            ),
            (
                r#"{"n":"4242 4242 4242 4242"}"#,
                JSON,
                r#"{"n":"4000 0566 5566 5556"}"#,
                1,
            ),
            (
                r#"{"n":"4242-4242-4242-4242"}"#,
                JSON,
                r#"{"n":"4000-0566-5566-5556"}"#,
                1,
            ),
            (
                r#"{"n":"4242 424242 424242"}"#,
                JSON,
                r#"{"n":"4000 056655 665556"}"#,
                1,
            ),
            (
                r#"["4242424242424242"]"#,
                JSON,
                r#"["4000056655665556"]"#,
                1,
            ),
            (
                r#"{"card":{"number":"4242424242424242","cvc":"737","exp_month":"12"},"quantity":"737"}"#,
                JSON,
                r#"{"card":{"number":"4000056655665556","cvc":"123","exp_month":"12"},"quantity":"737"}"#,
                2,
            ),
            (
                r#"{"securityCode":"737"}"#,
                JSON,
                r#"{"securityCode":"123"}"#,
                1,
            ),
            (r#"{"cvc":737}"#, JSON, r#"{"cvc":123}"#, 1),
            (
                r#"{"quantity":737,"zip":"737"}"#,
                JSON,
                r#"{"quantity":737,"zip":"737"}"#,
                0,
            ),
            // Escaped digits keep their escapes; separators stay as written.
            (
                r#"{"n":"\u0034242424242424242"}"#,
                JSON,
                r#"{"n":"\u0034000056655665556"}"#,
                1,
            ),
            (
                r#"{"n":"4242\u00204242\u002D4242 4242"}"#,
                JSON,
                r#"{"n":"4000\u00200566\u002D5566 5556"}"#,
                1,
            ),
            (r#"{"c\u0076c":"737"}"#, JSON, r#"{"c\u0076c":"123"}"#, 1),
            // Never a part of a value, never a malformed grouping.
            (
                r#"{"n":"card 4242424242424242"}"#,
                JSON,
                r#"{"n":"card 4242424242424242"}"#,
                0,
            ),
            (
                r#"{"n":"42424242424242420"}"#,
                JSON,
                r#"{"n":"42424242424242420"}"#,
                0,
            ),
            (
                r#"{"n":" 4242424242424242"}"#,
                JSON,
                r#"{"n":" 4242424242424242"}"#,
                0,
            ),
            (
                r#"{"n":"4242  4242 4242 4242"}"#,
                JSON,
                r#"{"n":"4242  4242 4242 4242"}"#,
                0,
            ),
            (
                r#"{"n":"4242424242424242-"}"#,
                JSON,
                r#"{"n":"4242424242424242-"}"#,
                0,
            ),
            (r#"{"cvc":"7 37"}"#, JSON, r#"{"cvc":"7 37"}"#, 0),
            (r#"{"cvc":"7370"}"#, JSON, r#"{"cvc":"7370"}"#, 0),
            (r#"{"cvc":737.0}"#, JSON, r#"{"cvc":737.0}"#, 0),
            (r#"{"cvc":["737"]}"#, JSON, r#"{"cvc":["737"]}"#, 0),
            // A key is not a value.
            (
                r#"{"4242424242424242":1}"#,
                JSON,
                r#"{"4242424242424242":1}"#,
                0,
            ),
            // Not JSON: nothing at all.
            (
                r#"{"n":"4242424242424242""#,
                JSON,
                r#"{"n":"4242424242424242""#,
                0,
            ),
            (
                r#"{"n":"4242424242424242"} x"#,
                JSON,
                r#"{"n":"4242424242424242"} x"#,
                0,
            ),
            // Other JSON types, and JSON sent as text.
            (
                r#"{"n":"4242424242424242"}"#,
                Some("application/vnd.api+json; charset=utf-8"),
                r#"{"n":"4000056655665556"}"#,
                1,
            ),
            (
                r#" {"n":"4242424242424242"}"#,
                Some("text/plain;charset=UTF-8"),
                r#" {"n":"4000056655665556"}"#,
                1,
            ),
            (
                r#"["4242424242424242"]"#,
                None,
                r#"["4000056655665556"]"#,
                1,
            ),
            (
                "4242424242424242",
                Some("text/plain"),
                "4242424242424242",
                0,
            ),
            (
                r#"{"n":"4242424242424242"}"#,
                Some("application/xml"),
                r#"{"n":"4242424242424242"}"#,
                0,
            ),
        ];
        for &(body, ct, want, n) in cases {
            assert_eq!(run(body, ct), (want.to_string(), n), "{body} as {ct:?}");
        }
    }

    #[test]
    fn a_json_number_cvc_drops_leading_zeros_as_a_script_would() {
        let card = StandIns::from_stored(
            CardNumber::new(REAL),
            STAND_IN.into(),
            Some((Cvc::new("012"), CVC_IN.into())),
        )
        .unwrap();
        let out = swap(br#"{"cvc":737,"cvv":"737"}"#, JSON, None, &card).unwrap();
        assert_eq!(&*out.body, br#"{"cvc":12,"cvv":"012"}"#);
        assert_eq!(out.replaced, 2);
    }

    #[test]
    fn form_fields() {
        let cases: &[(&str, &str, usize)] = &[
            ("number=4242424242424242", "number=4000056655665556", 1),
            (
                "card%5Bnumber%5D=4242+4242+4242+4242&card%5Bcvc%5D=737&quantity=737",
                "card%5Bnumber%5D=4000+0566+5566+5556&card%5Bcvc%5D=123&quantity=737",
                2,
            ),
            ("n=4242%204242%2D4242-4242", "n=4000%200566%2D5566-5556", 1),
            ("n=%34%32%342424242424242", "n=%34%30%300056655665556", 1),
            (
                "card[cvc]=737&postal_code=737&zip=737",
                "card[cvc]=123&postal_code=737&zip=737",
                1,
            ),
            (
                "cvv2=737&CVV=737&security-code=737&cc-csc=737",
                "cvv2=123&CVV=123&security-code=123&cc-csc=123",
                4,
            ),
            (
                "cid=737&amount=737&cvc=%37%33%37",
                "cid=737&amount=737&cvc=%31%32%33",
                1,
            ),
            ("n=4242424242424242x", "n=4242424242424242x", 0),
            (
                "n=x4242424242424242&=4242424242424242",
                "n=x4242424242424242&=4000056655665556",
                1,
            ),
            ("4242424242424242", "4242424242424242", 0),
            (
                "n=4242424242424242&&n=%ZZ&n=%3",
                "n=4000056655665556&&n=%ZZ&n=%3",
                1,
            ),
            ("", "", 0),
        ];
        for &(body, want, n) in cases {
            assert_eq!(run(body, FORM), (want.to_string(), n), "{body}");
        }
    }

    fn part(name: &str, extra: &str, content: &str) -> String {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n\r\n{content}\r\n"
        )
    }

    #[test]
    fn multipart_parts() {
        let ct = Some("multipart/form-data; boundary=XyZ");
        // Each part: name, disposition's extra parameters, content sent, content forwarded.
        let parts = [
            ("number", "", STAND_IN, REAL),
            ("cvc", "", CVC_IN, CVC_REAL),
            ("quantity", "", CVC_IN, CVC_IN),
            ("file", "; filename=\"n.txt\"", STAND_IN, STAND_IN),
            ("spaced", "", "4242 4242 4242 4242", "4000 0566 5566 5556"),
            (
                "note",
                "",
                "pay with 4242424242424242",
                "pay with 4242424242424242",
            ),
        ];
        let body: String = parts
            .iter()
            .map(|(n, e, sent, _)| part(n, e, sent))
            .collect();
        let want: String = parts.iter().map(|(n, e, _, out)| part(n, e, out)).collect();
        let (body, want) = (body + "--XyZ--\r\n", want + "--XyZ--\r\n");
        assert_eq!(run(&body, ct), (want.clone(), 3));
        // A quoted boundary, a preamble, and a part with its Content-Type.
        let quoted = Some("multipart/form-data; charset=utf-8; boundary=\"XyZ\"");
        let with_preamble = format!("preamble\r\n{body}");
        assert_eq!(run(&with_preamble, quoted).1, 3);
        let typed = "--XyZ\r\nContent-Type: text/plain\r\ncontent-disposition: form-data; name=cvc\r\n\r\n737\r\n--XyZ--";
        assert_eq!(run(typed, ct).0, typed.replace("737", "123"));
        // Without the closing delimiter, or without a boundary: nothing.
        let open = body.trim_end_matches("--XyZ--\r\n");
        assert_eq!(run(open, ct), (open.to_string(), 0));
        assert_eq!(run(&body, Some("multipart/form-data")).1, 0);
        assert_eq!(run(&body, Some("multipart/form-data; boundary=Other")).1, 0);
    }

    #[test]
    fn the_query_is_swapped_too() {
        let out = swap(
            b"",
            None,
            Some("number=4242-4242-4242-4242&cvc=737&qty=737&q=x%20y"),
            &card(),
        )
        .unwrap();
        assert_eq!(
            out.query.as_deref().map(String::as_str),
            Some("number=4000-0566-5566-5556&cvc=123&qty=737&q=x%20y")
        );
        assert_eq!(out.replaced, 2);
        let none = swap(b"number=4242424242424242", FORM, None, &card()).unwrap();
        assert!(none.query.is_none());
        assert_eq!(none.replaced, 1);
    }

    #[test]
    fn without_a_cvc_only_the_number_is_swapped() {
        let card = StandIns::from_stored(CardNumber::new(REAL), STAND_IN.into(), None).unwrap();
        let out = swap(b"n=4242424242424242&cvc=737", FORM, None, &card).unwrap();
        assert_eq!(&*out.body, b"n=4000056655665556&cvc=737");
        assert_eq!(out.replaced, 1);
    }

    #[test]
    fn a_large_body_is_refused_and_a_debug_shows_no_value() {
        let big = vec![b'a'; MAX_BODY + 1];
        assert_eq!(
            swap(&big, FORM, None, &card()).err(),
            Some(SwapError::TooLarge)
        );
        assert_eq!(ApiError::from(SwapError::TooLarge).status(), 413);
        assert!(swap(&big[1..], FORM, None, &card()).is_ok());
        let out = swap(b"n=4242424242424242", FORM, Some("cvc=737"), &card()).unwrap();
        let shown = format!("{out:?}");
        assert!(
            !shown.contains(REAL) && !shown.contains(CVC_REAL),
            "{shown}"
        );
    }

    #[test]
    fn deep_json_is_left_alone() {
        let deep = format!("{}\"4242424242424242\"{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(run(&deep, JSON), (deep.clone(), 0));
        let fine = format!("{}\"4242424242424242\"{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(run(&fine, JSON).1, 1);
    }

    #[test]
    fn cvc_names() {
        for name in [
            "cvc",
            "CVV",
            "cvc2",
            "cvv2",
            "csc",
            "cvn",
            "security_code",
            "securityCode",
            "card_code",
            "cardCode",
            "card[cvc]",
            "payment_method_data[card][cvc]",
            "card.cvv",
            "cc-csc",
            "card-cvc",
            "Security Code",
        ] {
            assert!(is_cvc_name(name), "{name}");
        }
        for name in [
            "",
            "quantity",
            "qty",
            "zip",
            "postal_code",
            "cid",
            "code",
            "pin",
            "amount",
            "cvc[extra]x",
            "card[number]",
            "verification_code",
            "cvcx",
        ] {
            assert!(!is_cvc_name(name), "{name}");
        }
    }

    /// Swaps with the pairs reversed: real values back to stand-ins.
    fn back(body: &[u8], ct: Option<&str>, query: Option<&str>) -> Swapped {
        let values = Values {
            number: (REAL, STAND_IN),
            cvc: Some((CVC_REAL, CVC_IN)),
        };
        swap_values(body, ct, query, &values).unwrap()
    }

    const TYPES: &[Option<&str>] = &[
        Some("application/json"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=XyZ"),
        Some("text/plain"),
        Some("application/octet-stream"),
        None,
    ];

    /// A value that is one of the stand-ins in some writing, or filler without a `7`.
    fn field() -> impl Strategy<Value = (String, String, usize)> {
        let name = prop_oneof![
            Just("cvc".to_string()),
            Just("card[cvc]".to_string()),
            Just("quantity".to_string()),
            "[a-z]{1,6}",
        ];
        let value = prop_oneof![
            Just(STAND_IN.to_string()),
            Just("4242 4242 4242 4242".to_string()),
            Just("4242-4242-4242-4242".to_string()),
            Just(CVC_IN.to_string()),
            // Neither a stand-in nor a real value (no 7, no 1).
            "[a-z02-689 ]{0,12}",
        ];
        (name, value).prop_map(|(name, value)| {
            let n = usize::from(
                value.replace([' ', '-'], "") == STAND_IN
                    || (value == CVC_IN && is_cvc_name(&name)),
            );
            (name, value, n)
        })
    }

    fn encode(fields: &[(String, String, usize)], kind: usize) -> String {
        match kind {
            0 => {
                let members: Vec<String> = fields
                    .iter()
                    .map(|(k, v, _)| format!("{}: {}", serde_json::json!(k), serde_json::json!(v)))
                    .collect();
                format!("{{\n  {}\n}}", members.join(",\n  "))
            }
            1 => form_urlencoded::Serializer::new(String::new())
                .extend_pairs(fields.iter().map(|(k, v, _)| (k, v)))
                .finish(),
            _ => {
                let parts: Vec<String> = fields.iter().map(|(k, v, _)| part(k, "", v)).collect();
                format!("{}--XyZ--\r\n", parts.concat())
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_body_without_a_stand_in_passes_byte_for_byte(
            bytes in proptest::collection::vec(any::<u8>().prop_filter("no 7", |b| *b != b'7'), 0..400),
            ct in proptest::sample::select(TYPES),
            query in "[a-z0-689=&%+ -]{0,40}",
        ) {
            let out = swap(&bytes, ct, Some(&query), &card()).unwrap();
            prop_assert_eq!(out.replaced, 0);
            prop_assert_eq!(&*out.body, &bytes);
            prop_assert_eq!(out.query.as_deref().map(String::as_str), Some(query.as_str()));
        }

        #[test]
        fn a_structured_body_without_a_stand_in_passes_byte_for_byte(
            fields in proptest::collection::vec(("[a-z_\\[\\]]{1,8}", "[a-z0-689 +%-]{0,20}"), 0..8),
            kind in 0usize..3,
        ) {
            let fields: Vec<_> = fields.into_iter().map(|(k, v)| (k, v, 0)).collect();
            let body = encode(&fields, kind);
            let out = swap(body.as_bytes(), TYPES[kind], None, &card()).unwrap();
            prop_assert_eq!(out.replaced, 0);
            prop_assert_eq!(&*out.body, body.as_bytes());
        }

        #[test]
        fn a_swap_then_the_reverse_swap_gives_the_original(
            fields in proptest::collection::vec(field(), 0..8),
            kind in 0usize..3,
        ) {
            let body = encode(&fields, kind);
            let ct = TYPES[kind];
            let query = encode(&fields, 1);
            let want: usize = fields.iter().map(|(_, _, n)| n).sum();
            let there = swap(body.as_bytes(), ct, Some(&query), &card()).unwrap();
            prop_assert_eq!(there.replaced, 2 * want);
            prop_assert_eq!(there.body.len(), body.len());
            let query_there = there.query.as_deref().cloned();
            let again = back(&there.body, ct, query_there.as_deref());
            prop_assert_eq!(again.replaced, 2 * want);
            prop_assert_eq!(&*again.body, body.as_bytes());
            prop_assert_eq!(again.query.as_deref().map(String::as_str), Some(query.as_str()));
            if want > 0 {
                prop_assert_ne!(&*there.body, body.as_bytes());
            }
        }
    }
}
