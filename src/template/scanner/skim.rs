//! The skim: JSON between tokens read 64 bytes at a time, as bit masks, instead of byte by byte
//! ([`Scanner::skim`]), and the word-at-a-time search for the end of a string ([`find_stop`])
//! that the byte lexer uses too ([`find3`], which the XML scanner uses for text and values).
//!
//! The bit tricks themselves ([`byte_eq`], [`below`], [`prefix_xor`]) know nothing of JSON;
//! [`escaped`] knows backslash escapes, [`Block`] JSON's tokens.

use memchr::{memchr2, memchr3};
use wide::u8x16;

use super::path::{Kind, MAX_PATH_DEPTH};
#[cfg(target_arch = "x86_64")]
use super::walk::prefix_xor_by_clmul;
use super::{Mode, Scanner};

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

/// Position of the first `a`, `b` or `c` in `hay`. Most runs between the bytes that matter
/// are short (JSON strings, XML text and values between tags): the first 8 bytes are tested at
/// once as a word (SWAR), without a branch per byte; `memchr` (SIMD) searches the rest.
#[inline]
pub(crate) fn find3(hay: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
    let Some(head) = hay.first_chunk::<8>() else {
        return hay.iter().position(|&x| x == a || x == b || x == c);
    };
    let word = u64::from_le_bytes(*head);
    let hits = byte_eq(word, a) | byte_eq(word, b) | byte_eq(word, c);
    if hits != 0 {
        // Little-endian: the lowest set bit is the first matching byte.
        return Some(hits.trailing_zeros() as usize / 8);
    }
    let tail = hay.get(8..).unwrap_or_default();
    let found = if c == a {
        memchr2(a, b, tail)
    } else {
        memchr3(a, b, c, tail)
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
pub(super) const BLOCK: usize = 64;
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
pub(crate) fn below(n: usize) -> u64 {
    u32::try_from(n)
        .ok()
        .and_then(|n| 1u64.checked_shl(n))
        .map_or(u64::MAX, |bit| bit - 1)
}

/// Bit `k` of the result is the XOR of bits `0..=k` of `x`: set from an opening quote up to,
/// not including, its closing quote.
#[inline]
pub(super) fn prefix_xor(mut x: u64) -> u64 {
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
pub(super) fn escaped(backslash: u64, carry: u64) -> (u64, u64) {
    const ODD: u64 = 0xaaaa_aaaa_aaaa_aaaa;
    // A first byte escaped by the previous block is not the start of a run.
    let potential = backslash & !carry;
    let code = ((potential << 1 | ODD).wrapping_sub(potential)) ^ ODD;
    let escaped = code ^ (backslash | carry);
    let escaping = code & backslash;
    (escaped, escaping >> 63)
}

/// The nesting of JSON copied without being lexed, after a template was substituted: how many
/// containers are open and whether it is inside a string, so that the end of the body can be
/// checked. Blocks are read as bit masks, as the skim reads them; a block with a backslash
/// between tokens (which escapes nothing there, while the masks assume it does) is read byte
/// by byte, which the masks match exactly otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Balance {
    /// Open containers; a stray closer at the top is ignored (never below zero), as the lexer
    /// ignores it.
    depth: i64,
    in_string: bool,
    /// In a string, the next byte is escaped.
    escape: bool,
}

impl Balance {
    /// From the lexer's state: inside a string or not (and escaped there), at `depth`.
    pub(super) fn new(in_string: bool, escape: bool, depth: usize) -> Self {
        Balance {
            depth: i64::try_from(depth).unwrap_or(i64::MAX),
            in_string,
            escape: in_string && escape,
        }
    }

    /// Whether the bytes so far end a document: outside strings, every container closed.
    pub(super) fn closed(&self) -> bool {
        !self.in_string && self.depth == 0
    }

    /// Follows `bytes`, and tells whether they hold a `{{` or a backslash: by AVX-512 or
    /// AVX2, with PCLMULQDQ and POPCNT, where the CPU has them (it is what a large body's
    /// tail costs: [`super::deferred`]).
    #[allow(unsafe_code)]
    pub(super) fn over(&mut self, bytes: &[u8]) -> Seen {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            if std::arch::is_x86_feature_detected!("avx512bw") {
                // SAFETY: `over_by_64` needs AVX-512BW, PCLMULQDQ and POPCNT, and the CPU has
                // them (checked just above).
                return unsafe { self.over_by_64(bytes) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: `over_by_32` needs AVX2, PCLMULQDQ and POPCNT, and the CPU has them
                // (checked just above).
                return unsafe { self.over_by_32(bytes) };
            }
        }
        self.over_with(bytes, nesting_masks, prefix_xor)
    }

    /// [`Balance::over`] by AVX-512BW, PCLMULQDQ and POPCNT: callable only where the CPU has
    /// them.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512bw,pclmulqdq,popcnt")]
    fn over_by_64(&mut self, bytes: &[u8]) -> Seen {
        self.over_with(
            bytes,
            |block| nesting_masks_by_64(block),
            |x| prefix_xor_by_clmul(x),
        )
    }

    /// [`Balance::over`] by AVX2, PCLMULQDQ and POPCNT: callable only where the CPU has them.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,pclmulqdq,popcnt")]
    fn over_by_32(&mut self, bytes: &[u8]) -> Seen {
        self.over_with(
            bytes,
            |block| nesting_masks_by_32(block),
            |x| prefix_xor_by_clmul(x),
        )
    }

    /// [`Balance::over`] with a block's masks by `masks` and the bytes inside strings by
    /// `xor` ([`prefix_xor`]).
    #[inline(always)]
    fn over_with(
        &mut self,
        bytes: &[u8],
        masks: impl Fn(&[u8; BLOCK]) -> Nesting,
        xor: impl Fn(u64) -> u64,
    ) -> Seen {
        let (blocks, rest) = bytes.as_chunks::<BLOCK>();
        // A copy, so that the state stays in registers (the loop's chains run through it).
        let mut state = *self;
        // Bit 0: the byte before the block is a `{`.
        let mut brace_before = 0;
        let (mut pairs, mut backslashes) = (0, 0);
        for block in blocks {
            let m = masks(block);
            pairs |= m.brace & (m.brace << 1 | brace_before);
            brace_before = m.brace >> 63;
            backslashes |= m.backslash;
            if !state.block(m, &xor) {
                block.iter().for_each(|&b| state.byte(b));
            }
        }
        let mut pair = pairs != 0;
        let mut before = brace_before == 1;
        for &b in rest {
            pair |= before && b == b'{';
            before = b == b'{';
            state.byte(b);
        }
        *self = state;
        Seen {
            pair,
            backslash: backslashes != 0 || rest.contains(&b'\\'),
        }
    }

    #[inline]
    fn byte(&mut self, b: u8) {
        if self.in_string {
            if std::mem::take(&mut self.escape) {
                return;
            }
            match b {
                b'\\' => self.escape = true,
                b'"' => self.in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => self.depth = (self.depth - 1).max(0),
                _ => {}
            }
        }
    }

    /// Follows a block by its masks; false (and nothing changed) when it has a backslash
    /// between tokens, or more closers than open containers.
    #[inline(always)]
    fn block(&mut self, m: Nesting, xor: impl Fn(u64) -> u64) -> bool {
        let Nesting {
            quote,
            backslash,
            open,
            close,
            ..
        } = m;
        let (escaped, escape_out) = if backslash | u64::from(self.escape) == 0 {
            (0, 0)
        } else {
            escaped(backslash, u64::from(self.escape))
        };
        let quote = quote & !escaped;
        let starts_in = u64::from(self.in_string);
        // From an opening quote, inclusive, to its closing quote, exclusive.
        let inside = xor(quote) ^ starts_in.wrapping_neg();
        if backslash & !inside != 0 {
            return false;
        }
        // (No bracket is a quote.)
        let opens = (open & !inside).count_ones();
        let closes = (close & !inside).count_ones();
        if i64::from(closes) > self.depth {
            // A closer may meet depth zero: byte by byte, where it is ignored.
            return false;
        }
        self.depth += i64::from(opens) - i64::from(closes);
        self.in_string = inside >> 63 == 1;
        self.escape = self.in_string && escape_out == 1;
        true
    }
}

/// What [`Balance::over`] saw besides the nesting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// Two `{` in a row.
    pub pair: bool,
    /// A backslash.
    pub backslash: bool,
}

/// What [`Balance`] reads of a block: bit `k` for byte `k`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Nesting {
    quote: u64,
    backslash: u64,
    /// `{` and `[`.
    open: u64,
    /// `}` and `]`.
    close: u64,
    /// `{` alone.
    brace: u64,
}

/// A block's [`Nesting`], 16 bytes at a time.
#[inline]
fn nesting_masks(bytes: &[u8; BLOCK]) -> Nesting {
    let (parts, _) = bytes.as_chunks::<16>();
    let mut m = Nesting::default();
    for (k, part) in parts.iter().enumerate() {
        let v = u8x16::new(*part);
        let is = |b: u8| u64::from(v.simd_eq(u8x16::splat(b)).to_bitmask()) << (16 * k);
        // `{` and `[` differ only in bit 5, and so do `}` and `]`.
        let folded = v | u8x16::splat(0x20);
        let folded_is = |b: u8| u64::from(folded.simd_eq(u8x16::splat(b)).to_bitmask()) << (16 * k);
        m.quote |= is(b'"');
        m.backslash |= is(b'\\');
        m.open |= folded_is(b'{');
        m.close |= folded_is(b'}');
        m.brace |= is(b'{');
    }
    m
}

/// A block's [`Nesting`], all 64 bytes at once by AVX-512BW (a compare gives a mask):
/// callable only where the CPU has it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw")]
#[inline]
fn nesting_masks_by_64(bytes: &[u8; BLOCK]) -> Nesting {
    use std::arch::x86_64::{__m512i, _mm512_cmpeq_epi8_mask, _mm512_or_si512, _mm512_set1_epi8};
    let splat = |b: u8| _mm512_set1_epi8(i8::from_ne_bytes([b]));
    let v: __m512i = bytemuck::cast(*bytes);
    let folded = _mm512_or_si512(v, splat(0x20));
    Nesting {
        quote: _mm512_cmpeq_epi8_mask(v, splat(b'"')),
        backslash: _mm512_cmpeq_epi8_mask(v, splat(b'\\')),
        open: _mm512_cmpeq_epi8_mask(folded, splat(b'{')),
        close: _mm512_cmpeq_epi8_mask(folded, splat(b'}')),
        brace: _mm512_cmpeq_epi8_mask(v, splat(b'{')),
    }
}

/// A block's [`Nesting`], 32 bytes at a time by AVX2: callable only where the CPU has it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn nesting_masks_by_32(bytes: &[u8; BLOCK]) -> Nesting {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
    };
    let splat = |b: u8| _mm256_set1_epi8(i8::from_ne_bytes([b]));
    let bits =
        |hits: __m256i| u64::from(u32::from_ne_bytes(_mm256_movemask_epi8(hits).to_ne_bytes()));
    let (halves, _) = bytes.as_chunks::<32>();
    let mut m = Nesting::default();
    for (k, half) in halves.iter().enumerate() {
        let v: __m256i = bytemuck::cast(*half);
        let is = |b: u8| bits(_mm256_cmpeq_epi8(v, splat(b))) << (32 * k);
        let folded = _mm256_or_si256(v, splat(0x20));
        let folded_is = |b: u8| bits(_mm256_cmpeq_epi8(folded, splat(b))) << (32 * k);
        m.quote |= is(b'"');
        m.backslash |= is(b'\\');
        m.open |= folded_is(b'{');
        m.close |= folded_is(b'}');
        m.brace |= is(b'{');
    }
    m
}

impl Scanner {
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
    pub(super) fn skim(&mut self, chunk: &[u8], at: usize) -> (usize, usize) {
        let len = chunk.len();
        if self.path.depth() > MAX_PATH_DEPTH {
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
                            let refused = b == b'{' && chunk.get(base + k + 1) == Some(&b'{');
                            if refused || self.path.depth() >= MAX_PATH_DEPTH {
                                // A `{{` between tokens (the byte lexer refuses it), or too
                                // deep for a frame: the byte lexer goes on from here.
                                stop = k;
                                key_next = expect;
                                from = k;
                                break;
                            }
                            if b == b'{' {
                                self.path.push(Kind::Object);
                                // An object below MAX_KIND_DEPTH: its first string is a key.
                                key_next = true;
                            } else {
                                self.path.push(Kind::Array);
                                key_next = false;
                            }
                        }
                        _ => {
                            self.path.pop();
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
                self.key_brace = false;
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
                base = find_stop(rest, true).map_or(len, |k| base + k);
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
        self.key_brace = false;
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
        match self.path.current() {
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
                self.path.open_key(span.base + key + 1);
                let close = (span.quote & !1u64 << key).trailing_zeros() as usize;
                if close < to {
                    self.close_key(span.base + close);
                    (expect, false)
                } else {
                    (true, true)
                }
            }
            Some(Kind::Array) => {
                self.path.advance(u64::from(commas.count_ones()));
                (false, false)
            }
            // At the top level, no key is ever expected.
            None => (false, false),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub(super) mod tests {
    use super::super::tests::{resolver, PAN_NUMBER};
    use super::super::{TemplateError, MAX_KEY_LEN};
    use super::*;
    use proptest::prelude::*;

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
            "{:?} esc={} brace={}/{} close={} key={} {:?} held={:?}",
            s.mode,
            s.escape,
            s.brace,
            s.brace_carried,
            s.close,
            s.expect_key,
            s.path,
            String::from_utf8_lossy(s.held.bytes()),
        )
    }

    /// Runs `body` cut at `cuts` through a skimming scanner and the byte lexer side by side,
    /// checking that their states agree after every chunk, and returns both outcomes. With
    /// `lex`, the skimming scanner's chunks that cannot reach the resolver are lexed
    /// ([`Scanner::lex`]) and passed on as the proxy passes them on.
    pub(in super::super) fn skim_and_bytes(
        body: &[u8],
        cuts: &[usize],
        last: bool,
        lex: bool,
    ) -> [Result<(Vec<u8>, usize), TemplateError>; 2] {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        at.extend([0, body.len()]);
        at.sort_unstable();
        let chunks: Vec<&[u8]> = at.windows(2).map(|w| &body[w[0]..w[1]]).collect();
        let mut scanners = [Scanner::new(), byte_lexer()];
        let mut outs = [vec![], vec![]];
        let mut counts = [Ok(0), Ok(0)];
        for (n, chunk) in chunks.iter().enumerate() {
            for (j, ((s, out), count)) in scanners
                .iter_mut()
                .zip(&mut outs)
                .zip(&mut counts)
                .enumerate()
            {
                let Ok(c) = count else { continue };
                let got = if last && n + 1 == chunks.len() {
                    s.feed_last(chunk, out, &mut resolver)
                } else if lex && j == 0 {
                    match s.lex(chunk) {
                        Ok(Some(through)) => {
                            out.extend_from_slice(&chunk[..through]);
                            Ok(0)
                        }
                        Ok(None) => s.feed(chunk, out, &mut resolver),
                        Err(err) => Err(err),
                    }
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
        for bytes in random_blocks(20_000) {
            let mask = |f: &dyn Fn(u8) -> bool| mask_of(&bytes, f);
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

    /// The nesting is followed the same by AVX2 (where the CPU has it), 16 bytes at a time
    /// and byte by byte, from any state and wherever the bytes start and end.
    #[test]
    fn balance_by_masks_matches_bytes() {
        let bytes = random_blocks(2_000).concat();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 0..3_000usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let start = usize::try_from(x % 4_096).unwrap();
            let len = usize::try_from(x >> 20).unwrap() % 2_000;
            let piece = &bytes[start..start + len];
            let from = Balance::new(n % 2 == 0, n % 3 == 0, n % 40);
            let mut by_bytes = from;
            piece.iter().for_each(|&b| by_bytes.byte(b));
            let seen = Seen {
                pair: piece.windows(2).any(|w| w == b"{{"),
                backslash: piece.contains(&b'\\'),
            };
            let mut fastest = from;
            assert_eq!(fastest.over(piece), seen, "{n}");
            let mut by_16 = from;
            assert_eq!(
                by_16.over_with(piece, nesting_masks, prefix_xor),
                seen,
                "{n}"
            );
            assert_eq!(fastest, by_bytes, "{n}");
            assert_eq!(by_16, by_bytes, "{n}");
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::is_x86_feature_detected as has;
                let base = has!("pclmulqdq") && has!("popcnt");
                if base && has!("avx2") {
                    let mut by_32 = from;
                    #[allow(unsafe_code)]
                    // SAFETY: the CPU has what `over_by_32` needs (checked just above).
                    let seen_32 = unsafe { by_32.over_by_32(piece) };
                    assert_eq!((seen_32, by_32), (seen, by_bytes), "{n}");
                }
                if base && has!("avx512bw") {
                    let mut by_64 = from;
                    #[allow(unsafe_code)]
                    // SAFETY: the CPU has what `over_by_64` needs (checked just above).
                    let seen_64 = unsafe { by_64.over_by_64(piece) };
                    assert_eq!((seen_64, by_64), (seen, by_bytes), "{n}");
                }
            }
        }
    }

    /// `count` blocks of mostly the bytes a classifier marks and bytes one bit away from
    /// them, some any byte (xorshift, the same every run).
    pub(in super::super) fn random_blocks(count: usize) -> Vec<[u8; BLOCK]> {
        let alphabet = b"\"\\,:{}[]x {[;|\xdb\xfb\x7f\x5c\x22\x3a\x2c\x7b\x7d\x5b\x5d\x1a\x0c";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..count)
            .map(|_| {
                let mut bytes = [0u8; BLOCK];
                for b in &mut bytes {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = match x % 8 {
                        0 => (x >> 8) as u8,
                        _ => alphabet[(x >> 8) as usize % alphabet.len()],
                    };
                }
                bytes
            })
            .collect()
    }

    /// The bytes of `bytes` for which `f` holds, bit `k` for byte `k`.
    pub(in super::super) fn mask_of(bytes: &[u8; BLOCK], f: &dyn Fn(u8) -> bool) -> u64 {
        bytes
            .iter()
            .enumerate()
            .fold(0u64, |m, (k, &b)| m | u64::from(f(b)) << k)
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
    pub(in super::super) fn document() -> impl Strategy<Value = String> {
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

        /// The skim and the walk leave the scanner exactly where the byte lexer would, after
        /// every chunk, with the same output, count and error, whether the chunks without a
        /// template are fed or lexed.
        #[test]
        fn skim_matches_byte_lexer(
            doc in document(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
            last in any::<bool>(),
            lex in any::<bool>(),
        ) {
            let [skimmed, bytes] = skim_and_bytes(doc.as_bytes(), &cuts, last, lex);
            prop_assert_eq!(skimmed, bytes, "{}", doc);
        }
    }
}
