//! How a digit or a separator may be written in an answer: the guard reads a card number
//! whatever the target made of its characters.
//!
//! A character is read from the bytes as
//! - UTF-8, as it is (`4`, a full-width `４`, an Arabic-Indic `٤`, a no-break space);
//! - a JSON escape: `\u0034`, `\u00a0`, `\t`, `\n`, `\r`, `\/`, `\b`, `\f`;
//! - an HTML character reference: `&#52;`, `&#x34;`, `&nbsp;` and the few named ones of
//!   [`NAMED`];
//! - a URL escape of an ASCII character: `%34`, `%20`, and `+` (a space in a form).
//!
//! A **digit** is a Unicode decimal digit of one of the scripts in [`ZEROS`]; a
//! **separator** one of the characters of [`is_separator`] (spaces of every width, zero-width
//! characters, dashes, dots, slashes, line breaks). What else a byte starts is neither.
//!
//! [`rewrite`] writes another digit, or a `*`, in the place of one, in the same form and the
//! same number of bytes, so `Content-Length` and chunk sizes stay valid.

/// The zero of each script whose decimal digits are read as digits: ASCII, Arabic-Indic and
/// Extended Arabic-Indic, the Brahmic scripts, Thai, Lao, Tibetan, Myanmar, Khmer,
/// Mongolian, full-width, and the five mathematical digit sets.
const ZEROS: [u32; 25] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xE50, 0xED0, 0xF20, 0x1040, 0x17E0, 0x1810, 0xFF10, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC,
    0x1D7F6,
];

/// HTML's named references that write a separator (with their `;`).
const NAMED: [(&[u8], char); 17] = [
    (b"nbsp;", '\u{a0}'),
    (b"NonBreakingSpace;", '\u{a0}'),
    (b"shy;", '\u{ad}'),
    (b"ensp;", '\u{2002}'),
    (b"emsp;", '\u{2003}'),
    (b"thinsp;", '\u{2009}'),
    (b"ThinSpace;", '\u{2009}'),
    (b"hairsp;", '\u{200a}'),
    (b"ZeroWidthSpace;", '\u{200b}'),
    (b"zwnj;", '\u{200c}'),
    (b"zwj;", '\u{200d}'),
    (b"NoBreak;", '\u{2060}'),
    (b"hyphen;", '\u{2010}'),
    (b"dash;", '\u{2010}'),
    (b"minus;", '\u{2212}'),
    (b"period;", '.'),
    (b"sol;", '/'),
];

/// Longest form of one character read: `&NonBreakingSpace;` and `&ZeroWidthSpace;`, and a
/// decimal reference with leading zeros up to this length.
pub const LONGEST: usize = 18;

/// What the bytes at a place write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// A decimal digit, its value and its length in bytes.
    Digit(u8, usize),
    /// A separator and its length.
    Separator(usize),
    /// Something else, one byte (or a whole UTF-8 character) long.
    Other(usize),
    /// The bytes end inside a form that may write a digit or a separator: more is needed to
    /// tell.
    Cut,
}

/// Whether `c` may stand between the digits of one number.
pub fn is_separator(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t'
            | '\n'
            | '\r'
            | '-'
            | '.'
            | '/'
            | '\u{a0}'
            | '\u{ad}'
            | '\u{2000}'..='\u{2015}'
            | '\u{2024}'
            | '\u{2027}'..='\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{2060}'
            | '\u{2212}'
            | '\u{3000}'
            | '\u{feff}'
            | '\u{ff0d}'..='\u{ff0f}'
    )
}

/// The value of `c` if it is a decimal digit of one of [`ZEROS`]' scripts.
pub fn digit_value(c: char) -> Option<u8> {
    let c = u32::from(c);
    ZEROS
        .iter()
        .find(|&&zero| (zero..zero + 10).contains(&c))
        .map(|zero| (c - zero) as u8)
}

/// What `bytes` (from a place on) write first. `end`: nothing follows these bytes, so a form
/// cut short is just other bytes.
pub fn read(bytes: &[u8], end: bool) -> Written {
    let Some(&first) = bytes.first() else {
        return if end { Written::Other(0) } else { Written::Cut };
    };
    if first.is_ascii_digit() {
        return Written::Digit(first - b'0', 1);
    }
    let found = match first {
        b'\\' => json_escape(bytes),
        b'&' => reference(bytes),
        b'%' => url_escape(bytes),
        b'+' => Some(Ok((' ', 1))),
        0x80.. => utf8(bytes),
        _ => Some(Ok((char::from(first), 1))),
    };
    match found {
        Some(Ok((c, len))) => classify(c, len),
        Some(Err(())) => Written::Other(1),
        None if end => Written::Other(1),
        None => Written::Cut,
    }
}

fn classify(c: char, len: usize) -> Written {
    if let Some(d) = digit_value(c) {
        Written::Digit(d, len)
    } else if is_separator(c) {
        Written::Separator(len)
    } else {
        Written::Other(len.max(1))
    }
}

/// A character and the bytes it took; `Err` for bytes that write nothing of interest, `None`
/// for bytes cut short.
type Read = Option<Result<(char, usize), ()>>;

/// Whether a `\` followed by `b` is an escape [`read`] reads (`\u…`, `\t`, `\/`, ...): the
/// others (`\"`, `\\`) write neither a digit nor a separator.
pub fn escape_reads(b: u8) -> bool {
    matches!(b, b'u' | b't' | b'n' | b'r' | b'/' | b'b' | b'f')
}

/// `\uXXXX` or a short escape.
fn json_escape(bytes: &[u8]) -> Read {
    let &kind = bytes.get(1)?;
    let short = match kind {
        b't' => '\t',
        b'n' => '\n',
        b'r' => '\r',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'u' => {
            let code = hex(bytes, 2, 4)?;
            return Some(
                code.and_then(|c| char::from_u32(c).ok_or(()))
                    .map(|c| (c, 6)),
            );
        }
        _ => return Some(Err(())),
    };
    Some(Ok((short, 2)))
}

/// `&#NNN;`, `&#xHHH;` or a named reference of [`NAMED`].
fn reference(bytes: &[u8]) -> Read {
    let rest = &bytes[1..];
    if rest.first() == Some(&b'#') {
        let (radix, digits_at) = match rest.get(1) {
            Some(b'x' | b'X') => (16, 2),
            Some(_) => (10, 1),
            None => return None,
        };
        let digits = &rest[digits_at.min(rest.len())..];
        let n = digits
            .iter()
            .take_while(|b| {
                if radix == 16 {
                    b.is_ascii_hexdigit()
                } else {
                    b.is_ascii_digit()
                }
            })
            .count();
        let len = 1 + digits_at + n + 1;
        return match digits.get(n) {
            _ if len > LONGEST => Some(Err(())),
            None => None,
            Some(b';') if n > 0 => {
                let code = std::str::from_utf8(&digits[..n])
                    .ok()
                    .and_then(|d| u32::from_str_radix(d, radix).ok());
                Some(code.and_then(char::from_u32).map(|c| (c, len)).ok_or(()))
            }
            Some(_) => Some(Err(())),
        };
    }
    for (name, c) in NAMED {
        if rest.starts_with(name) {
            return Some(Ok((c, 1 + name.len())));
        }
        if name.starts_with(rest) && rest.len() < name.len() {
            return None;
        }
    }
    Some(Err(()))
}

/// `%HH` of an ASCII character.
fn url_escape(bytes: &[u8]) -> Read {
    match hex(bytes, 1, 2)? {
        Ok(b) if b < 0x80 => Some(Ok((char::from(b as u8), 3))),
        _ => Some(Err(())),
    }
}

/// The number written by the `digits` hex digits at `at`: `None` when the bytes end before
/// them and what there is could still be one, `Err` when they are no hex digits.
fn hex(bytes: &[u8], at: usize, digits: usize) -> Option<Result<u32, ()>> {
    let Some(hex) = bytes.get(at..at + digits) else {
        let rest = bytes.get(at..).unwrap_or_default();
        return if rest.iter().all(u8::is_ascii_hexdigit) {
            None
        } else {
            Some(Err(()))
        };
    };
    let code = std::str::from_utf8(hex)
        .ok()
        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|h| u32::from_str_radix(h, 16).ok());
    Some(code.ok_or(()))
}

/// One UTF-8 character.
fn utf8(bytes: &[u8]) -> Read {
    let len = match bytes[0] {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return Some(Err(())),
    };
    let whole = bytes.get(..len)?;
    match std::str::from_utf8(whole)
        .ok()
        .and_then(|s| s.chars().next())
    {
        Some(c) => Some(Ok((c, len))),
        None => Some(Err(())),
    }
}

/// Writes `digit` (`None`: a `*`) over the digit `place` holds (as [`read`] found it), in the
/// same form and length: `4` → `*`, `\u0034` → `\u002a`, `&#52;` → `&#42;`, `&#x34;` →
/// `&#x2a;`, `%34` → `%2A`, `４` → `＊`; a digit of another script becomes the same script's
/// digit, or `*`s.
pub fn rewrite(place: &mut [u8], digit: Option<u8>) {
    let star = digit.is_none();
    let digit = digit.unwrap_or(0).min(9);
    match place {
        [b] => *b = if star { b'*' } else { b'0' + digit },
        [b'\\', b'u', .., hi, lo] => {
            (*hi, *lo) = if star {
                (b'2', b'a')
            } else {
                (b'3', b'0' + digit)
            };
        }
        [b'&', b'#', b'x' | b'X', .., hi, lo, b';'] => {
            (*hi, *lo) = if star {
                (b'2', b'a')
            } else {
                (b'3', b'0' + digit)
            };
        }
        [b'&', b'#', .., hi, lo, b';'] => {
            let code = if star { 42 } else { 48 + digit };
            (*hi, *lo) = (b'0' + code / 10, b'0' + code % 10);
        }
        [b'%', hi, lo] => {
            (*hi, *lo) = if star {
                (b'2', b'A')
            } else {
                (b'3', b'0' + digit)
            };
        }
        utf8 => {
            let len = utf8.len();
            let zero = std::str::from_utf8(utf8)
                .ok()
                .and_then(|s| s.chars().next())
                .and_then(|c| digit_value(c).map(|v| u32::from(c) - u32::from(v)));
            let fullwidth = zero == Some(0xFF10);
            let new = match zero {
                _ if star && fullwidth => Some('\u{ff0a}'),
                Some(zero) if !star => char::from_u32(zero + u32::from(digit)),
                _ => None,
            };
            let mut buf = [0u8; 4];
            match new.map(|c| c.encode_utf8(&mut buf).as_bytes()) {
                Some(bytes) if bytes.len() == len => utf8.copy_from_slice(bytes),
                _ => utf8.fill(b'*'),
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn each_form_of_a_digit_is_read() {
        for (text, want) in [
            ("4", Written::Digit(4, 1)),
            ("\\u0034", Written::Digit(4, 6)),
            ("&#52;", Written::Digit(4, 5)),
            ("&#052;", Written::Digit(4, 6)),
            ("&#x34;", Written::Digit(4, 6)),
            ("&#X34;", Written::Digit(4, 6)),
            ("%34", Written::Digit(4, 3)),
            ("４", Written::Digit(4, 3)),
            ("٤", Written::Digit(4, 2)),
            ("۴", Written::Digit(4, 2)),
            ("४", Written::Digit(4, 3)),
            ("𝟒", Written::Digit(4, 4)),
        ] {
            assert_eq!(read(text.as_bytes(), true), want, "{text}");
            assert_eq!(read(format!("{text}x").as_bytes(), false), want, "{text}");
        }
    }

    #[test]
    fn each_separator_is_read() {
        for text in [
            " ",
            "\t",
            "\n",
            "\r",
            "-",
            ".",
            "/",
            "+",
            "\u{a0}",
            "\u{200b}",
            "\u{2009}",
            "\u{2013}",
            "\u{3000}",
            "\u{feff}",
            "\\t",
            "\\n",
            "\\/",
            "\\u00a0",
            "\\u200B",
            "\\u0020",
            "&nbsp;",
            "&#160;",
            "&#xa0;",
            "&#8203;",
            "&ZeroWidthSpace;",
            "&shy;",
            "%20",
            "%2D",
            "%2e",
        ] {
            let len = text.len();
            assert_eq!(
                read(text.as_bytes(), true),
                Written::Separator(len),
                "{text:?}"
            );
        }
    }

    #[test]
    fn other_bytes_and_cut_forms() {
        for text in [
            "a", "\"", "\\\"", "\\u0041", "&amp;", "&#65;", "%41", "é", "&#;", "%zz",
        ] {
            assert!(
                matches!(read(text.as_bytes(), true), Written::Other(_)),
                "{text}"
            );
        }
        for text in [
            "\\", "\\u", "\\u00", "\\u003", "&", "&#", "&#5", "&#x3", "&nb", "%", "%3",
        ] {
            assert_eq!(read(text.as_bytes(), false), Written::Cut, "{text}");
            assert!(
                matches!(read(text.as_bytes(), true), Written::Other(_)),
                "{text}"
            );
        }
        // A UTF-8 character cut short.
        assert_eq!(read(&"４".as_bytes()[..2], false), Written::Cut);
        // Far too long to be a reference.
        let long = format!("&#{}", "0".repeat(30));
        assert!(matches!(read(long.as_bytes(), false), Written::Other(_)));
    }

    #[test]
    fn a_digit_is_rewritten_in_its_own_form() {
        for (text, digit, star) in [
            ("4", "7", "*"),
            ("\\u0034", "\\u0037", "\\u002a"),
            ("&#52;", "&#55;", "&#42;"),
            ("&#052;", "&#055;", "&#042;"),
            ("&#x34;", "&#x37;", "&#x2a;"),
            ("%34", "%37", "%2A"),
            ("４", "７", "＊"),
            ("٤", "٧", "**"),
            ("𝟒", "𝟕", "****"),
        ] {
            let mut place = text.as_bytes().to_vec();
            rewrite(&mut place, Some(7));
            assert_eq!(std::str::from_utf8(&place).unwrap(), digit);
            assert_eq!(read(&place, true), Written::Digit(7, text.len()));
            let mut place = text.as_bytes().to_vec();
            rewrite(&mut place, None);
            assert_eq!(std::str::from_utf8(&place).unwrap(), star);
            assert!(!matches!(read(&place, true), Written::Digit(..)));
        }
    }
}
