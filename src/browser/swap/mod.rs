//! The swap: a browser's request to an allowed host with every whole stand-in value replaced
//! by the real one ([`swap`]).
//!
//! **Where values are.** By the body's `Content-Type`:
//!
//! | type | a value is |
//! |---|---|
//! | `application/json`, `*/*+json` | a string (its escapes decoded); a number for the CVC only |
//! | `application/x-www-form-urlencoded` | a field's value, `+` and `%XX` decoded |
//! | `multipart/form-data` (its `boundary`) | a part's content; parts with a `filename` are files and are left alone |
//! | `text/plain` or none | as JSON when the body is a JSON object or array (`fetch` with a string body sends `text/plain`) |
//! | anything else | nothing: the body passes as it is |
//!
//! and the URL's query parameters, decoded as a form. A body that does not parse as its type
//! (JSON that is not JSON, multipart without its closing delimiter) is not swapped at all.
//!
//! **What is replaced.** A *whole* value, never a part of one:
//!
//! - the stand-in number, written as its digits alone or grouped by single spaces or dashes
//!   (`4242 4242 4242 4242`, `4242-4242-4242-4242`): the real number comes out with the same
//!   separators at the same places. Under any field name.
//! - the stand-in CVC, its digits alone, only under a field whose name is a CVC's: the name's
//!   last segment (`card[cvc]` → `cvc`, `card.cvc` → `cvc`), lower-cased without `_`, `-` and
//!   spaces, is one of [`CVC_NAMES`]. A `quantity=737` or a postal code equal to the stand-in
//!   CVC stays as it is, and so does the CVC in a field named otherwise. The name alone
//!   decides (a request need not carry the number as well), so that a form that sends the
//!   CVC again on its own still gets the real one. `cid` is not a CVC's name here: it is as
//!   often a client's or a campaign's id.
//!
//! A JSON number is considered for the CVC only (a number of 13 to 19 digits does not
//! survive a script's arithmetic, so forms send card numbers as strings): a number equal to
//! the stand-in CVC under a CVC's name becomes the real CVC as a script would have written
//! it, leading zeros dropped.
//!
//! **How.** Each replaced value keeps its encoding: a digit written `%34` or `\u0034` comes
//! out as `%3X` or `\u003X` of the real digit, a separator as it was written, and every byte
//! outside the replaced values is kept. So a swap never changes a body's length, but for a
//! JSON-number CVC whose real value starts with `0`.
//!
//! Bodies are small in a checkout: one larger than [`MAX_BODY`] is refused (413).
//!
//! The parts: [`value`] (what a whole value is: its characters, a CVC's name, what it
//! becomes), [`json`], [`form`] (a form body and the URL's query) and [`multipart`], each
//! finding the values of its format.

mod form;
mod json;
mod multipart;
#[cfg(test)]
mod tests;
mod value;

use crate::domain::card::standin::StandIns;
use crate::error::{ApiError, ErrorKind};
use zeroize::Zeroizing;

use form::form;
use json::json;
use multipart::{multipart, parameters};
pub use value::{is_cvc_name, CVC_NAMES};

/// Largest request body swapped; a larger one is refused (413 `payloadTooLarge`).
pub const MAX_BODY: usize = 1024 * 1024;

/// Why a request was not swapped. Messages never carry a card value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    #[error("the request body is larger than {MAX_BODY} bytes")]
    TooLarge,
}

impl From<SwapError> for ApiError {
    fn from(e: SwapError) -> Self {
        match e {
            SwapError::TooLarge => ApiError::new(
                ErrorKind::PayloadTooLarge,
                format!("A browser checkout request body is at most {MAX_BODY} bytes."),
            ),
        }
    }
}

/// A request after the swap. With real values in it, both buffers are wiped when dropped.
pub struct Swapped {
    /// The body to send.
    pub body: Zeroizing<Vec<u8>>,
    /// The query to send (without `?`), when the request had one.
    pub query: Option<Zeroizing<String>>,
    /// Values replaced: 0 when the request goes on unchanged (and counts no use).
    pub replaced: usize,
}

impl std::fmt::Debug for Swapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swapped")
            .field("body_len", &self.body.len())
            .field("has_query", &self.query.is_some())
            .field("replaced", &self.replaced)
            .finish()
    }
}

/// `body` (of type `content_type`) and `query` with every whole stand-in value of `card`
/// replaced by its real value: see the module doc.
pub fn swap(
    body: &[u8],
    content_type: Option<&str>,
    query: Option<&str>,
    card: &StandIns,
) -> Result<Swapped, SwapError> {
    let values = Values {
        number: (card.number(), card.real_number().expose()),
        cvc: card
            .cvc()
            .zip(card.real_cvc())
            .map(|(stand_in, real)| (stand_in, real.expose())),
    };
    swap_values(body, content_type, query, &values)
}

/// The values looked for, each with what it becomes.
pub(super) struct Values<'a> {
    pub number: (&'a str, &'a str),
    pub cvc: Option<(&'a str, &'a str)>,
}

pub(super) fn swap_values(
    body: &[u8],
    content_type: Option<&str>,
    query: Option<&str>,
    values: &Values<'_>,
) -> Result<Swapped, SwapError> {
    if body.len() > MAX_BODY {
        return Err(SwapError::TooLarge);
    }
    let mut edits = Vec::new();
    match body_type(content_type) {
        BodyType::Json => json(body, values, &mut edits),
        BodyType::Sniff => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if matches!(first, Some(b'{' | b'[')) {
                json(body, values, &mut edits);
            }
        }
        BodyType::Form => form(body, values, &mut edits),
        BodyType::Multipart(boundary) => multipart(body, boundary.as_bytes(), values, &mut edits),
        BodyType::Other => {}
    }
    let mut replaced = edits.len();
    let body = apply(body, &edits);
    let query = query.map(|q| {
        let mut edits = Vec::new();
        form(q.as_bytes(), values, &mut edits);
        replaced += edits.len();
        // Only ASCII digits were replaced by ASCII digits: still UTF-8.
        let bytes = apply(q.as_bytes(), &edits);
        Zeroizing::new(String::from_utf8_lossy(&bytes).into_owned())
    });
    Ok(Swapped {
        body,
        query,
        replaced,
    })
}

/// One replaced value: its raw bytes `start..end` become `with`.
pub(super) struct Edit {
    pub start: usize,
    pub end: usize,
    pub with: Zeroizing<Vec<u8>>,
}

/// `src` with `edits` (in order, not overlapping) made.
fn apply(src: &[u8], edits: &[Edit]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(src.len()));
    let mut at = 0;
    for edit in edits {
        out.extend_from_slice(src.get(at..edit.start).unwrap_or_default());
        out.extend_from_slice(&edit.with);
        at = edit.end;
    }
    out.extend_from_slice(src.get(at..).unwrap_or_default());
    out
}

/// What a body's `Content-Type` says to look in.
enum BodyType {
    Json,
    Form,
    Multipart(String),
    /// `text/plain` or none: JSON if it looks like it.
    Sniff,
    Other,
}

fn body_type(content_type: Option<&str>) -> BodyType {
    let Some(content_type) = content_type else {
        return BodyType::Sniff;
    };
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" => BodyType::Json,
        m if m.ends_with("+json") && m.contains('/') => BodyType::Json,
        "application/x-www-form-urlencoded" => BodyType::Form,
        "text/plain" => BodyType::Sniff,
        "multipart/form-data" => {
            let boundary = parameters(parts.collect::<Vec<_>>().join(";").as_str())
                .into_iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("boundary"))
                .map(|(_, v)| v);
            match boundary {
                Some(b) if (1..=70).contains(&b.len()) => BodyType::Multipart(b),
                _ => BodyType::Other,
            }
        }
        _ => BodyType::Other,
    }
}
