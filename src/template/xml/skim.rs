//! The XML skim: the bytes that change nothing but the state, read as far as they go and
//! copied whole ([`XmlScanner::skip`]), element text a block of 64 bytes at a time as bit masks
//! ([`TextBlock`]) with the start and end tags whole in a block, and markup by byte classes.
//! It stops at any byte that the byte lexer (`lexer`) must read: a `{`, a NUL in markup, a
//! character reference, a declaration, the end of a comment or a section.

use wide::u8x16;

use super::{State, XmlScanner};
use crate::template::bits::{byte_class, find3, next_bit, BLOCK};

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

impl XmlScanner {
    /// Reads `chunk` from `i` as far as its bytes are copied as they are and no template
    /// can start, following the state (tags, names, the path) on the way; returns where it
    /// stopped: the end of the chunk, or a byte for [`XmlScanner::byte`] (a `{`, a NUL in
    /// markup, a character reference, a declaration, the end of a comment or a section).
    /// Text, values and end tags are searched a word, then a SIMD vector at a time ([`find3`]),
    /// names byte by byte: they are short.
    pub(super) fn skip(&mut self, chunk: &[u8], from: usize) -> usize {
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
                    self.path.element_opens(next != State::Text);
                    i += 1;
                    next
                }
                State::Tag { slash } => {
                    let k = stop(rest, &TAG_STOP);
                    let name = rest.get(..k.unwrap_or(rest.len())).unwrap_or_default();
                    let slash = if name.is_empty() {
                        slash
                    } else {
                        self.path.attr_bytes(name);
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
                            self.path.attr_value();
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
                        t = next_bit(block.gt, t);
                        if t < limit {
                            self.path.pop();
                            return Some(i + t + 1);
                        }
                    }
                    Phase::Name => {
                        t = next_bit(block.space | block.gt | block.slash, t);
                        if t < limit {
                            name = chunk.get(start + 1..i + t).unwrap_or_default();
                            if block.gt >> t & 1 == 1 {
                                self.path.open(name);
                                return Some(i + t + 1);
                            }
                            phase = Phase::Attributes;
                        }
                    }
                    Phase::Attributes => {
                        t = next_bit(block.gt | block.double | block.single, t);
                        if t < limit {
                            let b = *bytes.get(t)?;
                            if b == b'>' {
                                if chunk.get(i + t - 1) != Some(&b'/') {
                                    self.path.open(name);
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
                        t = next_bit(same, t);
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
            let q = next_bit(block.lt, p);
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
                let gt = next_bit(block.gt, q + 2);
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
                let e = next_bit(name_stop, q + 2);
                if e >= limit {
                    return cut(q);
                }
                // Attributes: from a quote to the same quote is a value, `>` outside ends
                // the tag, and `/` right before it makes an empty element.
                let mut t = e;
                while !bit(block.gt, t) {
                    t = next_bit(block.gt | quote, t);
                    if t >= limit {
                        return cut(q);
                    }
                    if bit(quote, t) {
                        let same = if bit(block.double, t) {
                            block.double
                        } else {
                            block.single
                        };
                        let close = next_bit(same, t + 1);
                        if close >= limit {
                            return cut(q);
                        }
                        t = close + 1;
                    }
                }
                if !bit(block.slash, t - 1) {
                    self.path.open(bytes.get(q + 1..e).unwrap_or_default());
                }
                t
            };
            p = end + 1;
        }
    }
}
