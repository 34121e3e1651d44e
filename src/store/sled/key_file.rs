//! The key file: the wrapped keys of live intents' credentials, outside sled's log, in
//! fixed-size slots that are overwritten in place.
//!
//! sled never overwrites: a value it replaces or removes stays in its log until the segment
//! is reused, so a key kept in a tree would outlive the intent's end on disk. Here a slot is
//! written once when the intent is created and overwritten with zeros (then `fdatasync`) when
//! it ends; freed slots are reused. A slot holds `len (u8) | tag (16) | wrapped key` and zeros
//! after (`len` counts tag and key; the tag is the first 16 bytes of the SHA-256 of the
//! intent's `pi` key, so a slot reused meanwhile is not taken for another's); a zero first
//! byte is a free slot. A slot whose intent
//! is no longer live (a crash between an end and its erasure, or between the write and the
//! create) is erased at the next start ([`KeyFile::keep_only`]).

use crate::store::{unavailable, StoreResult};
use parking_lot::Mutex;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes per slot.
pub const SLOT: usize = 256;

/// The key file's name in the data dir.
pub const NAME: &str = "intent-keys";

/// Slots of wrapped keys; see the module.
#[derive(Debug)]
pub struct KeyFile {
    file: File,
    path: PathBuf,
    /// Which slots are taken.
    taken: Mutex<Vec<bool>>,
}

impl KeyFile {
    /// Opens (or creates, owner-only) the key file in `dir`.
    pub fn open(dir: &Path) -> StoreResult<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(NAME);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(unavailable)?;
        let len =
            usize::try_from(file.metadata().map_err(unavailable)?.len()).map_err(unavailable)?;
        let mut taken = Vec::with_capacity(len / SLOT);
        let mut first = [0u8; 1];
        for slot in 0..len / SLOT {
            file.read_exact_at(&mut first, (slot * SLOT) as u64)
                .map_err(unavailable)?;
            taken.push(first[0] != 0);
        }
        Ok(Self {
            file,
            path,
            taken: Mutex::new(taken),
        })
    }

    /// Writes `key` for the intent stored at `pi_key` into a free slot, durably; the slot.
    pub fn write(&self, pi_key: &[u8], key: &[u8]) -> StoreResult<u32> {
        let body_len = TAG + key.len();
        let Ok(len) = u8::try_from(body_len) else {
            return Err(unavailable("intent key too long for a key slot"));
        };
        let mut bytes = [0u8; SLOT];
        bytes[0] = len;
        bytes[1..1 + TAG].copy_from_slice(&tag(pi_key));
        bytes[1 + TAG..1 + body_len].copy_from_slice(key);
        let slot = {
            let mut taken = self.taken.lock();
            let slot = match taken.iter().position(|t| !t) {
                Some(free) => free,
                None => {
                    taken.push(false);
                    taken.len() - 1
                }
            };
            taken[slot] = true;
            slot_id(slot)?
        };
        let written = self
            .file
            .write_all_at(&bytes, offset(slot))
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            self.erase(slot).ok();
            return Err(unavailable(e));
        }
        Ok(slot)
    }

    /// The key in `slot` if it still belongs to the intent stored at `pi_key` (a slot erased
    /// and reused meanwhile belongs to another).
    pub fn read(&self, slot: u32, pi_key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let mut bytes = [0u8; SLOT];
        if self.file.read_exact_at(&mut bytes, offset(slot)).is_err() {
            return Ok(None);
        }
        let len = usize::from(bytes[0]);
        if len <= TAG || bytes[1..1 + TAG] != tag(pi_key) {
            return Ok(None);
        }
        Ok(bytes.get(1 + TAG..1 + len).map(<[u8]>::to_vec))
    }

    /// Overwrites `slot` with zeros in place, durably, and frees it.
    pub fn erase(&self, slot: u32) -> StoreResult<()> {
        let index = usize::try_from(slot).map_err(unavailable)?;
        self.file
            .write_all_at(&[0u8; SLOT], offset(slot))
            .and_then(|()| self.file.sync_data())
            .map_err(unavailable)?;
        if let Some(t) = self.taken.lock().get_mut(index) {
            *t = false;
        }
        Ok(())
    }

    /// Erases every taken slot that `live` does not name (at start, before any request).
    pub fn keep_only(&self, live: &std::collections::HashSet<u32>) -> StoreResult<usize> {
        let orphans: Vec<u32> = {
            let taken = self.taken.lock();
            (0..taken.len())
                .filter(|i| taken[*i])
                .filter_map(|i| u32::try_from(i).ok())
                .filter(|i| !live.contains(i))
                .collect()
        };
        for slot in &orphans {
            self.erase(*slot)?;
        }
        Ok(orphans.len())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Bytes of the tag that names a slot's intent.
const TAG: usize = 16;

fn tag(pi_key: &[u8]) -> [u8; TAG] {
    use sha2::Digest;
    let mut t = [0u8; TAG];
    t.copy_from_slice(&sha2::Sha256::digest(pi_key)[..TAG]);
    t
}

fn offset(slot: u32) -> u64 {
    u64::from(slot) * SLOT as u64
}

fn slot_id(slot: usize) -> StoreResult<u32> {
    u32::try_from(slot).map_err(unavailable)
}
