//! The values of a form (`name=value&…`): an `application/x-www-form-urlencoded` body, or
//! a URL's query.

use super::value::{chars, edit, hex, Char};
use super::{Edit, Values};

/// The characters of a form value (raw bytes `start..end`): `+` is a space, `%XX` a byte.
fn form_chars(src: &[u8], start: usize, end: usize) -> Option<Vec<Char>> {
    chars(start, end, |at| {
        Some(match src[at] {
            b'+' => (b' ', 1),
            b'%' => match (
                src.get(at + 1).and_then(|&b| hex(b)),
                src.get(at + 2).and_then(|&b| hex(b)),
            ) {
                (Some(hi), Some(lo)) if at + 3 <= end => (hi * 16 + lo, 3),
                _ => (b'%', 1),
            },
            b => (b, 1),
        })
    })
}

/// A form field's name decoded (`+` and `%XX`), for telling a CVC's field.
fn form_name(raw: &[u8]) -> String {
    let decoded: Vec<u8> = form_urlencoded::parse(&[b"n=", raw].concat())
        .next()
        .map(|(_, v)| v.into_owned().into_bytes())
        .unwrap_or_default();
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Edits of a form (`name=value&…`): the body of `application/x-www-form-urlencoded`, or a
/// URL's query.
pub(super) fn form(src: &[u8], values: &Values<'_>, edits: &mut Vec<Edit>) {
    let mut start = 0;
    for field in src.split(|&b| b == b'&') {
        let end = start + field.len();
        if let Some(eq) = field.iter().position(|&b| b == b'=') {
            let value_start = start + eq + 1;
            if let Some(chars) = form_chars(src, value_start, end) {
                let name = || form_name(&field[..eq]);
                edits.extend(edit(src, value_start, end, &chars, name, values));
            }
        }
        start = end + 1;
    }
}
