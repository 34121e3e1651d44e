//! The chunks of a streamed body that a JSON scanner has sent on without lexing them
//! ([`Deferred`], see [`super::deferred`] for when and why), and what they count against the
//! limits: at most [`BODY_LIMIT`] bytes a body and [`PROCESS_LIMIT`] bytes for all bodies
//! together. The chunks are the caller's pieces, kept by reference (not copied); only pieces of
//! [`MIN_KEPT`] bytes or more are kept, and each counts as at least [`COUNTED_AT_LEAST`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use super::balance::Balance;
use super::escape::EscapedBraces;

/// The most bytes one body keeps unlexed: a body of up to about this much after its
/// templates is never lexed there.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// The most bytes all bodies keep unlexed together: under load beyond it, chunks are lexed as
/// they come, as a body larger than [`BODY_LIMIT`] has its older chunks lexed.
pub const PROCESS_LIMIT: usize = 64 * 1024 * 1024;

/// The shortest piece kept: a shorter one is lexed at once (it costs little to lex).
pub const MIN_KEPT: usize = 4 * 1024;

/// What a kept piece counts against the limits at least: an HTTP/2 frame's largest default
/// size.
pub const COUNTED_AT_LEAST: usize = 16 * 1024;

/// Bytes kept by every [`Deferred`] in the process, as counted ([`Deferred::counted`]).
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// The chunks a scanner has sent on without lexing them, oldest first; the scanner's own
/// state is the lexer's before the first of them.
#[derive(Debug)]
pub(super) struct Deferred {
    pub(super) chunks: VecDeque<Kept>,
    /// What they count ([`Deferred::counted`]), also counted in [`KEPT`].
    pub(super) bytes: usize,
    /// The most bytes kept ([`BODY_LIMIT`]; less in tests).
    pub(super) limit: usize,
    /// The shortest piece kept ([`MIN_KEPT`]; less in tests).
    pub(super) min: usize,
    /// What a piece counts at least ([`COUNTED_AT_LEAST`]; less in tests).
    pub(super) floor: usize,
    /// The nesting over the chunks from the scanner's state, where a template was substituted
    /// before them (the body must then end complete).
    pub(super) balance: Option<Balance>,
    /// The search for escaped braces, from the scanner's, over the chunks.
    pub(super) braces: EscapedBraces,
}

/// A chunk kept, after a `{` held back from the chunk before it when `brace`.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    pub(super) brace: bool,
    pub(super) bytes: Bytes,
}

impl Kept {
    fn len(&self) -> usize {
        self.bytes.len() + usize::from(self.brace)
    }

    /// The chunk as the lexer reads it: its `{` and its bytes joined (copied) when it has
    /// one.
    fn joined(self) -> Bytes {
        if self.brace {
            after_brace(&self.bytes)
        } else {
            self.bytes
        }
    }
}

impl Default for Deferred {
    fn default() -> Self {
        Deferred {
            chunks: VecDeque::new(),
            bytes: 0,
            limit: BODY_LIMIT,
            min: MIN_KEPT,
            floor: COUNTED_AT_LEAST,
            balance: None,
            braces: EscapedBraces::default(),
        }
    }
}

impl Clone for Deferred {
    /// A copy keeps the same chunks, and counts them again.
    fn clone(&self) -> Self {
        KEPT.fetch_add(self.bytes, Ordering::Relaxed);
        Deferred {
            chunks: self.chunks.clone(),
            bytes: self.bytes,
            limit: self.limit,
            min: self.min,
            floor: self.floor,
            balance: self.balance,
            braces: self.braces.clone(),
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        KEPT.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl Deferred {
    pub(super) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Lets every chunk go.
    pub(super) fn clear(&mut self) {
        KEPT.fetch_sub(self.bytes, Ordering::Relaxed);
        self.chunks.clear();
        self.bytes = 0;
        self.balance = None;
    }

    /// What a piece of `len` bytes counts against the limits.
    pub(super) fn counted(&self, len: usize) -> usize {
        len.max(self.floor)
    }

    /// The oldest chunk, let go.
    pub(super) fn pop(&mut self) -> Option<Bytes> {
        let chunk = self.chunks.pop_front()?;
        let counted = self.counted(chunk.len());
        self.bytes -= counted;
        KEPT.fetch_sub(counted, Ordering::Relaxed);
        Some(chunk.joined())
    }

    /// Counts `len` more bytes in the process's keeping, if they fit.
    pub(super) fn reserve(len: usize) -> bool {
        KEPT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |kept| {
            kept.checked_add(len).filter(|&k| k <= PROCESS_LIMIT)
        })
        .is_ok()
    }
}

/// A `{` held back, then `chunk`: the two joined (copied), as the lexer must read them.
pub(super) fn after_brace(chunk: &[u8]) -> Bytes {
    let mut joined = Vec::with_capacity(chunk.len() + 1);
    joined.push(b'{');
    joined.extend_from_slice(chunk);
    Bytes::from(joined)
}
