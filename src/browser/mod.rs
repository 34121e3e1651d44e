//! Browser checkout: the forward proxy between an agent's browser and the internet, which
//! puts a purchase intent's real card values into requests to a browser session's allowed
//! hosts while the browser only ever holds stand-ins.
//!
//! - [`ca`]: the interception CA, the short-lived leaf certificate it mints for a host, and
//!   the rustls server configuration that terminates the browser's TLS with it.
//! - [`standin`]: the stand-in number and CVC of a session, and its (real, stand-in) pairs.
//! - [`swap`]: a request's body and query with every whole stand-in value replaced by the
//!   real one.
//! - [`connect`]: the proxy request head a browser opens a connection with (`CONNECT`,
//!   `Proxy-Authorization`), read within bounds, and the proxy's small error answers.
//!
//! Plain code over bytes, keys and rustls types: no listener and no store here.
//!
//! May import: the layers below `edge/` (`config`, `domain`, `secret`, `error`, `clock`,
//! `dev`); nothing of `edge`.

pub mod ca;
pub mod connect;
pub mod standin;
pub mod swap;

/// Whether `host` is a host name: dot-separated labels of 1 to 63 letters, digits, `-` or
/// `_`, 253 characters at most (no wildcard, no trailing dot).
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}
