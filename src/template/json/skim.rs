//! The skim: JSON between tokens read 64 bytes at a time, as bit masks, instead of byte by byte
//! ([`Scanner::skim`]). [`Block`] knows JSON's tokens; the bit tricks are the template level's
//! (`template::bits`), the escapes a backslash makes [`escaped`]'s.

use wide::u8x16;

use super::escape::{escaped, find_stop};
use super::path::Kind;
use super::{Mode, Scanner};
use crate::template::bits::{below, prefix_xor, BLOCK};
use crate::template::limits::MAX_PATH_DEPTH;

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
                self.braces.brace = false;
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
        self.braces.brace = false;
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
    use super::*;
    use crate::template::error::TemplateError;
    use crate::template::limits::MAX_KEY_LEN;
    use crate::template::testing::{mask_of, random_blocks};
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
            "{:?} esc={} {:?} carried={} key={} {:?} held={:?}",
            s.mode,
            s.escape,
            s.braces,
            s.brace_carried,
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
