//! `paycred store copy` on the sled side: everything the store holds, read out
//! ([`crate::store::copy`]).

use super::{events, SledStore};
use crate::store::copy::{Export, Scoped};
use crate::store::{corrupt, unavailable, AuditStore, StoreResult};

impl SledStore {
    /// Everything the store holds, for `paycred store copy` (records still sealed, keys still
    /// wrapped; the audit log as [`AuditStore::audit_log`] reads it).
    pub fn export(&self) -> StoreResult<Export> {
        let scoped = |tree: &sled::Tree| -> StoreResult<Vec<Scoped>> {
            tree.iter()
                .map(|item| {
                    let (k, v) = item.map_err(unavailable)?;
                    let mut parts = k.splitn(3, |b| *b == 0);
                    let mut part = || {
                        parts
                            .next()
                            .and_then(|p| std::str::from_utf8(p).ok())
                            .map(str::to_string)
                            .ok_or_else(|| corrupt("bad scoped key"))
                    };
                    Ok(Scoped {
                        project: part()?,
                        entity: part()?,
                        id: part()?,
                        value: serde_json::from_slice(&v).map_err(corrupt)?,
                    })
                })
                .collect()
        };
        let by_project = |tree: &sled::Tree| -> StoreResult<Vec<(String, Vec<u8>)>> {
            tree.iter()
                .map(|item| {
                    let (k, v) = item.map_err(unavailable)?;
                    Ok((String::from_utf8_lossy(&k).into_owned(), v.to_vec()))
                })
                .collect()
        };
        let mut payment_methods = Vec::new();
        for item in self.pm.iter() {
            let (k, v) = item.map_err(unavailable)?;
            let pm = Self::decode_pm(&v)?;
            let verified = self.pm_verified.contains_key(&k).map_err(unavailable)?;
            payment_methods.push((pm, verified));
        }
        let intents = self
            .pi
            .iter()
            .map(|item| {
                let (k, v) = item.map_err(unavailable)?;
                self.with_key(&k, Self::decode_pi(&v)?)
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let audit = AuditStore::audit_log(self)?;
        let webhook_endpoints = self
            .webhooks
            .iter()
            .values()
            .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        let passkeys = self
            .passkeys
            .iter()
            .values()
            .map(|v| serde_json::from_slice(&v.map_err(unavailable)?).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        let pending_deliveries = self
            .deliveries
            .due
            .iter()
            .values()
            .map(|at| {
                let at = at.map_err(unavailable)?;
                self.deliveries.all.get(at).map_err(unavailable)
            })
            .filter_map(Result::transpose)
            .map(|v| super::webhooks::decode(&v.map_err(unavailable)?))
            .collect::<StoreResult<Vec<_>>>()?;
        let fan_out = events::markers(&self.events, usize::MAX)?
            .into_iter()
            .map(|(seq, _)| seq)
            .collect();
        Ok(Export {
            pending_deliveries,
            fan_out,
            passkeys,
            webhook_endpoints,
            events: events::all(&self.events)?,
            payment_methods,
            intents,
            card_tokens: scoped(&self.card_tokens)?,
            idempotency: scoped(&self.idem)?,
            keyrings: by_project(&self.keyrings)?,
            client_keys: by_project(&self.client_keys)?,
            audit,
        })
    }
}
