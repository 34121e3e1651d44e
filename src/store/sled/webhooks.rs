//! [`WebhookStore`] on sled: webhook endpoints in the tree `webhooks` (key `project \0 id`,
//! value the record as JSON), and webhook deliveries ([`crate::store::deliveries`]) in two
//! trees: `webhook_deliveries`, key `project \0`, the event's number and the delivery's
//! (u64 BE, sled's id generator), so an event's deliveries are one range, value the record
//! (JSON); `webhook_due`, key the next attempt's time and the delivery's number (both u64
//! BE), value the delivery's key, one entry per pending delivery, so the due ones are the
//! tree's first range; and `webhook_done`, the same key with the last attempt's time, one
//! entry per finished delivery (`delivered` or `failed`), which retention reads
//! (`super::retention`).
//!
//! One process owns a sled store, so a claim is kept in memory only (the delivery's number
//! and the end of its lease): claims never race another instance, and after a restart (or a
//! kill) nothing is claimed, so a delivery whose attempt was cut short is due at once.

use super::{abort, events, keys, tx_error, SledStore};
use crate::audit::AuditEvent;
use crate::store::deliveries::{sends, DeliveryRecord, DeliveryStatus};
use crate::store::{
    corrupt, unavailable, StoreError, StoreResult, WebhookEndpointRecord, WebhookStore,
};
use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use sled::Transactional;
use std::collections::hash_map::{Entry, HashMap};

/// Names of the trees.
pub const ALL: &str = "webhook_deliveries";
pub const DUE: &str = "webhook_due";
pub const DONE: &str = "webhook_done";

/// The three trees, and the claims held now.
#[derive(Debug)]
pub struct Deliveries {
    pub all: sled::Tree,
    pub due: sled::Tree,
    pub done: sled::Tree,
    /// Claimed deliveries: number → end of the lease.
    claims: parking_lot::Mutex<std::collections::HashMap<u64, i64>>,
    /// Held while a redelivery checks its event and queues, and while retention checks that
    /// nothing waits for an event and removes it (`super::retention`): the check, a scan of
    /// `webhook_deliveries`, cannot be part of a sled transaction, so the two take turns.
    pub event_removal: parking_lot::Mutex<()>,
}

/// The key in `webhook_due` (or `webhook_done`) of delivery `id` at `next_micros`.
pub fn due_key(next_micros: i64, id: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&u64::try_from(next_micros.max(0)).unwrap_or(0).to_be_bytes());
    k[8..].copy_from_slice(&id.to_be_bytes());
    k
}

/// The key of `d` in `webhook_deliveries`.
pub fn key(d: &DeliveryRecord) -> Vec<u8> {
    let mut k = events::key(&d.project, d.event_seq);
    k.extend_from_slice(&d.id.to_be_bytes());
    k
}

pub fn decode(v: &[u8]) -> StoreResult<DeliveryRecord> {
    serde_json::from_slice(v).map_err(corrupt)
}

/// Stores `d` (a new one numbered first) and its due key while pending.
fn put(
    all: &TransactionalTree,
    due: &TransactionalTree,
    d: &mut DeliveryRecord,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    if d.id == 0 {
        d.id = all.generate_id()?.max(1);
    }
    let value = serde_json::to_vec(&*d).map_err(|e| abort(corrupt(e)))?;
    let k = key(d);
    all.insert(k.as_slice(), value)?;
    if d.status == DeliveryStatus::Pending {
        due.insert(&due_key(d.next_micros, d.id), k)?;
    }
    Ok(())
}

impl Deliveries {
    pub fn open(db: &sled::Db) -> StoreResult<Self> {
        Ok(Deliveries {
            all: db.open_tree(ALL).map_err(unavailable)?,
            due: db.open_tree(DUE).map_err(unavailable)?,
            done: db.open_tree(DONE).map_err(unavailable)?,
            claims: Default::default(),
            event_removal: Default::default(),
        })
    }

    /// Fans out up to `limit` markers of `events` to the endpoints `endpoints` lists for a
    /// project, in one transaction (each sled transaction is a log write of its own, so one
    /// per marker would cost a disk write per event): how many markers, and how many
    /// deliveries that queued.
    pub fn fan_out(
        &self,
        events_tree: &sled::Tree,
        endpoints: impl Fn(&str) -> StoreResult<Vec<WebhookEndpointRecord>>,
        now_micros: i64,
        limit: usize,
    ) -> StoreResult<(usize, usize)> {
        let markers = events::markers(events_tree, limit)?;
        if markers.is_empty() {
            return Ok((0, 0));
        }
        let mut of_project: HashMap<&str, Vec<WebhookEndpointRecord>> = HashMap::new();
        let mut planned = Vec::with_capacity(markers.len());
        for (seq, project) in &markers {
            let targets: Vec<String> = match events::get(events_tree, project, *seq)? {
                Some(found) => {
                    let listed = match of_project.entry(project.as_str()) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => e.insert(endpoints(project)?),
                    };
                    let kind = found.event.kind;
                    listed
                        .iter()
                        .filter(|e| sends(e, &kind))
                        .map(|e| e.id.clone())
                        .collect()
                }
                None => Vec::new(),
            };
            planned.push((*seq, project.as_str(), targets));
        }
        let queued = (events_tree, &self.all, &self.due)
            .transaction(|(t_events, t_all, t_due)| {
                let mut queued = 0;
                for (seq, project, targets) in &planned {
                    if t_events.remove(&events::marker(*seq))?.is_none() {
                        continue;
                    }
                    for endpoint in targets {
                        let mut d = DeliveryRecord::new(project, *seq, endpoint, now_micros);
                        put(t_all, t_due, &mut d)?;
                        queued += 1;
                    }
                }
                Ok(queued)
            })
            .map_err(tx_error)?;
        Ok((markers.len(), queued))
    }

    /// New pending deliveries of event `seq` of `events_tree` to `endpoints`; `false`, none,
    /// when the event is not there.
    pub fn queue(
        &self,
        events_tree: &sled::Tree,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<bool> {
        let _turn = self.event_removal.lock();
        let event = events::key(project, seq);
        (events_tree, &self.all, &self.due)
            .transaction(|(t_events, t_all, t_due)| {
                if t_events.get(&event)?.is_none() {
                    return Ok(false);
                }
                for endpoint in endpoints {
                    let mut d = DeliveryRecord::new(project, seq, endpoint, now_micros);
                    put(t_all, t_due, &mut d)?;
                }
                Ok(true)
            })
            .map_err(tx_error)
    }

    /// [`WebhookStore::claim_deliveries`].
    pub fn claim(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let end = due_key(now_micros, u64::MAX);
        let mut claimed = Vec::new();
        let mut claims = self.claims.lock();
        for item in self.due.range(..=end.as_slice()) {
            if claimed.len() >= limit {
                break;
            }
            let (k, at) = item.map_err(unavailable)?;
            let id = events::u64_at(&k, 8).ok_or_else(|| corrupt("bad webhook_due key"))?;
            if claims.get(&id).is_some_and(|until| *until > now_micros) {
                continue;
            }
            let Some(v) = self.all.get(at).map_err(unavailable)? else {
                continue;
            };
            let mut d = decode(&v)?;
            if skip.contains(&d.endpoint_id) {
                continue;
            }
            claims.insert(id, lease_until_micros);
            d.next_micros = lease_until_micros;
            claimed.push(d);
        }
        Ok(claimed)
    }

    /// [`WebhookStore::record_delivery`].
    pub fn record(&self, d: &DeliveryRecord, claimed_until_micros: i64) -> StoreResult<bool> {
        let mut claims = self.claims.lock();
        if claims.get(&d.id) != Some(&claimed_until_micros) {
            return Ok(false);
        }
        claims.remove(&d.id);
        let k = key(d);
        (&self.all, &self.due, &self.done)
            .transaction(|(t_all, t_due, t_done)| {
                let Some(v) = t_all.get(k.as_slice())? else {
                    return Ok(false);
                };
                let stored = decode(&v).map_err(abort)?;
                if stored.status != DeliveryStatus::Pending {
                    return Ok(false);
                }
                t_due.remove(&due_key(stored.next_micros, stored.id))?;
                put(t_all, t_due, &mut d.clone())?;
                if d.status != DeliveryStatus::Pending {
                    t_done.insert(&due_key(d.next_micros, d.id), k.as_slice())?;
                }
                Ok(true)
            })
            .map_err(tx_error)
    }

    /// The deliveries of event `seq` of `project`, oldest first.
    pub fn of_event(&self, project: &str, seq: u64) -> StoreResult<Vec<DeliveryRecord>> {
        self.all
            .scan_prefix(events::key(project, seq))
            .values()
            .map(|v| decode(&v.map_err(unavailable)?))
            .collect()
    }

    /// How many are pending.
    pub fn pending(&self) -> u64 {
        u64::try_from(self.due.len()).unwrap_or(u64::MAX)
    }
}

#[async_trait]
impl WebhookStore for SledStore {
    async fn put_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        replace: bool,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let key = keys::webhook(&endpoint.project, &endpoint.id);
        let value = serde_json::to_vec(endpoint).map_err(corrupt)?;
        self.change_audited(&self.webhooks, &key, Some((&value, replace)), Some(&audit))
            .await
    }

    async fn get_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        self.webhooks
            .get(keys::webhook(project, id))
            .map_err(unavailable)?
            .map(|v| serde_json::from_slice(&v).map_err(corrupt))
            .transpose()
    }

    async fn list_webhook_endpoints(
        &self,
        project: &str,
    ) -> StoreResult<Vec<WebhookEndpointRecord>> {
        endpoints_of(&self.webhooks, project)
    }

    async fn delete_webhook_endpoint(
        &self,
        project: &str,
        id: &str,
        audit: AuditEvent,
    ) -> StoreResult<bool> {
        let key = keys::webhook(project, id);
        self.change_audited(&self.webhooks, &key, None, Some(&audit))
            .await
    }

    async fn fan_out_events(&self, now_micros: i64, limit: usize) -> StoreResult<usize> {
        let webhooks = &self.webhooks;
        let (n, queued) = self.deliveries.fan_out(
            &self.events,
            |project| endpoints_of(webhooks, project),
            now_micros,
            limit,
        )?;
        // Only deliveries need to outlive a crash: markers a crash brings back are fanned out
        // again (a delivery is at least once).
        if queued > 0 {
            self.durable().await?;
        }
        Ok(n)
    }

    async fn queue_deliveries(
        &self,
        project: &str,
        seq: u64,
        endpoints: &[String],
        now_micros: i64,
    ) -> StoreResult<bool> {
        if !self
            .deliveries
            .queue(&self.events, project, seq, endpoints, now_micros)?
        {
            return Ok(false);
        }
        self.durable().await?;
        Ok(true)
    }

    async fn claim_deliveries(
        &self,
        now_micros: i64,
        lease_until_micros: i64,
        skip: &[String],
        limit: usize,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        self.deliveries
            .claim(now_micros, lease_until_micros, skip, limit)
    }

    async fn record_delivery(
        &self,
        delivery: &DeliveryRecord,
        claimed_until_micros: i64,
    ) -> StoreResult<bool> {
        let recorded = self.deliveries.record(delivery, claimed_until_micros)?;
        self.durable().await?;
        Ok(recorded)
    }

    async fn list_deliveries(&self, project: &str, seq: u64) -> StoreResult<Vec<DeliveryRecord>> {
        self.deliveries.of_event(project, seq)
    }

    async fn deliveries_pending(&self) -> StoreResult<u64> {
        Ok(self.deliveries.pending())
    }
}

/// The project's webhook endpoints in `tree`, newest first.
fn endpoints_of(tree: &sled::Tree, project: &str) -> StoreResult<Vec<WebhookEndpointRecord>> {
    let mut all = tree
        .scan_prefix(keys::webhook(project, ""))
        .values()
        .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
        .collect::<StoreResult<Vec<WebhookEndpointRecord>>>()?;
    all.sort_by(|a, b| (b.created_micros, &b.id).cmp(&(a.created_micros, &a.id)));
    Ok(all)
}
