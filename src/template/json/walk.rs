//! The walk: a chunk in which no template can start (no `{{` in it, and no template, `{` or
//! escape of one carried into it) lexed from bit masks, visiting only the bytes that change
//! the lexer's state where the chunk ends.
//!
//! Such chunks are most of a large body: its templates come early and the rest only has to
//! be followed, so that a template further on is found where it is and named by its path.
//! The skim ([`super::skim`]) must stop at every `{` in a string value, as it may start a
//! template, and leaves long strings to the byte lexer; here neither can happen.
//!
//! A chunk is walked a window of [`WINDOW`] blocks of 64 bytes at a time, in two passes:
//!
//! 1. Each block is classified once into bit masks ([`Marks`]: by AVX2 where the CPU has it,
//!    else 16 bytes at a time through `wide`, `template::simd`); the escaped bytes follow
//!    from the backslashes ([`escaped`]) and a prefix XOR of the quotes that are not escaped
//!    marks the bytes inside strings (one carry-less multiplication with AVX2). The quotes and
//!    the tokens between strings are kept for the second pass, and the brackets and braces
//!    between strings are matched on a small stack: where each container closes is noted by
//!    where it opened, and what is left on the stack are the containers that stay open past
//!    the window.
//! 2. The lexer's own steps ([`Scanner::structural`], [`Scanner::close_key`]) run at the kept
//!    bytes in order, except inside a container that opens and closes within the window: it
//!    is passed over whole, to its noted close. Opening and closing it leaves the
//!    path as it was, and after it no key is expected, which is all the byte lexer would have
//!    left of it. An array of a thousand objects costs the lexer a step at each object's start
//!    and at each comma.
//!
//! A block with a backslash between tokens (it escapes nothing there, while the masks assume
//! it does) ends the walk: the byte lexer goes on from its start. The state after the walk is
//! the byte lexer's, exactly (the skim's tests compare the two after every chunk, walked and
//! lexed).

use super::escape::escaped;
use super::path::Kind;
use super::{Mode, Scanner};
use crate::template::bits::{below, BLOCK};
use crate::template::simd::{self, BlockJob, Marks, Masks, Xor};

/// Blocks in a window (4 KiB of the chunk).
const WINDOW: usize = 64;
/// Containers that open in a window and stay open past it, as kept; one more, and all are
/// forgotten: every container opening up to there is visited (which costs time, never
/// correctness).
const OPEN_KEPT: usize = 64;

/// Whether `b` opens a container.
#[inline]
fn opens(b: u8) -> bool {
    b | 0x20 == b'{'
}

thread_local! {
    /// The room of every walk on a thread (about 9 KiB), made once: a walk reads no entry of
    /// its arrays that it has not written in the same window, so they are never cleared.
    static ROOM: std::cell::RefCell<Window> = std::cell::RefCell::new(Window::new(false, 0));
}

/// Positions in a window, and one more: where a closer with nothing open in the window
/// (it closes a container opened before) is matched, and never read.
const POSITIONS: usize = WINDOW * BLOCK + 1;

/// What the first pass keeps of a window for the second, and carries to the next window.
struct Window {
    /// Where the window starts in the chunk.
    base: usize,
    /// Blocks classified: up to [`WINDOW`], fewer at the chunk's end or before a block with a
    /// backslash between tokens.
    blocks: usize,
    /// The window ends before a block with a backslash between tokens.
    stopped: bool,
    /// Per block: the quotes not escaped, and the tokens between strings.
    visit: [u64; WINDOW],
    /// By the position of each container that opens and closes within the window, where it
    /// closes (other entries mean nothing).
    close_at: [u16; POSITIONS],
    /// Openings (positions in the window) of the containers open so far that stay open past
    /// it, in order, and a slot more, written at every bracket.
    open: [u16; OPEN_KEPT + 1],
    open_len: usize,
    /// Every container opening before this position in the window is visited (the stack
    /// was full there).
    visit_before: usize,
    /// Inside a string where the window starts, and after the first pass, where it ends.
    in_string: bool,
    /// Whether the byte after the window is escaped.
    carry: u64,
    /// Whether the window's last byte is escaped.
    last_escaped: bool,
}

impl Window {
    /// Before the first window of a chunk: inside a string or not, and whether its first
    /// byte is escaped (`carry`, 0 or 1).
    fn new(in_string: bool, carry: u64) -> Self {
        Window {
            base: 0,
            blocks: 0,
            stopped: false,
            visit: [0; WINDOW],
            close_at: [0; POSITIONS],
            open: [0; OPEN_KEPT + 1],
            open_len: 0,
            visit_before: 0,
            in_string,
            carry,
            last_escaped: false,
        }
    }

    /// The first pass over the window at `base`, classifying blocks with `marks` and finding
    /// the bytes inside strings with `xor` (a prefix XOR).
    #[inline(always)]
    fn classify(
        &mut self,
        chunk: &[u8],
        base: usize,
        marks: impl Fn(&[u8; BLOCK]) -> Marks,
        xor: impl Fn(u64) -> u64,
    ) {
        self.base = base;
        self.blocks = 0;
        self.stopped = false;
        self.open_len = 0;
        self.visit_before = 0;
        let mut in_string = self.in_string;
        let mut at = base;
        while self.blocks < WINDOW && at < chunk.len() {
            let rest = chunk.get(at..).unwrap_or_default();
            // The last bytes of the chunk are padded with zeros, which are never marked.
            let mut padded = [0u8; BLOCK];
            let (bytes, n) = match rest.first_chunk::<BLOCK>() {
                Some(bytes) => (bytes, BLOCK),
                None => {
                    padded[..rest.len()].copy_from_slice(rest);
                    (&padded, rest.len())
                }
            };
            // Kept opaque: LLVM otherwise sees through the AVX2 masks into the bit loops
            // below and extracts them byte by byte (several times the instructions).
            let m = std::hint::black_box(marks(bytes));
            let (escaped, carry_out) = if m.backslash | self.carry == 0 {
                (0, 0)
            } else {
                escaped(m.backslash, self.carry)
            };
            let quote = m.quote & !escaped;
            // From an opening quote, inclusive, to its closing quote, exclusive.
            let inside = xor(quote) ^ u64::from(in_string).wrapping_neg();
            if m.backslash & !inside != 0 {
                self.stopped = true;
                break;
            }
            let nest = m.nest & !inside;
            let j = self.blocks;
            if let Some(v) = self.visit.get_mut(j) {
                *v = nest | (m.punct & !inside) | quote;
            }
            self.match_nesting(nest, m.open, j * BLOCK);
            in_string = inside >> 63 == 1;
            self.carry = if n == BLOCK {
                carry_out
            } else {
                escaped >> n & 1
            };
            self.last_escaped = escaped >> (n - 1) & 1 == 1;
            self.blocks += 1;
            at += n;
        }
        self.in_string = in_string;
    }

    /// The first pass, by AVX2 and PCLMULQDQ where the CPU has them.
    fn classify_fastest(&mut self, chunk: &[u8], base: usize) {
        simd::by_marks(self, chunk, base);
    }

    /// Matches the brackets and braces of a block (`nest`, the openers among them `open`;
    /// the block at `at` in the window) on the stack of containers open, noting where each
    /// container closes by where it opened (`close_at`). Without branches on the brackets,
    /// which a body's shapes make hard to predict: every bracket writes the stack's spare
    /// slot (an opener's position, kept by moving the top over it) and `close_at` at the
    /// top's position (a closer's, kept by popping; an opener's is overwritten when the
    /// container closes, or never read if it stays open).
    #[inline(always)]
    fn match_nesting(&mut self, mut nest: u64, open: u64, at: usize) {
        while nest != 0 {
            let k = nest.trailing_zeros() as usize;
            nest &= nest - 1;
            let pos = at + k;
            let opener = open >> k & 1 == 1;
            let top = match self.open_len.checked_sub(1) {
                Some(t) => self.open.get(t).map_or(POSITIONS - 1, |&o| usize::from(o)),
                None => POSITIONS - 1,
            };
            let pos16 = u16::try_from(pos).unwrap_or(u16::MAX);
            if let Some(slot) = self.open.get_mut(self.open_len) {
                *slot = pos16;
            }
            if let Some(close) = self.close_at.get_mut(top) {
                *close = pos16;
            }
            self.open_len = if opener {
                self.open_len + 1
            } else {
                self.open_len.saturating_sub(1)
            };
            if self.open_len > OPEN_KEPT {
                // All are forgotten: everything opened up to here is visited.
                self.visit_before = pos + 1;
                self.open_len = 0;
            }
        }
    }
}

/// [`Window::classify`] as a loop over blocks, for [`simd::by_marks`] to run with the fastest
/// classifier.
impl BlockJob<Marks> for &mut Window {
    type Output = ();

    #[inline(always)]
    fn run(self, chunk: &[u8], base: usize, masks: impl Masks<Marks>, xor: impl Xor) {
        self.classify(chunk, base, masks, xor);
    }
}

impl Scanner {
    /// Lexes `chunk`, in which no template can start (see the module's text), and returns
    /// where the byte lexer must take over: the end of the chunk when the walk got there,
    /// else the start of the first block with a backslash between tokens. The scanner's state
    /// is the byte lexer's at the returned position.
    pub(super) fn walk(&mut self, chunk: &[u8]) -> usize {
        ROOM.with_borrow_mut(|window| self.walk_in(chunk, window))
    }

    /// [`Scanner::walk`] with `window`'s room.
    fn walk_in(&mut self, chunk: &[u8], window: &mut Window) -> usize {
        let len = chunk.len();
        let in_string = self.mode != Mode::Structure;
        window.carry = u64::from(in_string && self.escape);
        window.last_escaped = false;
        let mut base = 0;
        while base < len {
            window.in_string = self.mode != Mode::Structure;
            window.classify_fastest(chunk, base);
            self.visit(chunk, window);
            base += window.blocks * BLOCK;
            if window.stopped {
                self.escape = self.mode != Mode::Structure && window.carry == 1;
                return base;
            }
        }
        self.escape = self.mode != Mode::Structure && window.carry == 1;
        // A `{` that ends the chunk in a string is carried over as the byte lexer carries it:
        // with the next chunk's first byte it may start a template (in a key, be refused).
        if chunk.last() == Some(&b'{') && !window.last_escaped {
            match self.mode {
                Mode::Value => self.braces.hold(),
                Mode::Key => self.key_brace = true,
                Mode::Structure | Mode::Template => {}
            }
        }
        len
    }

    /// The second pass over a window: the lexer's steps at the bytes kept, in order, passing
    /// over the containers that open and close within the window.
    fn visit(&mut self, chunk: &[u8], window: &Window) {
        let mut next_open = 0;
        let mut j = 0;
        let mut from = 0;
        while j < window.blocks {
            let mut bits = window.visit.get(j).copied().unwrap_or_default() & !below(from);
            let mut next = (j + 1, 0);
            while bits != 0 {
                let k = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let at = j * BLOCK + k;
                let b = chunk.get(window.base + at).copied().unwrap_or_default();
                match self.mode {
                    Mode::Structure if opens(b) => {
                        let stays = at < window.visit_before
                            || (next_open < window.open_len
                                && window.open.get(next_open).map(|&o| usize::from(o)) == Some(at));
                        if stays {
                            if at >= window.visit_before {
                                next_open += 1;
                            }
                            self.structural(b, window.base + at + 1);
                        } else {
                            // Opens and closes in the window: passed over whole.
                            let close = window.close_at.get(at).map_or(0, |&c| usize::from(c));
                            let (jc, kc) = (close / BLOCK, close % BLOCK);
                            self.expect_key = false;
                            next = if kc + 1 < BLOCK {
                                (jc, kc + 1)
                            } else {
                                (jc + 1, 0)
                            };
                            break;
                        }
                    }
                    // The commas of an array, most of what is visited in a long one.
                    Mode::Structure if b == b',' && self.path.current() == Some(Kind::Array) => {
                        self.path.advance(1);
                    }
                    // A quote opens a key or a value; the tokens change the path.
                    Mode::Structure => {
                        self.structural(b, window.base + at + 1);
                    }
                    // Inside a string only a closing quote is visited.
                    Mode::Key => {
                        self.mode = Mode::Structure;
                        self.close_key(window.base + at);
                    }
                    Mode::Value | Mode::Template => self.mode = Mode::Structure,
                }
            }
            (j, from) = next;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::skim::tests::skim_and_bytes;
    use super::super::tests::PAN_NUMBER;
    use super::{simd, BlockJob, Marks, Masks, Window, Xor, BLOCK};

    /// What the first pass keeps of each window of a body, by the classifier and prefix XOR
    /// it is run with.
    struct Kept;

    /// What a window keeps for the second pass and the next window.
    type Windows = Vec<(usize, [u64; 64], Vec<u16>, Vec<u16>, usize, u64, bool)>;

    impl BlockJob<Marks> for Kept {
        type Output = Windows;

        fn run(self, body: &[u8], _: usize, masks: impl Masks<Marks>, xor: impl Xor) -> Windows {
            let mut w = Window::new(false, 0);
            let mut windows = Vec::new();
            let mut base = 0;
            while base < body.len() {
                w.classify(body, base, &masks, &xor);
                let open: Vec<u16> = w.open.iter().take(w.open_len).copied().collect();
                windows.push((
                    w.blocks,
                    w.visit,
                    w.close_at.to_vec(),
                    open,
                    w.visit_before,
                    w.carry,
                    w.last_escaped,
                ));
                assert!(w.blocks > 0);
                base += w.blocks * BLOCK;
            }
            windows
        }
    }

    /// The first pass keeps the same of a window whichever classifier runs it.
    #[test]
    fn both_classifiers_keep_the_same() {
        let sku = "x".repeat(100);
        let items: Vec<String> = (0..40)
            .map(|i| format!(r#"{{"sku":"{sku}","n":[{i},{{"q":"{{\"]"}}]}}"#))
            .collect();
        let body = format!(r#"{{"items":[{}],"end":"\\"}}"#, items.join(","));
        let each = simd::marks_each(|| Kept, body.as_bytes(), 0);
        for (n, kept) in each.iter().enumerate() {
            assert_eq!(kept, &each[0], "classifier {n}");
        }
    }

    /// Every way to cut `body` in two, and in three around each block boundary, fed and
    /// lexed, ends as the byte lexer ends (`skim_and_bytes` also compares the states after
    /// every chunk).
    fn agrees(body: &str) {
        let body = body.as_bytes();
        let mut cuts: Vec<Vec<usize>> = (0..=body.len()).map(|k| vec![k]).collect();
        for edge in (64..body.len()).step_by(64) {
            for k in 0..=body.len() {
                cuts.push(vec![edge, k]);
            }
        }
        for cut in &cuts {
            for last in [false, true] {
                for lex in [false, true] {
                    let [walked, bytes] = skim_and_bytes(body, cut, last, lex);
                    assert_eq!(walked, bytes, "cut at {cut:?}, last {last}, lex {lex}");
                }
            }
        }
    }

    /// Cuts of a body larger than a window: every 61st byte, alone and with each later one.
    fn agrees_sparsely(body: &str) {
        let body = body.as_bytes();
        let at: Vec<usize> = (0..=body.len()).step_by(61).collect();
        for (n, &a) in at.iter().enumerate() {
            for cut in std::iter::once(vec![a]).chain(at[n..].iter().map(|&b| vec![a, b])) {
                for lex in [false, true] {
                    let [walked, bytes] = skim_and_bytes(body, &cut, false, lex);
                    assert_eq!(walked, bytes, "cut at {cut:?}, lex {lex}");
                }
            }
        }
    }

    #[test]
    fn windows_of_objects() {
        let sku = "x".repeat(100);
        let items: Vec<String> = (0..60)
            .map(|i| format!(r#"{{"sku":"{sku}","n":[{i},{{"q":"{{"}}]}}"#))
            .collect();
        agrees_sparsely(&format!(
            r#"{{"card":{{"number":"{PAN_NUMBER}"}},"items":[{}]}}"#,
            items.join(",")
        ));
    }

    #[test]
    fn nesting_deeper_than_the_openings_kept() {
        let open = r#"[{"k":"#.repeat(90);
        let close = "}]".repeat(90);
        agrees(&format!(
            r#"{{"a":"{PAN_NUMBER}","b":{open}"v",[1,{{}}]{close},"c":[]}}"#
        ));
    }

    #[test]
    fn long_strings_and_small_objects() {
        let sku = "x".repeat(100);
        let items: Vec<String> = (0..6).map(|_| format!(r#"{{"sku":"{sku}"}}"#)).collect();
        agrees(&format!(
            r#"{{"card":{{"number":"{PAN_NUMBER}"}},"items":[{}]}}"#,
            items.join(",")
        ));
    }

    #[test]
    fn braces_escapes_and_keys_at_chunk_ends() {
        agrees(concat!(
            r#"{"a{b":"c{d\"{e\\{","lo{ng key with [brackets] and \"quotes\"":["#,
            r#"{"k":"{"},"\\","x\u00e9{",{"n":[1,2,{"m":"]}"}]},"{}[]:,"],"#,
            r#""deep":[[[[{"z":"{ }"}]]]],"tail":"ends with a brace {"}"#,
        ));
    }

    #[test]
    fn malformed_json_with_backslashes_between_tokens() {
        agrees(concat!(
            r#"{"a":1,\"b":"c"\,"d":[\"e",\\"f"],"g":"h"}"#,
            r#"}]stray"closers\"{"x":"y{"} \"#,
        ));
    }
}
