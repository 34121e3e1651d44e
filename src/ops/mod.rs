//! Operations: the server's log ([`logging`]) and its Prometheus metrics ([`metrics`]).
//!
//! Leaves: import nothing of paycred.

pub mod logging;
pub mod metrics;
