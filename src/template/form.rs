//! The form scanner: templates in `application/x-www-form-urlencoded` bodies, chunk by chunk,
//! with the guarantees of the JSON scanner (a template split across any chunk boundary,
//! bounded memory, fail closed) and what every format shares (`template::braces`, the
//! `{{ … }}` recogniser, fed a decoded unit at a time; `template::held`, the held template,
//! its parser, cache and resolver; the errors, limits and bit tricks).
//!
//! A form is `key=value` pairs joined by `&`, both sides percent-encoded (`+` is a space).
//! The rules:
//!
//! - A template goes in a value, written raw (`{{ … }}`) or percent-encoded (`%7B%7B … %7D%7D`,
//!   as `urllib.parse.urlencode` and browsers write it), or any mix: braces are recognised
//!   after decoding. A `{{` in a key is refused; the template must end in its value (an `&`
//!   before `}}` is an unterminated template).
//! - The template's text is percent-decoded (and `+` read as a space) before it is parsed.
//! - The value is percent-encoded for a form in its place (`application/x-www-form-urlencoded`
//!   serialisation: letters, digits and `*-._` as they are, a space as `+`, every other byte
//!   `%XX`).
//! - Every other byte is copied as written; the scanner holds back only an escape cut by the
//!   end of a chunk (`%` or `%7`), a brace that may open a template, and the open template.
//! - An error names the field by its key decoded (`card[number]`), cut at [`MAX_KEY_LEN`]
//!   bytes with `…`.

use wide::u8x16;

use super::bits::{below, BLOCK};
use super::braces::{Braces, Inside, Outside};
use super::error::{Failed, TemplateError, NOT_UTF8, TOO_LONG, UNTERMINATED};
use super::held::{Encoding, Held, ParsedCache};
use super::limits::MAX_KEY_LEN;
use super::resolve::Resolver;

/// Text of a form, percent-encoded.
pub(super) struct Form;

/// What a bad escape in a template answers.
const BAD_PERCENT: &str = "invalid percent-encoding in template";

impl Encoding for Form {
    fn parsed() -> &'static ParsedCache {
        static PARSED: ParsedCache = ParsedCache::new();
        &PARSED
    }

    #[inline]
    fn has_escapes(raw: &[u8]) -> bool {
        raw.iter().any(|&b| b == b'%' || b == b'+')
    }

    fn unescape(raw: &[u8], dst: &mut String) -> Result<(), &'static str> {
        let mut bytes = Vec::with_capacity(raw.len());
        let mut i = 0;
        while let Some(&b) = raw.get(i) {
            match b {
                b'+' => bytes.push(b' '),
                b'%' => {
                    let d = match (raw.get(i + 1), raw.get(i + 2)) {
                        (Some(&h), Some(&l)) => hex(h, l),
                        _ => None,
                    };
                    bytes.push(d.ok_or(BAD_PERCENT)?);
                    i += 2;
                }
                _ => bytes.push(b),
            }
            i += 1;
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| NOT_UTF8)?;
        dst.clear();
        dst.push_str(text);
        Ok(())
    }

    fn escape_into(out: &mut Vec<u8>, value: &[u8]) {
        for part in form_urlencoded::byte_serialize(value) {
            out.extend_from_slice(part.as_bytes());
        }
    }
}

/// The byte that two hex digits stand for.
#[inline]
fn hex(h: u8, l: u8) -> Option<u8> {
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    Some(digit(h)? << 4 | digit(l)?)
}

/// Where the bytes that matter are in a block of [`BLOCK`] bytes (bit `k` for byte `k`): those
/// a value stops at (`{`, `%`, `&`), and those that matter only in a key (`=`, `+`). Compares
/// 16 bytes at a time (SSE2 on x86_64, NEON on aarch64, through `wide`).
#[inline]
fn classify(bytes: &[u8; BLOCK]) -> (u64, u64) {
    let (parts, _) = bytes.as_chunks::<16>();
    let (mut value, mut key) = (0, 0);
    for (k, part) in parts.iter().enumerate() {
        let v = u8x16::new(*part);
        let is = |b: u8| v.simd_eq(u8x16::splat(b));
        let at = 16 * k;
        value |= u64::from((is(b'{') | is(b'%') | is(b'&')).to_bitmask()) << at;
        key |= u64::from((is(b'=') | is(b'+')).to_bitmask()) << at;
    }
    (value, key)
}

/// What a `{{` in a key answers.
pub(super) const FORM_IN_KEY: &str = "a template cannot be in a form key";

/// Incremental template scanner for one form body at a time; [`FormScanner::finish`], when it
/// succeeds, readies it for the next. After an error, every further call returns it.
#[derive(Debug, Clone)]
pub struct FormScanner {
    /// Reading a key (before its `=`).
    in_key: bool,
    /// The current pair's key, decoded, at most [`MAX_KEY_LEN`] bytes.
    key: Vec<u8>,
    /// The key was longer.
    key_cut: bool,
    /// An escape cut by the end of the last chunk (`%` or `%X`), not yet written.
    partial: Vec<u8>,
    /// Where the `{{ … }}` recogniser is.
    braces: Braces,
    /// The `{` held back (`braces.brace`) as written (`{` or `%7B`), not yet written.
    brace: Vec<u8>,
    /// In a template (held in `held`).
    in_template: bool,
    /// In a template that holds only its two braces: how the first is written (its length),
    /// so that a third brace makes it text (`{{{ … }}` is `{` and a template).
    first: usize,
    held: Held,
    /// Templates substituted in the chunk being fed.
    count: usize,
    failed: Failed,
}

impl Default for FormScanner {
    fn default() -> Self {
        FormScanner::new()
    }
}

impl FormScanner {
    pub fn new() -> Self {
        FormScanner {
            in_key: true,
            key: Vec::new(),
            key_cut: false,
            partial: Vec::new(),
            braces: Braces::default(),
            brace: Vec::new(),
            in_template: false,
            first: 0,
            held: Held::new(),
            count: 0,
            failed: Failed::default(),
        }
    }

    /// Back to the start of a body, allocations kept.
    pub fn reset(&mut self) {
        self.in_key = true;
        self.key.clear();
        self.key_cut = false;
        self.partial.clear();
        self.braces = Braces::default();
        self.brace.clear();
        self.in_template = false;
        self.first = 0;
        self.held.clear();
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
        let result = self.feed_chunk(chunk, out, r).map(|()| self.count);
        self.failed.keep(result)
    }

    /// End of body: writes what is held back and resets the scanner. A template still open
    /// is an error.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TemplateError> {
        self.failed.check()?;
        if self.in_template {
            let err = self.error(UNTERMINATED);
            return self.failed.keep(Err(err));
        }
        out.extend_from_slice(&self.brace);
        out.extend_from_slice(&self.partial);
        self.reset();
        Ok(())
    }

    fn feed_chunk(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        out.reserve(chunk.len());
        let mut from = 0;
        if !self.partial.is_empty() {
            // The escape cut by the last chunk, completed by this one's first bytes.
            let held = self.partial.len();
            let take = chunk.len().min(2);
            let mut joined = std::mem::take(&mut self.partial);
            joined.extend_from_slice(chunk.get(..take).unwrap_or_default());
            let end = self.scan(&joined, held, out, r)?;
            if end < held {
                // Still cut: the whole chunk is in `joined` (it had fewer than 2 bytes).
                joined.drain(..end);
                self.partial = joined;
                return Ok(());
            }
            from = end - held;
        }
        let rest = chunk.get(from..).unwrap_or_default();
        let end = self.scan(rest, rest.len(), out, r)?;
        self.partial
            .extend_from_slice(rest.get(end..).unwrap_or_default());
        Ok(())
    }

    /// Reads the units (a byte, or an escape `%XX`) of `buf` that start before `stop`; an
    /// escape may run past `stop`. Returns where it stopped: `stop` or beyond, or the start of
    /// an escape that `buf` cuts.
    fn scan(
        &mut self,
        buf: &[u8],
        stop: usize,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<usize, TemplateError> {
        let mut i = 0;
        while i < stop {
            if !self.in_template && !self.braces.brace {
                i = self.skip_plain(buf, i, stop, out);
                if i >= stop {
                    break;
                }
            }
            let Some(&b) = buf.get(i) else { break };
            let (decoded, len, literal) = match b {
                b'%' => match (buf.get(i + 1), buf.get(i + 2)) {
                    (Some(&h), Some(&l)) => match hex(h, l) {
                        Some(d) => (d, 3, false),
                        None => (b'%', 1, true),
                    },
                    _ => return Ok(i),
                },
                b'+' => (b' ', 1, true),
                _ => (b, 1, true),
            };
            let raw = buf.get(i..i + len).unwrap_or_default();
            self.unit(decoded, raw, literal, out, r)?;
            i += len;
        }
        Ok(i)
    }

    /// One unit: `decoded` is what it stands for, `raw` how it is written, `literal` when it
    /// is not an escape (only a literal `&` or `=` separates).
    fn unit(
        &mut self,
        decoded: u8,
        raw: &[u8],
        literal: bool,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        if self.in_template {
            if literal && decoded == b'&' {
                return Err(self.error(UNTERMINATED));
            }
            match self.braces.inside(decoded == b'{', decoded == b'}') {
                Inside::Third => {
                    // A third brace: the first is text, the template starts at the second.
                    let bytes = self.held.bytes();
                    out.extend_from_slice(bytes.get(..self.first).unwrap_or_default());
                    let second = bytes.get(self.first..).unwrap_or_default().to_vec();
                    self.held.clear();
                    self.held.extend(&second);
                    self.held.extend(raw);
                    self.first = second.len();
                }
                step => {
                    if self.held.room() < raw.len() {
                        return Err(self.error(TOO_LONG));
                    }
                    self.held.extend(raw);
                    if step == Inside::Closes {
                        if let Err(message) = self.held.substitute::<Form>(out, r) {
                            return Err(self.error(&message));
                        }
                        self.in_template = false;
                        self.count += 1;
                    }
                }
            }
            return Ok(());
        }
        match self.braces.outside(decoded == b'{') {
            Outside::Opens => {
                if self.in_key {
                    return Err(self.error(FORM_IN_KEY));
                }
                self.held.clear();
                self.held.extend(&self.brace);
                self.held.extend(raw);
                self.first = self.brace.len();
                self.brace.clear();
                self.in_template = true;
                return Ok(());
            }
            Outside::Releases => {
                out.extend_from_slice(&self.brace);
                self.brace.clear();
            }
            Outside::Holds | Outside::Text => {}
        }
        if self.in_key {
            if literal && decoded == b'=' {
                self.in_key = false;
            } else if literal && decoded == b'&' {
                self.key.clear();
                self.key_cut = false;
            } else {
                self.key_push(&[decoded]);
            }
        } else if literal && decoded == b'&' {
            self.in_key = true;
            self.key.clear();
            self.key_cut = false;
        }
        if decoded == b'{' {
            self.brace.extend_from_slice(raw);
        } else {
            out.extend_from_slice(raw);
        }
        Ok(())
    }

    /// Copies the units of `buf[from..stop]` that cannot open a template, following keys and
    /// separators as [`FormScanner::unit`] does, [`BLOCK`] bytes at a time; returns where it
    /// stopped: `stop`, or a unit that may open a template (`{`, `%7B`, `%7b`) or an escape
    /// that `stop` cuts, for [`FormScanner::unit`] to read. An escape that stands for another
    /// byte (or a `%` that starts none) is text: in a value it is stepped over without
    /// leaving the block.
    fn skip_plain(&mut self, buf: &[u8], from: usize, stop: usize, out: &mut Vec<u8>) -> usize {
        let text = buf.get(..stop).unwrap_or_default();
        // Start of the key's bytes not yet in `key`.
        let mut run = from;
        let mut base = from;
        let end = 'blocks: loop {
            let rest = text.get(base..).unwrap_or_default();
            if rest.is_empty() {
                break stop;
            }
            let mut pad = [0; BLOCK];
            let bytes = match rest.first_chunk::<BLOCK>() {
                Some(bytes) => bytes,
                None => {
                    // The tail: zeros match none of the bytes that matter.
                    pad.get_mut(..rest.len())
                        .unwrap_or_default()
                        .copy_from_slice(rest);
                    &pad
                }
            };
            let (value, key) = classify(bytes);
            let mut at = 0;
            loop {
                let mask = (if self.in_key { value | key } else { value }) & !below(at);
                if mask == 0 {
                    break;
                }
                let k = mask.trailing_zeros() as usize;
                let pos = base + k;
                at = k + 1;
                match text.get(pos) {
                    Some(b'&') => {
                        self.in_key = true;
                        self.key.clear();
                        self.key_cut = false;
                        run = pos + 1;
                    }
                    Some(b'=') => {
                        self.key_push(text.get(run..pos).unwrap_or_default());
                        self.in_key = false;
                    }
                    Some(b'+') => {
                        self.key_push(text.get(run..pos).unwrap_or_default());
                        self.key_push(b" ");
                        run = pos + 1;
                    }
                    Some(b'%') => {
                        let decoded = match (text.get(pos + 1), text.get(pos + 2)) {
                            (Some(&h), Some(&l)) => hex(h, l),
                            _ => break 'blocks pos,
                        };
                        match decoded {
                            Some(b'{') => break 'blocks pos,
                            Some(d) => {
                                if self.in_key {
                                    self.key_push(text.get(run..pos).unwrap_or_default());
                                    self.key_push(&[d]);
                                    run = pos + 3;
                                }
                                at = k + 3;
                            }
                            // A `%` that starts no escape is text.
                            None => {}
                        }
                    }
                    _ => break 'blocks pos,
                }
            }
            base += BLOCK;
        };
        if self.in_key {
            self.key_push(text.get(run..end).unwrap_or_default());
        }
        out.extend_from_slice(text.get(from..end).unwrap_or_default());
        end
    }

    /// Adds `bytes` of the key, up to [`MAX_KEY_LEN`] in all.
    fn key_push(&mut self, bytes: &[u8]) {
        let room = MAX_KEY_LEN.saturating_sub(self.key.len());
        self.key
            .extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
        self.key_cut |= bytes.len() > room;
    }

    fn error(&self, message: &str) -> TemplateError {
        let mut field = String::from_utf8_lossy(&self.key).into_owned();
        if self.key_cut {
            field.push('…');
        }
        TemplateError::at(field, self.held.bytes(), message)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::secret::Revealed;
    use crate::template::expr::TemplateRef;
    use crate::template::resolve::ResolveError;
    use crate::template::testing::run_every_cut;

    /// Resolves `pm_x`'s number to `4242 4242&=x`, a value that needs encoding; `pm_<n>` to
    /// `n`; anything else is unknown.
    fn resolver(t: &TemplateRef) -> Result<Revealed, ResolveError> {
        match t.payment_method.as_str() {
            "pm_x" => Ok(Revealed::Number("4242 4242&=x".into())),
            "nope" => Err(ResolveError::new("unknown payment method")),
            other => Ok(Revealed::Number(other.trim_start_matches("pm_").into())),
        }
    }

    fn run(body: &str) -> Result<String, TemplateError> {
        run_every_cut(
            (FormScanner::new, FormScanner::feed, FormScanner::finish),
            body,
            &mut resolver,
        )
    }

    const T: &str = "{{ paymentMethod: pm_7 | type: 'pan' | json: '$.number' }}";
    const T_ENC: &str =
        "%7B%7B+paymentMethod%3A+pm_7+%7C+type%3A+%27pan%27+%7C+json%3A+%27%24.number%27+%7D%7D";

    #[test]
    fn substitutes_raw_and_encoded_templates() {
        let x = "{{paymentMethod:pm_x|type:'pan'|json:'$.number'}}";
        for (body, want) in [
            (
                format!("card[number]={T}&a=b"),
                "card[number]=7&a=b".to_string(),
            ),
            (
                format!("card%5Bnumber%5D={T_ENC}"),
                "card%5Bnumber%5D=7".to_string(),
            ),
            (
                format!("a=x{T_ENC}y&b=%7b{T}%7d"),
                "a=x7y&b=%7b7%7d".to_string(),
            ),
            (format!("n={x}"), "n=4242+4242%26%3Dx".to_string()),
            // Mixed spellings of the braces.
            (
                "n={%7B+paymentMethod:+pm_3+|+type:+'pan'+|+json:+'$.number'+%7d}".into(),
                "n=3".into(),
            ),
            // Braces that open no template, escapes that are none, separators.
            (
                "a={x}&b=}}&c=%zz%&d=%7B&e={".into(),
                "a={x}&b=}}&c=%zz%&d=%7B&e={".into(),
            ),
            ("a[{]=1&{=2".into(), "a[{]=1&{=2".into()),
        ] {
            assert_eq!(run(&body), Ok(want), "{body}");
        }
    }

    #[test]
    fn keys_and_escapes_across_blocks() {
        // Escapes, `+` and separators at every offset of a 64-byte block, in keys and values.
        for pad in 0..70 {
            let text = "x".repeat(pad);
            let body = format!(
                "{text}=v%2C+w&{text}%5Ba+b%5D+c%zz%7D{text}=%41%7{text}%2C%%2B+&q={T_ENC}"
            );
            let want =
                format!("{text}=v%2C+w&{text}%5Ba+b%5D+c%zz%7D{text}=%41%7{text}%2C%%2B+&q=7");
            assert_eq!(run(&body), Ok(want), "{pad}");
            let nope = T_ENC.replace("pm_7", "nope");
            let err = run(&format!(
                "{text}=%7D&{text}%5Ba+b%5D+c%zz%7D%2b{text}={nope}"
            ))
            .unwrap_err();
            assert_eq!(err.field, format!("{text}[a b] c%zz}}+{text}"), "{pad}");
            let err = run(&format!("{text}=1&%41%7B%7Bk{text}=1")).unwrap_err();
            assert_eq!(
                (err.field.as_str(), err.message.as_str()),
                ("A{", FORM_IN_KEY),
                "{pad}"
            );
        }
        // A key is named up to its first MAX_KEY_LEN bytes.
        let key = "k+".repeat(MAX_KEY_LEN);
        let nope = T.replace("pm_7", "nope");
        let err = run(&format!("a=1&{key}={nope}")).unwrap_err();
        let named = "k ".repeat(MAX_KEY_LEN / 2) + "…";
        assert_eq!(err.field, named);
    }

    #[test]
    fn refuses_and_names_the_field() {
        let nope = T.replace("pm_7", "nope");
        for (body, field, message) in [
            (
                format!("card%5Bnumber%5D={nope}"),
                "card[number]",
                "unknown payment method",
            ),
            (format!("a=1&{T}=1"), "{", FORM_IN_KEY),
            ("a=1&k%7B%7B=1".to_string(), "k{", FORM_IN_KEY),
            (
                "a={{ paymentMethod: pm_1 &b=1".into(),
                "a",
                "unterminated template",
            ),
            ("a=%7B%7B x".into(), "a", "unterminated template"),
            ("a={{ %zz }}".into(), "a", BAD_PERCENT),
            (
                format!("a={{{{{}}}}}", " ".repeat(600)),
                "a",
                "template too long",
            ),
        ] {
            let err = run(&body).unwrap_err();
            assert_eq!(
                (err.field.as_str(), err.message.as_str()),
                (field, message),
                "{body}"
            );
        }
    }
}
