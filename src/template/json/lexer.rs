//! The byte lexer: the state machine that walks a chunk byte by byte, or string by string, and
//! drives the rest. Between tokens it hands whole blocks to the skim ([`super::skim`]); it
//! tells the path ([`super::path`]) where containers and keys open and close; in string values
//! it feeds the `{{ … }}` recogniser ([`crate::template::braces`]), holds a template back and
//! has it substituted at `}}` ([`crate::template::held`]).

use memchr::memchr3;

use super::escape::{find_stop, Json, ESCAPED_BRACE};
use super::path::Kind;
use super::{Mode, Scanner, IN_KEY, OUTSIDE};
use crate::template::bits::byte_class;
use crate::template::braces::{find_open, Inside, Outside};
use crate::template::error::{TemplateError, TOO_LONG, UNTERMINATED};
use crate::template::resolve::Resolver;

/// The bytes that matter between tokens.
const STRUCTURAL: [bool; 256] =
    byte_class!(|b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']' | b',' | b':'));

impl Scanner {
    /// [`Scanner::feed`]; when `last`, the rest of the chunk may be copied without lexing
    /// (see [`Scanner::feed_last`]), which leaves the scanner's state behind the copied bytes:
    /// only [`Scanner::finish`] may follow.
    pub(super) fn feed_chunk(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
        last: bool,
    ) -> Result<usize, TemplateError> {
        self.failed.check()?;
        // An escaped brace ends the body at its last byte: the bytes before it are lexed, so
        // that the error names its field.
        let refused = self.escapes.find(chunk);
        let chunk = chunk
            .get(..refused.unwrap_or(chunk.len()))
            .unwrap_or_default();
        let last = last && refused.is_none();
        if !self.discard {
            out.reserve(chunk.len());
        }
        if self.mode == Mode::Key {
            // A key that continues from the previous chunk.
            self.path.continue_key();
        }
        let mut result = if self.open_end && chunk.first() == Some(&b'{') {
            Err(self.error(chunk, OUTSIDE))
        } else {
            self.scan(chunk, out, r, last)
        };
        if self.mode == Mode::Key {
            self.path.end_key(chunk.len());
        }
        self.path.store_keys(chunk);
        if !chunk.is_empty() {
            // Only a `{` lexed between tokens matters: after a copy without lexing (`last`)
            // no template, and so no `{{`, follows.
            self.open_end = !last && self.mode == Mode::Structure && chunk.last() == Some(&b'{');
        }
        if result.is_ok() && refused.is_some() {
            let mut err = self.error(chunk, ESCAPED_BRACE);
            if err.template.is_empty() {
                err.template = "\\u007b".to_string();
            }
            result = Err(err);
        }
        self.failed.keep(result)
    }

    /// Lexes `chunk` into `out`; the last chunk of the body when `last` (see
    /// [`Scanner::feed_chunk`]).
    fn scan(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
        last: bool,
    ) -> Result<usize, TemplateError> {
        let len = chunk.len();
        // Last chunk: where the next `{{` is, as far as known.
        let mut next = None;
        let carried = self.mode == Mode::Template || self.braces.brace || self.key_brace;
        if last && !carried && no_open(chunk, 0, &mut next) {
            // Nothing carried in continues a template, and none starts in the chunk.
            out.extend_from_slice(chunk);
            self.pass_unlexed(chunk);
            return Ok(0);
        }
        // chunk[run..i] is output not yet copied to `out`; it is copied in one go when the
        // scanner has to hold back or substitute, or at the end of the chunk.
        let mut run = 0;
        let mut i = 0;
        let mut count = 0;
        // Between tokens, whole blocks from `resume` on are skimmed (see [`Scanner::skim`]);
        // the byte loop below lexes the rest and what the skim hands over.
        let mut resume = if self.skim { 0 } else { len };
        if self.skim && !carried && (self.discard || no_open(chunk, 0, &mut next)) {
            // No template can start in the chunk: walked from its masks, as far as they go.
            i = self.walk(chunk);
        }
        'chunk: while i < len {
            match self.mode {
                Mode::Structure => {
                    if i >= resume {
                        (i, resume) = self.skim(chunk, i);
                        if self.mode != Mode::Structure {
                            continue;
                        }
                    }
                    // Punctuation is dense between tokens: a byte loop beats a search here.
                    // Plain strings (no escape, no brace) are skipped without leaving the
                    // loop; anything else goes to its mode's arm.
                    loop {
                        if i >= resume {
                            continue 'chunk;
                        }
                        let Some(&b) = chunk.get(i) else {
                            break 'chunk;
                        };
                        i += 1;
                        if !STRUCTURAL[usize::from(b)] {
                            continue;
                        }
                        if b == b'{' && chunk.get(i) == Some(&b'{') {
                            return Err(self.error(chunk, OUTSIDE));
                        }
                        if !self.structural(b, i) {
                            continue;
                        }
                        // A string opens: skip to its end while only escapes come up (a
                        // brace goes to its mode's arm, in a key as in a value).
                        let key = self.mode == Mode::Key;
                        loop {
                            let rest = chunk.get(i..).unwrap_or_default();
                            let Some(k) = find_stop(rest, true) else {
                                break 'chunk;
                            };
                            match rest.get(k) {
                                Some(b'"') => {
                                    i += k + 1;
                                    if key {
                                        self.close_key(i - 1);
                                    }
                                    self.mode = Mode::Structure;
                                    break;
                                }
                                Some(b'\\') if k + 1 < rest.len() => i += k + 2,
                                _ => {
                                    // A brace, or an escape cut by the chunk's end.
                                    i += k;
                                    continue 'chunk;
                                }
                            }
                        }
                    }
                }
                Mode::Key => {
                    if self.escape {
                        self.escape = false;
                        i += 1;
                        continue;
                    }
                    if std::mem::take(&mut self.key_brace) && chunk.get(i) == Some(&b'{') {
                        return Err(self.error(chunk, IN_KEY));
                    }
                    let rest = chunk.get(i..).unwrap_or_default();
                    let Some(k) = find_stop(rest, true) else {
                        break;
                    };
                    i += k + 1;
                    match rest.get(k) {
                        Some(b'"') => {
                            self.mode = Mode::Structure;
                            self.close_key(i - 1);
                        }
                        Some(b'\\') => self.escape = true,
                        // A `{`: the key so far (with that brace, wherever the chunks
                        // are cut) names the field.
                        _ => match chunk.get(i) {
                            Some(b'{') => {
                                self.path.end_key(i);
                                return Err(self.error(chunk, IN_KEY));
                            }
                            Some(_) => {}
                            None => self.key_brace = true,
                        },
                    }
                }
                Mode::Value => {
                    if self.escape {
                        self.escape = false;
                        i += 1;
                        continue;
                    }
                    let rest = chunk.get(i..).unwrap_or_default();
                    if self.braces.brace {
                        let carried = std::mem::take(&mut self.brace_carried);
                        if self.braces.outside(rest.first() == Some(&b'{')) == Outside::Opens {
                            // `{{`: a template starts at the first brace.
                            let start = if carried { i } else { i.saturating_sub(1) };
                            flush(out, chunk, run, start);
                            self.held.open();
                            self.mode = Mode::Template;
                            i += 1;
                            continue;
                        }
                        if carried {
                            // A lone `{` at the end of the previous chunk; here i == run == 0.
                            out.push(b'{');
                        }
                    }
                    let Some(k) = find_stop(rest, true) else {
                        break;
                    };
                    i += k + 1;
                    match rest.get(k) {
                        Some(b'"') => self.mode = Mode::Structure,
                        Some(b'\\') => self.escape = true,
                        // A `{`: held back, as it may open a template.
                        _ => self.braces.hold(),
                    }
                }
                Mode::Template => {
                    if !self.escape && !self.braces.opened() {
                        // Bytes other than `"`, `\\` and `}` only add to the template (a `{`
                        // matters only right after `{{`): take them as one run, as far as
                        // the length limit allows. The byte that ends the run goes below.
                        let rest = chunk.get(i..).unwrap_or_default();
                        let plain = memchr3(b'"', b'\\', b'}', rest).unwrap_or(rest.len());
                        let take = plain.min(self.held.room());
                        if take > 0 {
                            self.held.extend(rest.get(..take).unwrap_or_default());
                            self.braces.plain();
                            i += take;
                        }
                    }
                    let Some(&b) = chunk.get(i) else { break };
                    i += 1;
                    if self.template_byte(b, chunk, out, r)? {
                        count += 1;
                        run = i;
                        self.mode = Mode::Value;
                        if last && no_open(chunk, i, &mut next) {
                            // No template starts in the rest: it is copied below as it is.
                            self.pass_unlexed(chunk.get(i..).unwrap_or_default());
                            break;
                        }
                    }
                }
            }
        }
        let write = !self.discard;
        match self.mode {
            // Everything since the template's start is in `held`.
            Mode::Template => {}
            Mode::Value if self.braces.brace && !self.brace_carried => {
                if write {
                    flush(out, chunk, run, len.saturating_sub(1));
                }
                self.brace_carried = true;
            }
            _ if write => flush(out, chunk, run, len),
            _ => {}
        }
        Ok(count)
    }

    /// A punctuation byte between tokens; `at` is the position after it. Returns true when it
    /// opens a string.
    #[inline]
    pub(super) fn structural(&mut self, b: u8, at: usize) -> bool {
        match b {
            b'"' => {
                self.escape = false;
                self.braces.brace = false;
                self.key_brace = false;
                if self.expect_key {
                    self.mode = Mode::Key;
                    self.path.open_key(at);
                } else {
                    self.mode = Mode::Value;
                }
                return true;
            }
            b'{' => {
                self.path.push(Kind::Object);
                self.expect_key = self.path.current() == Some(Kind::Object);
            }
            b'[' => {
                self.path.push(Kind::Array);
                self.expect_key = false;
            }
            b'}' | b']' => {
                self.path.pop();
                self.expect_key = false;
            }
            b',' => match self.path.current() {
                Some(Kind::Object) => self.expect_key = true,
                Some(Kind::Array) => self.path.advance(1),
                None => {}
            },
            b':' => self.expect_key = false,
            _ => {}
        }
        false
    }

    /// The key being read ends at `at`, its closing quote.
    #[inline]
    pub(super) fn close_key(&mut self, at: usize) {
        self.expect_key = false;
        self.path.end_key(at);
    }

    /// One byte of a template. Returns true when the template is complete and substituted.
    fn template_byte(
        &mut self,
        b: u8,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<bool, TemplateError> {
        // The string ends inside the template.
        if !self.escape && b == b'"' {
            return Err(self.error(chunk, UNTERMINATED));
        }
        let escaped = self.escape;
        match self
            .braces
            .inside(!escaped && b == b'{', !escaped && b == b'}')
        {
            // `{{{`: the first brace is text, the template starts at the next.
            Inside::Third => {
                out.push(b'{');
                Ok(false)
            }
            step => {
                if self.held.room() == 0 {
                    return Err(self.error(chunk, TOO_LONG));
                }
                self.held.push(b);
                self.escape = !escaped && b == b'\\';
                if step != Inside::Closes {
                    return Ok(false);
                }
                if let Err(message) = self.held.substitute::<Json>(out, r) {
                    return Err(self.error(chunk, &message));
                }
                self.substituted += 1;
                Ok(true)
            }
        }
    }

    /// The error for the current template; `chunk` is the chunk being scanned, where pending
    /// keys lie.
    pub(super) fn error(&self, chunk: &[u8], message: &str) -> TemplateError {
        TemplateError::at(self.path.render(chunk), self.held.bytes(), message)
    }
}

/// Whether `chunk` holds no `{{` from `at` on. `next` is where the next `{{` was found by an
/// earlier call; the chunk is searched again (forward, by SIMD) only once `at` is past it, so a
/// chunk is searched about once in all.
fn no_open(chunk: &[u8], at: usize, next: &mut Option<usize>) -> bool {
    if next.is_some_and(|n| n >= at) {
        return false;
    }
    match find_open(chunk.get(at..).unwrap_or_default()) {
        Some(k) => {
            *next = Some(at + k);
            false
        }
        None => true,
    }
}

fn flush(out: &mut Vec<u8>, chunk: &[u8], from: usize, to: usize) {
    if let Some(bytes) = chunk.get(from..to) {
        out.extend_from_slice(bytes);
    }
}
