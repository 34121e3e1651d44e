//! What a whole value is: its characters as decoded ([`chars`]), whether its field is a
//! CVC's ([`is_cvc_name`]), and what it becomes when it is a stand-in ([`edit`]).

use super::{Edit, Values};
use zeroize::Zeroizing;

/// Most characters of a value that can still be a card number: 19 digits, 18 separators.
const MAX_CHARS: usize = 37;

/// The names of a CVC field, normalised: the last segment of the name, lower-cased, without
/// `_`, `-` and spaces.
pub const CVC_NAMES: &[&str] = &[
    "cvc",
    "cvv",
    "cvc2",
    "cvv2",
    "cvd",
    "cvn",
    "cvn2",
    "csc",
    "cccsc",
    "cccvc",
    "cccvv",
    "cvccode",
    "cvvcode",
    "cvcnumber",
    "cvvnumber",
    "cardcvc",
    "cardcvv",
    "cardcvc2",
    "cardcvv2",
    "cardcsc",
    "cardcid",
    "cardcode",
    "securitycode",
    "cardsecuritycode",
    "cardverificationcode",
    "cardverificationvalue",
];

/// One character of a value as decoded (a digit, `' '` or `'-'`), with the end of its raw
/// bytes in the body. A digit's raw bytes end in that digit however it is written (`4`,
/// `%34`, `\u0034`): that last byte is what a swap changes.
#[derive(Clone, Copy)]
pub(super) struct Char {
    pub c: u8,
    pub end: usize,
}

/// Whether a name is a CVC field's (see [`CVC_NAMES`]).
pub fn is_cvc_name(name: &str) -> bool {
    let last = name
        .trim_end_matches(']')
        .rsplit(['[', ']', '.'])
        .next()
        .unwrap_or_default();
    let normal: String = last
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    CVC_NAMES.contains(&normal.as_str())
}

/// What the value of `chars` (raw bytes `start..end`, under the field `name`) becomes, if
/// it is a whole stand-in.
pub(super) fn edit(
    src: &[u8],
    start: usize,
    end: usize,
    chars: &[Char],
    name: impl FnOnce() -> String,
    values: &Values<'_>,
) -> Option<Edit> {
    let digits: Zeroizing<Vec<u8>> = Zeroizing::new(
        chars
            .iter()
            .filter(|ch| ch.c.is_ascii_digit())
            .map(|ch| ch.c)
            .collect(),
    );
    let grouped = chars.first()?.c.is_ascii_digit()
        && chars.last()?.c.is_ascii_digit()
        && chars
            .windows(2)
            .all(|w| w[0].c.is_ascii_digit() || w[1].c.is_ascii_digit());
    let separated = digits.len() != chars.len();
    let to = if grouped && *digits == *values.number.0.as_bytes() {
        values.number.1
    } else {
        match values.cvc {
            Some((from, to))
                if !separated && *digits == *from.as_bytes() && is_cvc_name(&name()) =>
            {
                to
            }
            _ => return None,
        }
    };
    if to.len() != digits.len() || !to.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut with = Zeroizing::new(src.get(start..end)?.to_vec());
    let digit_ends = chars
        .iter()
        .filter(|ch| ch.c.is_ascii_digit())
        .map(|ch| ch.end);
    for (raw_end, real) in digit_ends.zip(to.bytes()) {
        *with.get_mut(raw_end.checked_sub(start + 1)?)? = real;
    }
    Some(Edit { start, end, with })
}

/// Whether a decoded byte may be part of a card number.
fn number_char(c: u8) -> bool {
    c.is_ascii_digit() || c == b' ' || c == b'-'
}

pub(super) fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// The characters of a value whose raw bytes are `start..end`, each read by `decode` (the
/// byte at a position stands for, and how many raw bytes it takes). `None` when one cannot
/// be in a card number, or there are too many.
pub(super) fn chars(
    start: usize,
    end: usize,
    decode: impl Fn(usize) -> Option<(u8, usize)>,
) -> Option<Vec<Char>> {
    let mut chars = Vec::new();
    let mut at = start;
    while at < end {
        let (c, len) = decode(at)?;
        if !number_char(c) || chars.len() == MAX_CHARS {
            return None;
        }
        at += len;
        chars.push(Char { c, end: at });
    }
    Some(chars)
}
