//! What the scanner fuzz targets share: a body scanned whole or in chunks of sizes the input
//! chooses.

use paycred::template::{BodyScanner, Format, Resolver, TemplateError};

/// Scans `body` as `format` in chunks whose sizes come from `sizes` (cycled; 0 means 1).
pub fn scan(
    format: Format,
    body: &[u8],
    sizes: &[u8],
    r: &mut dyn Resolver,
) -> Result<Vec<u8>, TemplateError> {
    let mut scanner = BodyScanner::new(format);
    let mut out = Vec::new();
    let mut rest = body;
    let mut k = 0;
    while !rest.is_empty() {
        let size = sizes.get(k % sizes.len().max(1)).map_or(rest.len(), |&s| usize::from(s).max(1));
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        scanner.feed(chunk, &mut out, r)?;
        rest = tail;
        k += 1;
    }
    scanner.finish(&mut out)?;
    Ok(out)
}

/// Splits the fuzzer's input: the first byte says how many of the next bytes are chunk sizes.
pub fn split(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&n, data) = data.split_first()?;
    Some(data.split_at(usize::from(n % 16).min(data.len())))
}
