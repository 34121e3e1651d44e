//! The form scanner on arbitrary bytes in arbitrary chunks: it never panics, chunking never
//! changes the outcome, and a body without a brace (`{`, `%7B`) passes byte for byte.
//!
//! Run with `cargo +nightly fuzz run form` from the crate root.

#![no_main]

use libfuzzer_sys::fuzz_target;
use paycred::secret::Revealed;
use paycred::template::{Format, ResolveError, TemplateRef};

#[path = "chunks.rs"]
mod chunks;

/// `pm_ok` resolves to a value that needs encoding; anything else is unknown.
fn resolve(t: &TemplateRef) -> Result<Revealed, ResolveError> {
    if t.payment_method == "pm_ok" {
        Ok(Revealed::Cvc("4 2&=%+é".into()))
    } else {
        Err(ResolveError::new("unknown payment method"))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((sizes, body)) = chunks::split(data) else {
        return;
    };
    let whole = chunks::scan(Format::Form, body, &[], &mut resolve);
    assert_eq!(whole, chunks::scan(Format::Form, body, sizes, &mut resolve));
    let brace = body.contains(&b'{') || body.windows(3).any(|w| w.eq_ignore_ascii_case(b"%7b"));
    if !brace {
        assert_eq!(whole.as_deref(), Ok(body));
    }
});
