//! Uses reserved ahead, so that a use of an intent rarely waits for a flush, nor writes
//! through a transaction: the record of an intent holds ([`Ahead`]) uses already counted
//! against its limit in a durable write but not yet taken; the tree `pi_ahead` lists the
//! intents that hold some (for a start to find them).
//!
//! A use that takes a reserved one is one compare-and-swap of the intent's record (its
//! `uses` up, its reservation down) and then its `purchase_intent.used` event: no flush, and
//! no sled transaction (each one seals the log's buffer, a disk write of its own). A use
//! that finds nothing reserved, or the use that makes the next reservation due or reaches
//! the limit, is a transaction that waits for a flush; that same flush makes the next
//! reservation durable. `uses + reserved + pending` is what the last flush wrote, whichever
//! of the compare-and-swaps since then a crash loses.
//!
//! - **The limit is never exceeded**: a reservation never takes `uses + reserved +
//!   pending` past the usage limit, and a start counts every use still reserved as used
//!   ([`SledStore::count_uses_held`](super::SledStore::count_uses_held)): after a crash it
//!   cannot tell the uses that went out from those that did not, and a use that went out is
//!   never counted twice nor forgotten. A clean stop hands the unused ones back.
//! - **What a crash can cost**: at most the uses reserved and not taken: a reservation is
//!   an eighth of the uses left (at most [`MOST_AHEAD`]), and the next one is made while
//!   half of it is still held, so at most a quarter of what was left; with fewer than eight
//!   left none is made and every use waits for its own flush, as a one-time intent's does.
//!   The events of the uses a crash cuts short may be lost with them; their count is not.
//! - A reservation is made `pending` (a use that takes one waits for a flush, which covers
//!   the reservation written before it) and becomes `reserved` once the flush that followed
//!   it is over ([`Ahead::confirm`]), unless a newer one replaced it.
//!
//! Everything else about a use (refusals, the end at the limit) is the record's, as on
//! PostgreSQL ([`crate::store::intents`]).

use super::unavailable;
use crate::store::StoreResult;
use serde::{Deserialize, Serialize};

/// The tree's name.
pub const TREE: &str = "pi_ahead";

/// Most uses one reservation takes ahead.
pub const MOST_AHEAD: u32 = 1024;

/// What is reserved ahead for one intent (kept in its record; always empty on PostgreSQL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.held() == 0
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

impl Ahead {
    /// Whether a use can take one of these without a transaction: a durable one is left
    /// after it, no reservation falls due with it, and it does not reach `limit` (`uses`
    /// counted before it).
    pub fn takes_alone(&self, limit: Option<u32>, uses: u32) -> bool {
        let mut after = *self;
        after.take() == Taken::Reserved
            && !after.top_up(limit, uses.saturating_add(1), 0)
            && limit != Some(uses.saturating_add(1))
    }

    /// Makes the reservation `lease` usable without a flush, once the flush that followed
    /// it is over (unless a newer reservation replaced it). Whether it changed anything.
    pub fn confirm(&mut self, lease: u64) -> bool {
        if self.lease != lease || self.pending == 0 {
            return false;
        }
        self.reserved = self.reserved.saturating_add(self.pending);
        self.pending = 0;
        true
    }
}

/// The intents listed as holding uses (their `pi` keys).
pub fn listed(tree: &sled::Tree) -> StoreResult<Vec<sled::IVec>> {
    tree.iter()
        .keys()
        .collect::<Result<_, _>>()
        .map_err(unavailable)
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
    fn a_use_takes_a_reserved_one_alone_until_the_next_reservation_or_the_limit_is_due() {
        let a = Ahead {
            reserved: 10,
            pending: 0,
            lease: 1,
        };
        assert!(a.takes_alone(Some(100), 5));
        // An unlimited intent reserves 1,024: with 10 held the next reservation is due.
        assert!(!a.takes_alone(None, 5));
        assert!(Ahead { reserved: 600, ..a }.takes_alone(None, 5));
        // Near the limit, no reservation is made: the use that reaches it ends the intent.
        assert!(!a.takes_alone(Some(6), 5));
        // Fewer than half the next reservation held: that use makes it.
        let low = Ahead { reserved: 2, ..a };
        assert!(!low.takes_alone(Some(1000), 10));
        assert!(!Ahead::default().takes_alone(None, 0));
        let mut pending = Ahead {
            reserved: 0,
            pending: 12,
            lease: 7,
        };
        assert!(!pending.takes_alone(None, 0));
        assert!(!pending.confirm(6));
        assert!(pending.confirm(7));
        assert_eq!((pending.reserved, pending.pending), (12, 0));
    }
}
