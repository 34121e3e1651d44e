//! Credential templates in proxied bodies, substituted as the body streams through, in three
//! formats: JSON ([`json`]), form-encoded ([`form`]) and XML ([`xml`]), one scanner each,
//! chosen by the body's `Content-Type` ([`format`]; any other body is only checked for `{{`).
//!
//! The layout, each file importing only those below it in this list:
//!
//! - [`format`]: the choice of scanner ([`Format`], [`BodyScanner`]), the one place that knows
//!   all three;
//! - [`json`], [`form`], [`xml`]: the scanners, side by side, none importing another;
//! - what they share, each in one place: `held` (the template held back until it closes,
//!   then decoded by the format's rules, parsed through a cache, resolved and its value
//!   written), `braces` (the `{{ … }}` recogniser and the search for `{{`), `error`
//!   ([`TemplateError`] and the messages every format gives), `resolve` ([`Resolver`],
//!   [`ResolveError`]), `limits` ([`MAX_TEMPLATE_LEN`], [`MAX_KEY_LEN`], [`MAX_PATH_DEPTH`],
//!   [`MAX_KIND_DEPTH`]), `bits` (byte classes, bit masks of 64-byte blocks, the search for
//!   one of three bytes) and `simd` (the block classifiers that need CPU features: the
//!   scanners' only `unsafe` code);
//! - [`expr`]: the expression inside the braces and its parser ([`parse`]).
//!
//! Every format keeps the same guarantees: a template may be split across any chunk boundary,
//! the scanner holds back only the open template and what may start one (never the body), its
//! memory is bounded, every byte that is not part of a template is copied as written, and any
//! failure is a [`TemplateError`] naming the field, with the template as written and a message
//! free of card data, which the proxy maps to 400 `invalidTemplate`. Each format's module
//! gives its own rules (where a template may go, how its text is decoded and its value
//! escaped); JSON's follow.
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
//!   never the body; its memory is bounded (see [`json`]).
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

pub mod expr;
pub mod form;
pub mod format;
pub mod json;
pub mod xml;

mod bits;
mod braces;
mod error;
mod held;
mod limits;
mod resolve;
mod simd;
#[cfg(test)]
mod testing;

pub use error::TemplateError;
pub use expr::{parse, CredentialField, CredentialKind, ExprError, TemplateRef};
pub use form::FormScanner;
pub use format::{BodyScanner, Format, NOT_SUBSTITUTED};
pub use json::Scanner;
pub use limits::{MAX_KEY_LEN, MAX_KIND_DEPTH, MAX_PATH_DEPTH, MAX_TEMPLATE_LEN};
pub use resolve::{ResolveError, Resolver};
pub use xml::XmlScanner;
