//! The scanner for a body's format: one per format behind the same narrow API (feed a chunk,
//! end the body), chosen by the caller from the body's `Content-Type` ([`Format`]).

use super::form::FormScanner;
use super::scanner::{Resolver, Scanner, TemplateError};

/// The body formats templates are substituted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`, `application/*+json`: [`Scanner`].
    Json,
    /// `application/x-www-form-urlencoded`: [`FormScanner`].
    Form,
}

/// A scanner for one format. The JSON scanner's shortcuts for bodies read whole
/// ([`Scanner::lex`], [`Scanner::tail_start`], [`Scanner::feed_tail`]) are JSON's alone:
/// other formats feed every chunk.
#[derive(Debug, Clone)]
pub enum BodyScanner {
    Json(Scanner),
    Form(FormScanner),
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
        }
    }

    /// Back to the start of a body.
    pub fn reset(&mut self) {
        match self {
            BodyScanner::Json(s) => s.reset(),
            BodyScanner::Form(s) => s.reset(),
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
        }
    }

    /// [`Scanner::feed_last`].
    pub fn feed_last(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        match self {
            BodyScanner::Json(s) => s.feed_last(chunk, out, r),
            BodyScanner::Form(s) => s.feed_last(chunk, out, r),
        }
    }

    /// [`Scanner::finish`].
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        match self {
            BodyScanner::Json(s) => s.finish(out),
            BodyScanner::Form(s) => s.finish(out),
        }
    }

    /// [`Scanner::lex`]; `None` (feed the chunk) for other formats.
    pub fn lex(&mut self, chunk: &[u8]) -> Result<Option<usize>, TemplateError> {
        match self {
            BodyScanner::Json(s) => s.lex(chunk),
            BodyScanner::Form(_) => Ok(None),
        }
    }

    /// [`Scanner::may_resolve`]; `true` for other formats.
    pub fn may_resolve(&self, chunk: &[u8]) -> bool {
        match self {
            BodyScanner::Json(s) => s.may_resolve(chunk),
            BodyScanner::Form(_) => true,
        }
    }

    /// [`Scanner::carries_template`]; `true` for other formats (nothing is skipped).
    pub fn carries_template(&self) -> bool {
        match self {
            BodyScanner::Json(s) => s.carries_template(),
            BodyScanner::Form(_) => true,
        }
    }

    /// [`Scanner::tail_start`]; for other formats the last piece (every piece is fed).
    pub fn tail_start<P: AsRef<[u8]>>(&self, pieces: &[P]) -> usize {
        match self {
            BodyScanner::Json(_) => Scanner::tail_start(pieces),
            BodyScanner::Form(_) => pieces.len().saturating_sub(1),
        }
    }

    /// [`Scanner::skip`]; never called for other formats ([`BodyScanner::carries_template`]).
    pub fn skip(&mut self, piece: &[u8]) {
        if let BodyScanner::Json(s) = self {
            s.skip(piece);
        }
    }
}
