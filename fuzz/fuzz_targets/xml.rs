//! The XML scanner on arbitrary bytes in arbitrary chunks: it never panics, chunking never
//! changes the outcome, and a body without a `{` passes byte for byte unless it is refused
//! for its markup (a DOCTYPE, a NUL in a tag).
//!
//! Run with `cargo +nightly fuzz run xml` from the crate root.

#![no_main]

use libfuzzer_sys::fuzz_target;
use paycred::secret::Revealed;
use paycred::template::{Format, ResolveError, TemplateRef};

#[path = "chunks.rs"]
mod chunks;

/// `pm_ok` resolves to a value that needs escaping; anything else is unknown.
fn resolve(t: &TemplateRef) -> Result<Revealed, ResolveError> {
    if t.payment_method == "pm_ok" {
        Ok(Revealed::Cvc("4<2&\"'>]".into()))
    } else {
        Err(ResolveError::new("unknown payment method"))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((sizes, body)) = chunks::split(data) else {
        return;
    };
    let whole = chunks::scan(Format::Xml, body, &[], &mut resolve);
    assert_eq!(whole, chunks::scan(Format::Xml, body, sizes, &mut resolve));
    if let (Ok(out), false) = (&whole, body.contains(&b'{')) {
        assert_eq!(out.as_slice(), body);
    }
});
