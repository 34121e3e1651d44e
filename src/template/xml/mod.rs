//! The XML scanner: templates in XML bodies (`text/xml`, `application/xml`, `application/*+xml`,
//! SOAP 1.1 and 1.2), chunk by chunk, with the guarantees of the JSON scanner (a template split
//! across any chunk boundary, bounded memory, fail closed) and what every format shares (the
//! `{{ … }}` recogniser, the held template, its parser, cache and resolver, the errors, limits
//! and bit tricks, all at the template level).
//!
//! The scanner reads the document's markup as far as templates need it, never a DTD:
//!
//! - A template goes in an element's text or an attribute value. Its text is read after the
//!   XML references in it are decoded (`&apos;`, `&quot;`, `&amp;`, `&lt;`, `&gt;`, `&#…;`),
//!   and its value is escaped for its place: `&`, `<` and `>` in text; those, both quotes and
//!   tab, line feed and carriage return in an attribute value (a parser would fold them).
//! - In a CDATA section a template is read as written and its value goes in raw, unless the
//!   value could close the section (it holds `]]>`, begins with `]` or `>`, or ends with `]`):
//!   that is refused.
//! - A value with a character XML does not allow (a control character other than tab, line
//!   feed, carriage return) is refused.
//! - A `{{` anywhere else is refused: in an element or attribute name, an end tag, a comment,
//!   a processing instruction, or text or a CDATA section outside the root element. So is a
//!   brace written as a character reference (`&#123;`, `&#x7B;`) in text or an attribute
//!   value: a parser reads it as `{`, so it could hide a template from the scanner.
//! - A DOCTYPE (or any `<!` declaration other than a comment or a CDATA section) is refused
//!   wherever it is: no DTD or entity is ever read, let alone resolved. Bodies are UTF-8: a
//!   NUL byte outside text and values is refused, so an XML body in UTF-16 (which would hide
//!   its templates) is refused at its first tag.
//! - A template runs to the first `}}` and must end where it started (before the `<` that
//!   ends the text, the quote that ends the value, the `]]>` that ends the section).
//! - Every other byte is copied as written; the scanner holds back only a brace that may open
//!   a template and the open template. Malformed XML passes through for the target to judge,
//!   except that a body which ends inside markup or an element after a template was
//!   substituted is an error: the target would receive a broken document with a card value.
//! - An error names the element by its path of local names (`/Envelope/Body/card/number`),
//!   an attribute as `/a/b/@name`, `/` outside the root; at most [`MAX_PATH_DEPTH`] levels of
//!   at most [`MAX_KEY_LEN`] bytes, deeper or longer shown with `…`.
//!
//! This file holds the [`XmlScanner`]'s state and what callers use; the work is done by
//!
//! - `skim`: the bytes that change nothing but the state, copied whole: element text a
//!   block of 64 bytes at a time, with the tags whole in a block, and markup by byte classes;
//! - `lexer`: the state machine, a byte at a time, for what the skim stops at: markup,
//!   declarations, comments, and in text, values and sections the templates;
//! - `path`: the element path that an error names;
//! - `escape`: references decoded in a template, values escaped for their place, and the
//!   character references followed in text and values.
//!
//! [`MAX_PATH_DEPTH`]: crate::template::MAX_PATH_DEPTH
//! [`MAX_KEY_LEN`]: crate::template::MAX_KEY_LEN

mod escape;
mod lexer;
mod path;
mod skim;
#[cfg(test)]
mod tests;

use super::braces::Braces;
use super::error::{Failed, TemplateError, UNTERMINATED};
use super::held::Held;
use super::resolve::Resolver;
use escape::Reference;
use path::Path;

/// What a DOCTYPE or another declaration answers.
pub(super) const XML_DECLARATION: &str = "a DOCTYPE or other `<!` declaration is refused in an \
     XML body: no DTD or entity is ever read";
/// What a `{{` in markup answers.
pub(super) const XML_IN_MARKUP: &str =
    "a template cannot be in an element or attribute name or an end tag";
/// What a `{{` in a comment or a processing instruction answers.
pub(super) const XML_IN_COMMENT: &str =
    "templates are never substituted in XML comments or processing instructions";
/// What a `{{` outside the root element answers.
pub(super) const XML_OUTSIDE: &str =
    "a template must be in an element's text or an attribute value";
/// What a brace written as a character reference answers.
pub(super) const XML_BRACE_REFERENCE: &str =
    "a brace written as a character reference (`&#123;`) could hide a template";
/// What a NUL byte answers.
pub(super) const XML_NUL: &str = "an XML body must be UTF-8 (it holds a NUL byte)";
/// What a body that ends inside its document after a substitution answers.
pub(super) const XML_ENDS_EARLY: &str =
    "the body ends before its XML document does, after a template was substituted";

/// Where in the document the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Element text, or the prolog and epilogue at depth 0.
    Text,
    /// After `<`.
    Open,
    /// In a start tag's element name.
    Name,
    /// In an end tag.
    End,
    /// In a start tag, between attributes; `slash` when the last byte was `/`.
    Tag { slash: bool },
    /// In an attribute value quoted by `quote`.
    Value { quote: u8 },
    /// After `<!`: `n` bytes of `[CDATA[` (`cdata`) or `--` matched.
    Bang { cdata: bool, n: u8 },
    /// In a comment; `dashes` trailing `-` (at most 2).
    Comment { dashes: u8 },
    /// In a processing instruction; `question` when the last byte was `?`.
    Pi { question: bool },
    /// In a CDATA section; `brackets` trailing `]` (at most 2).
    Cdata { brackets: u8 },
}

/// Incremental template scanner for one XML body at a time; [`XmlScanner::finish`], when it
/// succeeds, readies it for the next. After an error, every further call returns it.
#[derive(Debug, Clone)]
pub struct XmlScanner {
    state: State,
    reference: Reference,
    /// The open elements, and the attribute whose value is being read.
    path: Path,
    /// Where the `{{ … }}` recogniser is in text, a value or a section; a `{` held back there
    /// (`braces.brace`) is not yet written.
    braces: Braces,
    /// The last byte of markup was `{` (a second one is refused).
    markup_brace: bool,
    /// In a template (held in `held`).
    in_template: bool,
    held: Held,
    /// A template was substituted in this body.
    substituted: bool,
    /// Templates substituted in the chunk being fed.
    count: usize,
    failed: Failed,
}

impl Default for XmlScanner {
    fn default() -> Self {
        XmlScanner::new()
    }
}

impl XmlScanner {
    pub fn new() -> Self {
        XmlScanner {
            state: State::Text,
            reference: Reference::None,
            path: Path::default(),
            braces: Braces::default(),
            markup_brace: false,
            in_template: false,
            held: Held::new(),
            substituted: false,
            count: 0,
            failed: Failed::default(),
        }
    }

    /// Back to the start of a body, allocations kept.
    pub fn reset(&mut self) {
        self.state = State::Text;
        self.reference = Reference::None;
        self.path.clear();
        self.braces = Braces::default();
        self.markup_brace = false;
        self.in_template = false;
        self.held.clear();
        self.substituted = false;
        self.failed.clear();
    }

    /// Scans one chunk, appending output to `out`; returns how many templates it substituted.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        self.failed.check()?;
        self.count = 0;
        let result = self.scan(chunk, out, r).map(|()| self.count);
        self.failed.keep(result)
    }

    /// End of body: writes what is held back and resets the scanner. A template still open,
    /// or a document cut short after a substitution, is an error.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        self.failed.check()?;
        let message = if self.in_template {
            Some(UNTERMINATED)
        } else if self.substituted && (self.path.depth > 0 || self.state != State::Text) {
            Some(XML_ENDS_EARLY)
        } else {
            None
        };
        if let Some(message) = message {
            let err = self.error(message);
            return self.failed.keep(Err(err));
        }
        if self.braces.brace {
            out.push(b'{');
        }
        self.reset();
        Ok(())
    }

    fn scan(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        out.reserve(chunk.len());
        let mut i = 0;
        while i < chunk.len() {
            // The common case: bytes that change nothing but the state, copied whole.
            if !self.in_template && !self.braces.brace && self.reference == Reference::None {
                let k = self.skip(chunk, i);
                out.extend_from_slice(chunk.get(i..k).unwrap_or_default());
                i = k;
            }
            let Some(&b) = chunk.get(i) else { break };
            self.byte(b, out, r)?;
            i += 1;
        }
        Ok(())
    }

    fn error(&self, message: &str) -> TemplateError {
        let in_value = matches!(self.state, State::Value { .. });
        TemplateError::at(self.path.field(in_value), self.held.bytes(), message)
    }
}
