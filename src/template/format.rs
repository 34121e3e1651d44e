//! The scanner for a body's format: one per format behind the same narrow API (feed a chunk,
//! end the body), chosen by the caller from the body's `Content-Type` ([`Format`]): the JSON
//! scanner ([`super::json`]), the form scanner ([`super::form`]) or the XML scanner
//! ([`super::xml`]), and for any other body a check that it holds no `{{`. The scanners know
//! nothing of this choice: this file imports them, and none of them imports it.

use super::braces::find_open;
use super::error::TemplateError;
use super::form::FormScanner;
use super::json::Scanner;
use super::resolve::Resolver;
use super::xml::XmlScanner;

/// The body formats templates are substituted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`, `application/*+json`: [`Scanner`].
    Json,
    /// `application/x-www-form-urlencoded`: [`FormScanner`].
    Form,
    /// `text/xml`, `application/xml`, `application/*+xml` (SOAP 1.1 and 1.2): [`XmlScanner`].
    Xml,
    /// Any other body, or none declared: nothing is substituted, and a `{{` anywhere is
    /// refused ([`OtherBody`]): a template there would reach the target unsubstituted.
    Other,
}

/// What a `{{` in a body of another format answers.
pub const NOT_SUBSTITUTED: &str = "templates are substituted only in JSON, form-encoded and \
     XML bodies (by Content-Type); this body holds `{{`, which would reach the target as it is";

/// A body of another format, checked for `{{` wherever the chunks cut it and otherwise
/// passed as it is.
#[derive(Debug, Clone, Default)]
pub struct OtherBody {
    /// The last chunk ended with `{`.
    brace: bool,
}

impl OtherBody {
    /// Refuses a chunk that holds or completes a `{{`.
    fn check(&mut self, chunk: &[u8]) -> Result<(), TemplateError> {
        if (self.brace && chunk.first() == Some(&b'{')) || find_open(chunk).is_some() {
            return Err(TemplateError::at("$".to_string(), &[], NOT_SUBSTITUTED));
        }
        if let Some(&last) = chunk.last() {
            self.brace = last == b'{';
        }
        Ok(())
    }

    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<usize, TemplateError> {
        self.check(chunk)?;
        out.extend_from_slice(chunk);
        Ok(0)
    }
}

/// A scanner for one format. The JSON scanner's shortcuts for bodies read whole
/// ([`Scanner::lex`], [`Scanner::tail_start`], [`Scanner::feed_tail`]) are JSON's alone:
/// other formats feed every chunk.
#[derive(Debug, Clone)]
pub enum BodyScanner {
    Json(Scanner),
    Form(FormScanner),
    Xml(XmlScanner),
    Other(OtherBody),
}

impl Default for BodyScanner {
    fn default() -> Self {
        BodyScanner::new(Format::Json)
    }
}

impl BodyScanner {
    pub fn new(format: Format) -> Self {
        match format {
            Format::Json => BodyScanner::Json(Scanner::new()),
            Format::Form => BodyScanner::Form(FormScanner::new()),
            Format::Xml => BodyScanner::Xml(XmlScanner::new()),
            Format::Other => BodyScanner::Other(OtherBody::default()),
        }
    }

    /// Back to the start of a body.
    pub fn reset(&mut self) {
        match self {
            BodyScanner::Json(s) => s.reset(),
            BodyScanner::Form(s) => s.reset(),
            BodyScanner::Xml(s) => s.reset(),
            BodyScanner::Other(s) => *s = OtherBody::default(),
        }
    }

    /// [`Scanner::feed`].
    pub fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        match self {
            BodyScanner::Json(s) => s.feed(chunk, out, r),
            BodyScanner::Form(s) => s.feed(chunk, out, r),
            BodyScanner::Xml(s) => s.feed(chunk, out, r),
            BodyScanner::Other(s) => s.feed(chunk, out),
        }
    }

    /// [`Scanner::feed_tail`]; [`BodyScanner::feed`] for other formats.
    pub fn feed_tail(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        match self {
            BodyScanner::Json(s) => s.feed_tail(chunk, out, r),
            BodyScanner::Form(s) => s.feed(chunk, out, r),
            BodyScanner::Xml(s) => s.feed(chunk, out, r),
            BodyScanner::Other(s) => s.feed(chunk, out),
        }
    }

    /// [`Scanner::feed_last`]; for other formats [`BodyScanner::feed`] then
    /// [`BodyScanner::finish`].
    pub fn feed_last(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        if let BodyScanner::Json(s) = self {
            return s.feed_last(chunk, out, r);
        }
        let n = self.feed(chunk, out, r)?;
        self.finish(out)?;
        Ok(n)
    }

    /// [`Scanner::finish`].
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        match self {
            BodyScanner::Json(s) => s.finish(out),
            BodyScanner::Form(s) => s.finish(out),
            BodyScanner::Xml(s) => s.finish(out),
            BodyScanner::Other(s) => {
                *s = OtherBody::default();
                Ok(())
            }
        }
    }

    /// [`Scanner::lex`]; for a form or XML `None` (feed the chunk); another body is checked and
    /// goes through whole.
    pub fn lex(&mut self, chunk: &[u8]) -> Result<Option<usize>, TemplateError> {
        match self {
            BodyScanner::Json(s) => s.lex(chunk),
            BodyScanner::Form(_) | BodyScanner::Xml(_) => Ok(None),
            BodyScanner::Other(s) => s.check(chunk).map(|()| Some(chunk.len())),
        }
    }

    /// Whether the body is JSON.
    pub fn is_json(&self) -> bool {
        matches!(self, BodyScanner::Json(_))
    }

    /// [`Scanner::defer`]; other formats defer nothing.
    pub fn defer(&mut self, brace: bool, chunk: &bytes::Bytes) -> Result<bool, TemplateError> {
        match self {
            BodyScanner::Json(s) => s.defer(brace, chunk),
            BodyScanner::Form(_) | BodyScanner::Xml(_) | BodyScanner::Other(_) => Ok(false),
        }
    }

    /// [`Scanner::may_resolve`]; `true` for other formats.
    pub fn may_resolve(&self, chunk: &[u8]) -> bool {
        match self {
            BodyScanner::Json(s) => s.may_resolve(chunk),
            BodyScanner::Form(_) | BodyScanner::Xml(_) => true,
            BodyScanner::Other(_) => false,
        }
    }

    /// Whether a template is open (JSON); `true` for other formats (nothing is skipped).
    pub fn carries_template(&self) -> bool {
        match self {
            BodyScanner::Json(s) => s.carries_template(),
            BodyScanner::Form(_) | BodyScanner::Xml(_) | BodyScanner::Other(_) => true,
        }
    }

    /// [`Scanner::tail_start`]; for other formats the last piece (every piece is fed).
    pub fn tail_start<P: AsRef<[u8]>>(&self, pieces: &[P]) -> usize {
        match self {
            BodyScanner::Json(_) => Scanner::tail_start(pieces),
            BodyScanner::Form(_) | BodyScanner::Xml(_) | BodyScanner::Other(_) => {
                pieces.len().saturating_sub(1)
            }
        }
    }

    /// [`Scanner::skip`]; never called for other formats ([`BodyScanner::carries_template`]).
    pub fn skip(&mut self, piece: &[u8]) {
        if let BodyScanner::Json(s) = self {
            s.skip(piece);
        }
    }
}

impl BodyScanner {
    /// Whether substitution may change the body's length (not for another format's body,
    /// which only is checked).
    pub fn may_change_length(&self) -> bool {
        !matches!(self, BodyScanner::Other(_))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::template::expr::TemplateRef;
    use crate::template::resolve::ResolveError;

    #[test]
    fn another_body_passes_unless_it_holds_a_template_start() {
        let mut never = |_: &TemplateRef| Err(ResolveError::new("never"));
        let body = b"plain { text } with {braces} {";
        for at in 0..=body.len() {
            let (a, b) = body.split_at(at);
            let mut s = BodyScanner::new(Format::Other);
            let mut out = Vec::new();
            s.feed(a, &mut out, &mut never).unwrap();
            s.feed_last(b, &mut out, &mut never).unwrap();
            assert_eq!(out, body);
        }
        let body = b"x {{ paymentMethod: pm_1 }} y";
        for at in 0..=body.len() {
            let (a, b) = body.split_at(at);
            let mut s = BodyScanner::new(Format::Other);
            let refused = s.lex(a).and_then(|_| s.lex(b)).unwrap_err();
            assert_eq!(refused.message, NOT_SUBSTITUTED);
            assert_eq!(refused.field, "$");
        }
    }
}
