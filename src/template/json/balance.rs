//! The nesting of JSON copied without being lexed, after a template was substituted
//! ([`Balance`]): followed a block of 64 bytes at a time from bit masks ([`Nesting`], by the
//! fastest classifier the CPU has, `template::simd`), so that the end of the body can be
//! checked, and so that a chunk kept unlexed ([`super::deferred`]) is known to hold no `{{`
//! nor a backslash without another search.

use super::escape::escaped;
use crate::template::bits::BLOCK;
use crate::template::simd::{self, BlockJob, Masks, Nesting, Xor};

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
    pub(super) fn over(&mut self, bytes: &[u8]) -> Seen {
        simd::by_nesting(self, bytes, 0)
    }

    /// [`Balance::over`] with a block's masks by `masks` and the bytes inside strings by
    /// `xor` (a prefix XOR).
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

/// [`Balance::over`] as a loop over blocks, for [`simd::by_nesting`] to run with the fastest
/// classifier.
impl BlockJob<Nesting> for &mut Balance {
    type Output = Seen;

    #[inline(always)]
    fn run(self, bytes: &[u8], _: usize, masks: impl Masks<Nesting>, xor: impl Xor) -> Seen {
        self.over_with(bytes, masks, xor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::template::testing::random_blocks;

    /// [`Balance::over`] from a copy of a state, for [`simd::nesting_each`]: what it saw and
    /// the state after it.
    struct OverCopy(Balance);

    impl BlockJob<Nesting> for OverCopy {
        type Output = (Seen, Balance);

        fn run(
            self,
            bytes: &[u8],
            _: usize,
            masks: impl Masks<Nesting>,
            xor: impl Xor,
        ) -> Self::Output {
            let mut balance = self.0;
            (balance.over_with(bytes, masks, xor), balance)
        }
    }

    /// The nesting is followed the same by AVX-512BW and AVX2 (where the CPU has them), 16
    /// bytes at a time and byte by byte, from any state and wherever the bytes start and end.
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
            assert_eq!(fastest, by_bytes, "{n}");
            let each = simd::nesting_each(|| OverCopy(from), piece, 0);
            for got in each {
                assert_eq!(got, (seen, by_bytes), "{n}");
            }
        }
    }
}
