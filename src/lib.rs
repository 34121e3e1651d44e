//! paycred: a payment credential service. It stores cards as payment methods, issues
//! short-lived, mandate-bounded credentials, and proxies requests to payment APIs with
//! card values substituted in, so callers never handle them.
//!
//! The layers, each importing only those below it (no module imports one above):
//!
//! ```text
//! cli/           the command line (`main.rs` only parses and calls it)
//! server         start-up: store, keys, the pingora server
//! delivery/      webhook delivery: the worker that sends the outbox's events
//! edge/          the HTTP edge: the gateway's phase table, routing, rate limits,
//!                idempotency, REST handling
//! api/ proxy/    the handlers: REST resources; the proxy route and its forwarding
//! service/       what handlers and the proxy share: card intake, credentials of intents
//! app            the shared state handed to handlers ([`app::App`])
//! auth/          JWT → Principal; minting development tokens
//! template/      the template language and its streaming scanners (JSON, form, XML)
//! audit/ vault/  the audit log; encryption at rest and keys
//! store/         persistence (the `Store` trait, the sled and PostgreSQL backends)
//! domain/        pure rules: cards, mandates, issuers
//! config/ ops/ dev/ http
//!                configuration; logs and metrics; development tools; HTTP plumbing
//! error clock secret
//!                leaves: the error envelope, time, secret types
//! ```

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod dev;
pub mod domain;
pub mod edge;
pub mod error;
pub mod http;
pub mod ops;
pub mod proxy;
pub mod secret;
pub mod server;
pub mod service;
pub mod store;
pub mod template;
pub mod vault;

pub use server::{build_app, build_server, StartError};
