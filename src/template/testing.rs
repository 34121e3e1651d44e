//! What the tests of every format's scanner share: a body run through a scanner cut every
//! way ([`run_every_cut`]), and random 64-byte blocks for the block classifiers
//! ([`random_blocks`], [`mask_of`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::bits::BLOCK;
use super::error::TemplateError;
use super::resolve::Resolver;

/// Runs `body` through a scanner (its `new`, `feed` and `finish`) whole, byte by byte and cut
/// in two at every byte, checks that all agree, and returns the output.
pub(super) fn run_every_cut<S>(
    (new, feed, finish): (
        impl Fn() -> S,
        impl Fn(&mut S, &[u8], &mut Vec<u8>, &mut dyn Resolver) -> Result<usize, TemplateError>,
        impl Fn(&mut S, &mut Vec<u8>) -> Result<(), TemplateError>,
    ),
    body: &str,
    r: &mut dyn Resolver,
) -> Result<String, TemplateError> {
    let mut run = |chunks: &[&[u8]]| {
        let mut s = new();
        let mut out = Vec::new();
        for c in chunks {
            feed(&mut s, c, &mut out, r)?;
        }
        finish(&mut s, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    };
    let b = body.as_bytes();
    let whole = run(&[b]);
    let bytes: Vec<&[u8]> = b.chunks(1).collect();
    assert_eq!(run(&bytes), whole, "{body} byte by byte");
    for at in 0..=b.len() {
        let (x, y) = b.split_at(at);
        assert_eq!(run(&[x, y]), whole, "{body} cut at {at}");
    }
    whole
}

/// `count` blocks of mostly the bytes a classifier marks and bytes one bit away from them,
/// some any byte (xorshift, the same every run).
pub(super) fn random_blocks(count: usize) -> Vec<[u8; BLOCK]> {
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
pub(super) fn mask_of(bytes: &[u8; BLOCK], f: &dyn Fn(u8) -> bool) -> u64 {
    bytes
        .iter()
        .enumerate()
        .fold(0u64, |m, (k, &b)| m | u64::from(f(b)) << k)
}
