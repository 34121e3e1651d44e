//! The scanner on arbitrary bytes in arbitrary chunks: it never panics, chunking never
//! changes the outcome, and a body without `{{` (nor a brace written `\u007b`) passes byte
//! for byte.
//!
//! Run with `cargo +nightly fuzz run scanner` from the crate root.

#![no_main]

use libfuzzer_sys::fuzz_target;
use paycred::secret::Revealed;
use paycred::template::{Format, ResolveError, TemplateRef};

#[path = "chunks.rs"]
mod chunks;

/// `pm_ok` resolves to a value that needs escaping; anything else is unknown.
fn resolve(t: &TemplateRef) -> Result<Revealed, ResolveError> {
    if t.payment_method == "pm_ok" {
        Ok(Revealed::Cvc("42\"\\\n\u{1}é".into()))
    } else {
        Err(ResolveError::new("unknown payment method"))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((sizes, body)) = chunks::split(data) else {
        return;
    };
    let whole = chunks::scan(Format::Json, body, &[], &mut resolve);
    let chunked = chunks::scan(Format::Json, body, sizes, &mut resolve);
    assert_eq!(whole, chunked);
    if !body.windows(2).any(|w| w == b"{{") && !body.windows(5).any(|w| w == b"\\u007") {
        assert_eq!(whole.as_deref(), Ok(body));
    }
});
