//! The XML scanner: templates in XML bodies (`text/xml`, `application/xml`, `application/*+xml`,
//! SOAP 1.1 and 1.2), chunk by chunk, with the guarantees of the JSON scanner (a template split
//! across any chunk boundary, bounded memory, fail closed) and its held template, parser, cache
//! and resolver.
//!
//! The scanner reads the document's markup as far as templates need it, never a DTD:
//!
//! - A template goes in an element's text or an attribute value. Its text is read after the
//!   XML references in it are decoded (`&apos;`, `&quot;`, `&amp;`, `&lt;`, `&gt;`, `&#…;`),
//!   and its value is escaped for its place: `&`, `<` and `>` in text; those, both quotes and
//!   tab, line feed and carriage return in an attribute value (a parser would fold them).
//! - In a CDATA section a template is read as written and its value goes in raw, unless the
//!   value could close the section (it holds `]]>`, begins with `]` or `>`, or ends with `]`):
//!   that is refused.
//! - A value with a character XML does not allow (a control character other than tab, line
//!   feed, carriage return) is refused.
//! - A `{{` anywhere else is refused: in an element or attribute name, an end tag, a comment,
//!   a processing instruction, or text or a CDATA section outside the root element. So is a
//!   brace written as a character reference (`&#123;`, `&#x7B;`) in text or an attribute
//!   value: a parser reads it as `{`, so it could hide a template from the scanner.
//! - A DOCTYPE (or any `<!` declaration other than a comment or a CDATA section) is refused
//!   wherever it is: no DTD or entity is ever read, let alone resolved. Bodies are UTF-8: a
//!   NUL byte outside text and values is refused, so an XML body in UTF-16 (which would hide
//!   its templates) is refused at its first tag.
//! - A template runs to the first `}}` and must end where it started (before the `<` that
//!   ends the text, the quote that ends the value, the `]]>` that ends the section).
//! - Every other byte is copied as written; the scanner holds back only a brace that may open
//!   a template and the open template. Malformed XML passes through for the target to judge,
//!   except that a body which ends inside markup or an element after a template was
//!   substituted is an error: the target would receive a broken document with a card value.
//! - An error names the element by its path of local names (`/Envelope/Body/card/number`),
//!   an attribute as `/a/b/@name`, `/` outside the root; at most [`MAX_PATH_DEPTH`] levels of
//!   at most [`MAX_KEY_LEN`] bytes, deeper or longer shown with `…`.

use super::held::{Encoding, Held, ParsedCache};
use super::scanner::{find3, Failed, Resolver, TemplateError, MAX_KEY_LEN, MAX_PATH_DEPTH};
use wide::u8x16;

/// What a bad reference in a template answers.
const BAD_REFERENCE: &str = "invalid XML reference in template";

/// Decodes the XML references of `raw` (the five predefined entities, `&#…;`, `&#x…;`).
fn unescape_references(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| "template is not valid UTF-8")?;
    dst.clear();
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        dst.push_str(rest.get(..amp).unwrap_or_default());
        let after = rest.get(amp + 1..).unwrap_or_default();
        let semi = after.find(';').ok_or(BAD_REFERENCE)?;
        let name = after.get(..semi).unwrap_or_default();
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = name.strip_prefix("#x") {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#') {
                    dec.parse().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32).ok_or(BAD_REFERENCE)?
            }
        };
        dst.push(c);
        rest = after.get(semi + 1..).unwrap_or_default();
    }
    dst.push_str(rest);
    Ok(())
}

/// Why a value cannot go in an XML document at all.
fn refuse_characters(value: &[u8]) -> Option<&'static str> {
    value
        .iter()
        .any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
        .then_some("the value holds a character that XML does not allow")
}

/// Writes `value` escaped for element text, or for an attribute value (`attribute`).
fn escape(out: &mut Vec<u8>, value: &[u8], attribute: bool) {
    for &b in value {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'\r' => out.extend_from_slice(b"&#13;"),
            b'"' if attribute => out.extend_from_slice(b"&quot;"),
            b'\'' if attribute => out.extend_from_slice(b"&apos;"),
            b'\t' if attribute => out.extend_from_slice(b"&#9;"),
            b'\n' if attribute => out.extend_from_slice(b"&#10;"),
            _ => out.push(b),
        }
    }
}

/// Element text.
pub(super) struct XmlText;
/// An attribute value.
pub(super) struct XmlAttr;
/// A CDATA section.
pub(super) struct XmlCdata;

impl Encoding for XmlText {
    fn parsed() -> &'static ParsedCache {
        static PARSED: ParsedCache = ParsedCache::new();
        &PARSED
    }

    #[inline]
    fn has_escapes(raw: &[u8]) -> bool {
        raw.contains(&b'&')
    }

    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        unescape_references(raw, dst)
    }

    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        escape(out, value, false);
    }

    fn refuse(value: &[u8]) -> Option<&'static str> {
        refuse_characters(value)
    }
}

impl Encoding for XmlAttr {
    fn parsed() -> &'static ParsedCache {
        // Decoded exactly as text is.
        XmlText::parsed()
    }

    #[inline]
    fn has_escapes(raw: &[u8]) -> bool {
        XmlText::has_escapes(raw)
    }

    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        unescape_references(raw, dst)
    }

    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        escape(out, value, true);
    }

    fn refuse(value: &[u8]) -> Option<&'static str> {
        refuse_characters(value)
    }
}

/// What a value that could close its CDATA section answers.
pub(super) const CDATA_CLOSE: &str = "the value could close its CDATA section (it holds `]]>`, \
     begins with `]` or `>` or ends with `]`)";

impl Encoding for XmlCdata {
    fn parsed() -> &'static ParsedCache {
        static PARSED: ParsedCache = ParsedCache::new();
        &PARSED
    }

    #[inline]
    fn has_escapes(_raw: &[u8]) -> bool {
        false
    }

    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        let text = std::str::from_utf8(raw).map_err(|_| "template is not valid UTF-8")?;
        dst.clear();
        dst.push_str(text);
        Ok(())
    }

    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        out.extend_from_slice(value);
    }

    fn refuse(value: &[u8]) -> Option<&'static str> {
        let closes = value.windows(3).any(|w| w == b"]]>")
            || matches!(value.first(), Some(b']' | b'>'))
            || value.last() == Some(&b']');
        if closes {
            Some(CDATA_CLOSE)
        } else {
            refuse_characters(value)
        }
    }
}

/// What a DOCTYPE or another declaration answers.
pub(super) const XML_DECLARATION: &str = "a DOCTYPE or other `<!` declaration is refused in an \
     XML body: no DTD or entity is ever read";
/// What a `{{` in markup answers.
pub(super) const XML_IN_MARKUP: &str =
    "a template cannot be in an element or attribute name or an end tag";
/// What a `{{` in a comment or a processing instruction answers.
pub(super) const XML_IN_COMMENT: &str =
    "templates are never substituted in XML comments or processing instructions";
/// What a `{{` outside the root element answers.
pub(super) const XML_OUTSIDE: &str =
    "a template must be in an element's text or an attribute value";
/// What a brace written as a character reference answers.
pub(super) const XML_BRACE_REFERENCE: &str =
    "a brace written as a character reference (`&#123;`) could hide a template";
/// What a NUL byte answers.
pub(super) const XML_NUL: &str = "an XML body must be UTF-8 (it holds a NUL byte)";
/// What a body that ends inside its document after a substitution answers.
pub(super) const XML_ENDS_EARLY: &str =
    "the body ends before its XML document does, after a template was substituted";

/// The bytes that end a run in each state of markup ([`XmlScanner::skip`]).
const NAME_STOP: [bool; 256] =
    byte_class!(|b| matches!(b, b'>' | b'/' | b' ' | b'\t' | b'\n' | b'\r' | b'{' | 0));
const TAG_STOP: [bool; 256] = byte_class!(|b| matches!(
    b,
    b'>' | b'/' | b' ' | b'\t' | b'\n' | b'\r' | b'{' | 0 | b'"' | b'\'' | b'='
));
const COMMENT_STOP: [bool; 256] = byte_class!(|b| matches!(b, b'-' | b'>' | b'{' | 0));
const PI_STOP: [bool; 256] = byte_class!(|b| matches!(b, b'?' | b'>' | b'{' | 0));
const CDATA_STOP: [bool; 256] = byte_class!(|b| matches!(b, b']' | b'>' | b'{'));

/// Bytes of text read at a time by [`XmlScanner::skim_text`], one bit each in a `u64`.
const BLOCK: usize = 64;

/// Where the bytes of tags are in a block of [`BLOCK`] bytes of text: bit `k` stands for byte
/// `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TextBlock {
    lt: u64,
    gt: u64,
    slash: u64,
    /// Space, tab, line feed, carriage return.
    space: u64,
    /// `"`.
    double: u64,
    /// `'`.
    single: u64,
    /// What only [`XmlScanner::skip`] reads: `{`, NUL, an `&` before `#` or at `last` (the
    /// last byte of the chunk's, whose next byte is not in the block).
    stop: u64,
}

impl TextBlock {
    /// Compares 16 bytes at a time (SSE2 on x86_64, NEON on aarch64, through `wide`).
    #[inline]
    fn classify(bytes: &[u8; BLOCK], last: usize) -> TextBlock {
        let (parts, _) = bytes.as_chunks::<16>();
        let mut block = TextBlock {
            lt: 0,
            gt: 0,
            slash: 0,
            space: 0,
            double: 0,
            single: 0,
            stop: 0,
        };
        let (mut amp, mut hash) = (0u64, 0u64);
        for (k, part) in parts.iter().enumerate() {
            let v = u8x16::new(*part);
            let is = |b: u8| v.simd_eq(u8x16::splat(b));
            let bits = |m: u8x16| u64::from(m.to_bitmask()) << (16 * k);
            block.lt |= bits(is(b'<'));
            block.gt |= bits(is(b'>'));
            block.slash |= bits(is(b'/'));
            block.space |= bits(is(b' ') | is(b'\t') | is(b'\n') | is(b'\r'));
            block.double |= bits(is(b'"'));
            block.single |= bits(is(b'\''));
            block.stop |= bits(is(b'{') | is(0));
            amp |= bits(is(b'&'));
            hash |= bits(is(b'#'));
        }
        block.stop |= amp & ((hash >> 1) | 1 << last);
        block
    }
}

/// How far [`XmlScanner::skim_block`] read a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skimmed {
    /// All of it: its last byte is text.
    Whole,
    /// Up to a tag that begins here and ends in a later block, with nothing between for
    /// [`XmlScanner::skip`]: the next block can start at it.
    Tag(usize),
    /// Up to a byte for [`XmlScanner::skip`], or a tag it reads.
    Stop(usize),
}

/// The first bit of `mask` from bit `from` on; [`BLOCK`] if none.
#[inline]
fn next(mask: u64, from: usize) -> usize {
    if from >= BLOCK {
        return BLOCK;
    }
    (mask & (u64::MAX << from)).trailing_zeros() as usize
}

/// Where in the document the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Element text, or the prolog and epilogue at depth 0.
    Text,
    /// After `<`.
    Open,
    /// In a start tag's element name.
    Name,
    /// In an end tag.
    End,
    /// In a start tag, between attributes; `slash` when the last byte was `/`.
    Tag { slash: bool },
    /// In an attribute value quoted by `quote`.
    Value { quote: u8 },
    /// After `<!`: `n` bytes of `[CDATA[` (`cdata`) or `--` matched.
    Bang { cdata: bool, n: u8 },
    /// In a comment; `dashes` trailing `-` (at most 2).
    Comment { dashes: u8 },
    /// In a processing instruction; `question` when the last byte was `?`.
    Pi { question: bool },
    /// In a CDATA section; `brackets` trailing `]` (at most 2).
    Cdata { brackets: u8 },
}

/// A character reference being read in text or an attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reference {
    None,
    /// After `&`.
    Amp,
    /// After `&#`.
    Hash,
    /// After `&#` and digits: their value, saturated.
    Dec(u32),
    /// After `&#x` and hex digits: their value, saturated.
    Hex(u32),
}

/// The element path for errors, bounded: the open elements' names as written, kept as they
/// are read and turned into the path of local names only when an error needs it.
#[derive(Debug, Clone, Default)]
struct Path {
    /// The names of the first [`MAX_PATH_DEPTH`] open elements one after another (each at
    /// most [`MAX_KEY_LEN`] bytes), then the start tag's name being read.
    names: Vec<u8>,
    /// Where each kept level's name ends in `names`, and whether it was cut.
    ends: Vec<(usize, bool)>,
    /// Open elements, kept or not.
    depth: usize,
    /// The name being read was cut.
    cut: bool,
}

impl Path {
    /// Where the name being read starts.
    #[inline]
    fn base(&self) -> usize {
        self.ends.last().map_or(0, |&(end, _)| end)
    }

    /// A start tag's name begins.
    #[inline]
    fn begin(&mut self) {
        self.names.truncate(self.base());
        self.cut = false;
    }

    /// Adds `run` to the name being read (if its level is kept).
    #[inline]
    fn name_bytes(&mut self, run: &[u8]) {
        if self.ends.len() >= MAX_PATH_DEPTH {
            return;
        }
        let room = MAX_KEY_LEN.saturating_sub(self.names.len() - self.base());
        self.names
            .extend_from_slice(run.get(..room.min(run.len())).unwrap_or_default());
        self.cut |= run.len() > room;
    }

    /// A start tag read whole: [`Path::begin`], [`Path::name_bytes`] and [`Path::push`] at
    /// once.
    #[inline]
    fn open(&mut self, name: &[u8]) {
        self.depth += 1;
        self.cut = false;
        if self.ends.len() < MAX_PATH_DEPTH {
            self.names.truncate(self.base());
            let kept = name.get(..MAX_KEY_LEN).unwrap_or(name);
            self.names.extend_from_slice(kept);
            self.ends.push((self.names.len(), kept.len() < name.len()));
        }
    }

    /// The name being read is complete: its element is open.
    #[inline]
    fn push(&mut self) {
        self.depth += 1;
        if self.ends.len() < MAX_PATH_DEPTH {
            self.ends.push((self.names.len(), self.cut));
        }
    }

    #[inline]
    fn pop(&mut self) {
        if self.depth == 0 {
            return;
        }
        if self.depth <= self.ends.len() {
            self.ends.pop();
            self.names.truncate(self.base());
        }
        self.depth -= 1;
    }

    fn clear(&mut self) {
        self.names.clear();
        self.ends.clear();
        self.depth = 0;
        self.cut = false;
    }

    /// `/a/b/c`: each open element's local name, `/…` for the levels not kept.
    fn render(&self) -> String {
        let mut field = String::new();
        let mut start = 0;
        for &(end, cut) in &self.ends {
            let name = self.names.get(start..end).unwrap_or_default();
            let local = match name.iter().rposition(|&b| b == b':') {
                Some(colon) => name.get(colon + 1..).unwrap_or_default(),
                None => name,
            };
            field.push('/');
            field.push_str(&String::from_utf8_lossy(local));
            if cut {
                field.push('…');
            }
            start = end;
        }
        if self.depth > self.ends.len() {
            field.push_str("/…");
        }
        field
    }
}

/// Incremental template scanner for one XML body at a time; [`XmlScanner::finish`], when it
/// succeeds, readies it for the next. After an error, every further call returns it.
#[derive(Debug, Clone)]
pub struct XmlScanner {
    state: State,
    reference: Reference,
    path: Path,
    /// The attribute whose value is being read (or was last).
    attr: Vec<u8>,
    attr_cut: bool,
    /// The next name byte in a tag starts a new attribute name.
    attr_done: bool,
    /// A `{` in text, a value or a section, not yet written: with the next, it opens a template.
    brace: bool,
    /// The last byte of markup was `{` (a second one is refused).
    markup_brace: bool,
    /// In a template (held in `held`).
    in_template: bool,
    /// In a template, the last byte read was a `}`.
    close: bool,
    /// In a template that holds only its `{{` (a third brace makes the first text).
    opened: bool,
    held: Held,
    /// A template was substituted in this body.
    substituted: bool,
    /// Templates substituted in the chunk being fed.
    count: usize,
    failed: Failed,
}

impl Default for XmlScanner {
    fn default() -> Self {
        XmlScanner::new()
    }
}

impl XmlScanner {
    pub fn new() -> Self {
        XmlScanner {
            state: State::Text,
            reference: Reference::None,
            path: Path::default(),
            attr: Vec::new(),
            attr_cut: false,
            attr_done: false,
            brace: false,
            markup_brace: false,
            in_template: false,
            close: false,
            opened: false,
            held: Held::new(),
            substituted: false,
            count: 0,
            failed: Failed::default(),
        }
    }

    /// Back to the start of a body, allocations kept.
    pub fn reset(&mut self) {
        self.state = State::Text;
        self.reference = Reference::None;
        self.path.clear();
        self.attr.clear();
        self.attr_cut = false;
        self.attr_done = false;
        self.brace = false;
        self.markup_brace = false;
        self.in_template = false;
        self.close = false;
        self.opened = false;
        self.held.clear();
        self.substituted = false;
        self.failed.clear();
    }

    /// Scans one chunk, appending output to `out`; returns how many templates it substituted.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        self.failed.check()?;
        self.count = 0;
        let result = self.scan(chunk, out, r).map(|()| self.count);
        self.failed.keep(result)
    }

    /// End of body: writes what is held back and resets the scanner. A template still open,
    /// or a document cut short after a substitution, is an error.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        self.failed.check()?;
        let message = if self.in_template {
            Some("unterminated template")
        } else if self.substituted && (self.path.depth > 0 || self.state != State::Text) {
            Some(XML_ENDS_EARLY)
        } else {
            None
        };
        if let Some(message) = message {
            let err = self.error(message);
            return self.failed.keep(Err(err));
        }
        if self.brace {
            out.push(b'{');
        }
        self.reset();
        Ok(())
    }

    fn scan(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        out.reserve(chunk.len());
        let mut i = 0;
        while i < chunk.len() {
            // The common case: bytes that change nothing but the state, copied whole.
            if !self.in_template && !self.brace && self.reference == Reference::None {
                let k = self.skip(chunk, i);
                out.extend_from_slice(chunk.get(i..k).unwrap_or_default());
                i = k;
            }
            let Some(&b) = chunk.get(i) else { break };
            self.byte(b, out, r)?;
            i += 1;
        }
        Ok(())
    }

    /// Reads `chunk` from `i` as far as its bytes are copied as they are and no template
    /// can start, following the state (tags, names, the path) on the way; returns where it
    /// stopped: the end of the chunk, or a byte for [`XmlScanner::byte`] (a `{`, a NUL in
    /// markup, a character reference, a declaration, the end of a comment or a section).
    /// Text, values and end tags are searched a word, then a SIMD vector at a time ([`find3`]),
    /// names byte by byte: they are short.
    fn skip(&mut self, chunk: &[u8], from: usize) -> usize {
        let stop = |rest: &[u8], table: &[bool; 256]| {
            rest.iter()
                .position(|&b| table.get(usize::from(b)).copied().unwrap_or(true))
        };
        let mut state = self.state;
        let mut i = from;
        loop {
            let rest = chunk.get(i..).unwrap_or_default();
            let Some(&first) = rest.first() else { break };
            state = match state {
                State::Text | State::Value { .. } => {
                    let rest = if state == State::Text {
                        i = self.skim_text(chunk, i);
                        chunk.get(i..).unwrap_or_default()
                    } else {
                        rest
                    };
                    let end = if let State::Value { quote } = state {
                        quote
                    } else {
                        b'<'
                    };
                    let Some(k) = find3(rest, end, b'&', b'{') else {
                        i = chunk.len();
                        break;
                    };
                    i += k;
                    match rest.get(k) {
                        // A named reference: only `&#` can spell a brace.
                        Some(b'&') if chunk.get(i + 1).is_some_and(|&n| n != b'#') => {
                            i += 1;
                            continue;
                        }
                        Some(&b) if b == end => {
                            i += 1;
                            if b == b'<' {
                                State::Open
                            } else {
                                State::Tag { slash: false }
                            }
                        }
                        _ => break,
                    }
                }
                State::Open => {
                    let next = match first {
                        b'/' => State::End,
                        b'?' => State::Pi { question: false },
                        b'!' | b'{' | 0 => break,
                        b => {
                            self.path.begin();
                            self.path.name_bytes(&[b]);
                            State::Name
                        }
                    };
                    i += 1;
                    next
                }
                State::Name => {
                    let k = stop(rest, &NAME_STOP);
                    self.path
                        .name_bytes(rest.get(..k.unwrap_or(rest.len())).unwrap_or_default());
                    let Some(k) = k else {
                        i = chunk.len();
                        break;
                    };
                    i += k;
                    let next = match rest.get(k) {
                        Some(b'>') => State::Text,
                        Some(b'/') => State::Tag { slash: true },
                        Some(b'{' | 0) | None => break,
                        Some(_) => State::Tag { slash: false },
                    };
                    self.element_opens(next != State::Text);
                    i += 1;
                    next
                }
                State::Tag { slash } => {
                    let k = stop(rest, &TAG_STOP);
                    let name = rest.get(..k.unwrap_or(rest.len())).unwrap_or_default();
                    let slash = if name.is_empty() {
                        slash
                    } else {
                        self.attr_bytes(name);
                        false
                    };
                    let Some(k) = k else {
                        i = chunk.len();
                        state = State::Tag { slash };
                        break;
                    };
                    i += k;
                    let next = match rest.get(k) {
                        Some(b'>') => {
                            if slash {
                                self.path.pop();
                            }
                            State::Text
                        }
                        Some(&quote @ (b'"' | b'\'')) => {
                            self.attr_done = true;
                            State::Value { quote }
                        }
                        Some(b'/') => State::Tag { slash: true },
                        Some(b'{' | 0) | None => {
                            state = State::Tag { slash };
                            break;
                        }
                        Some(_) => State::Tag { slash: false },
                    };
                    i += 1;
                    next
                }
                State::End => {
                    let Some(k) = find3(rest, b'>', b'{', 0) else {
                        i = chunk.len();
                        break;
                    };
                    i += k;
                    if rest.get(k) != Some(&b'>') {
                        break;
                    }
                    self.path.pop();
                    i += 1;
                    State::Text
                }
                // Rare: runs to the byte that may end them, which [`XmlScanner::byte`] reads.
                State::Comment { .. } | State::Pi { .. } | State::Cdata { .. } => {
                    let table = match state {
                        State::Comment { .. } => &COMMENT_STOP,
                        State::Pi { .. } => &PI_STOP,
                        _ => &CDATA_STOP,
                    };
                    let k = stop(rest, table).unwrap_or(rest.len());
                    if k == 0 {
                        break;
                    }
                    i += k;
                    match state {
                        State::Comment { .. } => State::Comment { dashes: 0 },
                        State::Pi { .. } => State::Pi { question: false },
                        _ => State::Cdata { brackets: 0 },
                    }
                }
                State::Bang { .. } => break,
            };
        }
        if i > from {
            self.markup_brace = false;
        }
        self.state = state;
        i
    }

    /// Reads element text from `i` a block of [`BLOCK`] bytes at a time ([`TextBlock`]), with
    /// the start and end tags whole in a block that hold nothing for [`XmlScanner::skip`]
    /// (`<name>`, `</name>`, `<name/>`, `<name a="v" b='w'>`, `<name a="v"/>`). A tag that
    /// crosses a block's end starts the next block. Returns where [`XmlScanner::skip`] takes
    /// over, still in text: at `<!`, `<?`, a tag longer than a block or one that holds a byte
    /// that may start a template, a reference or a refusal (`{`, `&#`, NUL), at such a byte in
    /// text, or at the end of the chunk.
    fn skim_text(&mut self, chunk: &[u8], mut i: usize) -> usize {
        while let Some(bytes) = chunk.get(i..).and_then(|rest| rest.first_chunk::<BLOCK>()) {
            let block = TextBlock::classify(bytes, BLOCK - 1);
            match self.skim_block(bytes, &block) {
                Skimmed::Whole => i += BLOCK,
                Skimmed::Tag(q) if q > 0 => i += q,
                Skimmed::Tag(_) => match self.skim_long_tag(chunk, i) {
                    Some(end) => i = end,
                    None => return i,
                },
                Skimmed::Stop(q) => return i + q,
            }
        }
        // The chunk's last bytes, padded with NULs: a stop each.
        let rest = chunk.get(i..).unwrap_or_default();
        if rest.is_empty() {
            return i;
        }
        let mut bytes = [0u8; BLOCK];
        if let Some(head) = bytes.get_mut(..rest.len()) {
            head.copy_from_slice(rest);
        }
        let block = TextBlock::classify(&bytes, rest.len() - 1);
        match self.skim_block(&bytes, &block) {
            Skimmed::Whole => chunk.len(),
            Skimmed::Tag(q) | Skimmed::Stop(q) => (i + q).min(chunk.len()),
        }
    }

    /// Reads the tag at `start` (its `<`), longer than a block, a block at a time to its `>`
    /// as [`XmlScanner::skim_block`] reads a tag, the state (name, between attributes, in a
    /// value) carried from block to block; returns the index after it. `None` when it holds
    /// a byte for [`XmlScanner::skip`], is not a start or end tag, or runs into the chunk's
    /// last bytes: [`XmlScanner::skip`] reads it from `start`.
    fn skim_long_tag(&mut self, chunk: &[u8], start: usize) -> Option<usize> {
        #[derive(Clone, Copy)]
        enum Phase {
            End,
            Name,
            Attributes,
            Value(u8),
        }
        let mut phase = match *chunk.get(start + 1)? {
            b'/' => Phase::End,
            b'!' | b'?' | b'>' | b' ' | b'\t' | b'\n' | b'\r' | b'{' | 0 => return None,
            _ => Phase::Name,
        };
        let mut i = start + 2;
        let mut name: &[u8] = &[];
        loop {
            let bytes = chunk.get(i..)?.first_chunk::<BLOCK>()?;
            let block = TextBlock::classify(bytes, BLOCK - 1);
            let limit = block.stop.trailing_zeros() as usize;
            let mut t = 0;
            while t < limit {
                match phase {
                    Phase::End => {
                        t = next(block.gt, t);
                        if t < limit {
                            self.path.pop();
                            return Some(i + t + 1);
                        }
                    }
                    Phase::Name => {
                        t = next(block.space | block.gt | block.slash, t);
                        if t < limit {
                            name = chunk.get(start + 1..i + t).unwrap_or_default();
                            if block.gt >> t & 1 == 1 {
                                self.path_push(name);
                                return Some(i + t + 1);
                            }
                            phase = Phase::Attributes;
                        }
                    }
                    Phase::Attributes => {
                        t = next(block.gt | block.double | block.single, t);
                        if t < limit {
                            let b = *bytes.get(t)?;
                            if b == b'>' {
                                if chunk.get(i + t - 1) != Some(&b'/') {
                                    self.path_push(name);
                                }
                                return Some(i + t + 1);
                            }
                            phase = Phase::Value(b);
                            t += 1;
                        }
                    }
                    Phase::Value(quote) => {
                        let same = if quote == b'"' {
                            block.double
                        } else {
                            block.single
                        };
                        t = next(same, t);
                        if t < limit {
                            phase = Phase::Attributes;
                            t += 1;
                        }
                    }
                }
            }
            if limit < BLOCK {
                return None;
            }
            i += BLOCK;
        }
    }

    /// Reads one block of text: its tags, whole before its first stop byte, move the path.
    #[inline]
    fn skim_block(&mut self, bytes: &[u8; BLOCK], block: &TextBlock) -> Skimmed {
        let bit = |mask: u64, k: usize| k < BLOCK && (mask >> k) & 1 == 1;
        let limit = block.stop.trailing_zeros() as usize;
        // A tag at `q` not whole before `limit`.
        let cut = |q: usize| {
            if limit == BLOCK {
                Skimmed::Tag(q)
            } else {
                Skimmed::Stop(q)
            }
        };
        let name_stop = block.space | block.gt | block.slash;
        let quote = block.double | block.single;
        let mut p = 0;
        loop {
            let q = next(block.lt, p);
            if q >= limit {
                return if limit < BLOCK {
                    Skimmed::Stop(limit)
                } else {
                    Skimmed::Whole
                };
            }
            if q + 1 >= limit {
                return cut(q);
            }
            let end = if bit(block.slash, q + 1) {
                let gt = next(block.gt, q + 2);
                if gt >= limit {
                    return cut(q);
                }
                self.path.pop();
                gt
            } else {
                // `<!`, `<?`: a declaration or a processing instruction.
                if bit(name_stop, q + 1) || matches!(bytes.get(q + 1), Some(b'!' | b'?')) {
                    return Skimmed::Stop(q);
                }
                let e = next(name_stop, q + 2);
                if e >= limit {
                    return cut(q);
                }
                // Attributes: from a quote to the same quote is a value, `>` outside ends
                // the tag, and `/` right before it makes an empty element.
                let mut t = e;
                while !bit(block.gt, t) {
                    t = next(block.gt | quote, t);
                    if t >= limit {
                        return cut(q);
                    }
                    if bit(quote, t) {
                        let same = if bit(block.double, t) {
                            block.double
                        } else {
                            block.single
                        };
                        let close = next(same, t + 1);
                        if close >= limit {
                            return cut(q);
                        }
                        t = close + 1;
                    }
                }
                if !bit(block.slash, t - 1) {
                    self.path_push(bytes.get(q + 1..e).unwrap_or_default());
                }
                t
            };
            p = end + 1;
        }
    }

    /// A start tag read whole: its element, `name`, is open.
    #[inline]
    fn path_push(&mut self, name: &[u8]) {
        self.path.open(name);
    }

    /// A start tag's name is complete: its element is open, and (`tag`) its attributes follow.
    /// Each tag's attribute names start afresh, so the one an error names never depends on
    /// the tags before it (which [`XmlScanner::skim_text`] reads without following names).
    #[inline]
    fn element_opens(&mut self, tag: bool) {
        self.path.push();
        if tag {
            self.attr.clear();
            self.attr_cut = false;
            self.attr_done = false;
        }
    }

    /// Adds `run` to the attribute name being read, or starts the next one with it.
    fn attr_bytes(&mut self, run: &[u8]) {
        if std::mem::take(&mut self.attr_done) {
            self.attr.clear();
            self.attr_cut = false;
        }
        let room = MAX_KEY_LEN.saturating_sub(self.attr.len());
        self.attr
            .extend_from_slice(run.get(..room.min(run.len())).unwrap_or_default());
        self.attr_cut |= run.len() > room;
    }

    /// One byte.
    fn byte(
        &mut self,
        b: u8,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        match self.state {
            State::Text | State::Value { .. } | State::Cdata { .. } => self.content(b, out, r),
            _ => {
                if b == 0 {
                    return Err(self.error(XML_NUL));
                }
                if b == b'{' && std::mem::replace(&mut self.markup_brace, true) {
                    let message = match self.state {
                        State::Comment { .. } | State::Pi { .. } => XML_IN_COMMENT,
                        _ => XML_IN_MARKUP,
                    };
                    return Err(self.error(message));
                }
                if b != b'{' {
                    self.markup_brace = false;
                }
                out.push(b);
                self.markup(b)
            }
        }
    }

    /// A byte of markup: tags, declarations, comments, processing instructions.
    fn markup(&mut self, b: u8) -> Result<(), TemplateError> {
        self.state = match self.state {
            State::Open => match b {
                b'/' => State::End,
                b'!' => State::Bang { cdata: false, n: 0 },
                b'?' => State::Pi { question: false },
                _ => {
                    self.path.begin();
                    self.path.name_bytes(&[b]);
                    State::Name
                }
            },
            State::Name => match b {
                b'>' => {
                    self.element_opens(false);
                    State::Text
                }
                b'/' => {
                    self.element_opens(true);
                    State::Tag { slash: true }
                }
                b' ' | b'\t' | b'\n' | b'\r' => {
                    self.element_opens(true);
                    State::Tag { slash: false }
                }
                _ => {
                    self.path.name_bytes(&[b]);
                    State::Name
                }
            },
            State::End => {
                if b == b'>' {
                    self.path.pop();
                    State::Text
                } else {
                    State::End
                }
            }
            State::Tag { slash } => match b {
                b'>' => {
                    if slash {
                        self.path.pop();
                    }
                    State::Text
                }
                b'"' | b'\'' => {
                    self.attr_done = true;
                    State::Value { quote: b }
                }
                b'/' => State::Tag { slash: true },
                b' ' | b'\t' | b'\n' | b'\r' | b'=' => State::Tag { slash: false },
                _ => {
                    self.attr_bytes(&[b]);
                    State::Tag { slash: false }
                }
            },
            State::Bang { cdata, n } => {
                let (cdata, want): (bool, &[u8]) = match (n, b) {
                    (0, b'[') => (true, b"[CDATA["),
                    (0, _) => (false, b"--"),
                    _ if cdata => (true, b"[CDATA["),
                    _ => (false, b"--"),
                };
                let n = usize::from(n);
                if want.get(n) != Some(&b) {
                    return Err(self.error(XML_DECLARATION));
                }
                if n + 1 == want.len() {
                    if cdata {
                        State::Cdata { brackets: 0 }
                    } else {
                        State::Comment { dashes: 0 }
                    }
                } else {
                    State::Bang {
                        cdata,
                        n: u8::try_from(n + 1).unwrap_or(u8::MAX),
                    }
                }
            }
            State::Comment { dashes } => match b {
                b'>' if dashes >= 2 => State::Text,
                b'-' => State::Comment {
                    dashes: (dashes + 1).min(2),
                },
                _ => State::Comment { dashes: 0 },
            },
            State::Pi { question } => match b {
                b'>' if question => State::Text,
                _ => State::Pi {
                    question: b == b'?',
                },
            },
            other => other,
        };
        Ok(())
    }

    /// A byte of text, an attribute value or a CDATA section: where templates go.
    fn content(
        &mut self,
        b: u8,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        if let State::Cdata { brackets } = self.state {
            if b == b'>' && brackets >= 2 && !self.in_template && !self.brace {
                out.push(b);
                self.state = State::Text;
                return Ok(());
            }
            let brackets = if b == b']' { (brackets + 1).min(2) } else { 0 };
            self.state = State::Cdata { brackets };
        }
        if self.in_template {
            let ends = match self.state {
                State::Text => b == b'<',
                State::Value { quote } => b == quote || b == b'<',
                State::Cdata { brackets } => b == b'>' && brackets >= 2,
                _ => false,
            };
            if ends {
                return Err(self.error("unterminated template"));
            }
            if self.opened && b == b'{' {
                // A third brace: the first is text, the template starts at the second.
                out.push(b'{');
                return Ok(());
            }
            self.opened = false;
            if self.held.room() == 0 {
                return Err(self.error("template too long"));
            }
            self.held.push(b);
            if b != b'}' {
                self.close = false;
            } else if std::mem::take(&mut self.close) {
                let result = match self.state {
                    State::Value { .. } => self.held.substitute::<XmlAttr>(out, r),
                    State::Cdata { .. } => self.held.substitute::<XmlCdata>(out, r),
                    _ => self.held.substitute::<XmlText>(out, r),
                };
                if let Err(message) = result {
                    return Err(self.error(&message));
                }
                if let State::Cdata { .. } = self.state {
                    self.state = State::Cdata { brackets: 0 };
                }
                self.in_template = false;
                self.substituted = true;
                self.count += 1;
            } else {
                self.close = true;
            }
            return Ok(());
        }
        if self.brace {
            if b == b'{' {
                if self.path.depth == 0 && !matches!(self.state, State::Value { .. }) {
                    return Err(self.error(XML_OUTSIDE));
                }
                self.brace = false;
                self.held.open();
                self.in_template = true;
                self.opened = true;
                self.close = false;
                return Ok(());
            }
            out.push(b'{');
            self.brace = false;
        }
        if !matches!(self.state, State::Cdata { .. }) {
            self.reference(b)?;
        }
        if b == b'{' {
            self.brace = true;
            return Ok(());
        }
        out.push(b);
        match self.state {
            State::Text if b == b'<' => {
                self.markup_brace = false;
                self.state = State::Open;
            }
            State::Value { quote } if b == quote => self.state = State::Tag { slash: false },
            _ => {}
        }
        Ok(())
    }

    /// Follows a character reference in text or a value, refusing one that stands for `{`.
    fn reference(&mut self, b: u8) -> Result<(), TemplateError> {
        let add = |v: u32, radix: u32| {
            let d = char::from(b).to_digit(radix).unwrap_or(0);
            v.saturating_mul(radix).saturating_add(d)
        };
        self.reference = match (self.reference, b) {
            (_, b'&') => Reference::Amp,
            (Reference::Amp, b'#') => Reference::Hash,
            (Reference::Hash, b'x') => Reference::Hex(0),
            (Reference::Hash, b'0'..=b'9') => Reference::Dec(add(0, 10)),
            (Reference::Dec(v), b'0'..=b'9') => Reference::Dec(add(v, 10)),
            (Reference::Hex(v), _) if b.is_ascii_hexdigit() => Reference::Hex(add(v, 16)),
            (Reference::Dec(123) | Reference::Hex(0x7b), b';') => {
                return Err(self.error(XML_BRACE_REFERENCE));
            }
            _ => Reference::None,
        };
        Ok(())
    }

    fn error(&self, message: &str) -> TemplateError {
        let mut field = self.path.render();
        if let State::Value { .. } = self.state {
            field.push_str("/@");
            field.push_str(&String::from_utf8_lossy(&self.attr));
            if self.attr_cut {
                field.push('…');
            }
        }
        if field.is_empty() {
            field.push('/');
        }
        TemplateError::at(field, self.held.bytes(), message)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::secret::Revealed;
    use crate::template::format::{run_every_cut, Format};
    use crate::template::{ResolveError, TemplateRef};

    /// Resolves `pm_x`'s number to `4<2&"'>`, a value that needs escaping; `pm_c` to `a]]>b`;
    /// `pm_<n>` to `n`; `nope` is unknown.
    fn resolver(t: &TemplateRef) -> Result<Revealed, ResolveError> {
        match t.payment_method.as_str() {
            "pm_x" => Ok(Revealed::Number("4<2&\"'>\t".into())),
            "pm_c" => Ok(Revealed::Number("a]]>b".into())),
            "pm_z" => Ok(Revealed::Number("a\u{1}".into())),
            "nope" => Err(ResolveError::new("unknown payment method")),
            other => Ok(Revealed::Number(other.trim_start_matches("pm_").into())),
        }
    }

    fn run(body: &str) -> Result<String, TemplateError> {
        run_every_cut(Format::Xml, body, &mut resolver)
    }

    fn t(pm: &str) -> String {
        format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}")
    }

    #[test]
    fn substitutes_in_text_attributes_and_cdata() {
        let quoted =
            "{{ paymentMethod: pm_4 | type: &apos;pan&apos; | json: &quot;$.number&quot; }}";
        for (body, want) in [
            (
                format!(
                    "<?xml version=\"1.0\"?><s:E xmlns:s=\"u\"><n>{}</n></s:E>",
                    t("pm_7")
                ),
                "<?xml version=\"1.0\"?><s:E xmlns:s=\"u\"><n>7</n></s:E>".to_string(),
            ),
            (
                format!("<a><n>x{}y</n><m k=\"{}\"/></a>", t("pm_x"), t("pm_x")),
                "<a><n>x4&lt;2&amp;\"'&gt;\ty</n><m k=\"4&lt;2&amp;&quot;&apos;&gt;&#9;\"/></a>"
                    .to_string(),
            ),
            (
                format!("<a b='{quoted}'>{quoted}</a>"),
                "<a b='4'>4</a>".into(),
            ),
            (
                format!("<a><![CDATA[<{}>]]></a>", t("pm_5")),
                "<a><![CDATA[<5>]]></a>".into(),
            ),
            (format!("<a>{{{}}}</a>", t("pm_3")), "<a>{3}</a>".into()),
            // Braces that open no template, references, comments and markup without any.
            (
                "<!-- { } --><?pi { ?><a x=\"{a}\">{ } }} &amp;&#125;&#x7d;<![CDATA[{]]]]></a>"
                    .into(),
                "<!-- { } --><?pi { ?><a x=\"{a}\">{ } }} &amp;&#125;&#x7d;<![CDATA[{]]]]></a>"
                    .into(),
            ),
        ] {
            assert_eq!(run(&body), Ok(want), "{body}");
        }
    }

    #[test]
    fn refuses_and_names_the_element() {
        let envelope = |inner: &str| {
            format!(
                "<soap:Envelope xmlns:soap=\"s\"><soap:Body><req><card>{inner}</card></req>\
                 </soap:Body></soap:Envelope>"
            )
        };
        let card = "/Envelope/Body/req/card";
        for (body, field, message) in [
            (
                envelope(&format!("<accountNumber>{}</accountNumber>", t("nope"))),
                format!("{card}/accountNumber"),
                "unknown payment method",
            ),
            (
                envelope(&format!("<n type=\"{}\"/>", t("nope"))),
                format!("{card}/n/@type"),
                "unknown payment method",
            ),
            (
                envelope(&format!("<![CDATA[{}]]>", t("pm_c"))),
                card.to_string(),
                CDATA_CLOSE,
            ),
            (
                envelope(&format!("<n>{}</n>", t("pm_z"))),
                format!("{card}/n"),
                "the value holds a character that XML does not allow",
            ),
            (
                envelope("<n>{{ paymentMethod: pm_1 </n>"),
                format!("{card}/n"),
                "unterminated template",
            ),
            (
                envelope("<n a=\"{{ paymentMethod: pm_1\"/>"),
                format!("{card}/n/@a"),
                "unterminated template",
            ),
            (
                envelope("<![CDATA[{{ x ]]>"),
                card.to_string(),
                "unterminated template",
            ),
            (
                envelope(&format!("<n>{{{{{}}}}}</n>", " ".repeat(600))),
                format!("{card}/n"),
                "template too long",
            ),
            (envelope("<n{{ x }}/>"), card.to_string(), XML_IN_MARKUP),
            (
                envelope("<n {{x}}=\"1\"/>"),
                format!("{card}/n"),
                XML_IN_MARKUP,
            ),
            (envelope("<n></n{{>"), format!("{card}/n"), XML_IN_MARKUP),
            (
                envelope("<!-- {{ x }} -->"),
                card.to_string(),
                XML_IN_COMMENT,
            ),
            (
                envelope("<?pi {{ x }} ?>"),
                card.to_string(),
                XML_IN_COMMENT,
            ),
            (format!("{}<a/>", t("pm_1")), "/".to_string(), XML_OUTSIDE),
            (
                format!("<a/><![CDATA[{}]]>", t("pm_1")),
                "/".to_string(),
                XML_OUTSIDE,
            ),
            (
                "<!DOCTYPE a [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><a>&e;</a>".into(),
                "/".into(),
                XML_DECLARATION,
            ),
            (envelope("<!DOCTYPE x>"), card.to_string(), XML_DECLARATION),
            (envelope("<!-x>"), card.to_string(), XML_DECLARATION),
            (
                envelope("<n>&#123;&#0123;</n>"),
                format!("{card}/n"),
                XML_BRACE_REFERENCE,
            ),
            (
                envelope("<n a='&#x7b;'/>"),
                format!("{card}/n/@a"),
                XML_BRACE_REFERENCE,
            ),
            ("<\0a\0>\0".into(), "/".into(), XML_NUL),
            (
                format!("<a><b>{}</b>", t("pm_1")),
                "/a".to_string(),
                XML_ENDS_EARLY,
            ),
            (
                format!("<a><b>{}</b></a><c", t("pm_1")),
                "/".to_string(),
                XML_ENDS_EARLY,
            ),
        ] {
            let err = run(&body).unwrap_err();
            assert_eq!(
                (err.field.as_str(), err.message.as_str()),
                (field.as_str(), message),
                "{body}"
            );
        }
    }

    /// A SOAP envelope: `head` (the start tags of `Envelope`, `Body` and `req`), five `item`s,
    /// `<card{card}><deep>` around `inner`, two more `item`s.
    fn envelope(head: &str, item: &str, card: &str, inner: &str) -> String {
        format!(
            "{head}{}<card{card}><deep>{inner}</deep></card>{}</req></s:Body></s:Envelope>",
            item.repeat(5),
            item.repeat(2)
        )
    }

    /// Where [`envelope`] puts its `inner` markup.
    const DEEP: &str = "/Envelope/Body/req/card/deep";

    /// `envelope` substitutes a template in `deep`, refuses an unknown payment method there
    /// and refuses each of `cases` (its inner markup, the field named, the message) alike,
    /// however it is cut.
    fn substitutes_and_refuses<const N: usize>(
        envelope: impl Fn(&str) -> String,
        cases: [(String, String, &str); N],
    ) {
        assert_eq!(run(&envelope(&t("pm_42"))), Ok(envelope("42")));
        refuses_at(&envelope(&t("nope")), DEEP, "unknown payment method");
        for (inner, field, message) in cases {
            refuses_at(&envelope(&inner), &field, message);
        }
    }

    /// `body` is refused with `message`, naming `field`, however it is cut.
    fn refuses_at(body: &str, field: &str, message: &str) {
        let err = run(body).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.message.as_str()),
            (field, message),
            "{body}"
        );
    }

    #[test]
    fn long_plain_markup_keeps_the_path() {
        // Blocks of plain tags (read a block at a time) among tags with attributes, empty
        // elements, references and punctuation (read byte by byte), cut everywhere.
        let item = "<item><name>Widget &amp; co. ?!</name><price>19.99</price><empty/>\
                    <q n=\"1\">3 > 2</q><x:y>a/b</x:y ></item>";
        let envelope =
            |inner: &str| envelope("<s:Envelope xmlns:s=\"u\"><s:Body><req>", item, "", inner);
        let deep = DEEP;
        substitutes_and_refuses(
            envelope,
            [
                (
                    format!("<n a=\"{}\"/>", t("nope")),
                    format!("{deep}/n/@a"),
                    "unknown payment method",
                ),
                ("&#123;".into(), deep.into(), XML_BRACE_REFERENCE),
                ("<!DOCTYPE x>".into(), deep.into(), XML_DECLARATION),
                ("<?pi {{ ?>".into(), deep.into(), XML_IN_COMMENT),
                ("<n{{/>".into(), deep.into(), XML_IN_MARKUP),
                ("</n\0>".into(), deep.into(), XML_NUL),
            ],
        );
        // Cut short after a substitution, inside plain markup.
        let body = envelope(&t("pm_1"));
        let cut = &body[..body.len() - "</s:Body></s:Envelope>".len()];
        let err = run(cut).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.message.as_str()),
            ("/Envelope/Body", XML_ENDS_EARLY)
        );
    }

    #[test]
    fn tags_with_attributes_in_blocks_keep_the_path() {
        // Start tags with attributes (quotes of both kinds, `>` and `/` in values, empty
        // elements, `/` not right before `>`), whole in a block or across a block's end,
        // and longer than a block, cut everywhere.
        let item = "<item id=\"7\" kind='a\"b'><name lang=\"en\">Widget &amp; co.</name>\
                    <price cur=\"EUR\" v='1>0'/><q n=\"1\" m='/' / >3</q><x:y a=\"/\">a/b</x:y >\
                    <long:element-name-of-some-length a=\"a value > a block's 64 bytes, with \
                    'quotes' and /slashes/\" b='\"' /><long:element-name-of-some-length \
                    xmlns:long=\"urn:example:a-namespace-long-enough-to-cross-one-block\">x\
                    </long:element-name-of-some-length                                   ></item>";
        let head = "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body>\
                    <req xmlns=\"urn:schemas-cybersource-com:transaction-data-1.219\">";
        let envelope = |inner: &str| envelope(head, item, " type=\"visa\"", inner);
        let deep = DEEP;
        substitutes_and_refuses(
            envelope,
            [
                (
                    format!("<n a=\"x\" b=\"{}\"/>", t("nope")),
                    format!("{deep}/n/@b"),
                    "unknown payment method",
                ),
                (
                    format!("<n a=\"x\"/><m =\"{}\"/>", t("nope")),
                    format!("{deep}/m/@"),
                    "unknown payment method",
                ),
                (
                    format!("<n/ c=\"{}\"/>", t("nope")),
                    format!("{deep}/n/@c"),
                    "unknown payment method",
                ),
                (
                    "<n a='&#123;'/>".into(),
                    format!("{deep}/n/@a"),
                    XML_BRACE_REFERENCE,
                ),
                (
                    format!("<n long=\"{}\"/>", "x".repeat(70) + &t("nope")),
                    format!("{deep}/n/@long"),
                    "unknown payment method",
                ),
                (
                    format!("<n a='1' b=\"{}&#x7b;\"/>", "x".repeat(70)),
                    format!("{deep}/n/@b"),
                    XML_BRACE_REFERENCE,
                ),
                (
                    format!("</deep{}{{{{>", " ".repeat(70)),
                    deep.to_string(),
                    XML_IN_MARKUP,
                ),
                ("<n a='1' {{/>".into(), format!("{deep}/n"), XML_IN_MARKUP),
                ("<n a='1'\0/>".into(), format!("{deep}/n"), XML_NUL),
            ],
        );
    }

    #[test]
    fn the_path_is_bounded() {
        let deep = "<a>".repeat(MAX_PATH_DEPTH + 5);
        let err = run(&format!("{deep}{}", t("nope"))).unwrap_err();
        assert!(err.field.ends_with("/a/…"), "{}", err.field);
        assert_eq!(err.field.len(), MAX_PATH_DEPTH * 2 + "/…".len());
        let long = "n".repeat(MAX_KEY_LEN + 10);
        let err = run(&format!("<{long}>{}", t("nope"))).unwrap_err();
        assert_eq!(err.field, format!("/{}…", &long[..MAX_KEY_LEN]));
    }
}
