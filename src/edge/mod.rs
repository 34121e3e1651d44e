//! The HTTP edge: everything between pingora and the handlers.
//!
//! - [`gateway`]: `impl ProxyHttp`, the phase table; it routes each request here or to the
//!   proxy.
//! - [`routes`]: paths to routes. [`rest`]: a REST request from authentication to answer.
//! - [`cors`]: which other origins' pages may call the public role's routes.
//! - [`ratelimit`]: per-project and per-entity limits. [`idempotency`]: `Idempotency-Key`.
//!
//! May import: `api`, `proxy`, `service`, `app`, `auth`, `http`, `ops`, `dev`, and below.

pub mod cors;
pub mod gateway;
pub mod idempotency;
pub mod ratelimit;
pub mod rest;
pub mod routes;
