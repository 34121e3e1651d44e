//! The response guard as the guard benches arm it, shared by `benches/response_guard.rs` and
//! `benches/load/bin/guard_instructions.rs` (each includes this file as a module): one card
//! number, and a substituted CVC where asked, looked for in order-like JSON answers.

use paycred::config::{ProxyConfig, ResponseGuardMode};
use paycred::proxy::guard::ResponseGuard;
use paycred::secret::{CardNumber, Cvc};
use std::time::Duration;

/// The card number the guard looks for.
pub const NUMBER: &str = "4242424242424242";

/// The substituted CVC it looks for where asked.
pub const CVC: &str = "737";

/// A guard in `mode`, armed.
pub fn guard(mode: ResponseGuardMode, any_card: bool, cvc: bool) -> ResponseGuard {
    let mut g = ResponseGuard::new(&ProxyConfig {
        allowed_hosts: Vec::new(),
        allow_http: false,
        allow_private_networks: false,
        ca_file: None,
        timeout: Duration::from_secs(30),
        response_guard: mode,
        response_guard_any_card: any_card,
    });
    arm(&mut g, cvc);
    g
}

/// Arms `g` for one answer, as the proxy does for each request.
pub fn arm(g: &mut ResponseGuard, cvc: bool) {
    let cvcs = if cvc { vec![Cvc::new(CVC)] } else { Vec::new() };
    g.arm(vec![CardNumber::new(NUMBER)], cvcs);
}
