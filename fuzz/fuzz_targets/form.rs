//! The form scanner on arbitrary bytes in arbitrary chunks: it never panics, chunking never
//! changes the outcome, and a body without a brace (`{`, `%7B`) passes byte for byte.
//!
//! Run with `cargo +nightly fuzz run form` from the crate root.

#![no_main]

use libfuzzer_sys::fuzz_target;
use paycred::secret::Revealed;
use paycred::template::{BodyScanner, Format, ResolveError, TemplateError, TemplateRef};

/// `pm_ok` resolves to a value that needs encoding; anything else is unknown.
fn resolve(t: &TemplateRef) -> Result<Revealed, ResolveError> {
    if t.payment_method == "pm_ok" {
        Ok(Revealed::Cvc("4 2&=%+é".into()))
    } else {
        Err(ResolveError::new("unknown payment method"))
    }
}

/// Scans `body` in chunks whose sizes come from `sizes` (cycled; 0 means 1).
fn scan(body: &[u8], sizes: &[u8]) -> Result<Vec<u8>, TemplateError> {
    let mut scanner = BodyScanner::new(Format::Form);
    let mut out = Vec::new();
    let mut r = resolve;
    let mut rest = body;
    let mut k = 0;
    while !rest.is_empty() {
        let size = sizes.get(k % sizes.len().max(1)).map_or(rest.len(), |&s| usize::from(s).max(1));
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        scanner.feed(chunk, &mut out, &mut r)?;
        rest = tail;
        k += 1;
    }
    scanner.finish(&mut out)?;
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    // The first byte says how many of the next bytes are chunk sizes.
    let Some((&n, data)) = data.split_first() else {
        return;
    };
    let (sizes, body) = data.split_at(usize::from(n % 16).min(data.len()));
    let whole = scan(body, &[]);
    assert_eq!(whole, scan(body, sizes));
    let brace = body.contains(&b'{') || body.windows(3).any(|w| w.eq_ignore_ascii_case(b"%7b"));
    if !brace {
        assert_eq!(whole.as_deref(), Ok(body));
    }
});
