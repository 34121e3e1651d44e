//! The JSON path of the field being scanned (`card.number`, `items[0].pan`, `["a b"].c`, `$`),
//! kept as a stack of open containers for
//! [`TemplateError::field`](crate::template::TemplateError::field).
//!
//! Bounded whatever the body: [`MAX_PATH_DEPTH`] levels of at most [`MAX_KEY_LEN`] bytes of key
//! each, and a bit per container up to [`MAX_KIND_DEPTH`] levels. Deeper containers are still
//! counted: their path shows as `…`, and beyond [`MAX_KIND_DEPTH`] levels every container is
//! taken as an array, so every string there is a value.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::template::limits::{MAX_KEY_LEN, MAX_KIND_DEPTH, MAX_PATH_DEPTH};

const KIND_WORDS: usize = MAX_KIND_DEPTH / 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Object,
    Array,
}

/// One level of the path: the container and where in it the scanner is.
///
/// Keys are copied lazily: while a key lies in the chunk being scanned it is only a range of
/// that chunk (`pending`), copied into `Path::keys` when the chunk ends. Most keys are
/// replaced by the next member's key within the same chunk and are never copied at all.
#[derive(Debug, Clone, Copy)]
struct Frame {
    kind: Kind,
    /// Index of the current element (arrays only).
    index: u64,
    /// A key has been seen in this object.
    has_key: bool,
    /// The key was longer than [`MAX_KEY_LEN`].
    key_cut: bool,
    /// `keys[key_start..key_end]` holds the key, or its start when `pending` too.
    stored: bool,
    key_start: usize,
    key_end: usize,
    /// The key (or its rest) is `chunk[pend_from..pend_to]` of the chunk being scanned.
    pending: bool,
    pend_from: usize,
    pend_to: usize,
}

impl Frame {
    fn new(kind: Kind) -> Self {
        Frame {
            kind,
            index: 0,
            has_key: false,
            key_cut: false,
            stored: false,
            key_start: 0,
            key_end: 0,
            pending: false,
            pend_from: 0,
            pend_to: 0,
        }
    }
}

/// The open containers, outermost first. Positions given to its methods are in the chunk being
/// scanned, which [`Path::store_keys`] must see before the next chunk comes.
#[derive(Debug, Clone)]
pub(super) struct Path {
    /// Open containers, counted however deep.
    depth: usize,
    /// Kind of the innermost container, `None` at the top level (cached from `kinds`).
    current: Option<Kind>,
    /// Bit `d` set: the container at depth `d` is an array.
    kinds: [u64; KIND_WORDS],
    /// Path of the current field, up to [`MAX_PATH_DEPTH`] levels.
    frames: Vec<Frame>,
    /// Stored keys of `frames`, back to back.
    keys: Vec<u8>,
}

impl Path {
    /// The top level.
    pub(super) fn new() -> Self {
        Path {
            depth: 0,
            current: None,
            kinds: [0; KIND_WORDS],
            frames: Vec::new(),
            keys: Vec::new(),
        }
    }

    /// Back to the top level, keeping allocations.
    pub(super) fn clear(&mut self) {
        self.depth = 0;
        self.current = None;
        self.kinds = [0; KIND_WORDS];
        self.frames.clear();
        self.keys.clear();
    }

    /// Open containers, counted however deep.
    #[inline]
    pub(super) fn depth(&self) -> usize {
        self.depth
    }

    /// Kind of the innermost container, `None` at the top level.
    #[inline]
    pub(super) fn current(&self) -> Option<Kind> {
        self.current
    }

    /// Kind of the container at depth `d`. Beyond [`MAX_KIND_DEPTH`] it is unknown and taken
    /// as an array, so strings there count as values.
    fn kind_at(&self, d: usize) -> Kind {
        let word = self.kinds.get(d / 64).copied().unwrap_or(u64::MAX);
        if word >> (d % 64) & 1 == 1 {
            Kind::Array
        } else {
            Kind::Object
        }
    }

    /// The innermost frame, when the innermost container has one.
    #[inline]
    fn top_frame(&mut self) -> Option<&mut Frame> {
        if self.depth > MAX_PATH_DEPTH {
            return None;
        }
        self.frames.last_mut()
    }

    /// A container opens.
    #[inline]
    pub(super) fn push(&mut self, kind: Kind) {
        if self.depth < MAX_PATH_DEPTH {
            self.frames.push(Frame::new(kind));
        }
        let d = self.depth;
        if let Some(word) = self.kinds.get_mut(d / 64) {
            let bit = 1u64 << (d % 64);
            match kind {
                Kind::Array => *word |= bit,
                Kind::Object => *word &= !bit,
            }
        }
        self.depth = self.depth.saturating_add(1);
        self.current = Some(self.kind_at(d));
    }

    /// The innermost container closes.
    #[inline]
    pub(super) fn pop(&mut self) {
        // A stray closer at the top level is passed through and otherwise ignored.
        let Some(depth) = self.depth.checked_sub(1) else {
            return;
        };
        self.depth = depth;
        // Kind bits above the depth are kept clear, so that a container opened and closed
        // without being visited (`Scanner::walk`) leaves the path as visiting it would.
        if let Some(word) = self.kinds.get_mut(depth / 64) {
            *word &= !(1u64 << (depth % 64));
        }
        self.current = depth.checked_sub(1).map(|d| self.kind_at(d));
        if self.frames.len() > depth {
            if let Some(f) = self.frames.pop() {
                if f.stored {
                    self.keys.truncate(f.key_start);
                }
            }
        }
    }

    /// The innermost array moves `n` elements on.
    #[inline]
    pub(super) fn advance(&mut self, n: u64) {
        if let Some(f) = self.top_frame() {
            f.index = f.index.saturating_add(n);
        }
    }

    /// A key opens in the innermost object; its text starts at `at`.
    #[inline]
    pub(super) fn open_key(&mut self, at: usize) {
        if let Some(f) = self.top_frame() {
            let forget = f.stored.then_some(f.key_start);
            f.stored = false;
            f.has_key = true;
            f.key_cut = false;
            f.pending = true;
            f.pend_from = at;
            f.pend_to = at;
            if let Some(start) = forget {
                self.keys.truncate(start);
            }
        }
    }

    /// The key being read continues from the previous chunk into this one.
    pub(super) fn continue_key(&mut self) {
        if let Some(f) = self.top_frame() {
            f.pending = true;
            f.pend_from = 0;
            f.pend_to = 0;
        }
    }

    /// The key being read runs up to `at`: its closing quote, or the end of the chunk.
    #[inline]
    pub(super) fn end_key(&mut self, at: usize) {
        if let Some(f) = self.top_frame() {
            f.pend_to = at;
        }
    }

    /// Copies the keys that lie in `chunk` into `keys`, up to [`MAX_KEY_LEN`] each, before the
    /// chunk goes away. Pending keys are those of the innermost frames, so appending in order
    /// keeps `keys` in frame order.
    pub(super) fn store_keys(&mut self, chunk: &[u8]) {
        for f in self.frames.iter_mut().filter(|f| f.pending) {
            if !f.stored {
                f.stored = true;
                f.key_start = self.keys.len();
                f.key_end = f.key_start;
            }
            self.keys.truncate(f.key_end);
            let part = chunk.get(f.pend_from..f.pend_to).unwrap_or_default();
            let room = MAX_KEY_LEN.saturating_sub(f.key_end - f.key_start);
            let take = part.len().min(room);
            f.key_cut |= take < part.len();
            self.keys
                .extend_from_slice(part.get(..take).unwrap_or_default());
            f.key_end = self.keys.len();
            f.pending = false;
        }
    }

    /// The key of `f` as written, at most [`MAX_KEY_LEN`] bytes, and whether it was cut.
    fn key<'a>(&'a self, f: &Frame, chunk: &'a [u8]) -> (Cow<'a, [u8]>, bool) {
        let stored = if f.stored {
            self.keys.get(f.key_start..f.key_end).unwrap_or_default()
        } else {
            &[]
        };
        if !f.pending {
            return (stored.into(), f.key_cut);
        }
        let part = chunk.get(f.pend_from..f.pend_to).unwrap_or_default();
        let room = MAX_KEY_LEN.saturating_sub(stored.len());
        let take = part.len().min(room);
        let mut key = stored.to_vec();
        key.extend_from_slice(part.get(..take).unwrap_or_default());
        (key.into(), f.key_cut || take < part.len())
    }

    /// The path as shown: `card.number`, `items[0].pan`, `["a b"].c`, `$`; `chunk` is the
    /// chunk being scanned, where pending keys lie.
    pub(super) fn render(&self, chunk: &[u8]) -> String {
        let mut path = String::new();
        for f in &self.frames {
            match f.kind {
                Kind::Array => {
                    let _ = write!(path, "[{}]", f.index);
                }
                Kind::Object if f.has_key => {
                    let (key, cut) = self.key(f, chunk);
                    let plain = !cut
                        && !key.is_empty()
                        && key.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
                    if plain {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(&String::from_utf8_lossy(&key));
                    } else {
                        // The key as written, so its escapes stay valid inside the quotes; a
                        // cut key loses a dangling backslash.
                        let trailing = key.iter().rev().take_while(|&&b| b == b'\\').count();
                        let key = if trailing % 2 == 1 {
                            key.get(..key.len() - 1).unwrap_or_default()
                        } else {
                            &key
                        };
                        path.push_str("[\"");
                        path.push_str(&String::from_utf8_lossy(key));
                        if cut {
                            path.push('…');
                        }
                        path.push_str("\"]");
                    }
                }
                // An object member without a key: malformed input, nothing to show.
                Kind::Object => {}
            }
        }
        if self.depth > MAX_PATH_DEPTH {
            path.push('…');
        }
        if path.is_empty() {
            path.push('$');
        }
        path
    }
}
