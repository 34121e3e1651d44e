//! Browser checkout: the forward proxy between an agent's browser and the internet, which
//! puts a purchase intent's real card values into requests to a browser session's allowed
//! hosts while the browser only ever holds stand-ins.
//!
//! - [`ca`]: the interception CA, the short-lived leaf certificate it mints for a host, and
//!   the rustls server configuration that terminates the browser's TLS with it.
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
pub mod swap;
