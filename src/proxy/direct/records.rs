//! A streamed body's chunks cut to TLS records. Over TLS every write is sealed into records of
//! at most [`TLS_RECORD`] bytes, and a piece read from a TLS caller is usually one record's
//! worth: framed as a chunk (size line, bytes, CRLF) it would leave as a full record and a
//! small one. [`RecordChunks`] holds the body's bytes back until a write can be a whole
//! number of full records, framing and all, and sends the rest at the body's end.
//!
//! A chunk's closing CRLF does not have to leave with its bytes: it leads the next write.

use bytes::Bytes;

/// The most plaintext a TLS record carries.
pub const TLS_RECORD: usize = 16 * 1024;

/// Room before the held bytes for a previous chunk's CRLF and a size line (at most 16 hex
/// digits and its CRLF).
const ROOM: usize = 2 + 16 + 2;

/// Body bytes held back for record-sized writes.
pub struct RecordChunks {
    /// `buf[..ROOM]` is room for framing; the held bytes follow.
    buf: Vec<u8>,
    /// A chunk was written without its closing CRLF: the next write starts with it.
    open: bool,
}

impl Default for RecordChunks {
    fn default() -> Self {
        RecordChunks {
            buf: vec![0; ROOM],
            open: false,
        }
    }
}

impl RecordChunks {
    /// Adds `pieces` to the held bytes.
    pub fn hold<P: AsRef<[u8]>>(&mut self, pieces: &[P]) {
        for piece in pieces {
            self.buf.extend_from_slice(piece.as_ref());
        }
    }

    /// What to write now: a whole number of full TLS records (a chunk of the held bytes that
    /// fills them, led by the previous chunk's CRLF), or nothing while less than a record is
    /// held.
    pub fn take(&mut self) -> Option<Bytes> {
        let held = self.buf.len() - ROOM;
        let lead = if self.open { 2 } else { 0 };
        let len = filling_len(held, lead)?;
        let start = self.frame(len);
        let out = Bytes::copy_from_slice(self.buf.get(start..ROOM + len).unwrap_or_default());
        self.buf.drain(ROOM..ROOM + len);
        self.open = true;
        Some(out)
    }

    /// The body's end: the previous chunk's CRLF, a chunk of whatever is held, and the last
    /// (empty) chunk.
    pub fn finish(&mut self) -> Bytes {
        let held = self.buf.len() - ROOM;
        let mut out = Vec::with_capacity(held + ROOM + 5);
        if self.open {
            out.extend_from_slice(b"\r\n");
        }
        if held > 0 {
            out.extend_from_slice(format!("{held:x}\r\n").as_bytes());
            out.extend_from_slice(self.buf.get(ROOM..).unwrap_or_default());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        self.buf.truncate(ROOM);
        self.open = false;
        out.into()
    }

    /// Writes the framing of a chunk of `len` held bytes into the room before them; returns
    /// where the write starts.
    fn frame(&mut self, len: usize) -> usize {
        let line = format!("{len:x}\r\n");
        let start = ROOM - line.len() - if self.open { 2 } else { 0 };
        let mut at = start;
        for b in self
            .open
            .then_some(&b"\r\n"[..])
            .into_iter()
            .chain([line.as_bytes()])
        {
            if let Some(room) = self.buf.get_mut(at..at + b.len()) {
                room.copy_from_slice(b);
            }
            at += b.len();
        }
        start
    }
}

/// Digits of `n` in hex.
fn hex_digits(n: usize) -> usize {
    (usize::BITS - n.leading_zeros()).div_ceil(4).max(1) as usize
}

/// The longest chunk of at most `held` bytes (at least one) whose write, `lead` bytes then
/// its size line and bytes, is a whole number of full TLS records; `None` when there is none.
fn filling_len(held: usize, lead: usize) -> Option<usize> {
    let records = (lead + ROOM + held) / TLS_RECORD;
    (1..=records).rev().find_map(|k| {
        (1..=16).find_map(|digits| {
            let len = (k * TLS_RECORD).checked_sub(lead + digits + 2)?;
            (len >= 1 && len <= held && hex_digits(len) == digits).then_some(len)
        })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes a `chunked` body, `None` if malformed or not ended.
    fn dechunk(mut wire: &[u8]) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = wire.windows(2).position(|w| w == b"\r\n")?;
            let size = usize::from_str_radix(std::str::from_utf8(&wire[..line]).ok()?, 16).ok()?;
            wire = &wire[line + 2..];
            if size == 0 {
                return (wire == b"\r\n").then_some(body);
            }
            body.extend_from_slice(wire.get(..size)?);
            if wire.get(size..size + 2)? != b"\r\n" {
                return None;
            }
            wire = &wire[size + 2..];
        }
    }

    #[test]
    fn hex_digits_counts() {
        assert_eq!(hex_digits(0), 1);
        assert_eq!(hex_digits(0xf), 1);
        assert_eq!(hex_digits(0x10), 2);
        assert_eq!(hex_digits(0x3ffa), 4);
        assert_eq!(hex_digits(0x10000), 5);
    }

    #[test]
    fn record_sized_pieces_leave_as_full_records() {
        let mut chunks = RecordChunks::default();
        let mut writes = Vec::new();
        for k in 0..64u8 {
            chunks.hold(&[[b'a' + k % 26; TLS_RECORD]]);
            writes.extend(chunks.take());
        }
        let end = chunks.finish();
        assert_eq!(writes.len(), 64);
        assert!(writes.iter().all(|w| w.len() % TLS_RECORD == 0));
        assert!(end.len() < 2 * TLS_RECORD);
    }

    proptest! {
        /// Whatever the pieces, held a few at a time, the writes join into a chunked body of
        /// exactly their bytes, and every write before the end is whole records.
        #[test]
        fn writes_are_whole_records_and_carry_the_body(
            pieces in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..40_000), 0..12),
            batch in 1..4usize,
        ) {
            let mut chunks = RecordChunks::default();
            let mut wire = Vec::new();
            for batch in pieces.chunks(batch) {
                chunks.hold(batch);
                if let Some(write) = chunks.take() {
                    prop_assert!(!write.is_empty() && write.len() % TLS_RECORD == 0);
                    wire.extend_from_slice(&write);
                }
            }
            wire.extend_from_slice(&chunks.finish());
            prop_assert_eq!(dechunk(&wire), Some(pieces.concat()));
        }
    }
}
