//! [`RetentionStore`] on sled ([`crate::store::retention`]): each kind read in key order, a
//! batch at most `limit` keys, each removal a transaction that checks the record again.
//!
//! - ended intents: the `pi_ended` index (end time, `pi` key), oldest first; the record, its
//!   `pi_by_pm` entry and its count in `pi_pm_n` go together.
//! - finished deliveries: the `webhook_done` index (last attempt's time, number), oldest first.
//! - events: no index by time, but one project's events are one range in the order they were
//!   written, so their times grow along it: the walk removes a project's old events from the
//!   start of its range and jumps to the next project at the first recent one. Where the walk
//!   stopped is kept in memory ([`SledStore`]'s `prune_cursor`), so a batch goes on from
//!   there and events kept (a delivery pending, a fan-out marker) are not read again and
//!   again in one pass. A redelivery takes turns with the check and removal of each event
//!   (`Deliveries::event_removal`), so it either queues first and keeps the event, or finds
//!   the event gone and queues nothing.

use super::webhooks::{decode, due_key};
use super::{count_value, events, keys, read_count, tx_error, SledStore};
use crate::store::deliveries::DeliveryStatus;
use crate::store::events::NewEvent;
use crate::store::retention::{Prunable, Pruned, RetentionStore};
use crate::store::{corrupt, unavailable, StoreResult};
use async_trait::async_trait;
use sled::Transactional;

/// Marks in `meta` that `webhook_done` lists every finished delivery (built once, on the
/// first start that has the index).
const DONE_INDEX_BUILT: &[u8] = b"webhook_done_built";

impl SledStore {
    /// Builds the `webhook_done` index from the stored deliveries, unless it was built before.
    pub(super) fn index_finished_deliveries(&self) -> StoreResult<()> {
        self.build_once(DONE_INDEX_BUILT, || {
            for item in self.deliveries.all.iter() {
                let (k, v) = item.map_err(unavailable)?;
                let d = decode(&v)?;
                if d.status != DeliveryStatus::Pending {
                    self.deliveries
                        .done
                        .insert(due_key(d.next_micros, d.id), k)
                        .map_err(unavailable)?;
                }
            }
            Ok(())
        })
    }

    /// The first `limit` entries of `index` before `upto`, each handed to `remove` (which
    /// removes it, and its record when that still qualifies: whether it did).
    fn prune_indexed(
        index: &sled::Tree,
        upto: &[u8],
        limit: usize,
        remove: impl Fn(&[u8], &[u8]) -> StoreResult<bool>,
    ) -> StoreResult<Pruned> {
        let entries: Vec<(sled::IVec, sled::IVec)> = index
            .range(..upto)
            .take(limit)
            .collect::<Result<_, _>>()
            .map_err(unavailable)?;
        let mut removed = 0;
        for (entry, value) in &entries {
            removed += usize::from(remove(entry, value)?);
        }
        Ok(Pruned {
            removed,
            more: entries.len() >= limit,
        })
    }

    /// Up to `limit` ended intents whose end is before `before`, removed.
    fn prune_ended_intents(&self, before: i64, limit: usize) -> StoreResult<Pruned> {
        let upto = keys::pi_due(before, &[]);
        Self::prune_indexed(&self.pi_ended, &upto, limit, |entry, _| {
            let (at, pi_key) =
                keys::from_pi_due(entry).ok_or_else(|| corrupt("bad pi_ended key"))?;
            let at = i64::try_from(at).unwrap_or(i64::MAX);
            (&self.pi, &self.pi_by_pm, &self.pi_pm_n, &self.pi_ended)
                .transaction(|(t_pi, t_index, t_n, t_ended)| {
                    t_ended.remove(entry)?;
                    let Some(bytes) = t_pi.get(pi_key)? else {
                        return Ok(false);
                    };
                    let rec = Self::decode_pi(&bytes).map_err(super::abort)?;
                    // Ended again later (a cancelation of an `unavailable` intent): its newer
                    // entry is the one that counts.
                    if rec.is_live_stored() || rec.ended_at().unwrap_or(at) >= before {
                        return Ok(false);
                    }
                    let scope = crate::store::Scope {
                        project: &rec.project,
                        entity: &rec.entity,
                    };
                    t_pi.remove(pi_key)?;
                    let pm = &rec.payment_method_id;
                    if t_index
                        .remove(keys::pi_by_pm(scope, pm, rec.created_micros, &rec.id))?
                        .is_some()
                    {
                        let ref_key = keys::pm_ref(scope, pm);
                        if let Some(n) = t_n.get(&ref_key)? {
                            let n = read_count(Some(n)).saturating_sub(1);
                            t_n.insert(ref_key, &count_value(n))?;
                        }
                    }
                    Ok(true)
                })
                .map_err(tx_error)
        })
    }

    /// Up to `limit` finished deliveries whose last attempt is before `before`, removed.
    fn prune_deliveries(&self, before: i64, limit: usize) -> StoreResult<Pruned> {
        let upto = due_key(before, 0);
        Self::prune_indexed(&self.deliveries.done, &upto, limit, |entry, at| {
            (&self.deliveries.all, &self.deliveries.done)
                .transaction(|(t_all, t_done)| {
                    t_done.remove(entry)?;
                    let Some(v) = t_all.get(at)? else {
                        return Ok(false);
                    };
                    if decode(&v).map_err(super::abort)?.status == DeliveryStatus::Pending {
                        return Ok(false);
                    }
                    t_all.remove(at)?;
                    Ok(true)
                })
                .map_err(tx_error)
        })
    }

    /// Whether event `seq` of `project` must stay: not fanned out yet, or a delivery of it
    /// pending.
    fn event_awaited(&self, project: &str, seq: u64) -> StoreResult<bool> {
        if self
            .events
            .contains_key(events::marker(seq))
            .map_err(unavailable)?
        {
            return Ok(true);
        }
        for v in self
            .deliveries
            .all
            .scan_prefix(events::key(project, seq))
            .values()
        {
            if decode(&v.map_err(unavailable)?)?.status == DeliveryStatus::Pending {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Reads at most `limit` events from where the last batch stopped, removing those created
    /// before `before` that no delivery waits for.
    fn prune_events(&self, before: i64, limit: usize) -> StoreResult<Pruned> {
        let mut cursor = self.prune_cursor.lock();
        let mut removed = 0;
        let mut read = 0;
        while read < limit {
            let Some(item) = self.events.range(cursor.clone()..).next() else {
                cursor.clear();
                return Ok(Pruned {
                    removed,
                    more: false,
                });
            };
            read += 1;
            let (k, v) = item.map_err(unavailable)?;
            if k.first() == Some(&events::MARKER) {
                // The fan-out markers sort after every project's events: the end of them.
                cursor.clear();
                return Ok(Pruned {
                    removed,
                    more: false,
                });
            }
            let sep = k
                .iter()
                .position(|b| *b == 0)
                .ok_or_else(|| corrupt("bad events key"))?;
            let project = std::str::from_utf8(&k[..sep]).map_err(corrupt)?;
            let seq = events::u64_at(&k, sep + 1).ok_or_else(|| corrupt("bad events key"))?;
            let event: NewEvent = serde_json::from_slice(&v).map_err(corrupt)?;
            if event.created_micros >= before {
                // The rest of this project's events are newer: on to the next project.
                *cursor = k[..sep].to_vec();
                cursor.push(1);
                continue;
            }
            *cursor = k.to_vec();
            cursor.push(0);
            // No redelivery queues between the check and the removal.
            let _turn = self.deliveries.event_removal.lock();
            if self.event_awaited(project, seq)? {
                continue;
            }
            let marker = events::marker(seq);
            let gone = self
                .events
                .transaction(|t| {
                    // Not fanned out meanwhile (a marker is written with its event only, so
                    // this holds unless the event was just written).
                    if t.get(marker)?.is_some() {
                        return Ok(false);
                    }
                    Ok(t.remove(k.as_ref())?.is_some())
                })
                .map_err(tx_error)?;
            removed += usize::from(gone);
        }
        Ok(Pruned {
            removed,
            more: true,
        })
    }
}

#[async_trait]
impl RetentionStore for SledStore {
    async fn prune(&self, kind: Prunable, before_micros: i64, limit: usize) -> StoreResult<Pruned> {
        let pruned = match kind {
            Prunable::Events => self.prune_events(before_micros, limit)?,
            Prunable::Deliveries => self.prune_deliveries(before_micros, limit)?,
            Prunable::EndedIntents => self.prune_ended_intents(before_micros, limit)?,
        };
        if pruned.removed > 0 {
            self.durable().await?;
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::super::intents::tests::record;
    use super::*;
    use crate::store::{when_unlocked, DeliveryRecord, IntentStore, Scope};

    const SCOPE: Scope<'static> = Scope {
        project: "p1",
        entity: "e1",
    };

    /// A store from before the indexes: the first start builds them from the records; an
    /// intent whose record does not say when it ended counts as ended at that start.
    #[tokio::test]
    async fn the_first_start_indexes_what_was_stored_before() {
        let dir = tempfile::tempdir().unwrap();
        let open = || when_unlocked(|| SledStore::open(dir.path(), Default::default())).unwrap();
        let store = open();
        let rec = record("pi_old", "expired");
        assert_eq!(rec.ended_micros, None);
        let pi_key = keys::pi(SCOPE, "pi_old");
        store
            .pi
            .insert(&pi_key, serde_json::to_vec(&rec).unwrap())
            .unwrap();
        let mut done = DeliveryRecord::new("p1", 7, "we_1", 100);
        done.id = 3;
        done.status = DeliveryStatus::Delivered;
        let done_key = super::super::webhooks::key(&done);
        store
            .deliveries
            .all
            .insert(&done_key, serde_json::to_vec(&done).unwrap())
            .unwrap();
        store.meta.remove(DONE_INDEX_BUILT).unwrap();
        store
            .meta
            .remove(super::super::intents::ENDED_INDEX_BUILT)
            .unwrap();
        drop(store);
        let store = open();
        let started = crate::clock::micros(time::OffsetDateTime::now_utc());
        let hour = 3_600_000_000;
        let prune = |kind, before| store.prune(kind, before, 10);
        assert_eq!(
            prune(Prunable::EndedIntents, started - hour)
                .await
                .unwrap()
                .removed,
            0
        );
        assert_eq!(
            prune(Prunable::EndedIntents, started + hour)
                .await
                .unwrap()
                .removed,
            1
        );
        assert!(store.get_intent(SCOPE, "pi_old").await.unwrap().is_none());
        assert_eq!(prune(Prunable::Deliveries, 100).await.unwrap().removed, 0);
        assert_eq!(prune(Prunable::Deliveries, 101).await.unwrap().removed, 1);
        assert!(store.deliveries.all.get(&done_key).unwrap().is_none());
    }

    /// A redelivery that comes while retention checks and removes its event waits for it,
    /// then finds the event gone and queues nothing.
    #[tokio::test]
    async fn a_redelivery_during_the_removal_of_its_event_waits_and_queues_nothing() {
        use crate::store::contract_tests::delivered_events;
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SledStore::open(dir.path(), Default::default()).unwrap());
        let seq = delivered_events(&*store, 1).await[0];
        // Retention's turn: the check done, the removal to come.
        let turn = store.deliveries.event_removal.lock();
        let redelivery = std::thread::spawn({
            let store = store.clone();
            move || {
                store
                    .deliveries
                    .queue(&store.events, "p1", seq, &["we_all".to_string()], 30)
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!redelivery.is_finished(), "the redelivery did not wait");
        store.events.remove(events::key("p1", seq)).unwrap();
        drop(turn);
        assert!(
            !redelivery.join().unwrap().unwrap(),
            "queued for a gone event"
        );
        assert!(store.deliveries.due.is_empty());
    }
}
