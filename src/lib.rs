//! paycred: a payment credential service. It stores cards as payment methods, issues
//! short-lived, mandate-bounded credentials, and proxies requests to payment APIs with
//! card values substituted in, so callers never handle them.
//!
//! The layers, top first. A module imports only modules of the layers below its own, never
//! one of its own layer or above; `tests/it/layers.rs` reads this table and fails on any
//! import (production or test code) that breaks it.
//!
//! ```text
//! cli/                     the command line (`main.rs` only parses and calls it)
//! server                   start-up: store, keys, the pingora server
//! delivery/                webhook delivery: the worker that sends the outbox's events
//! edge/ browser/           the HTTP edge: the gateway's phase table, routing, rate limits,
//!                          idempotency, REST handling; the browser checkout's forward proxy
//!                          (interception CA, the swap, the CONNECT head)
//! api/ proxy/              the handlers: REST resources; the proxy route and its forwarding
//! service/                 what handlers and the proxy share: card intake, credentials of
//!                          intents, the target guard
//! app dev/                 the shared state handed to handlers ([`app::App`]); development
//!                          tools (`serve --dev`, the demo page)
//! auth/ vault/ template/   JWT → Principal; encryption at rest and keys; the template
//!                          language and its streaming scanners (JSON, form, XML)
//! store/                   persistence (the `Store` traits, the sled and PostgreSQL backends)
//! config/ domain/ http     configuration; pure rules (cards, mandates, issuers); HTTP
//!                          plumbing
//! audit/                   the audit log's entries, chain and files
//! ops/ error clock secret  leaves: logs and metrics, the error envelope, time, secret types
//! ```

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod browser;
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
