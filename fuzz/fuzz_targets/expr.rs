//! The expression parser on arbitrary text: it never panics, and its error messages never
//! contain a digit, so no card number can leak through them.
//!
//! Run with `cargo +nightly fuzz run expr` from the crate root.

#![no_main]

use libfuzzer_sys::fuzz_target;
use paycred::template::parse;

fn check(text: &str) {
    if let Err(err) = parse(text) {
        let message = err.to_string();
        assert!(!message.bytes().any(|b| b.is_ascii_digit()), "{message}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check(text);
    check(&format!("{{{{{text}}}}}"));
    check(&format!("{{{{ paymentMethod: pm_1 | type: 'pan' | json: '{text}' }}}}"));
});
