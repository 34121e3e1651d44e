//! The template being read, whatever the body's format: its bytes held back from the output
//! until it closes, then decoded, parsed (through a cache of parsed templates), resolved, and
//! its value written in its place.
//!
//! The format supplies the two things that differ between bodies ([`Encoding`]): how text
//! inside a template is escaped, and how a value must be escaped where the template stood. The
//! JSON scanner ([`super::json`]), the form scanner ([`super::form`]) and the XML scanner
//! ([`super::xml`]) share it.

use std::sync::Arc;

use once_cell::sync::Lazy;

use super::expr::{self, TemplateRef};
use super::limits::MAX_TEMPLATE_LEN;
use super::resolve::Resolver;

/// Templates parsed so far, by their text as written, one cache per format (the same bytes
/// decode differently in JSON and in a form). Parsing is a pure function of the text, and a
/// service's bodies carry the same few templates again and again: a lookup costs about a
/// fifth of decoding and parsing one. Only templates that parsed and resolved are kept
/// (their text names a credential that exists: ids and a path), at most [`PARSED_CAPACITY`].
pub(super) struct ParsedCache(Lazy<quick_cache::sync::Cache<Vec<u8>, Arc<TemplateRef>>>);

impl ParsedCache {
    /// An empty cache, made on first use (for a `static`).
    pub(super) const fn new() -> Self {
        ParsedCache(Lazy::new(new_cache))
    }
}

fn new_cache() -> quick_cache::sync::Cache<Vec<u8>, Arc<TemplateRef>> {
    quick_cache::sync::Cache::new(PARSED_CAPACITY)
}

/// Most templates a [`ParsedCache`] keeps.
const PARSED_CAPACITY: usize = 4096;

/// How a body format writes text, as far as templates are concerned.
pub(super) trait Encoding {
    /// The format's cache of parsed templates.
    fn parsed() -> &'static ParsedCache;
    /// Whether `raw`, a template as written, holds escapes to decode before it is parsed.
    fn has_escapes(raw: &[u8]) -> bool;
    /// Decodes the escapes of `raw` into `dst`; the message says what is wrong.
    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str>;
    /// Writes `value` escaped for the place the template stood in.
    fn escape_into(out: &mut Vec<u8>, value: &[u8]);
    /// Why `value` cannot stand in the template's place at all, however escaped.
    fn refuse(_value: &[u8]) -> Option<&'static str> {
        None
    }
}

/// The template being read: its bytes as written, from `{{` on, at most [`MAX_TEMPLATE_LEN`].
#[derive(Debug, Clone)]
pub(super) struct Held {
    /// The template as written.
    bytes: Vec<u8>,
    /// The template decoded, for the expression parser.
    decoded: String,
}

impl Held {
    pub(super) fn new() -> Self {
        Held {
            bytes: Vec::with_capacity(MAX_TEMPLATE_LEN),
            decoded: String::new(),
        }
    }

    /// Nothing held, allocations kept.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.decoded.clear();
    }

    /// A template starts: holds its `{{`.
    #[inline]
    pub(super) fn open(&mut self) {
        self.bytes.clear();
        self.bytes.extend_from_slice(b"{{");
    }

    /// The template as written so far.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes that may still be added before the template is too long.
    #[inline]
    pub(super) fn room(&self) -> usize {
        MAX_TEMPLATE_LEN.saturating_sub(self.bytes.len())
    }

    #[inline]
    pub(super) fn push(&mut self, b: u8) {
        self.bytes.push(b);
    }

    #[inline]
    pub(super) fn extend(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// Decodes, parses and resolves the held template, writes its value into `out` escaped by
    /// `E`, and holds nothing more. The error is the message for the client, free of card data.
    pub(super) fn substitute<E: Encoding>(
        &mut self,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), String> {
        let parsed = &E::parsed().0;
        let (reference, cached) = match parsed.get(self.bytes.as_slice()) {
            Some(reference) => (reference, true),
            None => (Arc::new(self.parse::<E>()?), false),
        };
        let value = r.resolve(&reference).map_err(|err| err.message)?;
        // Kept once it named a credential that exists: the text holds an id then, and
        // whatever else a caller wrote into a template (a card number as the id, say)
        // is never kept.
        if !cached {
            parsed.insert(self.bytes.clone(), reference);
        }
        if let Some(message) = E::refuse(value.expose().as_bytes()) {
            return Err(message.to_owned());
        }
        E::escape_into(out, value.expose().as_bytes());
        // The value is wiped as it drops (its type does it); `out` is the caller's to protect.
        drop(value);
        self.bytes.clear();
        Ok(())
    }

    /// Decodes and parses the held template.
    fn parse<E: Encoding>(&mut self) -> Result<TemplateRef, String> {
        // Templates seldom hold escapes: parse the held bytes in place when they have none.
        let text = match std::str::from_utf8(&self.bytes) {
            Ok(text) if !E::has_escapes(&self.bytes) => text,
            _ => {
                E::unescape(&self.bytes, &mut self.decoded)?;
                &self.decoded
            }
        };
        expr::parse(text).map_err(|e| e.to_string())
    }
}

/// Whether the text `template` is in format `E`'s cache of parsed templates.
#[cfg(test)]
pub(super) fn is_cached<E: Encoding>(template: &str) -> bool {
    E::parsed().0.get(template.as_bytes()).is_some()
}
