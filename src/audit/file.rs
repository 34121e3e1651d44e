//! The audit log's file, `audit.log` in the data dir: one JSON [`AuditEntry`] a line,
//! hash-chained (`hash = H(prev_hash || event JSON)`, [`HashFunction`]), appended only by the
//! audit writer and made durable with `fdatasync`.
//!
//! Each time the file is synced the store records the chain head apart from it
//! ([`AuditHead`]: the seq and hash of the last entry and the file's length there). Opening
//! checks the file against it: a file shorter than the head, or whose line at the head is not
//! the head, was changed or cut, and the server does not start on it (`paycred audit
//! --verify` names where). What follows the head was written after it was recorded (at most
//! one sync window before a crash): its entries are kept, and must each chain from the one
//! before (else the file was changed, as above); an unfinished line at the end, which was
//! never reported durable, is cut off.

use super::chain::{hash_holds, HashFunction};
use super::{AuditEntry, AuditEvent};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The log's file name inside the data dir.
pub const FILE_NAME: &str = "audit.log";

/// About the size of a proxy entry line, to size a batch's buffer once.
const ENTRY_BYTES: usize = 512;

/// Longest line looked for at the recorded head (entries are a few hundred bytes).
const MAX_LINE: u64 = 64 * 1024;

/// The chain head as the store records it apart from the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHead {
    /// Seq of the last entry (0: none).
    pub seq: u64,
    /// Hash of the last entry (empty: none).
    pub hash: String,
    /// Length of the file up to and including the last entry's line.
    #[serde(default)]
    pub len: u64,
    /// `<master key id>:<HMAC-SHA256>` of the seq and hash ([`super::head_mac`]); empty in a
    /// head recorded before heads were MACed, and in the head of an open log.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
}

/// The open log, positioned after its last entry.
#[derive(Debug)]
pub struct AuditFile {
    file: File,
    head: AuditHead,
    /// What new entries are hashed with.
    hash_fn: HashFunction,
    /// The lines of one append, reused.
    buf: Vec<u8>,
}

impl AuditFile {
    /// Opens (or creates) the log at `path` and checks it against `recorded`, the head the
    /// store recorded. Returns the log and the events found after the recorded head (written
    /// after it was recorded), oldest first. New entries are hashed with `hash_fn`; those
    /// already there are checked with the function each names.
    pub fn open(
        path: &Path,
        recorded: &AuditHead,
        hash_fn: HashFunction,
    ) -> Result<(Self, Vec<AuditEvent>), String> {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("audit log {}: {e}", path.display()))?;
        // The file's name is durable too, before any entry in it is reported durable (also
        // when a crash came between creating it and this, on an earlier start).
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| format!("audit log {}: {e}", path.display()))?;
        }
        let file_len = file.metadata().map_err(|e| e.to_string())?.len();
        let damaged = |what: &str| {
            format!(
                "the audit log {} {what}: run `paycred audit --verify` to see where",
                path.display()
            )
        };
        if file_len < recorded.len {
            return Err(damaged(
                "is shorter than the head the store recorded (entries cut off)",
            ));
        }
        let at_head =
            |e: AuditEntry| e.seq == recorded.seq && e.hash == recorded.hash && hash_holds(&e);
        let head_found = match recorded.len {
            0 => recorded.seq == 0,
            len => line_ending_at(&file, len).is_some_and(at_head),
        };
        if !head_found {
            return Err(damaged("does not match the head the store recorded"));
        }
        let mut tail =
            vec![0; usize::try_from(file_len - recorded.len).map_err(|e| e.to_string())?];
        file.read_exact_at(&mut tail, recorded.len)
            .map_err(|e| e.to_string())?;
        let mut head = recorded.clone();
        let mut events = Vec::new();
        let mut rest = tail.as_slice();
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let (line, next) = rest.split_at(end + 1);
            if torn(line) {
                break;
            }
            let Some(entry) = chained_after(&head, &line[..end]) else {
                return Err(damaged(&format!(
                    "has an entry after the head the store recorded that does not follow it (seq {})",
                    head.seq + 1
                )));
            };
            head.seq = entry.seq;
            head.hash = entry.hash;
            head.len += line.len() as u64;
            events.push(entry.event);
            rest = next;
        }
        if head.len < file_len {
            // Never reported durable: an append cut short by a crash (or what the file
            // system left of it, such as zeros).
            tracing::warn!(
                bytes = file_len - head.len,
                "audit log: an unfinished write at its end was cut off"
            );
            file.set_len(head.len).map_err(|e| e.to_string())?;
            file.sync_data().map_err(|e| e.to_string())?;
        }
        Ok((
            Self {
                file,
                head,
                hash_fn,
                buf: Vec::new(),
            },
            events,
        ))
    }

    /// The last entry written (not necessarily durable yet).
    pub fn head(&self) -> &AuditHead {
        &self.head
    }

    /// Appends `events` as chained entries, in order, with one write. On failure nothing
    /// counts as written and the file is cut back to where it was.
    pub fn append(&mut self, events: &[AuditEvent]) -> Result<(), String> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.reserve(events.len() * ENTRY_BYTES);
        let (mut seq, mut hash) = (self.head.seq, self.head.hash.clone());
        for event in events {
            seq += 1;
            hash =
                push_entry(&mut buf, seq, event, &hash, self.hash_fn).map_err(|e| e.to_string())?;
            buf.push(b'\n');
        }
        let written = self.file.write_all_at(&buf, self.head.len);
        let result = match written {
            Ok(()) => {
                self.head.seq = seq;
                self.head.hash = hash;
                self.head.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.head.len);
                Err(e.to_string())
            }
        };
        self.buf = buf;
        result
    }

    /// Goes back to `head`, an earlier head of this file (the recorded one), dropping what
    /// was appended after it.
    /// The next successful [`AuditFile::sync`] makes the shorter length durable.
    pub fn rewind(&mut self, head: &AuditHead) -> Result<(), String> {
        self.file.set_len(head.len).map_err(|e| e.to_string())?;
        self.head = head.clone();
        Ok(())
    }

    /// Makes everything appended durable.
    pub fn sync(&self) -> Result<(), String> {
        self.file.sync_data().map_err(|e| e.to_string())
    }
}

/// Creates a new file for the log's lines at `path` (replacing one there), readable by its
/// owner only, like the log itself.
pub fn create(path: &Path) -> std::io::Result<File> {
    File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Every whole entry of the log at `path`, oldest first (an unfinished line at the end, or
/// from the first line a crash left zeros in, is not an entry). No file: no entries.
pub fn read_entries(path: &Path) -> Result<Vec<AuditEntry>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("audit log {}: {e}", path.display())),
    };
    let whole = match memchr::memrchr(b'\n', &bytes) {
        Some(end) => &bytes[..end],
        None => return Ok(Vec::new()),
    };
    whole
        .split(|&b| b == b'\n')
        .take_while(|line| !torn(line))
        .map(|line| serde_json::from_slice(line).map_err(|e| format!("audit log entry: {e}")))
        .collect()
}

/// Whether `line` holds what a crash leaves of an unfinished write: zeros the file system
/// put where data had not reached the disk (JSON has no NUL byte).
fn torn(line: &[u8]) -> bool {
    memchr::memchr(0, line).is_some()
}

/// The entry whose line ends (with its newline) at `end`.
fn line_ending_at(file: &File, end: u64) -> Option<AuditEntry> {
    let start = end.saturating_sub(MAX_LINE);
    let mut window = vec![0; usize::try_from(end - start).ok()?];
    file.read_exact_at(&mut window, start).ok()?;
    let line = window.strip_suffix(b"\n")?;
    let line = match memchr::memrchr(b'\n', line) {
        Some(i) => &line[i + 1..],
        None if start == 0 => line,
        None => return None,
    };
    serde_json::from_slice(line).ok()
}

/// `line` as the entry that follows `head`, if it is one.
pub(crate) fn chained_after(head: &AuditHead, line: &[u8]) -> Option<AuditEntry> {
    let entry: AuditEntry = serde_json::from_slice(line).ok()?;
    let follows = entry.seq == head.seq + 1 && entry.prev_hash == head.hash && hash_holds(&entry);
    follows.then_some(entry)
}

/// Appends the stored JSON of the [`AuditEntry`] with `seq`, `event` and `prev_hash` to
/// `out`, and returns the entry's hash, made with `hash_fn`. The event is serialized once, in
/// place, and hashed from there. Byte for byte what serde writes for the entry
/// (`tests::push_entry_is_what_serde_writes`); the hashes are hex (after `blake3:`), so
/// nothing needs escaping.
pub(crate) fn push_entry(
    out: &mut Vec<u8>,
    seq: u64,
    event: &AuditEvent,
    prev_hash: &str,
    hash_fn: HashFunction,
) -> serde_json::Result<String> {
    out.extend_from_slice(b"{\"seq\":");
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.extend_from_slice(b",\"event\":");
    let event_start = out.len();
    push_event(out, event)?;
    let hash = hash_fn.hash(prev_hash, out.get(event_start..).unwrap_or_default());
    out.extend_from_slice(b",\"prev_hash\":\"");
    out.extend_from_slice(prev_hash.as_bytes());
    out.extend_from_slice(b"\",\"hash\":\"");
    out.extend_from_slice(hash.as_bytes());
    out.extend_from_slice(b"\"}");
    Ok(hash)
}

/// Appends what `serde_json` writes for `event`, at a quarter of its cost (one entry a proxied
/// request): the keys are constants, and a string with nothing to escape is copied whole.
/// `AuditEvent`'s fields in their declared order, as serde writes them (a field added is a
/// compile error here; a reordered or renamed one fails the proptest below).
fn push_event(out: &mut Vec<u8>, event: &AuditEvent) -> serde_json::Result<()> {
    // Destructured, so a field added to the event cannot be left out here.
    let AuditEvent {
        at_micros,
        action,
        project,
        entity,
        resource,
    } = event;
    out.extend_from_slice(b"{\"at_micros\":");
    out.extend_from_slice(itoa::Buffer::new().format(*at_micros).as_bytes());
    for (key, value) in [
        (&b",\"action\":"[..], action),
        (b",\"project\":", project),
        (b",\"entity\":", entity),
        (b",\"resource\":", resource),
    ] {
        out.extend_from_slice(key);
        push_json_string(out, value)?;
    }
    out.push(b'}');
    Ok(())
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
fn push_json_string(out: &mut Vec<u8>, s: &str) -> serde_json::Result<()> {
    // One pass without an early exit and without a branch a byte, which the compiler may
    // turn into vector code; these strings are short.
    let needs_escape = s.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if needs_escape {
        return serde_json::to_writer(&mut *out, s);
    }
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

#[cfg(test)]
pub mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The `i`th of a run of events (at `i` µs, resource `n=<i>`).
    pub fn event(i: usize) -> AuditEvent {
        AuditEvent {
            at_micros: i as i64,
            action: "proxy.use".into(),
            project: "p".into(),
            entity: "e".into(),
            resource: format!("n={i}"),
        }
    }

    fn events(range: std::ops::Range<usize>) -> Vec<AuditEvent> {
        range.map(event).collect()
    }

    /// Both hash functions, for the tests that run with each.
    const BOTH: [HashFunction; 2] = [HashFunction::Sha256, HashFunction::Blake3];

    /// A new log in a new dir, holding events `0..n` hashed with `hash_fn`.
    fn log_of(
        n: usize,
        hash_fn: HashFunction,
    ) -> (tempfile::TempDir, std::path::PathBuf, AuditFile) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (mut log, _) = AuditFile::open(&path, &AuditHead::default(), hash_fn).unwrap();
        log.append(&events(0..n)).unwrap();
        (dir, path, log)
    }

    #[test]
    fn appends_chain_and_read_back_across_reopens() {
        for hash_fn in BOTH {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(FILE_NAME);
            let (mut log, found) = AuditFile::open(&path, &AuditHead::default(), hash_fn).unwrap();
            assert!(found.is_empty());
            log.append(&events(0..3)).unwrap();
            log.append(&events(3..10)).unwrap();
            log.sync().unwrap();
            let recorded = log.head().clone();
            assert_eq!(recorded.seq, 10);
            assert_eq!(recorded.len, std::fs::metadata(&path).unwrap().len());
            log.append(&events(10..12)).unwrap();
            drop(log);
            // Reopened at the recorded head: the two written after it are found and kept.
            let (mut log, found) = AuditFile::open(&path, &recorded, hash_fn).unwrap();
            assert_eq!(found, events(10..12));
            log.append(&events(12..13)).unwrap();
            let entries = read_entries(&path).unwrap();
            assert_eq!(crate::audit::verify(&entries), Ok(13));
            assert_eq!(entries[12].event, event(12));
        }
    }

    #[test]
    fn an_unfinished_line_after_the_head_is_cut_off() {
        for hash_fn in BOTH {
            let (_dir, path, mut log) = log_of(4, hash_fn);
            let recorded = log.head().clone();
            log.append(&events(4..6)).unwrap();
            drop(log);
            let full = std::fs::read(&path).unwrap();
            // Half of the last line, then garbage that is not a chained entry.
            for cut in [full.len() - 40, full.len() - 1] {
                std::fs::write(&path, &full[..cut]).unwrap();
                let (log, found) = AuditFile::open(&path, &recorded, hash_fn).unwrap();
                assert_eq!(found, events(4..5));
                assert_eq!(log.head().seq, 5);
                assert_eq!(read_entries(&path).unwrap().len(), 5);
            }
            // Zeros a file system left after the last whole line.
            let zeros = [full.clone(), vec![0; 300]].concat();
            std::fs::write(&path, zeros).unwrap();
            let (log, found) = AuditFile::open(&path, &recorded, hash_fn).unwrap();
            assert_eq!((found.len(), log.head().seq), (2, 6));
            assert_eq!(std::fs::read(&path).unwrap(), full);
            // Zeros inside an unfinished write, with a whole line after them: all cut off.
            let mut holed = full.clone();
            let line5 = holed[..holed.len() - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .unwrap();
            let line4 = holed[..line5].iter().rposition(|&b| b == b'\n').unwrap();
            holed[line4 + 10..line4 + 60].fill(0);
            std::fs::write(&path, holed).unwrap();
            let (log, found) = AuditFile::open(&path, &recorded, hash_fn).unwrap();
            assert_eq!((found.len(), log.head().seq), (0, 4));
            assert_eq!(read_entries(&path).unwrap().len(), 4);
            // A whole line that does not follow is not cut off: the file was changed.
            let bad = [full.clone(), b"{\"seq\":7}\n".to_vec()].concat();
            std::fs::write(&path, bad).unwrap();
            let err = AuditFile::open(&path, &recorded, hash_fn).unwrap_err();
            assert!(err.contains("does not follow it (seq 7)"), "{err}");
        }
    }

    #[test]
    fn a_rewind_drops_what_was_appended_after_the_head() {
        for hash_fn in BOTH {
            let (_dir, path, mut log) = log_of(3, hash_fn);
            let recorded = log.head().clone();
            log.append(&events(3..5)).unwrap();
            log.rewind(&recorded).unwrap();
            log.append(&events(7..8)).unwrap();
            let entries = read_entries(&path).unwrap();
            assert_eq!(crate::audit::verify(&entries), Ok(4));
            assert_eq!(entries[3].event, event(7));
        }
    }

    #[test]
    fn a_log_changed_or_cut_before_its_head_does_not_open() {
        for hash_fn in BOTH {
            let (_dir, path, log) = log_of(5, hash_fn);
            let recorded = log.head().clone();
            drop(log);
            let full = std::fs::read(&path).unwrap();
            let last_line = full[..full.len() - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .unwrap();
            std::fs::write(&path, &full[..=last_line]).unwrap();
            let err = AuditFile::open(&path, &recorded, hash_fn).unwrap_err();
            assert!(err.contains("entries cut off"), "{err}");
            // The same length, another last entry.
            let text = String::from_utf8(full).unwrap().replace("n=4", "n=5");
            std::fs::write(&path, text).unwrap();
            let err = AuditFile::open(&path, &recorded, hash_fn).unwrap_err();
            assert!(err.contains("does not match"), "{err}");
            // A head with entries but no length.
            let no_len = AuditHead { len: 0, ..recorded };
            let err = AuditFile::open(&path, &no_len, hash_fn).unwrap_err();
            assert!(err.contains("does not match"), "{err}");
        }
    }

    #[test]
    fn push_entry_is_what_serde_writes() {
        let event = AuditEvent {
            at_micros: 1_700_000_000_000_000,
            action: "proxy.use".into(),
            project: "p\"1".into(),
            entity: "user_\\1".into(),
            resource: "host=example.com status=200 templates=4".into(),
        };
        let event_json = serde_json::to_vec(&event).unwrap();
        for hash_fn in BOTH {
            let prev = hash_fn.hash("", b"{}");
            let mut out = b"...".to_vec();
            let hash = push_entry(&mut out, 42, &event, &prev, hash_fn).unwrap();
            assert_eq!(hash, hash_fn.hash(&prev, &event_json));
            let entry = AuditEntry {
                seq: 42,
                event: event.clone(),
                prev_hash: prev.clone(),
                hash,
            };
            assert_eq!(
                out,
                [b"...".to_vec(), serde_json::to_vec(&entry).unwrap()].concat()
            );
        }
    }

    #[test]
    fn push_event_escapes_as_serde_does() {
        let strings = [
            "",
            "plain",
            "quote\"",
            "back\\slash",
            "\u{0}\u{1f} \n\r\t\u{8}\u{c}",
            "\u{7f} é ü 🦀 \u{2028}",
        ];
        for (i, s) in strings.iter().enumerate() {
            let event = AuditEvent {
                at_micros: [i64::MIN, -1, 0, 1, 1_763_900_000_000_000, i64::MAX][i],
                action: (*s).into(),
                project: "p".into(),
                entity: (*s).into(),
                resource: format!("{s}{s}"),
            };
            let mut out = Vec::new();
            push_event(&mut out, &event).unwrap();
            assert_eq!(out, serde_json::to_vec(&event).unwrap(), "{s:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn push_event_writes_what_serde_writes(
            at_micros in proptest::num::i64::ANY,
            action in ".*",
            project in "[ -~]*",
            entity in proptest::string::bytes_regex("(?s-u:.{0,40})").unwrap(),
            resource in "\\PC*",
        ) {
            let event = AuditEvent {
                at_micros,
                action,
                project,
                entity: String::from_utf8_lossy(&entity).into_owned(),
                resource,
            };
            let mut out = Vec::new();
            push_event(&mut out, &event).unwrap();
            proptest::prop_assert_eq!(out, serde_json::to_vec(&event).unwrap());
        }
    }

    #[test]
    fn a_log_continues_across_a_change_of_hash_function() {
        // Written where SHA-256 was the faster (or before BLAKE3), then moved to a CPU
        // without SHA instructions, and back.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut recorded = AuditHead::default();
        let (sha256, blake3) = (HashFunction::Sha256, HashFunction::Blake3);
        for (i, hash_fn) in [sha256, blake3, sha256].into_iter().enumerate() {
            let (mut log, found) = AuditFile::open(&path, &recorded, hash_fn).unwrap();
            assert!(found.is_empty());
            log.append(&events(i * 3..i * 3 + 3)).unwrap();
            log.sync().unwrap();
            recorded = log.head().clone();
        }
        let entries = read_entries(&path).unwrap();
        assert_eq!(crate::audit::verify(&entries), Ok(9));
        let named: Vec<_> = entries
            .iter()
            .map(|e| HashFunction::named_by(&e.hash).unwrap())
            .collect();
        assert_eq!(named, [[sha256; 3], [blake3; 3], [sha256; 3]].concat());
        // Entries after the recorded head are checked across the change too.
        let (mut log, _) = AuditFile::open(&path, &recorded, blake3).unwrap();
        log.append(&events(9..11)).unwrap();
        drop(log);
        let (_, found) = AuditFile::open(&path, &recorded, sha256).unwrap();
        assert_eq!(found, events(9..11));
    }

    #[test]
    fn an_entry_relabelled_to_the_other_function_does_not_open() {
        for hash_fn in BOTH {
            let (_dir, path, mut log) = log_of(3, hash_fn);
            let recorded = log.head().clone();
            log.append(&events(3..4)).unwrap();
            drop(log);
            // The same digits under the other function's name.
            let relabel = |hash: &str| match hash_fn {
                HashFunction::Sha256 => format!("blake3:{hash}"),
                HashFunction::Blake3 => hash.trim_start_matches("blake3:").to_string(),
            };
            let relabel_line = |line: &str| {
                let entry: AuditEntry = serde_json::from_str(line).unwrap();
                line.replace(&entry.hash, &relabel(&entry.hash))
            };
            let good: Vec<String> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(String::from)
                .collect();
            // After the recorded head: a whole line that does not chain.
            let mut lines = good.clone();
            lines[3] = relabel_line(&lines[3]);
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
            let err = AuditFile::open(&path, &recorded, hash_fn).unwrap_err();
            assert!(err.contains("does not follow it (seq 4)"), "{err}");
            // At the recorded head, relabelled in the line and in the head alike.
            let mut lines = good[..3].to_vec();
            lines[2] = relabel_line(&lines[2]);
            let text = lines.join("\n") + "\n";
            std::fs::write(&path, &text).unwrap();
            let relabelled = AuditHead {
                hash: relabel(&recorded.hash),
                len: text.len() as u64,
                ..recorded.clone()
            };
            assert!(HashFunction::named_by(&relabelled.hash).is_some());
            let err = AuditFile::open(&path, &relabelled, hash_fn).unwrap_err();
            assert!(err.contains("does not match"), "{err}");
            // The untouched head opens; one whose hash names no function (in upper case, in
            // the line and in the head alike) does not.
            std::fs::write(&path, good[..3].join("\n") + "\n").unwrap();
            assert!(AuditFile::open(&path, &recorded, hash_fn).is_ok());
            let mut lines = good[..3].to_vec();
            lines[2] = lines[2].replace(&recorded.hash, &recorded.hash.to_uppercase());
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
            let nameless = AuditHead {
                hash: recorded.hash.to_uppercase(),
                ..recorded.clone()
            };
            let err = AuditFile::open(&path, &nameless, hash_fn).unwrap_err();
            assert!(err.contains("does not match"), "{err}");
        }
    }
}
