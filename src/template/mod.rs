//! Credential templates in proxied JSON bodies: the expression parser ([`expr`]), the streaming
//! scanner that substitutes them ([`scanner`]), and the held template between them, parsed and
//! resolved the same way whatever the body's format (`held`). Form-encoded bodies have their
//! own scanner ([`form`]), and so do XML bodies ([`xml`]); [`format`] picks one.
//!
//! A caller of the proxy writes, inside a JSON string value,
//!
//! ```text
//! {"card": {"number": "{{ paymentMethod: pm_123 | type: 'pan' | json: '$.number' }}"}}
//! ```
//!
//! and the target receives the card number in its place. The rules:
//!
//! - Templates go only inside string *values*. A `{{` in an object key or between tokens is
//!   an error, and so is a brace written as the escape `\u007b` (or `\u007B`) anywhere in the
//!   body: a target reads it as `{`, so it could hide a template from the scanner. The raw
//!   bytes `{{` start a template. Extra leading braces are text: `{{{ … }}` is `{` and a
//!   template.
//! - A template runs to the first `}}` and must end inside the string it started in. It may
//!   be up to [`MAX_TEMPLATE_LEN`] bytes as written; longer is an error.
//! - The held text is JSON-unescaped (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX`
//!   including surrogate pairs), so `type: \"pan\"` works, and then parsed by [`parse`]; see
//!   [`expr`] for the grammar.
//! - The [`Resolver`] supplies the value; it is JSON-string-escaped into the output: `"` and
//!   `\` with a backslash, control characters as `\u00XX`, non-ASCII UTF-8 as is.
//! - Several templates per string are fine and the text around them is kept.
//! - Every byte that is not part of a template is copied byte for byte: the body is never
//!   re-encoded or reformatted, and malformed JSON passes through for the target to judge,
//!   except that a body which ends before its JSON does (in a string or an open container)
//!   after a template was substituted is an error: the target would receive a broken
//!   document with a card value in it.
//! - A template may be split across any chunk boundary (inside `{{` or `}}`, an escape, a
//!   multi-byte character). The scanner holds back only the open template and a trailing `{`,
//!   never the body; its memory is bounded (see [`scanner`]).
//! - Any failure is a [`TemplateError`] carrying the JSON path of the field (`card.number`,
//!   `items[0].pan`, `["weird key"]`, `$` at the top level), the template as written and a
//!   message free of card data. The proxy maps it to 400 `invalidTemplate`.
//!
//! ```
//! use paycred::secret::Revealed;
//! use paycred::template::{ResolveError, Scanner, TemplateRef};
//!
//! let body = br#"{"n":"{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}"}"#;
//! let mut resolve = |_: &TemplateRef| Ok::<_, ResolveError>(Revealed::Number("4242424242424242".into()));
//! let mut scanner = Scanner::new();
//! let mut out = Vec::new();
//! for chunk in body.chunks(7) {
//!     scanner.feed(chunk, &mut out, &mut resolve)?;
//! }
//! scanner.finish(&mut out)?;
//! assert_eq!(out, br#"{"n":"4242424242424242"}"#);
//! # Ok::<(), paycred::template::TemplateError>(())
//! ```
//!
//! May import: `secret` (what a resolver reveals). The proxy resolves what a template names.

/// A byte table, built at compile time: `true` for the bytes `$b` for which `$is` holds (the
/// parser's and the scanner's byte classes).
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

pub mod expr;
pub mod form;
pub mod format;
mod held;
pub mod scanner;
pub mod xml;

pub use expr::{parse, CredentialField, CredentialKind, ExprError, TemplateRef};
pub use form::FormScanner;
pub use format::{BodyScanner, Format, NOT_SUBSTITUTED};
pub use scanner::{
    ResolveError, Resolver, Scanner, TemplateError, MAX_KEY_LEN, MAX_PATH_DEPTH, MAX_TEMPLATE_LEN,
};
pub use xml::XmlScanner;
