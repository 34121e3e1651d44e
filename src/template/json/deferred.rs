//! Chunks sent before they are lexed. In a streamed body, a chunk in which no template can
//! start goes on to the target at once and is only kept here ([`Scanner::defer`]); it is lexed
//! only if something after it needs the lexer's state: a chunk that may hold a template
//! (which is then found where it is and named by its path), an escaped brace (refused, with
//! its field), or more kept bytes than a body or the process may keep. A body that ends first
//! was never lexed past its last template: its kept chunks are only followed for their
//! nesting (`balance::Balance`, as bytes after the last template always are), which costs a
//! fraction of lexing them. That is most of a large body, whose templates come early.
//!
//! The outcome is the lexer's, exactly: the same bytes reach the target and the same error
//! is answered, only found later (before the body's end leaves: an error still drops the
//! target's connection on an unfinished body). A chunk is kept only when lexing it could not
//! fail nor change what the scanner holds back: no `{{` in it, no `{` at its end, and
//! nothing carried into it (a template, a `{`, a key's `{`). (A chunk that starts with `{`
//! may be kept: no chunk kept, or lexed with nothing carried, ends with one.) The proxy holds
//! a streamed chunk's trailing `{` back and sends it with the next chunk: a chunk kept after
//! such a `{` is taken as that `{` followed by the chunk (and is not kept when it starts with
//! another `{`), without joining them; they are joined only should the chunk be lexed.
//!
//! Memory: the chunks are the caller's pieces, kept by reference (not copied), at most
//! [`BODY_LIMIT`] bytes a body and [`PROCESS_LIMIT`] bytes for all bodies together; beyond
//! either, the oldest chunks are lexed and let go, or a chunk is lexed at once. Only pieces
//! of [`MIN_KEPT`] bytes or more are kept, and each counts as at least [`COUNTED_AT_LEAST`]:
//! a piece may hold more memory than its length (an HTTP/2 frame is a slice of the
//! connection's read buffer, a tiny piece an allocation and a slot of its own), so a caller
//! sending small pieces cannot make the limits stand for much more memory. The chunks and
//! their counts are kept by [`super::kept`].
//!
//! [`BODY_LIMIT`]: super::kept::BODY_LIMIT
//! [`PROCESS_LIMIT`]: super::kept::PROCESS_LIMIT
//! [`MIN_KEPT`]: super::kept::MIN_KEPT
//! [`COUNTED_AT_LEAST`]: super::kept::COUNTED_AT_LEAST

use bytes::Bytes;

use super::balance::Balance;
use super::escape::EscapedBraces;
use super::kept::{after_brace, Deferred, Kept};
use super::{Mode, Scanner};
use crate::template::error::TemplateError;

impl Scanner {
    /// Takes a streamed JSON chunk's trailing `{` off `chunk`, to be held back and sent with
    /// the next chunk (no chunk that ends with `{` is kept); returns whether it did. With
    /// `brace` a `{` is already held before `chunk`, and a chunk of a lone `{` is held too
    /// (the two may start a template).
    pub fn hold_back_brace(brace: bool, chunk: &mut Bytes) -> bool {
        let hold = chunk.len() + usize::from(brace) > 1 && chunk.last() == Some(&b'{');
        if hold {
            chunk.truncate(chunk.len() - 1);
        }
        hold
    }

    /// A `{` held back, then `chunk`: the two joined (copied), as the lexer must read them.
    pub fn after_brace(chunk: &[u8]) -> Bytes {
        after_brace(chunk)
    }

    /// Takes a chunk of a streamed body that may go on to the target as it is, without lexing
    /// it now (see the module's text): returns whether it did. When it does not, the chunk
    /// must be lexed or fed as usual ([`Scanner::lex`], [`Scanner::feed`]), and the chunks
    /// kept before it are lexed first.
    ///
    /// With `brace`, the chunk is a `{` held back from the chunk before, then `chunk`: what
    /// goes on is that `{` and `chunk`, and what must be lexed or fed when it is not kept is
    /// the two joined.
    pub fn defer(&mut self, brace: bool, chunk: &Bytes) -> Result<bool, TemplateError> {
        self.failed.check()?;
        // After a held `{`, a chunk that starts with `{` may start a template with it.
        if brace && chunk.first().is_none_or(|&b| b == b'{') {
            return Ok(false);
        }
        let plain = self.skim
            && self.tail.is_none()
            && !self.carries_template()
            && !self.brace_carried
            && !self.key_brace
            && !self.open_end
            && chunk.last().is_some_and(|&b| b != b'{');
        if !plain {
            return Ok(false);
        }
        let start = (self.substituted > 0)
            .then(|| Balance::new(self.mode != Mode::Structure, self.escape, self.path.depth()));
        let kept = self.deferred.get_or_insert_default();
        if kept.is_empty() {
            // The first chunk kept: the searches go on from the scanner's state.
            kept.braces = self.escapes.clone();
            kept.balance = start;
        }
        let len = chunk.len() + usize::from(brace);
        let counted = kept.counted(len);
        if len < kept.min || counted > kept.limit {
            return Ok(false);
        }
        // A `{{` and the start of an escaped brace (a backslash) are noticed while the
        // nesting is followed, where it is; else searched for.
        // A held `{` before a chunk that does not start with one cannot make a `{{`.
        let (balance, backslash) = match kept.balance {
            Some(mut balance) => {
                if brace {
                    let _ = balance.over(b"{");
                }
                let seen = balance.over(chunk);
                if seen.pair {
                    return Ok(false);
                }
                (Some(balance), seen.backslash)
            }
            None if Self::has_templates(chunk) => return Ok(false),
            None => (None, memchr::memchr(b'\\', chunk).is_some()),
        };
        let braces = if backslash || kept.braces.pending() {
            let mut braces = kept.braces.clone();
            if (brace && braces.find(b"{").is_some()) || braces.find(chunk).is_some() {
                return Ok(false);
            }
            braces
        } else {
            EscapedBraces::default()
        };
        // The oldest chunks are lexed until this one fits the body's share.
        while self
            .deferred
            .as_ref()
            .is_some_and(|d| d.bytes + counted > d.limit)
        {
            self.lex_oldest()?;
        }
        if !Deferred::reserve(counted) {
            return Ok(false);
        }
        let kept = self.deferred.get_or_insert_default();
        // What follows the kept chunks and this one, whichever of them were lexed above.
        kept.braces = braces;
        kept.balance = balance;
        kept.bytes += counted;
        kept.chunks.push_back(Kept {
            brace,
            bytes: chunk.clone(),
        });
        Ok(true)
    }

    /// Whether chunks are kept unlexed.
    pub(super) fn has_deferred(&self) -> bool {
        self.deferred.as_ref().is_some_and(|d| !d.is_empty())
    }

    /// Lexes the chunks kept, in order, and lets them go: the scanner is then where the
    /// lexer is after them.
    pub(super) fn catch_up(&mut self) -> Result<(), TemplateError> {
        while self.has_deferred() {
            self.lex_oldest()?;
        }
        Ok(())
    }

    /// Lexes the oldest chunk kept and lets it go.
    fn lex_oldest(&mut self) -> Result<(), TemplateError> {
        if let Some(chunk) = self.deferred.as_mut().and_then(|d| d.pop()) {
            // Kept chunks cannot reach the resolver, and none ends with a `{` held back.
            let through = self.lex_now(&chunk)?;
            debug_assert_eq!(through, Some(chunk.len()));
        }
        Ok(())
    }

    /// At the body's last chunk `end` (empty when it has ended without one): when no template
    /// nor escaped brace is in it, the chunks kept are passed as bytes after the last
    /// template, `end` with them, and the body is finished into `out` (returns true).
    /// Otherwise the kept chunks are lexed and `end` must be fed as usual (false).
    pub(super) fn end_deferred(
        &mut self,
        end: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, TemplateError> {
        if !self.has_deferred() {
            return Ok(false);
        }
        let may_resolve = self.may_resolve(end);
        let Some(kept) = &mut self.deferred else {
            return Ok(false);
        };
        let mut braces = kept.braces.clone();
        if may_resolve || braces.find(end).is_some() {
            self.catch_up()?;
            return Ok(false);
        }
        if let Some(balance) = &mut kept.balance {
            let _ = balance.over(end);
        }
        self.escapes = braces;
        self.tail = kept.balance;
        kept.clear();
        out.extend_from_slice(end);
        self.finish(out)?;
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::kept::{BODY_LIMIT, COUNTED_AT_LEAST};
    use super::super::tests::resolver;
    use super::*;
    use proptest::prelude::*;

    /// Feeds `chunks` as the proxy streams a body: each chunk that can be deferred is
    /// (when `defer`, with a chunk's trailing `{` held back for the next as the proxy
    /// holds it), else lexed, else fed; the last one with `feed_last`, or `finish` after an
    /// empty end. Returns what the target receives and the count, or the error.
    fn stream(
        chunks: &[&[u8]],
        defer: bool,
        limit: usize,
        end_empty: bool,
    ) -> Result<(Vec<u8>, usize), TemplateError> {
        let mut s = Scanner::new();
        let kept = s.deferred.get_or_insert_default();
        (kept.limit, kept.min, kept.floor) = (limit, 1, 1);
        let mut out = Vec::new();
        let mut count = 0;
        let (end, init) = chunks
            .split_last()
            .map_or((&b""[..], &[][..]), |(e, i)| (*e, i));
        let init_end = if end_empty { chunks } else { init };
        let joined = |brace: bool, chunk: Bytes| {
            if brace {
                Scanner::after_brace(&chunk)
            } else {
                chunk
            }
        };
        let mut brace = false;
        for chunk in init_end {
            let held = std::mem::take(&mut brace);
            let mut bytes = Bytes::copy_from_slice(chunk);
            brace = defer && Scanner::hold_back_brace(held, &mut bytes);
            if defer && s.defer(held, &bytes)? {
                out.extend_from_slice(&joined(held, bytes));
                continue;
            }
            let chunk = joined(held, bytes);
            match s.lex(&chunk)? {
                Some(through) => out.extend_from_slice(&chunk[..through]),
                None => count += s.feed(&chunk, &mut out, &mut resolver)?,
            }
        }
        if end_empty && brace {
            count += s.feed_last(b"{", &mut out, &mut resolver)?;
        } else if end_empty {
            s.finish(&mut out)?;
        } else {
            let end = joined(brace, Bytes::copy_from_slice(end));
            count += s.feed_last(&end, &mut out, &mut resolver)?;
        }
        // The scanner is reset: it lets its chunks go.
        assert!(!s.has_deferred());
        Ok((out, count))
    }

    /// Cuts `body` at `cuts`.
    fn cut<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        at.extend([0, body.len()]);
        at.sort_unstable();
        at.windows(2).map(|w| &body[w[0]..w[1]]).collect()
    }

    const T: &str = super::super::tests::PAN_NUMBER;

    fn agree(body: &str, cuts: &[usize], limit: usize) -> Result<(Vec<u8>, usize), TemplateError> {
        let chunks = cut(body.as_bytes(), cuts);
        let mut outcomes = Vec::new();
        for end_empty in [false, true] {
            let fed = stream(&chunks, false, limit, end_empty);
            let deferred = stream(&chunks, true, limit, end_empty);
            assert_eq!(deferred, fed, "{body} cut at {cuts:?}, limit {limit}");
            outcomes.push(fed);
        }
        outcomes.swap_remove(0)
    }

    #[test]
    fn a_body_after_its_templates_is_sent_unlexed_and_ends_checked() {
        let items = format!("[{}]", vec![r#"{"sku":"xxxxxxxx"}"#; 40].join(","));
        let body = format!(r#"{{"card":"{T}","items":{items}}}"#);
        let cuts: Vec<usize> = (1..40).map(|k| k * 23).collect();
        let (out, count) = agree(&body, &cuts, BODY_LIMIT).unwrap();
        assert_eq!(count, 1);
        assert!(String::from_utf8(out)
            .unwrap()
            .starts_with(r#"{"card":"1:pan:number""#));
        // Unfinished after a substitution: refused at the end.
        let cut_short = &body[..body.len() - 2];
        let err = agree(cut_short, &cuts, BODY_LIMIT).unwrap_err();
        assert_eq!(err.field, "$");
        // A template, a key with a template, an escaped brace after many plain chunks: each
        // is found where it is, with its path, and so with a small limit.
        for (late, refused) in [
            (format!(r#""late":"{T}""#), false),
            (format!(r#""k{T}":1"#), true),
            (r#""esc":"a\u007b""#.to_string(), true),
            (r#""esc":"a\\u007b""#.to_string(), false),
        ] {
            let body = format!(r#"{{"card":"{T}","items":{items},{late}}}"#);
            for limit in [BODY_LIMIT, 100, 0] {
                let got = agree(&body, &cuts, limit);
                assert_eq!(got.is_err(), refused, "{body}: {got:?}");
            }
        }
    }

    #[test]
    fn a_held_brace_goes_on_with_the_next_piece() {
        // Cut after every `{`: each is held back, the piece after it is kept with it unless
        // it starts with another `{` (a template cut in its `{{`), and the pieces kept after
        // a held `{` are lexed joined to it when a later template needs the lexer's state.
        let body = format!(r#"{{"card":"{T}","a":[{{"b":1}},{{"c":"{T}"}}],"d":{{}}}}"#);
        let cuts: Vec<usize> = body.match_indices('{').map(|(i, _)| i + 1).collect();
        for limit in [BODY_LIMIT, 3, 0] {
            let (out, count) = agree(&body, &cuts, limit).unwrap();
            assert_eq!(count, 2);
            assert!(String::from_utf8(out).unwrap().ends_with(r#""}],"d":{}}"#));
        }
        // Which `{` is held back: a piece's last, unless the piece is that `{` alone with
        // none held before it.
        for (brace, piece, held, left) in [
            (false, "ab{", true, "ab"),
            (false, "{", false, "{"),
            (true, "{", true, ""),
            (true, "ab", false, "ab"),
        ] {
            let mut chunk = Bytes::from(piece);
            assert_eq!(Scanner::hold_back_brace(brace, &mut chunk), held, "{piece}");
            assert_eq!(chunk, left);
        }
        // A piece after a held `{` counts the `{`, and one that starts with `{` is not kept.
        let mut s = Scanner::new();
        s.deferred.get_or_insert_default().floor = 1;
        let text = format!(r#""x":"{}"}}"#, "y".repeat(5_000));
        let piece = Bytes::from(text.clone());
        assert!(s.defer(true, &piece).unwrap());
        assert_eq!(s.deferred.as_ref().map(|d| d.bytes), Some(piece.len() + 1));
        assert!(!s.defer(true, &Bytes::from(format!("{{{text}"))).unwrap());
        // Lexed, the kept piece is the `{` and the piece: the document is closed after it.
        s.catch_up().unwrap();
        let mut out = Vec::new();
        s.finish(&mut out).unwrap();
    }

    #[test]
    fn keeping_is_counted_and_let_go() {
        // Other tests run beside this one: only this scanner's share is checked.
        let long = |text: &str| Bytes::from(format!(r#","x":"{}"{text}"#, "y".repeat(5_000)));
        let piece = long("");
        let mut s = Scanner::new();
        // A short piece is lexed at once.
        assert!(!s.defer(false, &Bytes::from_static(b"[1,22")).unwrap());
        assert_eq!(s.lex(b"[1,22").unwrap(), Some(5));
        assert!(s.defer(false, &piece).unwrap());
        assert!(s.defer(false, &piece).unwrap());
        // Each piece counts at least a frame's worth.
        let kept = |s: &Scanner| s.deferred.as_ref().map_or(0, |d| d.bytes);
        assert_eq!(kept(&s), 2 * COUNTED_AT_LEAST);
        let copy = s.clone();
        assert_eq!(kept(&copy), kept(&s));
        drop(copy);
        // A `{` at an end, or a `{{`, is not kept.
        assert!(!s.defer(false, &long(",{")).unwrap());
        assert!(!s.defer(false, &long(r#","b":"{{""#)).unwrap());
        // Over the body's limit, the oldest pieces are lexed to make room.
        if let Some(d) = &mut s.deferred {
            d.limit = COUNTED_AT_LEAST;
        }
        assert!(s.defer(false, &piece).unwrap());
        assert_eq!(kept(&s), COUNTED_AT_LEAST);
        // A piece over the limit by itself is not kept, and lexing it lexes the kept first.
        if let Some(d) = &mut s.deferred {
            d.limit = 4;
        }
        assert!(!s.defer(false, &piece).unwrap());
        assert!(s.has_deferred());
        assert_eq!(s.lex(&piece).unwrap(), Some(piece.len()));
        assert!(!s.has_deferred());
        assert_eq!(kept(&s), 0);
        let mut out = Vec::new();
        s.finish(&mut out).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Deferring whatever may be deferred gives what feeding every chunk gives: the same
        /// bytes to the target, count and error, whatever the limit.
        #[test]
        fn deferring_matches_feeding(
            doc in super::super::skim::tests::document(),
            late in prop_oneof![
                Just(String::new()),
                Just(format!(r#","t":"{T}""#)),
                Just(r#","e":"\u007B""#.to_string()),
                Just(format!(r#","{T}":1"#)),
                Just("{".to_string()),
            ],
            cuts in prop::collection::vec(any::<usize>(), 0..12),
            limit in prop_oneof![Just(BODY_LIMIT), 0usize..64],
        ) {
            let body = format!(r#"{{"first":"{T}","doc":[{doc}]{late}}}"#);
            let chunks = cut(body.as_bytes(), &cuts);
            for end_empty in [false, true] {
                let fed = stream(&chunks, false, limit, end_empty);
                let deferred = stream(&chunks, true, limit, end_empty);
                prop_assert_eq!(deferred, fed, "{}", body);
            }
            // Without a template before: nothing substituted, no nesting followed.
            let body = format!("[{doc}]{late}");
            let chunks = cut(body.as_bytes(), &cuts);
            let fed = stream(&chunks, false, limit, false);
            let deferred = stream(&chunks, true, limit, false);
            prop_assert_eq!(deferred, fed, "{}", body);
        }
    }
}
