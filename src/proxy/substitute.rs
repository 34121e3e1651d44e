//! Template substitution over a request body, chunk by chunk.
//!
//! The scanner is synchronous; credential lookups are `async`. The resolver answers from this
//! request's cache, and on a miss polls the lookup once: the embedded store answers at once,
//! so a chunk is normally scanned in one pass. A lookup that would wait is noted instead; the
//! scanner is then put back to its state before the chunk, the noted credentials are fetched,
//! and the chunk is scanned again. Each credential is fetched once per request.

use super::credentials::{self, Lookup};
use crate::api::App;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::template::{CredentialKind, ResolveError, Scanner, TemplateError, TemplateRef};
use std::collections::BTreeSet;

/// Polls a future once: its output if it is ready without waiting.
fn poll_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Most distinct credentials one request may name.
pub const MAX_CREDENTIALS_PER_REQUEST: usize = 32;

/// The credentials one request fetched: a short list (at most
/// [`MAX_CREDENTIALS_PER_REQUEST`]) searched in order, cheaper than hashing every template's
/// key.
#[derive(Default)]
struct Cache(Vec<(CredentialKey, Lookup)>);

type CredentialKey = (String, CredentialKind);

impl Cache {
    fn get(&self, id: &str, kind: CredentialKind) -> Option<&Lookup> {
        self.0
            .iter()
            .find(|((i, k), _)| *k == kind && i == id)
            .map(|(_, lookup)| lookup)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn insert(&mut self, key: CredentialKey, lookup: Lookup) {
        self.0.push((key, lookup));
    }

    fn values(&self) -> impl Iterator<Item = &Lookup> {
        self.0.iter().map(|(_, lookup)| lookup)
    }
}

/// The substitution state of one request.
#[derive(Default)]
pub struct Substitution {
    scanner: Scanner,
    cache: Cache,
    /// Templates substituted so far.
    pub templates: usize,
}

fn template_error(e: TemplateError) -> ApiError {
    ApiError::invalid_template(&e.field, &e.template, e.message)
}

impl Substitution {
    /// Back to the start (pingora replays a buffered body on retry).
    pub fn reset(&mut self) {
        self.scanner.reset();
        self.templates = 0;
    }

    /// Scans one chunk; returns the bytes to forward.
    pub async fn feed(
        &mut self,
        app: &App,
        principal: &Principal,
        chunk: &[u8],
    ) -> Result<Vec<u8>, ApiError> {
        let before = self.scanner.clone();
        for _pass in 0..2 {
            let mut out = Vec::with_capacity(chunk.len() + chunk.len() / 8);
            let mut missing: Vec<CredentialKey> = Vec::new();
            let mut failure: Option<ApiError> = None;
            let Substitution { scanner, cache, .. } = self;
            let mut resolve = |t: &TemplateRef| -> Result<String, ResolveError> {
                let (id, kind) = (t.payment_method.as_str(), t.kind);
                if cache.get(id, kind).is_none() {
                    if missing.iter().any(|(i, k)| *k == kind && i == id) {
                        return Ok(String::new());
                    }
                    if cache.len() >= MAX_CREDENTIALS_PER_REQUEST {
                        let limit = format!(
                            "a request may name at most {MAX_CREDENTIALS_PER_REQUEST} credentials"
                        );
                        cache.insert((id.to_string(), kind), Err(limit));
                    } else {
                        // The embedded store answers without waiting: fetch right here, in
                        // the one pass. A backend that has to wait is fetched between passes.
                        match poll_once(credentials::fetch(app, principal, id, kind)) {
                            Some(Ok(lookup)) => cache.insert((id.to_string(), kind), lookup),
                            Some(Err(e)) => {
                                failure = Some(e);
                                return Err(ResolveError::new("internal error"));
                            }
                            None => {
                                missing.push((id.to_string(), kind));
                                return Ok(String::new());
                            }
                        }
                    }
                }
                match cache.get(id, kind) {
                    Some(Ok(values)) => values.select(t).map_err(ResolveError::new),
                    Some(Err(message)) => Err(ResolveError::new(message.clone())),
                    None => Ok(String::new()),
                }
            };
            let result = scanner.feed(chunk, &mut out, &mut resolve);
            if let Some(e) = failure {
                return Err(e);
            }
            if missing.is_empty() {
                let n = result.map_err(template_error)?;
                self.templates += n;
                return Ok(out);
            }
            self.scanner = before.clone();
            for (id, kind) in missing {
                let lookup = credentials::fetch(app, principal, &id, kind).await?;
                self.cache.insert((id, kind), lookup);
            }
        }
        // The second pass found every credential in the cache.
        Err(ApiError::internal())
    }

    /// End of the body: what the scanner still holds.
    pub fn finish(&mut self) -> Result<Vec<u8>, ApiError> {
        let mut out = Vec::new();
        self.scanner.finish(&mut out).map_err(template_error)?;
        Ok(out)
    }

    /// What this request revealed (payment methods for `pan`, purchase intents otherwise),
    /// sorted, for its audit entry.
    pub fn revealed(&self) -> BTreeSet<&str> {
        self.cache
            .values()
            .filter_map(|l| l.as_ref().ok().map(|v| v.revealed.as_str()))
            .collect()
    }

    /// The purchase intents whose credentials this request used.
    pub fn intents_used(&self) -> BTreeSet<String> {
        self.cache
            .values()
            .filter_map(|l| l.as_ref().ok().and_then(|v| v.intent_id.clone()))
            .collect()
    }
}
