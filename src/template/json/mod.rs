//! The JSON scanner: finds templates in JSON string values, chunk by chunk, and writes the
//! body through with each template replaced by its JSON-escaped value.
//!
//! The scanner is a tolerant lexer, not a parser. It follows strings, escapes, objects, arrays
//! and keys versus values well enough to know where templates may be and what JSON path they
//! sit at, and copies every other byte through untouched. Malformed JSON passes through; the
//! target will judge it. What it refuses: a `{{` in a key or between tokens, a brace written
//! `\u007b` (searched for over every byte, beside the lexer), and a body that ends inside a
//! string or container after a template was substituted (the nesting of the bytes copied
//! without lexing is followed for that, by `balance::Balance`).
//!
//! Memory per scanner is bounded whatever the body: the held-back template (at most
//! [`MAX_TEMPLATE_LEN`] bytes), the path of the current field ([`MAX_PATH_DEPTH`] levels of at
//! most [`MAX_KEY_LEN`] bytes of key each) and a bit per container up to [`MAX_KIND_DEPTH`]
//! levels. Deeper containers are still followed: their path shows as `…`, and beyond
//! [`MAX_KIND_DEPTH`] levels every string is taken as a value.
//!
//! This file holds the [`Scanner`]'s state and what callers use; the work is done by
//!
//! - `lexer`: the state machine, byte by byte or string by string;
//! - `deferred`: a streamed body's chunks sent on before they are lexed, and lexed only if
//!   something after them needs it (the chunks themselves are kept by `kept`);
//! - `skim`: whole blocks of 64 bytes between tokens, as bit masks;
//! - `walk`: a chunk in which no template can start, from its bit masks, token by token;
//! - `balance`: the nesting of bytes copied without being lexed, after a template;
//! - `path`: the stack of containers that names the field (`items[0].pan`);
//! - `escape`: JSON string escapes, of a template's text and of the value put in its place,
//!   the bytes a backslash escapes, and the search for escaped braces (`\u007b`), which are
//!   refused.
//!
//! From the template level it uses what every format shares: the `{{ … }}` recogniser
//! (`template::braces`), the template held back, its parse, cache and resolution
//! (`template::held`), the errors, the limits, the bit tricks and the SIMD classifiers
//! (`template::simd`).
//!
//! [`MAX_TEMPLATE_LEN`]: crate::template::MAX_TEMPLATE_LEN
//! [`MAX_PATH_DEPTH`]: crate::template::MAX_PATH_DEPTH
//! [`MAX_KEY_LEN`]: crate::template::MAX_KEY_LEN
//! [`MAX_KIND_DEPTH`]: crate::template::MAX_KIND_DEPTH

mod balance;
mod deferred;
mod escape;
mod kept;
mod lexer;
mod path;
mod skim;
#[cfg(test)]
mod tests;
mod walk;

use super::braces::{find_open, Braces};
use super::error::{Failed, TemplateError, UNTERMINATED};
use super::expr::TemplateRef;
use super::held::Held;
use super::resolve::{ResolveError, Resolver};
use balance::Balance;
use escape::{has_escaped_braces, EscapedBraces};
use kept::Deferred;
use path::Path;

/// Where the lexer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Between tokens: whitespace, punctuation, numbers, literals.
    Structure,
    /// Inside an object key.
    Key,
    /// Inside a string value.
    Value,
    /// Inside a template, holding its bytes back.
    Template,
}

/// Incremental template scanner for one body at a time; [`Scanner::finish`], when it succeeds,
/// readies it for the next.
///
/// After an error, `out` holds an unspecified prefix of the output and every further `feed` or
/// `finish` returns the same error until the scanner is reset or replaced by a new one.
#[derive(Debug, Clone)]
pub struct Scanner {
    mode: Mode,
    /// `Key`, `Value`, `Template`: the previous byte was a backslash.
    escape: bool,
    /// `Value`: the previous byte was an unescaped `{`, not yet written (`braces.brace`);
    /// `Template`: the template holds only its `{{`, or the previous byte was an unescaped
    /// `}`.
    braces: Braces,
    /// `Value`: the `{` held back came in an earlier chunk.
    brace_carried: bool,
    /// `Key`: the previous byte was an unescaped `{` (two in a row are refused).
    key_brace: bool,
    /// `Structure`: the chunk ended with a `{` (another right after it is refused).
    open_end: bool,
    /// The next string is a key (only ever set inside an object).
    expect_key: bool,
    /// Where in the document the scanner is.
    path: Path,
    /// The template being read.
    held: Held,
    /// Escaped braces, searched for over the whole body.
    escapes: EscapedBraces,
    /// Templates substituted in this body so far.
    substituted: usize,
    /// The nesting over the bytes copied without lexing after a template was substituted
    /// ([`Scanner::feed_last`], [`Scanner::feed_tail`], [`Scanner::skip`]), so that
    /// [`Scanner::finish`] can tell whether the body ends complete.
    tail: Option<Balance>,
    /// Chunks sent on before they were lexed ([`Scanner::defer`]): the state above is the
    /// lexer's before them. Made at the first chunk deferred.
    deferred: Option<Box<Deferred>>,
    failed: Failed,
    /// [`Scanner::lex`]: the chunk is lexed, not written anywhere.
    discard: bool,
    /// Whether [`Scanner::skim`] may run; off only in tests, which compare the skim with the
    /// byte lexer.
    skim: bool,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new()
    }
}

impl Scanner {
    /// A scanner at the start of a body.
    pub fn new() -> Self {
        Scanner {
            mode: Mode::Structure,
            escape: false,
            braces: Braces::default(),
            brace_carried: false,
            key_brace: false,
            open_end: false,
            expect_key: false,
            path: Path::new(),
            held: Held::new(),
            escapes: EscapedBraces::default(),
            substituted: 0,
            tail: None,
            deferred: None,
            failed: Failed::default(),
            discard: false,
            skim: true,
        }
    }

    /// Back to the start of a body, keeping allocations (pingora may replay a body).
    pub(crate) fn reset(&mut self) {
        self.mode = Mode::Structure;
        self.escape = false;
        self.braces = Braces::default();
        self.brace_carried = false;
        self.key_brace = false;
        self.open_end = false;
        self.expect_key = false;
        self.path.clear();
        self.held.clear();
        self.escapes.clear();
        self.substituted = 0;
        self.tail = None;
        if let Some(deferred) = &mut self.deferred {
            deferred.clear();
        }
        self.failed.clear();
        self.discard = false;
    }

    /// Whether `body` may contain a template: a cheap check that lets a caller skip scanning
    /// a whole body held in memory.
    pub fn has_templates(body: &[u8]) -> bool {
        find_open(body).is_some()
    }

    /// Scans one chunk, appending output to `out`. Bytes of a template that is not complete at
    /// the end of the chunk (and a trailing `{` that may start one) are held back for the next
    /// call. Returns how many templates were substituted in this chunk.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        self.catch_up()?;
        self.feed_chunk(chunk, out, r, false)
    }

    /// Scans the last chunk of a body and ends the body: [`Scanner::feed`] then
    /// [`Scanner::finish`], with the same output, count and errors, and the scanner reset when
    /// it succeeds. Returns how many templates were substituted in this chunk.
    ///
    /// Faster: once the scanner is outside a template and no `{{` follows in the chunk, no
    /// template can start, so the rest of the chunk is copied without being lexed (a chunk
    /// without `{{` is copied whole unless a template or a `{` continues into it). This is
    /// checked at the start and after each template, not per byte.
    pub fn feed_last(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        if self.end_deferred(chunk, out)? {
            return Ok(0);
        }
        let count = self.feed_chunk(chunk, out, r, true)?;
        self.finish(out)?;
        Ok(count)
    }

    /// Scans a chunk of the body's tail: no template starts after this chunk (no later chunk
    /// holds a `{{`, nor does the next one start with a `{` that a `{` ending this one would
    /// complete). Faster than [`Scanner::feed`] the way [`Scanner::feed_last`] is, and like it
    /// leaves the scanner's state behind the bytes it copied: only more `feed_tail` calls, or
    /// [`Scanner::finish`], may follow. Returns how many templates were substituted.
    pub fn feed_tail(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        self.catch_up()?;
        self.feed_chunk(chunk, out, r, true)
    }

    /// Lexes a chunk that cannot reach the resolver (no `{{` in it, and no template or `{` that
    /// may start one continues into it) without writing it anywhere. What [`Scanner::feed`]
    /// would write for such a chunk is the chunk itself, less a trailing `{` that it holds back
    /// (with the next chunk's first byte it may start a template; the next `feed` writes it):
    /// returns how many of the chunk's bytes go through now. For a chunk that can reach the
    /// resolver it does nothing and returns `None`: that chunk must be fed (one check, so the
    /// chunk is searched for `{{` once).
    pub fn lex(&mut self, chunk: &[u8]) -> Result<Option<usize>, TemplateError> {
        self.catch_up()?;
        self.lex_now(chunk)
    }

    /// [`Scanner::lex`], with no chunk deferred before `chunk`.
    fn lex_now(&mut self, chunk: &[u8]) -> Result<Option<usize>, TemplateError> {
        if self.may_resolve(chunk) {
            return Ok(None);
        }
        // Nothing is written to `nothing`, and the resolver is never called.
        let mut never = |_: &TemplateRef| Err(ResolveError::new("internal error"));
        let mut nothing = Vec::new();
        self.discard = true;
        let result = self.feed_chunk(chunk, &mut nothing, &mut never, false);
        self.discard = false;
        result?;
        debug_assert!(nothing.is_empty());
        Ok(Some(if self.brace_carried {
            chunk.len().saturating_sub(1)
        } else {
            chunk.len()
        }))
    }

    /// Where the tail of a body read whole in `pieces` begins: the last piece in which a
    /// template may start (a `{{` in it, or a `{` starting it after a piece that ends with
    /// one, empty pieces skipped) or an escaped brace (`\u007`, or a backslash in the five
    /// bytes before the piece), 0 when none does. Pieces before it must go through
    /// [`Scanner::feed`]; from it on [`Scanner::feed_tail`] may be used, and the pieces after
    /// it may instead be passed to [`Scanner::skip`].
    pub fn tail_start<P: AsRef<[u8]>>(pieces: &[P]) -> usize {
        let mut before_last = None;
        // Bytes since the last backslash, over piece ends.
        let mut since_backslash = usize::MAX;
        let mut start = 0;
        for (j, piece) in pieces.iter().map(AsRef::as_ref).enumerate() {
            let across = piece.first() == Some(&b'{') && before_last == Some(b'{');
            let escape_across = !piece.is_empty() && since_backslash < 5;
            if across || escape_across || Self::has_templates(piece) || has_escaped_braces(piece) {
                start = j;
            }
            if let Some(&b) = piece.last() {
                before_last = Some(b);
            }
            since_backslash = match memchr::memrchr(b'\\', piece) {
                Some(k) => piece.len() - 1 - k,
                None => since_backslash.saturating_add(piece.len()),
            };
        }
        start
    }

    /// Whether feeding `chunk` may call the resolver: the chunk holds a `{{`, or a template or
    /// a `{` that may start one continues into it from the previous chunk.
    pub fn may_resolve(&self, chunk: &[u8]) -> bool {
        self.carries_template() || Self::has_templates(chunk)
    }

    /// Whether a template, or a `{` that may start one, continues into the next chunk.
    pub(crate) fn carries_template(&self) -> bool {
        self.mode == Mode::Template || self.braces.brace
    }

    /// A piece of the body's tail ([`Scanner::tail_start`]) that is sent as it is, neither
    /// copied nor lexed: only its nesting is followed, where a template was substituted (the
    /// body must then end complete). Only more `skip` calls, or [`Scanner::finish`], may
    /// follow.
    pub fn skip(&mut self, piece: &[u8]) {
        debug_assert!(!self.has_deferred(), "skip is for bodies read whole");
        self.pass_unlexed(piece);
    }

    /// Bytes that go through without being lexed, after the last template: where one was
    /// substituted, their nesting is followed from the state the lexer reached.
    fn pass_unlexed(&mut self, bytes: &[u8]) {
        if self.substituted == 0 {
            return;
        }
        let (mode, escape, depth) = (self.mode, self.escape, self.path.depth());
        self.tail
            .get_or_insert_with(|| Balance::new(mode != Mode::Structure, escape, depth))
            .over(bytes);
    }

    /// Whether the body read so far ends a complete document: outside any string and every
    /// container closed.
    fn complete(&self) -> bool {
        match &self.tail {
            Some(tail) => tail.closed(),
            None => self.mode == Mode::Structure && self.path.depth() == 0,
        }
    }

    /// End of body: writes what is held back and resets the scanner. A template still open is
    /// an error, and so is a body that ends before its JSON does after a template was
    /// substituted (the target would receive a broken document with a card value in it).
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        self.failed.check()?;
        if self.end_deferred(&[], out)? {
            return Ok(());
        }
        let err = if self.mode == Mode::Template {
            Some(self.error(&[], UNTERMINATED))
        } else if self.substituted > 0 && !self.complete() {
            // The whole body is at fault; where the lexer stopped depends on the chunks.
            Some(TemplateError::at("$".to_string(), &[], UNFINISHED))
        } else {
            None
        };
        if let Some(err) = err {
            return self.failed.keep(Err(err));
        }
        if self.brace_carried {
            out.push(b'{');
        }
        self.reset();
        Ok(())
    }
}

/// What a `{{` between tokens answers: a bare value or a key is not where templates go.
const OUTSIDE: &str = "a template must be inside a JSON string value";
/// What a `{{` in an object key answers.
const IN_KEY: &str = "a template cannot be in an object key";
/// What a body that ends unfinished after a substitution answers.
const UNFINISHED: &str =
    "the body ends before its JSON does, after a substituted template: it is not forwarded";
