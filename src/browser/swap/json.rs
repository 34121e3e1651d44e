//! The values of a JSON body: strings, and numbers under a CVC's name.

use super::value::{chars, edit, hex, is_cvc_name, Char};
use super::{Edit, Values};
use zeroize::Zeroizing;

/// Deepest JSON nesting read; a deeper body is not swapped.
const MAX_DEPTH: usize = 128;

/// Edits of a JSON body; none when it is not JSON.
pub(super) fn json(src: &[u8], values: &Values<'_>, edits: &mut Vec<Edit>) {
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
