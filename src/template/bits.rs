//! Bit tricks that know nothing of any format, for the scanners of all of them: byte classes
//! as tables built at compile time ([`byte_class!`]), bytes as blocks of [`BLOCK`] bits (bit
//! `k` for byte `k`) and the masks read from them ([`below`], [`next_bit`], [`prefix_xor`]),
//! and the word-at-a-time search for one of three bytes ([`find3`]).

use memchr::{memchr2, memchr3};

/// A byte table, built at compile time: `true` for the bytes `$b` for which `$is` holds (the
/// parser's and the scanners' byte classes).
macro_rules! byte_class {
    (|$b:ident| $is:expr) => {{
        let mut table = [false; 256];
        let mut i = 0;
        while i < 256 {
            let $b = i as u8;
            table[i] = $is;
            i += 1;
        }
        table
    }};
}
pub(super) use byte_class;

/// Bytes classified at a time into bit masks, one bit each in a `u64`.
pub(super) const BLOCK: usize = 64;

/// Position of the first `a`, `b` or `c` in `hay`. Most runs between the bytes that matter
/// are short (JSON strings, XML text and values between tags): the first 8 bytes are tested at
/// once as a word (SWAR), without a branch per byte; `memchr` (SIMD) searches the rest.
#[inline]
pub(super) fn find3(hay: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
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

/// The bits below bit `n`, all of them from 64 on.
#[inline]
pub(super) fn below(n: usize) -> u64 {
    u32::try_from(n)
        .ok()
        .and_then(|n| 1u64.checked_shl(n))
        .map_or(u64::MAX, |bit| bit - 1)
}

/// The first bit of `mask` from bit `from` on; [`BLOCK`] if none.
#[inline]
pub(super) fn next_bit(mask: u64, from: usize) -> usize {
    if from >= BLOCK {
        return BLOCK;
    }
    (mask & (u64::MAX << from)).trailing_zeros() as usize
}

/// Bit `k` of the result is the XOR of bits `0..=k` of `x`: of a block's quotes, set from an
/// opening quote up to, not including, its closing quote.
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
