//! Uses reserved ahead, so that a use of an intent rarely waits for a flush: the tree
//! `pi_ahead` holds, per intent (its `pi` key), uses already counted against its limit in a
//! durable write but not yet taken.
//!
//! A use always updates the intent's record (its `uses`, its `purchase_intent.used` event)
//! in a transaction. It waits for a flush only when the use is not covered by a reservation
//! known to be durable: then that same flush makes a reservation of the next uses durable
//! too. The uses that follow take reserved ones and do not wait: their transaction moves
//! one use from `reserved` to the record's `uses`, so `uses + reserved + pending` is what
//! the last flush wrote, whichever of those transactions a crash loses.
//!
//! - **The limit is never exceeded**: a reservation never takes `uses + reserved +
//!   pending` past the usage limit, and a start counts every use still reserved as used
//!   ([`fold_into_uses`]): after a crash it cannot tell the uses that went out from those
//!   that did not, and a use that went out is never counted twice nor forgotten. A clean
//!   stop hands the unused ones back ([`hand_back`]).
//! - **What a crash can cost**: at most the uses reserved and not taken, and a reservation
//!   is an eighth of the uses left (at most [`MOST_AHEAD`]); with fewer than eight left,
//!   none is reserved and every use waits for its own flush, as does a one-time intent's.
//! - A reservation is made `pending` (a use that takes one waits for a flush, which covers
//!   the reservation as it was written before) and becomes `reserved` once the flush that
//!   followed it is over ([`confirm`]), unless a newer one replaced it.
//!
//! Everything else about a use (refusals, the end at the limit) is the record's, as on
//! PostgreSQL ([`crate::store::intents`]).

use super::{abort, unavailable, StoreError};
use crate::store::{corrupt, StoreResult};
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

/// The tree's name.
pub const TREE: &str = "pi_ahead";

/// Most uses one reservation takes ahead.
pub const MOST_AHEAD: u32 = 1024;

/// What is reserved ahead for one intent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ahead {
    /// Uses reserved by a durable write: taking one needs no flush.
    pub reserved: u32,
    /// Uses of the reservation `lease`, not yet known durable: taking one waits for a flush.
    pub pending: u32,
    /// Which reservation `pending` belongs to (the process's own count).
    pub lease: u64,
}

/// How a use was covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// By a durable reservation: the use need not wait.
    Reserved,
    /// By a reservation not yet known durable, or by nothing: the use waits for a flush.
    Flush,
}

impl Ahead {
    fn decode(bytes: &[u8]) -> StoreResult<Self> {
        let field = |at: usize, len: usize| bytes.get(at..at + len).ok_or(());
        let parse = || -> Result<Self, ()> {
            Ok(Self {
                reserved: u32::from_be_bytes(field(0, 4)?.try_into().map_err(drop)?),
                pending: u32::from_be_bytes(field(4, 4)?.try_into().map_err(drop)?),
                lease: u64::from_be_bytes(field(8, 8)?.try_into().map_err(drop)?),
            })
        };
        parse().map_err(|()| corrupt("a reservation of uses is not 16 bytes"))
    }

    fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..4].copy_from_slice(&self.reserved.to_be_bytes());
        out[4..8].copy_from_slice(&self.pending.to_be_bytes());
        out[8..].copy_from_slice(&self.lease.to_be_bytes());
        out
    }

    /// The stored form, for tests that write a reservation as a crash leaves it.
    #[cfg(test)]
    pub fn encode_for_tests(&self) -> [u8; 16] {
        self.encode()
    }

    /// Uses counted against the limit and not taken yet.
    pub fn held(&self) -> u32 {
        self.reserved.saturating_add(self.pending)
    }

    /// Takes one use: a durable reserved one first, then a pending one.
    pub fn take(&mut self) -> Taken {
        if self.reserved > 0 {
            self.reserved -= 1;
            Taken::Reserved
        } else {
            self.pending = self.pending.saturating_sub(1);
            Taken::Flush
        }
    }

    /// Reserves the next uses when what is held runs low and no reservation is pending:
    /// `ahead(limit, counted)` more as pending under `lease`, `counted` being the uses
    /// counted so far with what is held. Whether it reserved.
    pub fn top_up(&mut self, limit: Option<u32>, uses: u32, lease: u64) -> bool {
        let more = ahead(limit, uses.saturating_add(self.held()));
        if more == 0 || self.pending > 0 || self.reserved >= more / 2 {
            return false;
        }
        self.pending = more;
        self.lease = lease;
        true
    }
}

/// How many uses one reservation takes ahead when `counted` of an intent's `limit` are
/// counted (used or held): an eighth of what is left, at most [`MOST_AHEAD`]; none with
/// fewer than eight left.
pub fn ahead(limit: Option<u32>, counted: u32) -> u32 {
    match limit {
        None => MOST_AHEAD,
        Some(limit) => (limit.saturating_sub(counted) / 8).min(MOST_AHEAD),
    }
}

/// The reservation held for `key` in a transaction.
pub fn read(
    t: &TransactionalTree,
    key: &[u8],
) -> Result<Ahead, ConflictableTransactionError<StoreError>> {
    match t.get(key)? {
        Some(bytes) => Ahead::decode(&bytes).map_err(abort),
        None => Ok(Ahead::default()),
    }
}

/// Writes `ahead` for `key` in a transaction (removes the entry when nothing is held).
pub fn write(
    t: &TransactionalTree,
    key: &[u8],
    ahead: &Ahead,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    if ahead.held() == 0 {
        t.remove(key)?;
    } else {
        t.insert(key, &ahead.encode())?;
    }
    Ok(())
}

/// Makes the reservation `lease` of `key` usable without a flush, once the flush that
/// followed it is over (unless a newer reservation replaced it). Not itself durable: a
/// crash counts `pending` and `reserved` alike.
pub fn confirm(tree: &sled::Tree, key: &[u8], lease: u64) -> StoreResult<()> {
    tree.fetch_and_update(key, |old| {
        let mut ahead = old.and_then(|bytes| Ahead::decode(bytes).ok())?;
        if ahead.lease == lease && ahead.pending > 0 {
            ahead.reserved = ahead.reserved.saturating_add(ahead.pending);
            ahead.pending = 0;
        }
        Some(ahead.encode().to_vec())
    })
    .map(drop)
    .map_err(unavailable)
}

/// What is held per intent (its `pi` key, the uses not taken): at a start, the uses a
/// crash left reserved ([`SledStore::count_uses_held`](super::SledStore::count_uses_held)
/// counts them as used and removes each entry in the same transaction).
pub fn held(tree: &sled::Tree) -> StoreResult<Vec<(sled::IVec, u32)>> {
    let mut out = Vec::new();
    for item in tree.iter() {
        let (key, bytes) = item.map_err(unavailable)?;
        out.push((key, Ahead::decode(&bytes)?.held()));
    }
    Ok(out)
}

/// At a clean stop, with no use in flight: the uses held and not taken are handed back.
pub fn hand_back(tree: &sled::Tree) -> StoreResult<()> {
    tree.clear().map_err(unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_an_eighth_of_what_is_left_and_none_near_the_limit() {
        assert_eq!(ahead(None, 5), MOST_AHEAD);
        assert_eq!(ahead(Some(100), 1), 12);
        assert_eq!(ahead(Some(100), 92), 1);
        assert_eq!(ahead(Some(100), 93), 0);
        assert_eq!(ahead(Some(1), 1), 0);
        assert_eq!(ahead(Some(1_000_000), 0), MOST_AHEAD);
        assert_eq!(ahead(Some(3), 9), 0);
    }

    #[test]
    fn uses_come_from_durable_reservations_first_and_never_past_the_limit() {
        let mut a = Ahead::default();
        assert_eq!(a.take(), Taken::Flush);
        assert!(a.top_up(Some(100), 1, 7));
        assert_eq!((a.reserved, a.pending, a.lease), (0, 12, 7));
        // A second reservation waits for the pending one.
        assert!(!a.top_up(Some(100), 1, 8));
        assert_eq!(a.take(), Taken::Flush);
        a.reserved += a.pending;
        a.pending = 0;
        assert_eq!(a.take(), Taken::Reserved);
        assert_eq!(a.reserved, 10);
        // Uses 3 and 10 held: more is reserved only once fewer than half the next are held.
        assert!(!a.top_up(Some(100), 3, 9));
        let mut uses = 3;
        while a.reserved > 0 {
            a.take();
            uses += 1;
            if a.top_up(Some(100), uses, 10) {
                break;
            }
        }
        assert!(uses + a.held() <= 100);
        assert_eq!(a.lease, 10);
    }

    #[test]
    fn the_encoding_round_trips_and_refuses_a_short_value() {
        let a = Ahead {
            reserved: 3,
            pending: 1024,
            lease: u64::MAX - 1,
        };
        assert_eq!(Ahead::decode(&a.encode()).ok(), Some(a));
        assert!(Ahead::decode(&[0u8; 15]).is_err());
    }
}
