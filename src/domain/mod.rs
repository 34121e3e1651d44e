//! Pure rules, no I/O: cards ([`card`]: validation, brands, display), mandates ([`mandate`]:
//! both forms, enforcement) and issuers ([`issuer`]: the `Issuer` trait and the sandbox).
//!
//! May import: `secret`, `clock`, `error`. Nothing here reads the store or the vault.

pub mod card;
pub mod issuer;
pub mod mandate;
pub mod webhook;
