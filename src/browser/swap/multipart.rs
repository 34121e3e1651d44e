//! The values of a `multipart/form-data` body, and the `key=value` parameters of its
//! headers (and of `Content-Type`).

use super::value::{chars, edit};
use super::{Edit, Values};

/// `key=value` parameters separated by `;` (a value may be a quoted string with `\`
/// escapes), as in `Content-Type` and `Content-Disposition`.
pub(super) fn parameters(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let (mut key, mut value, mut has_value) = (String::new(), String::new(), false);
        for c in chars.by_ref() {
            match c {
                '=' => {
                    has_value = true;
                    break;
                }
                ';' => break,
                c => key.push(c),
            }
        }
        while has_value && chars.peek() == Some(&' ') {
            chars.next();
        }
        let quoted = has_value && chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        }
        for c in chars.by_ref() {
            match c {
                ';' => break,
                c if has_value && !quoted => value.push(c),
                _ => {}
            }
        }
        found.push((key.trim().to_string(), value.trim().to_string()));
    }
    found
}

/// Edits of a `multipart/form-data` body: each part's content, files aside. A body whose
/// parts do not end with the closing delimiter gets none.
pub(super) fn multipart(src: &[u8], boundary: &[u8], values: &Values<'_>, edits: &mut Vec<Edit>) {
    let delimiter = [b"--", boundary].concat();
    let next_delimiter = [b"\r\n--", boundary].concat();
    let mut found = Vec::new();
    // The first delimiter opens the body, or ends a preamble's line.
    let mut at = if src.starts_with(&delimiter) {
        delimiter.len()
    } else {
        match find(src, &next_delimiter, 0) {
            Some(i) => i + next_delimiter.len(),
            None => return,
        }
    };
    loop {
        if src[at..].starts_with(b"--") {
            break;
        }
        // Transport padding, then the line's end.
        while matches!(src.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        if !src[at..].starts_with(b"\r\n") {
            return;
        }
        let headers_start = at + 2;
        let content_start = if src[headers_start..].starts_with(b"\r\n") {
            headers_start + 2
        } else {
            match find(src, b"\r\n\r\n", headers_start) {
                Some(i) => i + 4,
                None => return,
            }
        };
        let Some(content_end) = find(src, &next_delimiter, content_start) else {
            return;
        };
        let headers = String::from_utf8_lossy(&src[headers_start..content_start]);
        if let Some(name) = part_name(&headers) {
            let chars = chars(content_start, content_end, |at| Some((src[at], 1)));
            if let Some(chars) = chars {
                found.extend(edit(
                    src,
                    content_start,
                    content_end,
                    &chars,
                    || name,
                    values,
                ));
            }
        }
        at = content_end + next_delimiter.len();
    }
    edits.append(&mut found);
}

/// The field name of a part that is not a file, from its `Content-Disposition: form-data`.
fn part_name(headers: &str) -> Option<String> {
    let disposition = headers.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(value)
    })?;
    let params = parameters(disposition.split_once(';').map_or("", |(_, p)| p));
    if params
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("filename"))
    {
        return None;
    }
    params
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("name"))
        .map(|(_, v)| v)
}

/// Where `needle` is in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    memchr::memmem::find(hay.get(from..)?, needle).map(|i| i + from)
}
