//! XML's references and escapes: the references in a template's text decoded before it is
//! parsed (the five predefined entities, `&#…;`, `&#x…;`), a value escaped for its place
//! (element text, an attribute value, a CDATA section) or refused there, and the character
//! references followed in text and values ([`Reference`]), one that spells `{` refused.

use crate::template::error::NOT_UTF8;
use crate::template::held::{Encoding, ParsedCache};

/// What a bad reference in a template answers.
const BAD_REFERENCE: &str = "invalid XML reference in template";

/// Decodes the XML references of `raw` (the five predefined entities, `&#…;`, `&#x…;`).
fn unescape_references(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| NOT_UTF8)?;
    dst.clear();
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        dst.push_str(rest.get(..amp).unwrap_or_default());
        let after = rest.get(amp + 1..).unwrap_or_default();
        let semi = after.find(';').ok_or(BAD_REFERENCE)?;
        let name = after.get(..semi).unwrap_or_default();
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = name.strip_prefix("#x") {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#') {
                    dec.parse().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32).ok_or(BAD_REFERENCE)?
            }
        };
        dst.push(c);
        rest = after.get(semi + 1..).unwrap_or_default();
    }
    dst.push_str(rest);
    Ok(())
}

/// Why a value cannot go in an XML document at all.
fn refuse_characters(value: &[u8]) -> Option<&'static str> {
    value
        .iter()
        .any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
        .then_some("the value holds a character that XML does not allow")
}

/// Writes `value` escaped for element text, or for an attribute value (`attribute`).
fn escape(out: &mut Vec<u8>, value: &[u8], attribute: bool) {
    for &b in value {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'\r' => out.extend_from_slice(b"&#13;"),
            b'"' if attribute => out.extend_from_slice(b"&quot;"),
            b'\'' if attribute => out.extend_from_slice(b"&apos;"),
            b'\t' if attribute => out.extend_from_slice(b"&#9;"),
            b'\n' if attribute => out.extend_from_slice(b"&#10;"),
            _ => out.push(b),
        }
    }
}

/// Element text (`ATTRIBUTE` false) or an attribute value (true): decoded alike (one cache
/// of parsed templates for both), escaped each for its place.
pub(super) struct Escaped<const ATTRIBUTE: bool>;
/// Element text.
pub(super) type XmlText = Escaped<false>;
/// An attribute value.
pub(super) type XmlAttr = Escaped<true>;

impl<const ATTRIBUTE: bool> Encoding for Escaped<ATTRIBUTE> {
    fn parsed() -> &'static ParsedCache {
        // One static for both: a generic function's statics are not made per instance.
        static PARSED: ParsedCache = ParsedCache::new();
        &PARSED
    }

    #[inline]
    fn has_escapes(raw: &[u8]) -> bool {
        raw.contains(&b'&')
    }

    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        unescape_references(raw, dst)
    }

    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        escape(out, value, ATTRIBUTE);
    }

    fn refuse(value: &[u8]) -> Option<&'static str> {
        refuse_characters(value)
    }
}

/// A CDATA section.
pub(super) struct XmlCdata;

/// What a value that could close its CDATA section answers.
pub(super) const CDATA_CLOSE: &str = "the value could close its CDATA section (it holds `]]>`, \
     begins with `]` or `>` or ends with `]`)";

impl Encoding for XmlCdata {
    fn parsed() -> &'static ParsedCache {
        static PARSED: ParsedCache = ParsedCache::new();
        &PARSED
    }

    #[inline]
    fn has_escapes(_raw: &[u8]) -> bool {
        false
    }

    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        let text = std::str::from_utf8(raw).map_err(|_| NOT_UTF8)?;
        dst.clear();
        dst.push_str(text);
        Ok(())
    }

    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        out.extend_from_slice(value);
    }

    fn refuse(value: &[u8]) -> Option<&'static str> {
        let closes = value.windows(3).any(|w| w == b"]]>")
            || matches!(value.first(), Some(b']' | b'>'))
            || value.last() == Some(&b']');
        if closes {
            Some(CDATA_CLOSE)
        } else {
            refuse_characters(value)
        }
    }
}

/// A character reference being read in text or an attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reference {
    None,
    /// After `&`.
    Amp,
    /// After `&#`.
    Hash,
    /// After `&#` and digits: their value, saturated.
    Dec(u32),
    /// After `&#x` and hex digits: their value, saturated.
    Hex(u32),
}

impl Reference {
    /// The reference after byte `b` of text or a value; `None` when `b` ends one that stands
    /// for `{` (refused: a parser reads it as `{`, so it could hide a template).
    #[inline]
    pub(super) fn next(self, b: u8) -> Option<Reference> {
        let add = |v: u32, radix: u32| {
            let d = char::from(b).to_digit(radix).unwrap_or(0);
            v.saturating_mul(radix).saturating_add(d)
        };
        Some(match (self, b) {
            (_, b'&') => Reference::Amp,
            (Reference::Amp, b'#') => Reference::Hash,
            (Reference::Hash, b'x') => Reference::Hex(0),
            (Reference::Hash, b'0'..=b'9') => Reference::Dec(add(0, 10)),
            (Reference::Dec(v), b'0'..=b'9') => Reference::Dec(add(v, 10)),
            (Reference::Hex(v), _) if b.is_ascii_hexdigit() => Reference::Hex(add(v, 16)),
            (Reference::Dec(123) | Reference::Hex(0x7b), b';') => return None,
            _ => Reference::None,
        })
    }
}
