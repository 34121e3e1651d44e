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
//! - [`tls`]: the browser's TLS inside an intercepted tunnel, on rustls, as async I/O.
//! - [`message`]: what both protocols in the tunnel share: the request read whole, the sink
//!   its answer is written to, the exchange that serves it.
//! - [`http1`]: HTTP/1.1 in the tunnel: requests read whole within bounds, answers framed.
//! - [`http2`]: h2 in the tunnel (by ALPN): streams read whole within the same bounds,
//!   served concurrently, answers sent as flow control allows.
//! - [`forward`]: the listener on `browser_proxy.listen` and each connection: the session's
//!   credentials, interception or a blind tunnel, the swap, the count of a use, the
//!   forwarding to the host and the answer through the response guard.
//!
//! May import: the layers below `edge/` (`api`, `proxy`, `service`, `app`, `store`,
//! `config`, `domain`, `secret`, `error`, `clock`, `dev`, …); nothing of `edge`.

pub mod ca;
pub mod connect;
pub mod forward;
pub mod http1;
pub mod http2;
pub mod message;
pub mod swap;
pub mod tls;
