//! [`RateLimitStore`] on sled: no shared buckets. One process owns a sled store, so its own
//! buckets (`edge::ratelimit`) are the whole count.

use super::SledStore;
use crate::store::RateLimitStore;

impl RateLimitStore for SledStore {}
