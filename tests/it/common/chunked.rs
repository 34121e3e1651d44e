//! Checks shared by the property tests of the form and XML scanners: a body scanned in
//! arbitrary chunks.

use super::Table;
use paycred::template::{BodyScanner, Format, TemplateError};
use proptest::prelude::*;

/// Scans `body` as `format`, cut at `cuts` (taken modulo the length).
pub fn scan(
    format: Format,
    body: &[u8],
    cuts: &[usize],
    values: &[String],
) -> Result<Vec<u8>, TemplateError> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    at.push(0);
    at.push(body.len());
    at.sort_unstable();
    let mut scanner = BodyScanner::new(format);
    let mut resolver = Table { values };
    let mut out = Vec::new();
    for w in at.windows(2) {
        scanner.feed(&body[w[0]..w[1]], &mut out, &mut resolver)?;
    }
    scanner.finish(&mut out)?;
    Ok(out)
}

/// `written`, cut at `cuts` and byte by byte, gives `expected`.
pub fn gives(
    format: Format,
    written: &str,
    expected: &str,
    cuts: &[usize],
    values: &[String],
) -> Result<(), TestCaseError> {
    let bytewise: Vec<usize> = (0..written.len()).collect();
    for cuts in [cuts, &bytewise] {
        let out = scan(format, written.as_bytes(), cuts, values).unwrap();
        prop_assert_eq!(String::from_utf8(out).unwrap(), expected);
    }
    Ok(())
}

/// `body` whole, cut at `cuts` and byte by byte has the same outcome, errors included.
pub fn chunking_does_not_matter(
    format: Format,
    body: &[u8],
    cuts: &[usize],
) -> Result<(), TestCaseError> {
    let values = ["4242".to_owned()];
    let whole = scan(format, body, &[], &values);
    prop_assert_eq!(&whole, &scan(format, body, cuts, &values));
    let bytewise: Vec<usize> = (0..body.len()).collect();
    prop_assert_eq!(whole, scan(format, body, &bytewise, &values));
    Ok(())
}
