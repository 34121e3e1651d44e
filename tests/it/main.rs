//! The integration tests, one module per area, in one test binary: each binary links
//! pingora, sled and openssl, so one binary is built and linked once where a file per area
//! would link them fifteen times.
//!
//! Most areas start the real `paycred` binary on an ephemeral port with its own data dir
//! and keys and talk HTTP to it, through the harness in [`common`]; a recording server on
//! 127.0.0.1 (`common::upstream`) stands in for targets. `storage_faults` and
//! `template_props` call the library in-process; `layers` reads the source files.
//!
//! Run one area with `cargo test --test it AREA::` (e.g. `cargo test --test it proxy::`).
//! Proptest keeps the failing cases it found in `tests/proptest-regressions/AREA.txt` and
//! runs them first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod acp;
mod audit;
mod audit_head;
mod auth;
mod browser;
mod client_encryption;
mod cors;
mod crash;
mod credential_end;
mod deliveries;
mod errors;
mod events;
mod files;
mod form_props;
mod h2;
mod idempotency;
mod keepalive;
mod key_providers;
mod keys;
mod layers;
mod log_hygiene;
mod master_key;
mod mcp;
mod merchants;
mod operations;
mod passkeys;
mod payment_methods;
mod postgres;
mod proxy;
mod proxy_formats;
mod proxy_guard;
mod purchase_intents;
mod ratelimit;
mod restart;
mod shared_limits;
mod slow_bodies;
mod storage_faults;
mod template_props;
mod tls_listener;
mod uses_ahead;
mod verify_dialects;
mod webhooks;
mod xml_props;
