//! The streaming scanner: finds templates in JSON string values, chunk by chunk, and writes the
//! body through with each template replaced by its JSON-escaped value.
//!
//! The scanner is a tolerant lexer, not a parser. It follows strings, escapes, objects, arrays
//! and keys versus values well enough to know where templates may be and what JSON path they
//! sit at, and copies every other byte through untouched. Malformed JSON passes through; the
//! target will judge it.
//!
//! Memory per scanner is bounded whatever the body: the held-back template (at most
//! [`MAX_TEMPLATE_LEN`] bytes), the path of the current field ([`MAX_PATH_DEPTH`] levels of at
//! most [`MAX_KEY_LEN`] bytes of key each) and a bit per container up to [`MAX_KIND_DEPTH`]
//! levels. Deeper containers are still followed: their path shows as `…`, and beyond
//! [`MAX_KIND_DEPTH`] levels every string is taken as a value.

use std::fmt::Write as _;

use memchr::{memchr2, memchr3, memmem};
use once_cell::sync::Lazy;
use wide::u8x16;

use super::expr::{self, TemplateRef};
use std::sync::Arc;

/// Templates parsed so far, by their text as written. Parsing is a pure function of the text,
/// and a service's bodies carry the same few templates again and again: a lookup costs about
/// a fifth of decoding and parsing one. Only templates that parsed and resolved are kept
/// (their text names a credential that exists: ids and a path), at most [`PARSED_CAPACITY`].
static PARSED: Lazy<quick_cache::sync::Cache<Vec<u8>, Arc<TemplateRef>>> =
    Lazy::new(|| quick_cache::sync::Cache::new(PARSED_CAPACITY));

/// Most templates [`PARSED`] keeps.
const PARSED_CAPACITY: usize = 4096;

/// Longest template, `{{` to `}}` inclusive, as written in the body (escapes undecoded).
pub const MAX_TEMPLATE_LEN: usize = 512;
/// Deepest nesting whose keys and indices appear in [`TemplateError::field`].
pub const MAX_PATH_DEPTH: usize = 128;
/// Longest key kept for [`TemplateError::field`]; longer keys are cut and shown with `…`.
pub const MAX_KEY_LEN: usize = 256;
/// Deepest nesting at which objects and arrays are told apart.
pub const MAX_KIND_DEPTH: usize = 1024;

/// Looks up the value of one template.
pub trait Resolver {
    /// The credential value for `t`, or why there is none. The message becomes the
    /// [`TemplateError::message`] and so the client-facing error: it must not contain card data.
    fn resolve(&mut self, t: &TemplateRef) -> Result<String, ResolveError>;
}

impl<F> Resolver for F
where
    F: FnMut(&TemplateRef) -> Result<String, ResolveError>,
{
    fn resolve(&mut self, t: &TemplateRef) -> Result<String, ResolveError> {
        self(t)
    }
}

/// A template that names no usable credential, e.g. "unknown payment method".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ResolveError {
    /// Client-facing reason, free of card data.
    pub message: String,
}

impl ResolveError {
    /// A resolve error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        ResolveError {
            message: message.into(),
        }
    }
}

/// A template that cannot be substituted: the proxy answers 400 `invalidTemplate`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid template at {field}: {message}")]
pub struct TemplateError {
    /// JSON path of the body field holding the template: `card.number`, `items[0].pan`,
    /// `["weird key"]`, or `$` for a top-level string.
    pub field: String,
    /// The template as written in the body (JSON escapes not decoded), as far as it was read.
    pub template: String,
    /// What is wrong, free of card data.
    pub message: String,
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
}

/// One level of the path: the container and where in it the scanner is.
///
/// Keys are copied lazily: while a key lies in the chunk being scanned it is only a range of
/// that chunk (`pending`), copied into `Scanner::keys` when the chunk ends. Most keys are
/// replaced by the next member's key within the same chunk and are never copied at all.
#[derive(Debug, Clone, Copy)]
struct Frame {
    kind: Kind,
    /// Index of the current element (arrays only).
    index: u64,
    /// A key has been seen in this object.
    has_key: bool,
    /// The key was longer than [`MAX_KEY_LEN`].
    key_cut: bool,
    /// `keys[key_start..key_end]` holds the key, or its start when `pending` too.
    stored: bool,
    key_start: usize,
    key_end: usize,
    /// The key (or its rest) is `chunk[pend_from..pend_to]` of the chunk being scanned.
    pending: bool,
    pend_from: usize,
    pend_to: usize,
}

impl Frame {
    fn new(kind: Kind) -> Self {
        Frame {
            kind,
            index: 0,
            has_key: false,
            key_cut: false,
            stored: false,
            key_start: 0,
            key_end: 0,
            pending: false,
            pend_from: 0,
            pend_to: 0,
        }
    }
}

/// The bytes that matter between tokens.
const STRUCTURAL: [bool; 256] =
    byte_class!(|b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']' | b',' | b':'));

/// Position of the first byte that ends a run of plain string bytes: `"` or `\\`, and in a
/// value also `{`. Most strings in JSON are short: the first 8 bytes are tested at once as a
/// word (SWAR), without a branch per byte; `memchr` (SIMD) searches the rest.
#[inline]
fn find_stop(hay: &[u8], value: bool) -> Option<usize> {
    let Some(head) = hay.first_chunk::<8>() else {
        return hay
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || (value && b == b'{'));
    };
    let word = u64::from_le_bytes(*head);
    let mut hits = byte_eq(word, b'"') | byte_eq(word, b'\\');
    if value {
        hits |= byte_eq(word, b'{');
    }
    if hits != 0 {
        // Little-endian: the lowest set bit is the first matching byte.
        return Some(hits.trailing_zeros() as usize / 8);
    }
    let tail = hay.get(8..).unwrap_or_default();
    let found = if value {
        memchr3(b'"', b'\\', b'{', tail)
    } else {
        memchr2(b'"', b'\\', tail)
    };
    found.map(|k| k + 8)
}

/// Bit 7 of each byte of `word` that equals `b`, and no other bit. The classic zero-byte test
/// on `word ^ b…b`, in the form that is exact for every byte (no false hits from borrows).
#[inline]
fn byte_eq(word: u64, b: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ (u64::from(b) * 0x0101_0101_0101_0101);
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Bytes skimmed at a time by [`Scanner::skim`], one bit each in a `u64`.
const BLOCK: usize = 64;
/// Blocks lexed byte by byte after a long string before the skim resumes.
const LONG_STRING_LEX: usize = 16;

/// Where the bytes that matter are in a block of [`BLOCK`] bytes: bit `k` stands for byte `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    quote: u64,
    backslash: u64,
    comma: u64,
    /// `{`, `[`, `}` and `]`.
    depth: u64,
    /// Commas, colons and the bytes of `depth`.
    token: u64,
}

impl Block {
    /// Compares 16 bytes at a time (SSE2 on x86_64, NEON on aarch64, through `wide`).
    #[inline]
    fn classify(bytes: &[u8; BLOCK]) -> Block {
        let (parts, _) = bytes.as_chunks::<16>();
        let mut block = Block {
            quote: 0,
            backslash: 0,
            comma: 0,
            depth: 0,
            token: 0,
        };
        for (k, part) in parts.iter().enumerate() {
            let v = u8x16::new(*part);
            let is = |b: u8| v.simd_eq(u8x16::splat(b));
            let comma = is(b',');
            // `{` and `[` differ only in bit 5 (0x7b, 0x5b), and so do `}` and `]`.
            let folded = v | u8x16::splat(0x20);
            let depth = folded.simd_eq(u8x16::splat(b'{')) | folded.simd_eq(u8x16::splat(b'}'));
            let token = depth | comma | is(b':');
            let at = 16 * k;
            block.quote |= u64::from(is(b'"').to_bitmask()) << at;
            block.backslash |= u64::from(is(b'\\').to_bitmask()) << at;
            block.comma |= u64::from(comma.to_bitmask()) << at;
            block.depth |= u64::from(depth.to_bitmask()) << at;
            block.token |= u64::from(token.to_bitmask()) << at;
        }
        block
    }
}

/// What [`Scanner::skim_span`] needs of a classified block.
struct Span {
    /// Position of the block in the chunk.
    base: usize,
    /// Commas outside strings.
    comma: u64,
    /// Bytes that are not tokens.
    filler: u64,
    /// Opening quotes.
    open: u64,
    /// Quotes that are not escaped.
    quote: u64,
}

/// The bits below bit `n`, all of them from 64 on.
#[inline]
fn below(n: usize) -> u64 {
    u32::try_from(n)
        .ok()
        .and_then(|n| 1u64.checked_shl(n))
        .map_or(u64::MAX, |bit| bit - 1)
}

/// Bit `k` of the result is the XOR of bits `0..=k` of `x`: set from an opening quote up to,
/// not including, its closing quote.
#[inline]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
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
fn escaped(backslash: u64, carry: u64) -> (u64, u64) {
    const ODD: u64 = 0xaaaa_aaaa_aaaa_aaaa;
    // A first byte escaped by the previous block is not the start of a run.
    let potential = backslash & !carry;
    let code = ((potential << 1 | ODD).wrapping_sub(potential)) ^ ODD;
    let escaped = code ^ (backslash | carry);
    let escaping = code & backslash;
    (escaped, escaping >> 63)
}

const KIND_WORDS: usize = MAX_KIND_DEPTH / 64;

/// Incremental template scanner for one body at a time; [`Scanner::reset`] (or a successful
/// [`Scanner::finish`]) readies it for the next.
///
/// After an error, `out` holds an unspecified prefix of the output and every further `feed` or
/// `finish` returns the same error until the scanner is reset.
#[derive(Debug, Clone)]
pub struct Scanner {
    mode: Mode,
    /// `Key`, `Value`, `Template`: the previous byte was a backslash.
    escape: bool,
    /// `Value`: the previous byte was an unescaped `{`, not yet written.
    brace: bool,
    /// ... and that `{` came in an earlier chunk.
    brace_carried: bool,
    /// `Template`: the previous byte was an unescaped `}`.
    close: bool,
    /// The next string is a key (only ever set inside an object).
    expect_key: bool,
    /// Open containers, counted however deep.
    depth: usize,
    /// Kind of the innermost container, `None` at the top level (cached from `kinds`).
    current: Option<Kind>,
    /// Bit `d` set: the container at depth `d` is an array.
    kinds: [u64; KIND_WORDS],
    /// Path of the current field, up to [`MAX_PATH_DEPTH`] levels.
    frames: Vec<Frame>,
    /// Stored keys of `frames`, back to back.
    keys: Vec<u8>,
    /// The template being read, as written.
    held: Vec<u8>,
    /// The template JSON-unescaped, for the expression parser.
    decoded: String,
    failed: Option<TemplateError>,
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
            brace: false,
            brace_carried: false,
            close: false,
            expect_key: false,
            depth: 0,
            current: None,
            kinds: [0; KIND_WORDS],
            frames: Vec::new(),
            keys: Vec::new(),
            held: Vec::with_capacity(MAX_TEMPLATE_LEN),
            decoded: String::new(),
            failed: None,
            discard: false,
            skim: true,
        }
    }

    /// Back to the start of a body, keeping allocations (pingora may replay a body).
    pub fn reset(&mut self) {
        self.mode = Mode::Structure;
        self.escape = false;
        self.brace = false;
        self.brace_carried = false;
        self.close = false;
        self.expect_key = false;
        self.depth = 0;
        self.current = None;
        self.kinds = [0; KIND_WORDS];
        self.frames.clear();
        self.keys.clear();
        self.held.clear();
        self.decoded.clear();
        self.failed = None;
        self.discard = false;
    }

    /// Whether `body` may contain a template: a cheap check that lets a caller skip scanning
    /// a whole body held in memory.
    pub fn has_templates(body: &[u8]) -> bool {
        OPEN.find(body).is_some()
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
        self.feed_chunk(chunk, out, r, true)
    }

    /// Lexes a chunk that cannot reach the resolver ([`Scanner::may_resolve`] is false)
    /// without writing it anywhere. What [`Scanner::feed`] would write for such a chunk is the
    /// chunk itself, less a trailing `{` that it holds back (with the next chunk's first byte
    /// it may start a template; the next `feed` writes it): returns how many of the chunk's
    /// bytes go through now. For a chunk that can reach the resolver it does nothing and
    /// returns `None`: that chunk must be fed (one check, so the chunk is searched for `{{`
    /// once).
    pub fn lex(&mut self, chunk: &[u8]) -> Result<Option<usize>, TemplateError> {
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
    /// one, empty pieces skipped), 0 when none does. Pieces before it must go through
    /// [`Scanner::feed`]; from it on [`Scanner::feed_tail`] may be used.
    pub fn tail_start<P: AsRef<[u8]>>(pieces: &[P]) -> usize {
        let mut before_last = None;
        let mut start = 0;
        for (j, piece) in pieces.iter().map(AsRef::as_ref).enumerate() {
            let across = piece.first() == Some(&b'{') && before_last == Some(b'{');
            if across || Self::has_templates(piece) {
                start = j;
            }
            if let Some(&b) = piece.last() {
                before_last = Some(b);
            }
        }
        start
    }

    /// Whether feeding `chunk` may call the resolver: the chunk holds a `{{`, or a template or
    /// a `{` that may start one continues into it from the previous chunk.
    pub fn may_resolve(&self, chunk: &[u8]) -> bool {
        self.carries_template() || Self::has_templates(chunk)
    }

    /// Whether a template, or a `{` that may start one, continues into the next chunk.
    pub fn carries_template(&self) -> bool {
        self.mode == Mode::Template || self.brace
    }

    /// [`Scanner::feed`]; when `last`, the rest of the chunk may be copied without lexing
    /// (see [`Scanner::feed_last`]), which leaves the scanner's state behind the copied bytes:
    /// only [`Scanner::finish`] may follow.
    fn feed_chunk(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
        last: bool,
    ) -> Result<usize, TemplateError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if !self.discard {
            out.reserve(chunk.len());
        }
        if self.mode == Mode::Key {
            // A key that continues from the previous chunk.
            if let Some(f) = self.top_frame() {
                f.pending = true;
                f.pend_from = 0;
                f.pend_to = 0;
            }
        }
        let result = self.scan(chunk, out, r, last);
        if self.mode == Mode::Key {
            if let Some(f) = self.top_frame() {
                f.pend_to = chunk.len();
            }
        }
        self.store_keys(chunk);
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// End of body: writes what is held back and resets the scanner. A template still open is
    /// an error.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if self.mode == Mode::Template {
            let err = self.error(&[], "unterminated template");
            self.failed = Some(err.clone());
            return Err(err);
        }
        if self.brace_carried {
            out.push(b'{');
        }
        self.reset();
        Ok(())
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
        if last && self.mode != Mode::Template && !self.brace && no_open(chunk, 0, &mut next) {
            // Nothing carried in continues a template, and none starts in the chunk.
            out.extend_from_slice(chunk);
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
                        if !self.structural(b, i) {
                            continue;
                        }
                        // A string opens: skip to its end while only escapes come up.
                        let key = self.mode == Mode::Key;
                        loop {
                            let rest = chunk.get(i..).unwrap_or_default();
                            let Some(k) = find_stop(rest, !key) else {
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
                    let rest = chunk.get(i..).unwrap_or_default();
                    let Some(k) = find_stop(rest, false) else {
                        break;
                    };
                    i += k + 1;
                    if rest.get(k) == Some(&b'"') {
                        self.mode = Mode::Structure;
                        self.close_key(i - 1);
                    } else {
                        self.escape = true;
                    }
                }
                Mode::Value => {
                    if self.escape {
                        self.escape = false;
                        i += 1;
                        continue;
                    }
                    let rest = chunk.get(i..).unwrap_or_default();
                    if self.brace {
                        self.brace = false;
                        let carried = std::mem::take(&mut self.brace_carried);
                        if rest.first() == Some(&b'{') {
                            // `{{`: a template starts at the first brace.
                            let start = if carried { i } else { i.saturating_sub(1) };
                            flush(out, chunk, run, start);
                            self.held.clear();
                            self.held.extend_from_slice(b"{{");
                            self.close = false;
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
                        _ => self.brace = true,
                    }
                }
                Mode::Template => {
                    if !self.escape && self.held.len() > 2 {
                        // Bytes other than `"`, `\\` and `}` only add to the template (a `{`
                        // matters only right after `{{`): take them as one run, as far as
                        // the length limit allows. The byte that ends the run goes below.
                        let rest = chunk.get(i..).unwrap_or_default();
                        let plain = memchr3(b'"', b'\\', b'}', rest).unwrap_or(rest.len());
                        let take = plain.min(MAX_TEMPLATE_LEN.saturating_sub(self.held.len()));
                        if take > 0 {
                            self.held
                                .extend_from_slice(rest.get(..take).unwrap_or_default());
                            self.close = false;
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
            Mode::Value if self.brace && !self.brace_carried => {
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
    fn structural(&mut self, b: u8, at: usize) -> bool {
        match b {
            b'"' => {
                self.escape = false;
                self.brace = false;
                if self.expect_key {
                    self.mode = Mode::Key;
                    self.open_key(at);
                } else {
                    self.mode = Mode::Value;
                }
                return true;
            }
            b'{' => {
                self.push(Kind::Object);
                self.expect_key = self.current == Some(Kind::Object);
            }
            b'[' => {
                self.push(Kind::Array);
                self.expect_key = false;
            }
            b'}' | b']' => {
                self.pop();
                self.expect_key = false;
            }
            b',' => match self.current {
                Some(Kind::Object) => self.expect_key = true,
                Some(Kind::Array) => {
                    if let Some(f) = self.top_frame() {
                        f.index = f.index.saturating_add(1);
                    }
                }
                None => {}
            },
            b':' => self.expect_key = false,
            _ => {}
        }
        false
    }

    /// Skims `chunk` from `at`, where the scanner is between tokens, 64 bytes at a time, and
    /// leaves the scanner in the exact state the byte lexer would reach. Returns where the byte
    /// lexer takes over and from where a skim may be tried again.
    ///
    /// Each block is classified into bit masks (bit `k` for byte `k`, see [`Block`]). The
    /// escaped bytes follow from the backslashes ([`escaped`]); the quotes that are not
    /// escaped toggle in and out of strings, so a prefix XOR of them gives the bytes inside
    /// strings ([`prefix_xor`]). Outside strings, only `{`, `[`, `}` and `]` are visited one by
    /// one, as they push and pop path levels. Between two of them the container is fixed, and
    /// the rest is counted with masks: in an array, commas advance the index; in an object, a
    /// key is the first string after a `{` or `,` with nothing but non-tokens between (see
    /// [`Scanner::skim_span`]), and only the last key of the span is recorded, as it replaces
    /// the earlier ones.
    ///
    /// The byte lexer takes over at the first byte that needs it: a bracket or brace inside a
    /// string (a `{` in a value may start a template), a backslash outside strings (it
    /// escapes nothing there, while the masks assume it does), or a level deeper than
    /// [`MAX_PATH_DEPTH`]. Up to there the masks are exact: nothing before such a byte depends
    /// on it. The last bytes of a chunk that do not fill a block are lexed byte by byte, and so
    /// is JSON of long strings (see below).
    fn skim(&mut self, chunk: &[u8], at: usize) -> (usize, usize) {
        let len = chunk.len();
        if self.depth > MAX_PATH_DEPTH {
            return (at, len.min(at + BLOCK));
        }
        // The state at `base`, the start of the next block.
        let mut base = at;
        let mut in_string = false;
        let mut in_key = false;
        let mut escape = 0;
        let mut expect_key = self.expect_key;
        while let Some(bytes) = chunk
            .get(base..)
            .and_then(|rest| rest.first_chunk::<BLOCK>())
        {
            let block = Block::classify(bytes);
            let (escaped, escape_out) = escaped(block.backslash, escape);
            let quote = block.quote & !escaped;
            let starts_in = u64::from(in_string);
            // Inside strings: from an opening quote, inclusive, to its closing quote, exclusive.
            let inside = prefix_xor(quote) ^ starts_in.wrapping_neg();
            // In a string before byte `k` is read.
            let before = inside << 1 | starts_in;
            let open = quote & inside;
            let interior = inside & !quote;
            let outside = !inside;
            let handover = (block.backslash & outside) | (block.depth & interior);
            let mut stop = handover.trailing_zeros() as usize;
            let span = Span {
                base,
                comma: block.comma & outside,
                // Every byte but the tokens: commas, colons, brackets and braces outside
                // strings, and opening quotes. String contents and closing quotes are filler.
                filler: !((block.token & outside) | open),
                open,
                quote,
            };
            let mut keyed = false;
            let mut expect_end = false;
            if in_key {
                // A key from the previous block ends at the first quote.
                let close = quote.trailing_zeros() as usize;
                if close < stop {
                    self.close_key(base + close);
                    expect_key = false;
                } else {
                    keyed = true;
                    expect_end = true;
                }
            }
            if !keyed {
                let mut from = 0;
                let mut key_next = expect_key && !in_string;
                let mut levels = block.depth & outside & below(stop);
                while levels != 0 {
                    let k = levels.trailing_zeros() as usize;
                    levels &= levels - 1;
                    // A span that ends at a bracket holds no open key.
                    let (expect, _) = self.skim_span(&span, from, k, key_next);
                    match bytes.get(k) {
                        Some(&b @ (b'{' | b'[')) => {
                            if self.depth >= MAX_PATH_DEPTH {
                                // Too deep for a frame: the byte lexer goes on from here.
                                stop = k;
                                key_next = expect;
                                from = k;
                                break;
                            }
                            if b == b'{' {
                                self.push(Kind::Object);
                                // An object below MAX_KIND_DEPTH: its first string is a key.
                                key_next = true;
                            } else {
                                self.push(Kind::Array);
                                key_next = false;
                            }
                        }
                        _ => {
                            self.pop();
                            key_next = false;
                        }
                    }
                    from = k + 1;
                }
                (expect_end, keyed) = self.skim_span(&span, from, stop, key_next);
            }
            if stop < BLOCK {
                let string = before >> stop & 1 == 1;
                self.mode = match (string, keyed) {
                    (false, _) => Mode::Structure,
                    (true, true) => Mode::Key,
                    (true, false) => Mode::Value,
                };
                self.escape = string && escaped >> stop & 1 == 1;
                self.brace = false;
                self.expect_key = expect_end;
                // The byte lexer goes on for a block's worth at least, so that bytes that stop
                // the skim cannot make it classify a block for each of them.
                return (base + stop, len.min(base + stop + BLOCK));
            }
            in_string = inside >> 63 == 1;
            in_key = keyed;
            expect_key = expect_end;
            escape = escape_out;
            base += BLOCK;
            if in_string && escape == 0 {
                // Long strings are searched for their end faster than they are classified.
                // The next block starts where the byte lexer would stop in the string.
                let rest = chunk.get(base..).unwrap_or_default();
                base = find_stop(rest, !in_key).map_or(len, |k| base + k);
                if quote >> 32 == 0 {
                    // A string of 32 bytes or more: in such JSON a block holds little but
                    // string, and the byte lexer, which searches strings too, is faster for
                    // the next 1 KiB (cachegrind, the load bench's body of 100-byte strings:
                    // 5.8 instructions a byte when the skim resumes after 4 blocks, 5.5 after
                    // 16, 5.35 after 64; the byte lexer alone 5.1; dense JSON is unaffected).
                    self.skimmed(in_string, in_key, escape, expect_key);
                    return (base, len.min(base + LONG_STRING_LEX * BLOCK));
                }
            }
        }
        self.skimmed(in_string, in_key, escape, expect_key);
        (base, len)
    }

    /// Sets the state where a skim ends between blocks.
    fn skimmed(&mut self, in_string: bool, in_key: bool, escape: u64, expect_key: bool) {
        self.mode = match (in_string, in_key) {
            (false, _) => Mode::Structure,
            (true, true) => Mode::Key,
            (true, false) => Mode::Value,
        };
        self.escape = in_string && escape == 1;
        self.brace = false;
        self.expect_key = expect_key;
    }

    /// Skims bytes `from..to` of a block, where the innermost container does not change;
    /// `key_next` when a key is expected at `from`. Returns whether a key is expected at `to`
    /// and whether a key is still being read there (`to` is then the end of the block or where
    /// the skim stops).
    #[inline(always)]
    fn skim_span(&mut self, span: &Span, from: usize, to: usize, key_next: bool) -> (bool, bool) {
        if from >= to {
            return (key_next, false);
        }
        let bits = below(to) & !below(from);
        let commas = span.comma & bits;
        match self.current {
            Some(Kind::Object) => {
                // A `,` expects a key, and so does the start when `key_next`. Adding the bits
                // after them to the filler carries each one through the filler run that
                // follows it, up to the next token: an opening quote reached that way opens a
                // key. The carry out of the span says whether a key is expected at `to`.
                let starts = commas << 1 | u64::from(key_next) << from;
                let (carried, out) = starts.overflowing_add(span.filler & bits);
                let expect = if to >= BLOCK {
                    out || commas >> 63 == 1
                } else {
                    carried >> to & 1 == 1
                };
                let keys = carried & span.open & bits;
                if keys == 0 {
                    return (expect, false);
                }
                // Only the last key counts: each one replaces the one before.
                let key = 63 - keys.leading_zeros() as usize;
                self.open_key(span.base + key + 1);
                let close = (span.quote & !1u64 << key).trailing_zeros() as usize;
                if close < to {
                    self.close_key(span.base + close);
                    (expect, false)
                } else {
                    (true, true)
                }
            }
            Some(Kind::Array) => {
                if let Some(f) = self.top_frame() {
                    f.index = f.index.saturating_add(u64::from(commas.count_ones()));
                }
                (false, false)
            }
            // At the top level, no key is ever expected.
            None => (false, false),
        }
    }

    /// A key opens in the innermost object; its text starts at `at`.
    #[inline]
    fn open_key(&mut self, at: usize) {
        if let Some(f) = self.top_frame() {
            let forget = f.stored.then_some(f.key_start);
            f.stored = false;
            f.has_key = true;
            f.key_cut = false;
            f.pending = true;
            f.pend_from = at;
            f.pend_to = at;
            if let Some(start) = forget {
                self.keys.truncate(start);
            }
        }
    }

    /// The key being read ends at `at`, its closing quote.
    #[inline]
    fn close_key(&mut self, at: usize) {
        self.expect_key = false;
        if let Some(f) = self.top_frame() {
            f.pend_to = at;
        }
    }

    /// One byte of a template. Returns true when the template is complete and substituted.
    fn template_byte(
        &mut self,
        b: u8,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<bool, TemplateError> {
        if !self.escape {
            match b {
                // The string ends inside the template.
                b'"' => return Err(self.error(chunk, "unterminated template")),
                // `{{{`: the first brace is text, the template starts at the next.
                b'{' if self.held.len() == 2 => {
                    out.push(b'{');
                    return Ok(false);
                }
                _ => {}
            }
        }
        if self.held.len() >= MAX_TEMPLATE_LEN {
            return Err(self.error(chunk, "template too long"));
        }
        self.held.push(b);
        if std::mem::take(&mut self.escape) {
            self.close = false;
            return Ok(false);
        }
        match b {
            b'\\' => {
                self.escape = true;
                self.close = false;
            }
            b'}' if self.close => {
                self.substitute(chunk, out, r)?;
                self.held.clear();
                self.close = false;
                return Ok(true);
            }
            b'}' => self.close = true,
            _ => self.close = false,
        }
        Ok(false)
    }

    /// Decodes, parses and resolves the held template and writes its value.
    fn substitute(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        let (reference, cached) = match PARSED.get(self.held.as_slice()) {
            Some(reference) => (reference, true),
            None => {
                let reference = self.parse_held().map_err(|m| self.error(chunk, &m))?;
                (Arc::new(reference), false)
            }
        };
        let value = match r.resolve(&reference) {
            Ok(value) => value,
            Err(err) => return Err(self.error(chunk, &err.message)),
        };
        // Kept once it named a credential that exists: the text holds an id then, and
        // whatever else a caller wrote into a template (a card number as the id, say)
        // is never kept.
        if !cached {
            PARSED.insert(self.held.clone(), reference);
        }
        json_escape_into(out, value.as_bytes());
        wipe(value);
        Ok(())
    }

    /// Decodes and parses the held template.
    fn parse_held(&mut self) -> Result<TemplateRef, String> {
        // Templates seldom hold escapes: parse the held bytes in place when they have none.
        let text = match std::str::from_utf8(&self.held) {
            Ok(text) if !self.held.contains(&b'\\') => text,
            _ => {
                json_unescape(&self.held, &mut self.decoded)?;
                &self.decoded
            }
        };
        expr::parse(text).map_err(|e| e.to_string())
    }

    /// The error for the current template; `chunk` is the chunk being scanned, where pending
    /// keys lie.
    fn error(&self, chunk: &[u8], message: &str) -> TemplateError {
        TemplateError {
            field: self.path(chunk),
            template: String::from_utf8_lossy(&self.held).into_owned(),
            message: message.to_owned(),
        }
    }

    /// Kind of the container at depth `d`. Beyond [`MAX_KIND_DEPTH`] it is unknown and taken
    /// as an array, so strings there count as values.
    fn kind_at(&self, d: usize) -> Kind {
        let word = self.kinds.get(d / 64).copied().unwrap_or(u64::MAX);
        if word >> (d % 64) & 1 == 1 {
            Kind::Array
        } else {
            Kind::Object
        }
    }

    /// The innermost frame, when the innermost container has one.
    #[inline]
    fn top_frame(&mut self) -> Option<&mut Frame> {
        if self.depth > MAX_PATH_DEPTH {
            return None;
        }
        self.frames.last_mut()
    }

    #[inline]
    fn push(&mut self, kind: Kind) {
        if self.depth < MAX_PATH_DEPTH {
            self.frames.push(Frame::new(kind));
        }
        let d = self.depth;
        if let Some(word) = self.kinds.get_mut(d / 64) {
            let bit = 1u64 << (d % 64);
            match kind {
                Kind::Array => *word |= bit,
                Kind::Object => *word &= !bit,
            }
        }
        self.depth = self.depth.saturating_add(1);
        self.current = Some(self.kind_at(d));
    }

    #[inline]
    fn pop(&mut self) {
        // A stray closer at the top level is passed through and otherwise ignored.
        let Some(depth) = self.depth.checked_sub(1) else {
            return;
        };
        self.depth = depth;
        self.current = depth.checked_sub(1).map(|d| self.kind_at(d));
        if self.frames.len() > depth {
            if let Some(f) = self.frames.pop() {
                if f.stored {
                    self.keys.truncate(f.key_start);
                }
            }
        }
    }

    /// Copies the keys that lie in `chunk` into `keys`, up to [`MAX_KEY_LEN`] each, before the
    /// chunk goes away. Pending keys are those of the innermost frames, so appending in order
    /// keeps `keys` in frame order.
    fn store_keys(&mut self, chunk: &[u8]) {
        for f in self.frames.iter_mut().filter(|f| f.pending) {
            if !f.stored {
                f.stored = true;
                f.key_start = self.keys.len();
                f.key_end = f.key_start;
            }
            self.keys.truncate(f.key_end);
            let part = chunk.get(f.pend_from..f.pend_to).unwrap_or_default();
            let room = MAX_KEY_LEN.saturating_sub(f.key_end - f.key_start);
            let take = part.len().min(room);
            f.key_cut |= take < part.len();
            self.keys
                .extend_from_slice(part.get(..take).unwrap_or_default());
            f.key_end = self.keys.len();
            f.pending = false;
        }
    }

    /// The key of `f` as written, at most [`MAX_KEY_LEN`] bytes, and whether it was cut.
    fn key<'a>(&'a self, f: &Frame, chunk: &'a [u8]) -> (std::borrow::Cow<'a, [u8]>, bool) {
        let stored = if f.stored {
            self.keys.get(f.key_start..f.key_end).unwrap_or_default()
        } else {
            &[]
        };
        if !f.pending {
            return (stored.into(), f.key_cut);
        }
        let part = chunk.get(f.pend_from..f.pend_to).unwrap_or_default();
        let room = MAX_KEY_LEN.saturating_sub(stored.len());
        let take = part.len().min(room);
        let mut key = stored.to_vec();
        key.extend_from_slice(part.get(..take).unwrap_or_default());
        (key.into(), f.key_cut || take < part.len())
    }

    /// The JSON path of the current field: `card.number`, `items[0].pan`, `["a b"].c`, `$`.
    fn path(&self, chunk: &[u8]) -> String {
        let mut path = String::new();
        for f in &self.frames {
            match f.kind {
                Kind::Array => {
                    let _ = write!(path, "[{}]", f.index);
                }
                Kind::Object if f.has_key => {
                    let (key, cut) = self.key(f, chunk);
                    let plain = !cut
                        && !key.is_empty()
                        && key.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
                    if plain {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(&String::from_utf8_lossy(&key));
                    } else {
                        // The key as written, so its escapes stay valid inside the quotes; a
                        // cut key loses a dangling backslash.
                        let trailing = key.iter().rev().take_while(|&&b| b == b'\\').count();
                        let key = if trailing % 2 == 1 {
                            key.get(..key.len() - 1).unwrap_or_default()
                        } else {
                            &key
                        };
                        path.push_str("[\"");
                        path.push_str(&String::from_utf8_lossy(key));
                        if cut {
                            path.push('…');
                        }
                        path.push_str("\"]");
                    }
                }
                // An object member without a key: malformed input, nothing to show.
                Kind::Object => {}
            }
        }
        if self.depth > MAX_PATH_DEPTH {
            path.push('…');
        }
        if path.is_empty() {
            path.push('$');
        }
        path
    }
}

/// The searcher for `{{`, built once: `memmem::find` builds one at every call, which costs
/// more than searching a small body.
static OPEN: Lazy<memmem::Finder<'static>> = Lazy::new(|| memmem::Finder::new(b"{{"));

/// Whether `chunk` holds no `{{` from `at` on. `next` is where the next `{{` was found by an
/// earlier call; the chunk is searched again (forward, by SIMD) only once `at` is past it, so a
/// chunk is searched about once in all.
fn no_open(chunk: &[u8], at: usize, next: &mut Option<usize>) -> bool {
    if next.is_some_and(|n| n >= at) {
        return false;
    }
    match OPEN.find(chunk.get(at..).unwrap_or_default()) {
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

/// Overwrites a resolved value before freeing it. Best effort: copies made while `out` grew
/// are out of reach, and `out` itself is the caller's to protect.
fn wipe(value: String) {
    let mut bytes = value.into_bytes();
    bytes.fill(0);
    std::hint::black_box(&bytes);
}

/// Writes `value` as the inside of a JSON string: `"` and `\` backslash-escaped, control
/// characters as `\u00XX`, everything else (including non-ASCII UTF-8) as is.
fn json_escape_into(out: &mut Vec<u8>, value: &[u8]) {
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

const BAD_ESCAPE: &str = "invalid escape sequence in template";

/// Decodes the JSON string escapes of a template into `dst`.
fn json_unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| "template is not valid UTF-8")?;
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
    use crate::template::{CredentialField, CredentialKind};
    use proptest::prelude::*;

    const PAN_NUMBER: &str = "{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}";

    /// Resolves `pm_<x>` to `<x>:<type>:<field>`, `pm_q` to a value that needs escaping, and
    /// anything else to "unknown payment method".
    fn resolver(t: &TemplateRef) -> Result<String, ResolveError> {
        match t.payment_method.as_str() {
            "pm_q" => Ok("a\"b\\c\n\u{1}é😀".to_owned()),
            "pm_num" => Ok("4242424242424242".to_owned()),
            pm => match pm.strip_prefix("pm_") {
                Some(x) => Ok(format!("{x}:{}:{}", t.kind, t.field)),
                None => Err(ResolveError::new("unknown payment method")),
            },
        }
    }

    #[test]
    fn templates_are_kept_once_parsed_and_resolved() {
        // Ids of their own, so that no other test has parsed these texts.
        let ok = "{{ paymentMethod: pm_kept | type: 'pan' | json: '$.cvc' }}";
        let escaped = r#"{{ paymentMethod: pm_kept | type: \"pan\" | json: '$.cvc' }}"#;
        let unknown = "{{ paymentMethod: 4111111111111111 | type: 'pan' | json: '$.number' }}";
        let body = format!(r#"{{"a":"{ok}","b":"{escaped}"}}"#);
        // Twice: the second time every template comes from the cache.
        for _ in 0..2 {
            assert_eq!(
                run(&body),
                Ok(r#"{"a":"kept:pan:cvc","b":"kept:pan:cvc"}"#.to_string())
            );
        }
        assert!(PARSED.get(ok.as_bytes()).is_some());
        assert!(PARSED.get(escaped.as_bytes()).is_some());
        // A template that names nothing is an error each time, and its text is not kept.
        for _ in 0..2 {
            let e = run(&format!(r#"{{"n":"{unknown}"}}"#)).unwrap_err();
            assert_eq!(e.message, "unknown payment method");
            assert_eq!(e.field, "n");
        }
        assert!(PARSED.get(unknown.as_bytes()).is_none());
    }

    /// Runs `chunks` through a scanner, the last one with `feed_last` when `last`, else with
    /// `feed` and then `finish`.
    fn run_chunks(chunks: &[&[u8]], last: bool) -> Result<(Vec<u8>, usize), TemplateError> {
        let mut scanner = Scanner::new();
        let mut out = Vec::new();
        let mut count = 0;
        let mut r = resolver;
        let (end, init) = chunks
            .split_last()
            .map_or((&b""[..], &[][..]), |(end, init)| (*end, init));
        for chunk in init {
            count += scanner.feed(chunk, &mut out, &mut r)?;
        }
        if last {
            count += scanner.feed_last(end, &mut out, &mut r)?;
        } else {
            count += scanner.feed(end, &mut out, &mut r)?;
            scanner.finish(&mut out)?;
        }
        Ok((out, count))
    }

    /// Runs `body` in one chunk, then in every two-way split and byte by byte, each ended
    /// both ways (`feed_last`, and `feed` then `finish`), and checks that they all agree.
    fn run(body: &str) -> Result<String, TemplateError> {
        let body = body.as_bytes();
        let whole = run_chunks(&[body], false);
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        let mut splits = vec![];
        for last in [false, true] {
            splits.push(run_chunks(&bytes, last));
            for at in 0..=body.len() {
                let (a, b) = body.split_at(at);
                splits.push(run_chunks(&[a, b], last));
            }
        }
        for split in splits {
            match (&whole, &split) {
                (Ok(w), Ok(s)) => assert_eq!(w, s),
                (Err(w), Err(s)) => assert_eq!(w, s),
                _ => panic!("chunking changed the outcome: {whole:?} vs {split:?}"),
            }
        }
        whole.map(|(out, _)| String::from_utf8(out).unwrap())
    }

    #[test]
    fn substitutes() {
        let cases: Vec<(String, &str)> = vec![
            (r#"{"a":1,"b":[true,null,"x"]}"#.into(), r#"{"a":1,"b":[true,null,"x"]}"#),
            (format!(r#"{{"card":{{"number":"{PAN_NUMBER}"}}}}"#), r#"{"card":{"number":"1:pan:number"}}"#),
            (format!(r#"{{"n":"x{PAN_NUMBER}y"}}"#), r#"{"n":"x1:pan:numbery"}"#),
            (
                r#"{"exp":"{{paymentMethod:pm_1|type:'pan'|json:'$.expirationMonth'}}/{{paymentMethod:pm_1|type:'pan'|json:'$.expirationYear'}}"}"#.into(),
                r#"{"exp":"1:pan:expirationMonth/1:pan:expirationYear"}"#,
            ),
            // Double quotes arrive JSON-escaped.
            (
                r#"{"n":"{{ paymentMethod: pm_7 | type: \"networkToken\" | json: \"$.token.cryptogram\" }}"}"#.into(),
                r#"{"n":"7:networkToken:cryptogram"}"#,
            ),
            // An escape right before the closing braces.
            (
                r#"["{{ paymentMethod: pm_3 | type: 'pan' | json: '$.cvc' \t}}"]"#.into(),
                r#"["3:pan:cvc"]"#,
            ),
            // Other escapes in the template are decoded, including a surrogate pair.
            (
                r#"["{{\tpaymentMethod: pm\u005f2 |\ntype: 'pan' | json: '\u0024.number'\r}}"]"#.into(),
                r#"["2:pan:number"]"#,
            ),
            // Keys are never substituted.
            (format!(r#"{{"{PAN_NUMBER}":1}}"#), ""),
            // Extra braces are text.
            (format!(r#"["{{{PAN_NUMBER}}}"]"#), r#"["{1:pan:number}"]"#),
            (format!(r#"["{{{{{PAN_NUMBER}"]"#), r#"["{{1:pan:number"]"#),
            // Braces that start no template, escapes before a template.
            (r#"{"a":"{ } }} {x{","b":"}}{"}"#.into(), r#"{"a":"{ } }} {x{","b":"}}{"}"#),
            (format!(r#"["\\{PAN_NUMBER}\"{{"]"#), r#"["\\1:pan:number\"{"]"#),
            (r#"["\{{"]"#.into(), r#"["\{{"]"#),
            // Values are escaped.
            (
                r#"{"q":"<{{ paymentMethod: pm_q | type: 'pan' | json: '$.cvc' }}>"}"#.into(),
                r#"{"q":"<a\"b\\c\u000a\u0001é😀>"}"#,
            ),
            // Top-level string, templates after nested containers.
            (format!(r#""{PAN_NUMBER}""#), r#""1:pan:number""#),
            (
                format!(r#"{{"a":{{"b":[1,{{"c":"d"}}]}},"e":"{PAN_NUMBER}"}}"#),
                r#"{"a":{"b":[1,{"c":"d"}]},"e":"1:pan:number"}"#,
            ),
            // After the last template: a `{{` in a key, an escaped one, one between tokens.
            (
                format!(r#"{{"a":"{PAN_NUMBER}","{{{{k":"}}}}","b":"{{"}}"#),
                r#"{"a":"1:pan:number","{{k":"}}","b":"{"}"#,
            ),
            (format!(r#"["{PAN_NUMBER}","\{{{{ x","{{"]"#), r#"["1:pan:number","\{{ x","{"]"#),
            (format!(r#"["{PAN_NUMBER}",{{{{}}}}]"#), r#"["1:pan:number",{{}}]"#),
            // Malformed JSON passes through.
            (r#"]]}},:{"a""#.into(), r#"]]}},:{"a""#),
            (format!(r#"}}]"{PAN_NUMBER}"  "#), r#"}]"1:pan:number"  "#),
        ];
        // A template of exactly MAX_TEMPLATE_LEN bytes: the plain run inside it is taken up to
        // the limit and no further.
        let pad = MAX_TEMPLATE_LEN - PAN_NUMBER.len();
        let longest = PAN_NUMBER.replace(" }}", &format!("{} }}}}", " ".repeat(pad)));
        assert_eq!(longest.len(), MAX_TEMPLATE_LEN);
        let mut cases = cases;
        cases.push((format!(r#"["{longest}"]"#), r#"["1:pan:number"]"#));
        for (body, want) in cases {
            let want = if want.is_empty() { body.as_str() } else { want };
            assert_eq!(run(&body), Ok(want.to_owned()), "{body}");
        }
    }

    #[test]
    fn errors() {
        const UNKNOWN_PART: &str = "unknown part; expected `paymentMethod`, `type` or `json`";
        let nope = "{{ paymentMethod: nope | type: 'pan' | json: '$.number' }}";
        let long = format!(
            r#"["{{{{ paymentMethod: pm_1 {} }}}}"]"#,
            " ".repeat(MAX_TEMPLATE_LEN)
        );
        let long_template = String::from_utf8_lossy(&long.as_bytes()[2..2 + MAX_TEMPLATE_LEN]);
        let deep = format!("{}\"{nope}\"", "[".repeat(MAX_PATH_DEPTH + 5));
        let deep_field = format!("{}…", "[0]".repeat(MAX_PATH_DEPTH));
        let long_key = format!(r#"{{"{}":"{{{{x}}}}"}}"#, "k".repeat(MAX_KEY_LEN + 1));
        let long_key_field = format!("[\"{}…\"]", "k".repeat(MAX_KEY_LEN));
        let full = format!("{{{{{}", "x".repeat(MAX_TEMPLATE_LEN - 2));
        let full_then_quote = format!(r#"["{full}"]"#);
        let over = format!(r#"["{{{{ x{} }}}}"]"#, " ".repeat(MAX_TEMPLATE_LEN - 6));
        let over_template = String::from_utf8_lossy(&over.as_bytes()[2..2 + MAX_TEMPLATE_LEN]);
        let cases: Vec<(String, &str, &str, &str)> = vec![
            (
                format!(r#"{{"card":{{"number":"{nope}"}}}}"#),
                "card.number",
                nope,
                "unknown payment method",
            ),
            (
                r#"{"items":[{"pan":"{{ type: 'pan' }}"}]}"#.into(),
                "items[0].pan",
                "{{ type: 'pan' }}",
                "missing `paymentMethod`",
            ),
            (r#"{"a":{"b":[0,1,[{"c":"{{x}}"}]]}}"#.into(), "a.b[2][0].c", "{{x}}", UNKNOWN_PART),
            (
                r#"{"x":[1,2],"weird key":{"\"q\"":"{{x}}"}}"#.into(),
                r#"["weird key"]["\"q\""]"#,
                "{{x}}",
                UNKNOWN_PART,
            ),
            (r#""{{x}}""#.into(), "$", "{{x}}", UNKNOWN_PART),
            (r#"[1,"{{x}}"]"#.into(), "[1]", "{{x}}", UNKNOWN_PART),
            (
                r#"{"n":"{{ paymentMethod: pm_1 | type: \"pan\" | json: '$.cryptogram' }}"}"#.into(),
                "n",
                r#"{{ paymentMethod: pm_1 | type: \"pan\" | json: '$.cryptogram' }}"#,
                "unknown field `cryptogram` for type 'pan'; expected number, expirationMonth, expirationYear or cvc",
            ),
            (
                r#"["{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' \ud83d\ude00 }}"]"#.into(),
                "[0]",
                r#"{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' \ud83d\ude00 }}"#,
                "expected `|` or `}}` after `json`",
            ),
            // A bad template before a `{{` that starts none.
            (r#"{"n":"{{x}}","{{k":"\{{"}"#.into(), "n", "{{x}}", UNKNOWN_PART),
            (r#"{"n":"{{ x } y"}"#.into(), "n", "{{ x } y", "unterminated template"),
            (r#"{"n":"{{ x }"#.into(), "n", "{{ x }", "unterminated template"),
            (r#"{"n":"{{"#.into(), "n", "{{", "unterminated template"),
            (r#"{"n":"{{ \q }}"}"#.into(), "n", r#"{{ \q }}"#, BAD_ESCAPE),
            (r#"{"n":"{{ \ud800 }}"}"#.into(), "n", r#"{{ \ud800 }}"#, BAD_ESCAPE),
            (long.clone(), "[0]", &long_template, "template too long"),
            (deep, &deep_field, nope, "unknown payment method"),
            (long_key, &long_key_field, "{{x}}", UNKNOWN_PART),
            // The string ends right at the length limit: unterminated, not too long.
            (full_then_quote, "[0]", &full, "unterminated template"),
            // A template one byte over the limit.
            (over.clone(), "[0]", &over_template, "template too long"),
            // An escaped `}` does not close a template; the escape is invalid.
            (r#"{"n":"{{ \}} }}"}"#.into(), "n", r#"{{ \}} }}"#, BAD_ESCAPE),
        ];
        for (body, field, template, message) in cases {
            let err = run(&body).expect_err(&body);
            let want = TemplateError {
                field: field.to_owned(),
                template: template.to_owned(),
                message: message.to_owned(),
            };
            assert_eq!(err, want, "{body}");
        }
    }

    #[test]
    fn deep_nesting_resolves_and_unwinds() {
        let mut r = |t: &TemplateRef| Ok::<_, ResolveError>(t.payment_method.clone());
        let depth = MAX_KIND_DEPTH + 10;
        let body = format!("{}{}{}", r#"{"k":"#.repeat(depth), "1", "}".repeat(depth))
            + r#"{"a":["{{x}}"]}"#;
        let mut s = Scanner::new();
        let mut out = Vec::new();
        let err = s.feed(body.as_bytes(), &mut out, &mut r).unwrap_err();
        assert_eq!(err.field, "a[0]");
        // Keys stay keys below the path cap.
        let body = format!(
            "{}{{\"{PAN_NUMBER}\":1}}{}",
            "[".repeat(500),
            "]".repeat(500)
        );
        s.reset();
        out.clear();
        assert_eq!(s.feed(body.as_bytes(), &mut out, &mut r), Ok(0));
        assert_eq!(out, body.as_bytes());
    }

    #[test]
    fn counts_per_chunk_and_reuses() {
        let mut s = Scanner::new();
        let mut r = resolver;
        let mut out = Vec::new();
        let body = format!(r#"["{PAN_NUMBER}","{PAN_NUMBER}"]"#);
        let (a, b) = body.split_at(10);
        assert_eq!(s.feed(a.as_bytes(), &mut out, &mut r), Ok(0));
        assert_eq!(s.feed(b.as_bytes(), &mut out, &mut r), Ok(2));
        assert_eq!(s.finish(&mut out), Ok(()));
        assert_eq!(out, br#"["1:pan:number","1:pan:number"]"#);

        // finish resets: a second body starts clean.
        out.clear();
        assert_eq!(s.feed(b"\"{{", &mut out, &mut r), Ok(0));
        assert!(s.finish(&mut out).is_err());
        // After an error the scanner keeps failing until reset.
        assert!(s.feed(b"x", &mut out, &mut r).is_err());
        s.reset();
        out.clear();
        assert_eq!(s.feed(b"\"a{", &mut out, &mut r), Ok(0));
        assert_eq!(out, b"\"a");
        assert_eq!(s.feed(b"", &mut out, &mut r), Ok(0));
        assert_eq!(s.finish(&mut out), Ok(()));
        assert_eq!(out, b"\"a{");
    }

    #[test]
    fn has_templates() {
        assert!(Scanner::has_templates(b"{\"a\":\"{{\"}"));
        assert!(!Scanner::has_templates(b"{\"a\":{\"b\":\"{ {\"}}"));
    }

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
            json_escape_into(&mut out, value.as_bytes());
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
            let got = json_unescape(raw, &mut dst).map(|()| dst.as_str());
            assert_eq!(got, want);
        }
    }

    /// A scanner that never skims: the byte lexer alone, the reference for the skim.
    fn byte_lexer() -> Scanner {
        Scanner {
            skim: false,
            ..Scanner::new()
        }
    }

    /// Everything that decides what the scanner does next.
    fn state(s: &Scanner) -> String {
        format!(
            "{:?} esc={} brace={}/{} close={} key={} depth={} {:?} {:?} {:?} keys={:?} held={:?}",
            s.mode,
            s.escape,
            s.brace,
            s.brace_carried,
            s.close,
            s.expect_key,
            s.depth,
            s.current,
            s.kinds,
            s.frames,
            String::from_utf8_lossy(&s.keys),
            String::from_utf8_lossy(&s.held),
        )
    }

    /// Runs `body` cut at `cuts` through a skimming scanner and the byte lexer side by side,
    /// checking that their states agree after every chunk, and returns both outcomes.
    fn skim_and_bytes(
        body: &[u8],
        cuts: &[usize],
        last: bool,
    ) -> [Result<(Vec<u8>, usize), TemplateError>; 2] {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        at.extend([0, body.len()]);
        at.sort_unstable();
        let chunks: Vec<&[u8]> = at.windows(2).map(|w| &body[w[0]..w[1]]).collect();
        let mut scanners = [Scanner::new(), byte_lexer()];
        let mut outs = [vec![], vec![]];
        let mut counts = [Ok(0), Ok(0)];
        for (n, chunk) in chunks.iter().enumerate() {
            for ((s, out), count) in scanners.iter_mut().zip(&mut outs).zip(&mut counts) {
                let Ok(c) = count else { continue };
                let got = if last && n + 1 == chunks.len() {
                    s.feed_last(chunk, out, &mut resolver)
                } else {
                    s.feed(chunk, out, &mut resolver)
                };
                *count = got.map(|k| *c + k);
            }
            if counts.iter().all(Result::is_ok) {
                assert_eq!(state(&scanners[0]), state(&scanners[1]), "after chunk {n}");
            }
        }
        let mut results = [Ok((vec![], 0)), Ok((vec![], 0))];
        for (k, s) in scanners.iter_mut().enumerate() {
            results[k] = counts[k].clone().and_then(|c| {
                if !last {
                    s.finish(&mut outs[k])?;
                }
                Ok((std::mem::take(&mut outs[k]), c))
            });
        }
        results
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

    #[test]
    fn classify_matches_bytes() {
        let alphabet = b"\"\\,:{}[]x {[;|\xdb\xfb\x7f\x5c\x22\x3a\x2c\x7b\x7d\x5b\x5d";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut bytes = [0u8; BLOCK];
            for b in &mut bytes {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly the alphabet, some any byte.
                *b = match x % 8 {
                    0 => (x >> 8) as u8,
                    _ => alphabet[(x >> 8) as usize % alphabet.len()],
                };
            }
            let mask = |f: &dyn Fn(u8) -> bool| {
                bytes
                    .iter()
                    .enumerate()
                    .fold(0u64, |m, (k, &b)| m | u64::from(f(b)) << k)
            };
            let want = Block {
                quote: mask(&|b| b == b'"'),
                backslash: mask(&|b| b == b'\\'),
                comma: mask(&|b| b == b','),
                depth: mask(&|b| matches!(b, b'{' | b'}' | b'[' | b']')),
                token: mask(&|b| matches!(b, b'{' | b'}' | b'[' | b']' | b',' | b':')),
            };
            assert_eq!(Block::classify(&bytes), want, "{bytes:?}");
        }
    }

    #[test]
    fn passes_kinds_and_fields() {
        let mut seen = Vec::new();
        let mut r = |t: &TemplateRef| {
            seen.push((t.kind, t.field));
            Ok::<_, ResolveError>(String::new())
        };
        let mut s = Scanner::new();
        let mut out = Vec::new();
        let body = br#"["{{ paymentMethod: p | type: 'virtualCard' | json: '$.card.cvc' }}"]"#;
        assert_eq!(s.feed(body, &mut out, &mut r), Ok(1));
        assert_eq!(out, br#"[""]"#);
        assert_eq!(seen, [(CredentialKind::VirtualCard, CredentialField::Cvc)]);
    }

    /// Pieces of string contents: plain text, escapes, braces and brackets, templates good
    /// and bad, multi-byte characters, and runs longer than a block.
    fn string_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            20 => prop_oneof![
                Just("a"), Just("item_0001"), Just(" "), Just("é"), Just(","), Just(":"),
                Just("\\\""), Just("\\\\"), Just("\\n"), Just("\\u00e9"), Just("\\/"),
            ].prop_map(str::to_owned),
            4 => Just("x".repeat(72)),
            4 => Just(()).prop_map(|()| format!("{}\\\"", "\\\\".repeat(33))),
            2 => prop_oneof![Just("{"), Just("}"), Just("["), Just("]"), Just("{ }"), Just("}}")]
                .prop_map(str::to_owned),
            1 => prop_oneof![Just("{{"), Just("{{x}}"), Just(PAN_NUMBER), Just("{{{")]
                .prop_map(str::to_owned),
        ];
        prop::collection::vec(piece, 0..5).prop_map(|p| p.concat())
    }

    /// Keys: usually short names, sometimes with escapes, braces or longer than MAX_KEY_LEN.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => prop_oneof![Just("id"), Just("name"), Just("qty"), Just("card"), Just("pan")]
                .prop_map(str::to_owned),
            2 => string_text(),
            1 => Just("k".repeat(MAX_KEY_LEN + 40)),
        ]
        .prop_map(|k| format!("\"{k}\""))
    }

    /// Whitespace or nothing.
    fn gap() -> impl Strategy<Value = &'static str> {
        prop_oneof![6 => Just(""), 1 => Just(" "), 1 => Just("\n  "), 1 => Just("\t")]
    }

    /// A JSON value, nested up to 6 levels.
    fn json() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("1999".to_owned()),
            Just("true".to_owned()),
            Just("null".to_owned()),
            Just("-2.5e3".to_owned()),
            string_text().prop_map(|t| format!("\"{t}\"")),
        ];
        leaf.prop_recursive(6, 96, 10, |inner| {
            let member = (gap(), inner.clone(), gap());
            prop_oneof![
                prop::collection::vec(member, 0..10).prop_map(|items| {
                    let items: Vec<String> = items
                        .into_iter()
                        .map(|(a, v, b)| format!("{a}{v}{b}"))
                        .collect();
                    format!("[{}]", items.join(","))
                }),
                prop::collection::vec((key(), gap(), inner, gap()), 0..10).prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, a, v, b)| format!("{k}{a}:{v}{b}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    /// Tokens in any order: malformed JSON, stray backslashes and quotes.
    fn soup() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            8 => prop_oneof![
                Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"), Just(" "),
                Just("1"), Just("\"k\""), Just("\"v\""), Just("\"a\\\"b\""), Just("\"\\\\\""),
            ].prop_map(str::to_owned),
            2 => prop_oneof![Just("\\"), Just("\""), Just("\\\""), Just("{{"), Just("\"{\"")]
                .prop_map(str::to_owned),
            1 => string_text().prop_map(|t| format!("\"{t}\"")),
        ];
        prop::collection::vec(token, 0..300).prop_map(|t| t.concat())
    }

    /// A document: values one after another, sometimes deeper than MAX_PATH_DEPTH, or soup.
    fn document() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => prop::collection::vec((gap(), json()), 1..4)
                .prop_map(|v| v.into_iter().map(|(g, j)| format!("{g}{j}")).collect()),
            1 => (60usize..80, json()).prop_map(|(n, j)| {
                format!("{}{j}{}", "[{\"k\":".repeat(n), "}]".repeat(n))
            }),
            2 => soup(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// The skim leaves the scanner exactly where the byte lexer would, after every chunk,
        /// with the same output, count and error.
        #[test]
        fn skim_matches_byte_lexer(
            doc in document(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
            last in any::<bool>(),
        ) {
            let [skimmed, bytes] = skim_and_bytes(doc.as_bytes(), &cuts, last);
            prop_assert_eq!(skimmed, bytes, "{}", doc);
        }
    }
}
