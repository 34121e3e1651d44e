//! Finding card numbers and CVCs in an answer's bytes: runs of digits, however written
//! ([`super::written`]), and what in them is one of the request's values.
//!
//! A **run** is a digit, then more digits with at most [`MAX_GAP`] separators between two of
//! them: `4242 4242 4242 4242`, `4242.4242.4242.4242`, `4\u200b2\u200b4\u200b2…`,
//! `４２４２…`, `\u0034\u0032…`. In a run the guard looks for
//! - each card number the request revealed, as a sequence of the run's digits (a number inside
//!   a longer run is found too);
//! - with `response_guard_any_card`, the whole run, or a group of adjacent digits in it, of
//!   13 to 19 digits that passes the Luhn check;
//! - each CVC the request substituted, as a whole value: a group of adjacent digits (invisible
//!   separators allowed) or a whole run without a `.` (`1 2 3`), that is not part of a word
//!   (`ord_123`) or of a decimal number (`123.45`). A 3- or 4-digit value of the answer that
//!   happens to equal the CVC is hidden too: the guard cannot tell them apart, and errs on
//!   the side of hiding.
//!
//! A card number keeps its first 6 and last 4 digits; a CVC is hidden whole.

use super::written::{self, Written};
use crate::secret::{CardNumber, Cvc};
use wide::u8x16;
use zeroize::{Zeroize, Zeroizing};

/// Most separators between two digits of one run (`4242 \u200b 4242`: three).
pub const MAX_GAP: usize = 4;

/// Most bytes of a run held back at a chunk's end: a run of 19 digits with [`MAX_GAP`]
/// separators between every two, each written in its longest form.
pub const HOLD: usize = 19 * written::LONGEST + 18 * MAX_GAP * written::LONGEST;

/// Shortest run looked at for a card number: a known number has at least 12 digits, any card
/// at least 13.
const MIN_DIGITS: usize = 12;

/// What the guard looks for in one answer.
#[derive(Default)]
pub struct Sought {
    /// Card numbers, digits only, at least [`MIN_DIGITS`] long.
    pub numbers: Vec<CardNumber>,
    /// CVCs, digits only, 3 or 4 long.
    pub cvcs: Vec<Cvc>,
    /// Any Luhn-valid run of 13 to 19 digits.
    pub any_card: bool,
    /// What each of `numbers` becomes, by index, digit for digit (the browser proxy's
    /// stand-ins); a number without one is masked.
    pub numbers_as: Vec<Zeroizing<Vec<u8>>>,
    /// What each of `cvcs` becomes, by index; a CVC without one is hidden.
    pub cvcs_as: Vec<Zeroizing<Vec<u8>>>,
}

impl Sought {
    fn is_empty(&self) -> bool {
        self.numbers.is_empty() && self.cvcs.is_empty() && !self.any_card
    }
}

/// The bytes to search, and the two bytes sent just before them (`0`: none), which tell
/// whether a value at the start is part of a word or a decimal number.
#[derive(Clone, Copy)]
pub struct Text<'a> {
    pub bytes: &'a [u8],
    pub before: [u8; 2],
}

impl Text<'_> {
    /// The byte at `at` (negative: one of `before`), if any.
    fn byte(&self, at: isize) -> Option<u8> {
        match at {
            -2 | -1 => Some(self.before[(2 + at) as usize]).filter(|&b| b != 0),
            _ => usize::try_from(at)
                .ok()
                .and_then(|i| self.bytes.get(i).copied()),
        }
    }
}

/// One digit of a run: where it is written, in how many bytes, and its value.
#[derive(Debug, Clone, Copy)]
struct Digit {
    at: usize,
    len: usize,
    value: u8,
}

impl Digit {
    fn end(&self) -> usize {
        self.at + self.len
    }
}

/// A place to rewrite: a digit's bytes, and the digit to put there (`None`: a `*`).
pub type Edit = (usize, usize, Option<u8>);

/// Finds what `sought` names in `buf`: returns how many values, and where the bytes to hold
/// back begin (`buf.len()` when `end`: nothing follows); pushes the digits to hide to
/// `edits`.
pub fn find(text: Text, sought: &Sought, end: bool, edits: &mut Vec<Edit>) -> (usize, usize) {
    let buf = text.bytes;
    let len = buf.len();
    if sought.is_empty() {
        return (0, len);
    }
    let mut found = 0;
    let mut digits: Vec<Digit> = Vec::new();
    // Fewer digits than this cannot be anything sought.
    let shortest = if sought.cvcs.is_empty() {
        MIN_DIGITS
    } else {
        3
    };
    let mut i = 0;
    while i < len {
        let Some(start) = next_candidate(buf, i) else {
            break;
        };
        if buf[start] == b'\\'
            && buf
                .get(start + 1)
                .is_some_and(|&b| !written::escape_reads(b))
        {
            // `\"`, `\\`: JSON's most common escapes write nothing the guard reads.
            i = start + 1;
            continue;
        }
        if !buf[start].is_ascii_digit() {
            match written::read(&buf[start..], end) {
                Written::Digit(..) => {}
                Written::Cut => return (found, start),
                Written::Separator(n) | Written::Other(n) => {
                    i = start + n.max(1);
                    continue;
                }
            }
        }
        // A run. Counted first without keeping anything: most runs of an answer (amounts,
        // ids, dates) are too short to be sought, and are passed over at that cost.
        let run = read_run(buf, start, end, None);
        let open = run.open || (run.end == len && !end);
        if open && len - start <= HOLD {
            // The run may go on in the next chunk: held back whole.
            return (found, start);
        }
        if run.digits >= shortest || open {
            digits.clear();
            read_run(buf, start, end, Some(&mut digits));
            if digits.len() >= shortest {
                found += match_run(text, &digits, run.dotted, sought, edits);
            }
        }
        if open {
            // Too long to hold: the digits that may continue it are held, from a digit's start.
            let keep = digits
                .iter()
                .map(|d| d.at)
                .find(|&at| at >= len - HOLD)
                .unwrap_or(len);
            return (found, keep);
        }
        i = run.last;
    }
    (found, len)
}

/// What [`read_run`] found.
struct Run {
    /// How many digits.
    digits: usize,
    /// Past the last digit.
    last: usize,
    /// Where reading stopped (past the separators after the last digit, if any).
    end: usize,
    /// A `.` stands between two digits: the run may be a decimal number.
    dotted: bool,
    /// The bytes ended inside a form that may write a digit or a separator.
    open: bool,
}

/// Reads the run that starts with the digit at `start`: digits, and at most [`MAX_GAP`]
/// separators between two of them. Plain ASCII digits and separators are taken here, other
/// bytes that may write one are read by [`written`]. With `keep`, each digit is pushed there.
fn read_run(buf: &[u8], start: usize, end: bool, mut keep: Option<&mut Vec<Digit>>) -> Run {
    let len = buf.len();
    let mut run = Run {
        digits: 0,
        last: start,
        end: start,
        dotted: false,
        open: false,
    };
    let (mut gap, mut dot) = (0, false);
    let mut j = start;
    while j < len {
        let b = buf[j];
        let read = if b.is_ascii_digit() {
            // The digits that follow at once, in one step.
            let n = buf[j..].iter().take_while(|b| b.is_ascii_digit()).count();
            if let Some(keep) = keep.as_deref_mut() {
                keep.extend((j..j + n).map(|at| Digit {
                    at,
                    len: 1,
                    value: buf[at] - b'0',
                }));
            }
            run.digits += n;
            run.dotted |= dot;
            (gap, dot) = (0, false);
            j += n;
            run.last = j;
            continue;
        } else if matches!(b, b' ' | b'-' | b'.' | b'/' | b'\t' | b'\n' | b'\r' | b'+') {
            Written::Separator(1)
        } else if b < 0x80 && !matches!(b, b'\\' | b'&' | b'%') {
            break;
        } else {
            written::read(&buf[j..], end)
        };
        match read {
            Written::Digit(value, n) => {
                if let Some(keep) = keep.as_deref_mut() {
                    keep.push(Digit {
                        at: j,
                        len: n,
                        value,
                    });
                }
                run.digits += 1;
                run.dotted |= dot;
                (gap, dot) = (0, false);
                j += n;
                run.last = j;
            }
            Written::Separator(n) if gap < MAX_GAP => {
                dot |= b == b'.';
                gap += 1;
                j += n;
            }
            Written::Cut => {
                run.open = true;
                break;
            }
            _ => break,
        }
    }
    run.end = j;
    run
}

/// Position of the first byte at or after `from` that may start a digit: an ASCII digit, an
/// escape's first byte, or a byte of a UTF-8 character. Tested 16 bytes at a time (SSE2 on
/// x86_64, NEON on aarch64, through `wide`), then one by one for the last few.
fn next_candidate(buf: &[u8], mut from: usize) -> Option<usize> {
    let splat = u8x16::splat;
    while let Some(block) = buf.get(from..).and_then(|rest| rest.first_chunk::<16>()) {
        let v = u8x16::new(*block);
        // `b - '0'` wraps below `0`: at most 9 exactly for a digit.
        let below = v - splat(b'0');
        let marks = below.min(splat(9)).simd_eq(below)
            | v.simd_eq(splat(b'\\'))
            | v.simd_eq(splat(b'&'))
            | v.simd_eq(splat(b'%'));
        // A byte's top bit is its own mark: the bytes of UTF-8 characters.
        let hits = marks.to_bitmask() | v.to_bitmask();
        if hits != 0 {
            return Some(from + hits.trailing_zeros() as usize);
        }
        from += 16;
    }
    let rest = buf.get(from..)?;
    rest.iter().position(|&b| starts_digit(b)).map(|k| from + k)
}

/// Whether `b` may start a digit: see [`next_candidate`].
fn starts_digit(b: u8) -> bool {
    b.is_ascii_digit() || b >= 0x80 || matches!(b, b'\\' | b'&' | b'%')
}

/// Finds the sought values in one run; returns how many.
fn match_run(
    text: Text,
    digits: &[Digit],
    dotted: bool,
    sought: &Sought,
    edits: &mut Vec<Edit>,
) -> usize {
    let value = Value::of(digits);
    let value = value.bytes();
    let mut found = 0;
    if value.len() >= MIN_DIGITS {
        for (k, number) in sought.numbers.iter().enumerate() {
            let number = number.expose().as_bytes();
            let mut from = 0;
            while let Some(at) = value
                .get(from..)
                .and_then(|rest| rest.windows(number.len()).position(|w| w == number))
            {
                let place = &digits[from + at..from + at + number.len()];
                match sought.numbers_as.get(k) {
                    Some(with) => put(place, with, edits),
                    None => hide_number(place, edits),
                }
                found += 1;
                from += at + number.len();
            }
        }
        if found == 0 && sought.any_card {
            found += any_card(digits, value, edits);
        }
    }
    if !sought.cvcs.is_empty() {
        let sought_cvcs = (sought.cvcs.as_slice(), sought.cvcs_as.as_slice());
        found += cvcs(text, digits, dotted, value, sought_cvcs, edits);
    }
    found
}

/// A run's digits as ASCII, on the stack for a run of up to 64 digits; zeroed when dropped
/// (the part written, so a short run costs little).
struct Value {
    small: [u8; 64],
    large: Vec<u8>,
    len: usize,
}

impl Value {
    fn of(digits: &[Digit]) -> Value {
        let mut value = Value {
            small: [0; 64],
            large: Vec::new(),
            len: digits.len(),
        };
        let ascii = digits.iter().map(|d| b'0' + d.value);
        match value.small.get_mut(..digits.len()) {
            Some(room) => room.iter_mut().zip(ascii).for_each(|(v, a)| *v = a),
            None => value.large.extend(ascii),
        }
        value
    }

    fn bytes(&self) -> &[u8] {
        self.small.get(..self.len).unwrap_or(&self.large)
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        let len = self.len.min(self.small.len());
        self.small[..len].zeroize();
        self.large.zeroize();
    }
}

/// Any Luhn-valid number: the whole run, else each group of adjacent digits.
fn any_card(digits: &[Digit], value: &[u8], edits: &mut Vec<Edit>) -> usize {
    if (13..=19).contains(&value.len()) && luhn(value) {
        hide_number(digits, edits);
        return 1;
    }
    let mut found = 0;
    for (g, h) in groups(digits, |_, _| false) {
        if (13..=19).contains(&(h - g)) && luhn(&value[g..h]) {
            hide_number(&digits[g..h], edits);
            found += 1;
        }
    }
    found
}

/// The CVCs written as whole values in the run.
fn cvcs(
    text: Text,
    digits: &[Digit],
    dotted: bool,
    value: &[u8],
    (cvcs, cvcs_as): (&[Cvc], &[Zeroizing<Vec<u8>>]),
    edits: &mut Vec<Edit>,
) -> usize {
    let which = |part: &[u8]| cvcs.iter().position(|c| c.expose().as_bytes() == part);
    let is = |part: &[u8]| which(part).is_some();
    let replace = |place: &[Digit], part: &[u8], edits: &mut Vec<Edit>| match which(part)
        .and_then(|k| cvcs_as.get(k))
    {
        Some(with) => put(place, with, edits),
        None => hide_all(place, edits),
    };
    let (first, last) = match (digits.first(), digits.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return 0,
    };
    // The whole run (`1 2 3`), unless it is a decimal number.
    if !dotted
        && is(value)
        && stands_alone(text, first.at, last.end())
        && !in_decimal(text, first.at, last.end())
    {
        replace(digits, value, edits);
        return 1;
    }
    // A group of adjacent digits, invisible separators allowed inside.
    let mut found = 0;
    for (g, h) in groups(digits, |a, b| invisible_between(text.bytes, a, b)) {
        if h - g == digits.len() && !dotted && g == 0 {
            continue; // the whole run, already tried
        }
        let (a, b) = (&digits[g], &digits[h - 1]);
        if is(&value[g..h]) && stands_alone(text, a.at, b.end()) && !in_decimal(text, a.at, b.end())
        {
            replace(&digits[g..h], &value[g..h], edits);
            found += 1;
        }
    }
    found
}

/// The groups of a run's digits that follow each other with nothing between them (or what
/// `joins` lets through): `(first, past the last)` indices.
fn groups<'a>(
    digits: &'a [Digit],
    joins: impl Fn(&Digit, &Digit) -> bool + 'a,
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let mut g = 0;
    std::iter::from_fn(move || {
        if g >= digits.len() {
            return None;
        }
        let mut h = g + 1;
        while h < digits.len()
            && (digits[h].at == digits[h - 1].end() || joins(&digits[h - 1], &digits[h]))
        {
            h += 1;
        }
        let group = (g, h);
        g = h;
        Some(group)
    })
}

/// Whether only invisible characters (zero-width ones, a soft hyphen, a byte order mark) stand
/// between two digits.
fn invisible_between(buf: &[u8], a: &Digit, b: &Digit) -> bool {
    let mut at = a.end();
    while at < b.at {
        let Written::Separator(n) = written::read(&buf[at..b.at], true) else {
            return false;
        };
        let shown = std::str::from_utf8(&buf[at..at + n]).unwrap_or("");
        let invisible = matches!(
            shown,
            "\u{200b}" | "\u{200c}" | "\u{200d}" | "\u{2060}" | "\u{feff}" | "\u{ad}"
        ) || matches!(
            shown.to_ascii_lowercase().as_str(),
            "\\u200b"
                | "\\u200c"
                | "\\u200d"
                | "\\u2060"
                | "\\ufeff"
                | "\\u00ad"
                | "&#8203;"
                | "&#x200b;"
                | "&zerowidthspace;"
                | "&zwnj;"
                | "&zwj;"
                | "&nobreak;"
                | "&shy;"
        );
        if !invisible {
            return false;
        }
        at += n;
    }
    true
}

/// Whether the value from `from` to `to` is not part of a word: the bytes on either side are
/// no letter, digit or `_`.
fn stands_alone(text: Text, from: usize, to: usize) -> bool {
    let word = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    !word(text.byte(from as isize - 1)) && !word(text.byte(to as isize))
}

/// Whether the digits from `from` to `to` are a side of a decimal number (`123.45`, `0,123`).
fn in_decimal(text: Text, from: usize, to: usize) -> bool {
    let point = |at: isize| matches!(text.byte(at), Some(b'.' | b','));
    let digit = |at: isize| text.byte(at).is_some_and(|b| b.is_ascii_digit());
    let (from, to) = (from as isize, to as isize);
    (point(to) && digit(to + 1)) || (point(from - 1) && digit(from - 2))
}

/// A card number's mask: all but its first 6 and last 4 digits.
fn hide_number(digits: &[Digit], edits: &mut Vec<Edit>) {
    let hidden = digits.len().saturating_sub(4);
    edits.extend(
        digits
            .iter()
            .take(hidden)
            .skip(6)
            .map(|d| (d.at, d.len, None)),
    );
}

/// Each digit written over by the one of `with` at its place (ASCII digits, as many).
fn put(digits: &[Digit], with: &[u8], edits: &mut Vec<Edit>) {
    edits.extend(
        digits
            .iter()
            .zip(with)
            .map(|(d, w)| (d.at, d.len, Some(w.wrapping_sub(b'0')))),
    );
}

/// Every digit hidden.
fn hide_all(digits: &[Digit], edits: &mut Vec<Edit>) {
    edits.extend(digits.iter().map(|d| (d.at, d.len, None)));
}

/// The Luhn check over ASCII digits.
fn luhn(digits: &[u8]) -> bool {
    std::str::from_utf8(digits).is_ok_and(crate::domain::issuer::luhn_valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidate_test_finds_digits_escapes_and_utf8() {
        for b in 0..=255u8 {
            for at in 0..16 {
                let mut bytes = [b'a'; 16];
                bytes[at] = b;
                let hay = [&[b'x'; 5][..], &bytes, b"zz"].concat();
                let want = hay.iter().position(|&c| starts_digit(c));
                assert_eq!(next_candidate(&hay, 0), want, "byte {b:#x} at {at}");
            }
        }
    }
}
