//! The block classifiers that need CPU features, and the only `unsafe` code of the scanners:
//! a 64-byte block turned into bit masks (bit `k` for byte `k`) 16 bytes at a time through
//! `wide` (SSE2 on x86_64, NEON on aarch64), or 32 by AVX2 or all 64 by AVX-512BW, and the
//! prefix XOR in one carry-less multiplication (PCLMULQDQ). The JSON scanner reads two kinds
//! of masks: [`Marks`] where it walks a chunk no template can start in (`json::walk`), and
//! [`Nesting`] where it follows the nesting of bytes it does not lex (`json::balance`).
//!
//! A routine compiled for features the CPU may lack must be called only where it has them:
//! [`by_marks`] and [`by_nesting`] check at run time (the check is a cached load), then call
//! it. That call is the `unsafe` block, one per routine, each beside its check with a SAFETY
//! comment; everything else here is safe code. The routine runs the caller's loop, a
//! [`BlockJob`], with the classifier and the prefix XOR built for those features, so the
//! whole loop is compiled for them (the job is inlined into it, the masks stay in
//! registers).

#[cfg(target_arch = "x86_64")]
use std::arch::is_x86_feature_detected as has;

use wide::u8x16;

use super::bits::{prefix_xor, BLOCK};

/// A block's masks (`M`), as a [`BlockJob`] is given them.
pub(super) trait Masks<M>: Fn(&[u8; BLOCK]) -> M {}
impl<M, F: Fn(&[u8; BLOCK]) -> M> Masks<M> for F {}

/// A prefix XOR ([`prefix_xor`]), as a [`BlockJob`] is given it.
pub(super) trait Xor: Fn(u64) -> u64 {}
impl<F: Fn(u64) -> u64> Xor for F {}

/// A loop over the blocks of `bytes` from `at` that reads each one's masks (`M`) by `masks`
/// and the bytes inside strings by `xor` ([`prefix_xor`]): run by [`by_marks`] or
/// [`by_nesting`] with the fastest this CPU has. It is implemented for the loop's state by
/// `&mut` (a window, a nesting), so that the compiled loop gets the state as a reference of its
/// own, which nothing else aliases, and keeps it in registers.
pub(super) trait BlockJob<M> {
    type Output;

    /// The loop over `bytes` from `at`, with a block's masks by `masks` and the prefix XOR by
    /// `xor`.
    fn run(self, bytes: &[u8], at: usize, masks: impl Masks<M>, xor: impl Xor) -> Self::Output;
}

/// Where the bytes that the JSON walk reads are in a block: bit `k` stands for byte `k`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Marks {
    pub(super) quote: u64,
    pub(super) backslash: u64,
    /// `{`, `[`, `}` and `]`.
    pub(super) nest: u64,
    /// `{` and `[`.
    pub(super) open: u64,
    /// `,` and `:`.
    pub(super) punct: u64,
}

impl Marks {
    /// 16 bytes at a time (SSE2 on x86_64, NEON on aarch64, through `wide`).
    #[inline]
    pub(super) fn by_16(bytes: &[u8; BLOCK]) -> Marks {
        let (parts, _) = bytes.as_chunks::<16>();
        let mut marks = Marks::default();
        for (k, part) in parts.iter().enumerate() {
            let v = u8x16::new(*part);
            let is = |b: u8| v.simd_eq(u8x16::splat(b));
            // `{` and `[` differ only in bit 5 (0x7b, 0x5b), and so do `}` and `]`.
            let folded = v | u8x16::splat(0x20);
            let open = folded.simd_eq(u8x16::splat(b'{'));
            let nest = open | folded.simd_eq(u8x16::splat(b'}'));
            let at = 16 * k;
            marks.quote |= u64::from(is(b'"').to_bitmask()) << at;
            marks.backslash |= u64::from(is(b'\\').to_bitmask()) << at;
            marks.nest |= u64::from(nest.to_bitmask()) << at;
            marks.open |= u64::from(open.to_bitmask()) << at;
            marks.punct |= u64::from((is(b',') | is(b':')).to_bitmask()) << at;
        }
        marks
    }

    /// 32 bytes at a time, by AVX2: callable only where the CPU has it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    fn by_32(bytes: &[u8; BLOCK]) -> Marks {
        use std::arch::x86_64::{__m256i, _mm256_cmpeq_epi8, _mm256_or_si256};
        let (halves, _) = bytes.as_chunks::<32>();
        let mut marks = Marks::default();
        for (k, half) in halves.iter().enumerate() {
            let v: __m256i = bytemuck::cast(*half);
            let is = |b: u8| _mm256_cmpeq_epi8(v, splat_32(b));
            let folded = _mm256_or_si256(v, splat_32(0x20));
            let open = _mm256_cmpeq_epi8(folded, splat_32(b'{'));
            let nest = _mm256_or_si256(open, _mm256_cmpeq_epi8(folded, splat_32(b'}')));
            let at = 32 * k;
            marks.quote |= bits_32(is(b'"')) << at;
            marks.backslash |= bits_32(is(b'\\')) << at;
            marks.nest |= bits_32(nest) << at;
            marks.open |= bits_32(open) << at;
            marks.punct |= bits_32(_mm256_or_si256(is(b','), is(b':'))) << at;
        }
        marks
    }
}

/// What the JSON nesting follower reads of a block: bit `k` for byte `k`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Nesting {
    pub(super) quote: u64,
    pub(super) backslash: u64,
    /// `{` and `[`.
    pub(super) open: u64,
    /// `}` and `]`.
    pub(super) close: u64,
    /// `{` alone.
    pub(super) brace: u64,
}

impl Nesting {
    /// 16 bytes at a time (SSE2 on x86_64, NEON on aarch64, through `wide`).
    #[inline]
    fn by_16(bytes: &[u8; BLOCK]) -> Nesting {
        let (parts, _) = bytes.as_chunks::<16>();
        let mut m = Nesting::default();
        for (k, part) in parts.iter().enumerate() {
            let v = u8x16::new(*part);
            let is = |b: u8| u64::from(v.simd_eq(u8x16::splat(b)).to_bitmask()) << (16 * k);
            // `{` and `[` differ only in bit 5, and so do `}` and `]`.
            let folded = v | u8x16::splat(0x20);
            let folded_is =
                |b: u8| u64::from(folded.simd_eq(u8x16::splat(b)).to_bitmask()) << (16 * k);
            m.quote |= is(b'"');
            m.backslash |= is(b'\\');
            m.open |= folded_is(b'{');
            m.close |= folded_is(b'}');
            m.brace |= is(b'{');
        }
        m
    }

    /// 32 bytes at a time by AVX2: callable only where the CPU has it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    fn by_32(bytes: &[u8; BLOCK]) -> Nesting {
        use std::arch::x86_64::{__m256i, _mm256_cmpeq_epi8, _mm256_or_si256};
        let (halves, _) = bytes.as_chunks::<32>();
        let mut m = Nesting::default();
        for (k, half) in halves.iter().enumerate() {
            let v: __m256i = bytemuck::cast(*half);
            let is = |b: u8| bits_32(_mm256_cmpeq_epi8(v, splat_32(b))) << (32 * k);
            let folded = _mm256_or_si256(v, splat_32(0x20));
            let folded_is = |b: u8| bits_32(_mm256_cmpeq_epi8(folded, splat_32(b))) << (32 * k);
            m.quote |= is(b'"');
            m.backslash |= is(b'\\');
            m.open |= folded_is(b'{');
            m.close |= folded_is(b'}');
            m.brace |= is(b'{');
        }
        m
    }

    /// All 64 bytes at once by AVX-512BW (a compare gives a mask): callable only where the
    /// CPU has it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512bw")]
    #[inline]
    fn by_64(bytes: &[u8; BLOCK]) -> Nesting {
        use std::arch::x86_64::{
            __m512i, _mm512_cmpeq_epi8_mask, _mm512_or_si512, _mm512_set1_epi8,
        };
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
}

/// `b` in every byte of an AVX2 vector.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn splat_32(b: u8) -> std::arch::x86_64::__m256i {
    std::arch::x86_64::_mm256_set1_epi8(i8::from_ne_bytes([b]))
}

/// Bit `k` for each byte `k` of an AVX2 compare's result that matched.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn bits_32(hits: std::arch::x86_64::__m256i) -> u64 {
    let mask = std::arch::x86_64::_mm256_movemask_epi8(hits);
    u64::from(u32::from_ne_bytes(mask.to_ne_bytes()))
}

/// [`prefix_xor`] in one instruction, a carry-less multiplication by all ones: callable
/// only where the CPU has PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
fn prefix_xor_by_clmul(x: u64) -> u64 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set1_epi8, _mm_set_epi64x,
    };
    let x = _mm_set_epi64x(0, i64::from_ne_bytes(x.to_ne_bytes()));
    let product = _mm_clmulepi64_si128(x, _mm_set1_epi8(-1), 0);
    u64::from_ne_bytes(_mm_cvtsi128_si64(product).to_ne_bytes())
}

/// Runs `job` with [`Marks`] by AVX2 and the prefix XOR by PCLMULQDQ where the CPU has them,
/// else 16 bytes at a time and [`prefix_xor`].
#[allow(unsafe_code)]
pub(super) fn by_marks<J: BlockJob<Marks>>(job: J, bytes: &[u8], at: usize) -> J::Output {
    #[cfg(target_arch = "x86_64")]
    if has!("avx2") && has!("pclmulqdq") {
        // SAFETY: `marks_by_32` is compiled for AVX2 and PCLMULQDQ, and the CPU has both
        // (checked just above); it is otherwise safe code.
        return unsafe { marks_by_32(job, bytes, at) };
    }
    job.run(bytes, at, Marks::by_16, prefix_xor)
}

/// Runs `job` with [`Nesting`] by AVX-512BW or AVX2 and the prefix XOR by PCLMULQDQ where the
/// CPU has them (and POPCNT, for the job's counts), else 16 bytes at a time and
/// [`prefix_xor`].
#[allow(unsafe_code)]
pub(super) fn by_nesting<J: BlockJob<Nesting>>(job: J, bytes: &[u8], at: usize) -> J::Output {
    #[cfg(target_arch = "x86_64")]
    if has!("pclmulqdq") && has!("popcnt") {
        if has!("avx512bw") {
            // SAFETY: `nesting_by_64` is compiled for AVX-512BW, PCLMULQDQ and POPCNT, and the
            // CPU has them (checked just above); it is otherwise safe code.
            return unsafe { nesting_by_64(job, bytes, at) };
        }
        if has!("avx2") {
            // SAFETY: `nesting_by_32` is compiled for AVX2, PCLMULQDQ and POPCNT, and the CPU
            // has them (checked just above); it is otherwise safe code.
            return unsafe { nesting_by_32(job, bytes, at) };
        }
    }
    job.run(bytes, at, Nesting::by_16, prefix_xor)
}

/// [`by_marks`] by AVX2 and PCLMULQDQ: callable only where the CPU has them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq")]
fn marks_by_32<J: BlockJob<Marks>>(job: J, bytes: &[u8], at: usize) -> J::Output {
    job.run(bytes, at, |b| Marks::by_32(b), |x| prefix_xor_by_clmul(x))
}

/// [`by_nesting`] by AVX-512BW, PCLMULQDQ and POPCNT: callable only where the CPU has them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw,pclmulqdq,popcnt")]
fn nesting_by_64<J: BlockJob<Nesting>>(job: J, bytes: &[u8], at: usize) -> J::Output {
    job.run(bytes, at, |b| Nesting::by_64(b), |x| prefix_xor_by_clmul(x))
}

/// [`by_nesting`] by AVX2, PCLMULQDQ and POPCNT: callable only where the CPU has them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq,popcnt")]
fn nesting_by_32<J: BlockJob<Nesting>>(job: J, bytes: &[u8], at: usize) -> J::Output {
    job.run(bytes, at, |b| Nesting::by_32(b), |x| prefix_xor_by_clmul(x))
}

/// The outputs of a job made by `job` and run over `bytes` from `at` by every way [`by_marks`] may run it on this
/// CPU, 16 bytes at a time first: for tests, which compare them.
#[cfg(test)]
#[allow(unsafe_code)]
pub(super) fn marks_each<J: BlockJob<Marks>>(
    job: impl Fn() -> J,
    bytes: &[u8],
    at: usize,
) -> Vec<J::Output> {
    #[allow(unused_mut)]
    let mut all = vec![job().run(bytes, at, Marks::by_16, prefix_xor)];
    #[cfg(target_arch = "x86_64")]
    if has!("avx2") && has!("pclmulqdq") {
        // SAFETY: the CPU has what `marks_by_32` is compiled for (checked just above).
        all.push(unsafe { marks_by_32(job(), bytes, at) });
    }
    all
}

/// The outputs of a job made by `job` and run over `bytes` from `at` by every way [`by_nesting`] may run it on
/// this CPU, 16 bytes at a time first: for tests, which compare them.
#[cfg(test)]
#[allow(unsafe_code)]
pub(super) fn nesting_each<J: BlockJob<Nesting>>(
    job: impl Fn() -> J,
    bytes: &[u8],
    at: usize,
) -> Vec<J::Output> {
    #[allow(unused_mut)]
    let mut all = vec![job().run(bytes, at, Nesting::by_16, prefix_xor)];
    #[cfg(target_arch = "x86_64")]
    if has!("pclmulqdq") && has!("popcnt") {
        if has!("avx2") {
            // SAFETY: the CPU has what `nesting_by_32` is compiled for (checked just above).
            all.push(unsafe { nesting_by_32(job(), bytes, at) });
        }
        if has!("avx512bw") {
            // SAFETY: the CPU has what `nesting_by_64` is compiled for (checked just above).
            all.push(unsafe { nesting_by_64(job(), bytes, at) });
        }
    }
    all
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::template::testing::{mask_of, random_blocks};

    /// The masks of the block at `at`, and the prefix XOR of its quotes.
    struct Classify;

    impl<M> BlockJob<M> for Classify {
        type Output = (M, u64);

        fn run(self, bytes: &[u8], at: usize, masks: impl Masks<M>, xor: impl Xor) -> (M, u64) {
            let block = bytes.get(at..).and_then(|b| b.first_chunk()).unwrap();
            let quotes = mask_of(block, &|b| b == b'"');
            (masks(block), xor(quotes))
        }
    }

    /// Every classifier (AVX2 and AVX-512BW where this CPU has them) against a byte loop, on
    /// random blocks, and the prefix XOR against one.
    #[test]
    fn classifiers_match_bytes() {
        for bytes in random_blocks(20_000) {
            let mask = |f: &dyn Fn(u8) -> bool| mask_of(&bytes, f);
            let quotes = mask(&|b| b == b'"');
            let inside = (0..BLOCK).fold(0u64, |m, k| {
                m | u64::from((quotes & below_or_at(k)).count_ones() % 2 == 1) << k
            });
            let marks = Marks {
                quote: quotes,
                backslash: mask(&|b| b == b'\\'),
                nest: mask(&|b| matches!(b, b'{' | b'}' | b'[' | b']')),
                open: mask(&|b| matches!(b, b'{' | b'[')),
                punct: mask(&|b| matches!(b, b',' | b':')),
            };
            for got in marks_each(|| Classify, &bytes, 0) {
                assert_eq!(got, (marks, inside), "{bytes:?}");
            }
            let nesting = |m: Nesting| (m.quote, m.backslash, m.open, m.close, m.brace);
            let want = (
                quotes,
                marks.backslash,
                marks.open,
                mask(&|b| matches!(b, b'}' | b']')),
                mask(&|b| b == b'{'),
            );
            for (got, xor) in nesting_each(|| Classify, &bytes, 0) {
                assert_eq!((nesting(got), xor), (want, inside), "{bytes:?}");
            }
        }
    }

    /// The bits up to bit `k`, inclusive.
    fn below_or_at(k: usize) -> u64 {
        u64::MAX >> (63 - k)
    }
}
