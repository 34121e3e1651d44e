//! `projects[].rate_limits:` checked: the limits `edge::ratelimit` enforces.

use super::file::{LimitFile, RateLimitsFile};

/// A checked limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub per_second: f64,
    pub burst: f64,
}

/// What a request is answered while the store that shares the limits between instances
/// (PostgreSQL) does not answer (`on_store_error`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnStoreError {
    /// Each instance's own buckets decide alone (a limit of N/s allows N/s on each instance).
    #[default]
    Allow,
    /// 503 `storeUnavailable` with `Retry-After: 1`.
    Deny,
}

/// A project's checked limits.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateLimits {
    pub project: Option<Limit>,
    pub entity: Option<Limit>,
    pub on_store_error: OnStoreError,
}

/// Checks `rate_limits:` of the project at config key `key`; the message names the key.
pub fn validate(key: &str, file: Option<&RateLimitsFile>) -> Result<RateLimits, (String, String)> {
    let Some(file) = file else {
        return Ok(RateLimits::default());
    };
    let check = |name: &str, l: &Option<LimitFile>| -> Result<Option<Limit>, (String, String)> {
        let Some(l) = l else { return Ok(None) };
        if !(l.per_second.is_finite() && l.per_second > 0.0 && l.per_second <= 1_000_000.0) {
            return Err((
                format!("{key}.rate_limits.{name}.per_second"),
                "must be a number above 0 and at most 1000000".into(),
            ));
        }
        let burst = match l.burst {
            Some(0) => {
                return Err((
                    format!("{key}.rate_limits.{name}.burst"),
                    "must be at least 1".into(),
                ))
            }
            Some(b) => f64::from(b),
            None => l.per_second.max(1.0).ceil(),
        };
        Ok(Some(Limit {
            per_second: l.per_second,
            burst,
        }))
    };
    let on_store_error = match file.on_store_error.as_deref() {
        None | Some("allow") => OnStoreError::Allow,
        Some("deny") => OnStoreError::Deny,
        Some(_) => {
            return Err((
                format!("{key}.rate_limits.on_store_error"),
                "must be allow or deny".into(),
            ))
        }
    };
    Ok(RateLimits {
        project: check("project", &file.project)?,
        entity: check("entity", &file.entity)?,
        on_store_error,
    })
}
