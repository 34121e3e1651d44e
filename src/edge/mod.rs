//! The HTTP edge: everything between pingora and the handlers.
//!
//! - [`gateway`]: `impl ProxyHttp`, the phase table; it routes each request here or to the
//!   proxy.
//! - [`routes`]: paths to routes. [`rest`]: a REST request from authentication to answer.
//! - [`mcp`]: the MCP server on `/mcp` (Streamable HTTP), its tools calling the handlers.
//! - [`acp`]: the Agentic Commerce Protocol's Delegate Payment API
//!   (`/agentic_commerce/delegate_payment`), calling the payment-method and purchase-intent
//!   handlers; its errors in ACP's shape.
//! - [`cors`]: which other origins' pages may call the public role's routes.
//! - [`ratelimit`]: per-project and per-entity limits, shared by the instances on PostgreSQL.
//!   [`idempotency`]: `Idempotency-Key`.
//! - [`live`]: the configuration a request runs under, and its reload on SIGHUP.
//! - [`metrics`]: `/metrics`, on its own listener or behind a bearer token.
//! - [`idle`]: the small wait for each HTTP/1.x request before pingora's proxy takes it.
//! - [`tls`]: the TLS listener (rustls): its accept loop, each connection's handshake before
//!   [`idle`], and the stream with buffers freed while it idles.
//!
//! May import: `api`, `proxy`, `service`, `app`, `auth`, `http`, `ops`, `dev`, and below.

pub mod acp;
pub mod cors;
pub mod gateway;
pub mod idempotency;
pub mod idle;
pub mod live;
pub mod mcp;
pub mod metrics;
pub mod ratelimit;
pub mod rest;
pub mod routes;
pub mod tls;
