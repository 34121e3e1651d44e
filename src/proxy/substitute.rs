//! Template substitution over a request body, chunk by chunk.
//!
//! The scanner is synchronous; credential lookups are not. Each chunk is scanned with a
//! resolver that answers from this request's cache and notes the (payment method, type)
//! pairs it has not seen; if there were any, the scanner is put back to its state before
//! the chunk, the missing credentials are fetched, and the chunk is scanned again. So each
//! chunk is scanned at most twice and each credential fetched once per request.

use super::credentials::{self, Lookup};
use crate::api::App;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::template::{CredentialKind, ResolveError, Scanner, TemplateError, TemplateRef};
use std::collections::{BTreeSet, HashMap};

/// Most distinct credentials one request may name.
pub const MAX_CREDENTIALS_PER_REQUEST: usize = 32;

/// The substitution state of one request.
#[derive(Default)]
pub struct Substitution {
    scanner: Scanner,
    cache: HashMap<(String, CredentialKind), Lookup>,
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
            let mut missing: Vec<(String, CredentialKind)> = Vec::new();
            let cache = &self.cache;
            let mut resolve = |t: &TemplateRef| -> Result<String, ResolveError> {
                match cache.get(&(t.payment_method.clone(), t.kind)) {
                    Some(Ok(values)) => values.select(t).map_err(ResolveError::new),
                    Some(Err(message)) => Err(ResolveError::new(message.clone())),
                    None => {
                        missing.push((t.payment_method.clone(), t.kind));
                        Ok(String::new())
                    }
                }
            };
            let result = self.scanner.feed(chunk, &mut out, &mut resolve);
            if missing.is_empty() {
                let n = result.map_err(template_error)?;
                self.templates += n;
                return Ok(out);
            }
            self.scanner = before.clone();
            for key in missing {
                if self.cache.contains_key(&key) {
                    continue;
                }
                let lookup = if self.cache.len() >= MAX_CREDENTIALS_PER_REQUEST {
                    Err(format!(
                        "a request may name at most {MAX_CREDENTIALS_PER_REQUEST} credentials"
                    ))
                } else {
                    credentials::fetch(app, principal, &key.0, key.1).await?
                };
                self.cache.insert(key, lookup);
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

    /// The purchase intents whose credentials this request used.
    pub fn intents_used(&self) -> BTreeSet<String> {
        self.cache
            .values()
            .filter_map(|l| l.as_ref().ok().and_then(|v| v.intent_id.clone()))
            .collect()
    }
}
