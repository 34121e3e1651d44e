//! Where each sealed value is bound: the vault's `aad` for every place a value is sealed, so
//! a ciphertext copied to another record, field or project does not open.

/// A payment method's card number.
pub fn pm_number(project: &str, pm_id: &str) -> String {
    ["pm/", project, "/", pm_id, "/number"].concat()
}

/// A payment method's cvc.
pub fn pm_cvc(project: &str, pm_id: &str) -> String {
    ["pm/", project, "/", pm_id, "/cvc"].concat()
}

/// A token-vault card's number.
pub fn token_number(project: &str, token_id: &str) -> String {
    ["tok/", project, "/", token_id, "/number"].concat()
}

/// A token-vault card's cvc.
pub fn token_cvc(project: &str, token_id: &str) -> String {
    ["tok/", project, "/", token_id, "/cvc"].concat()
}

/// A purchase intent's issued credential.
pub fn intent_credential(project: &str, intent_id: &str) -> String {
    ["pi/", project, "/", intent_id, "/credential"].concat()
}

/// A webhook endpoint's signing secret (`n`: which of its secrets).
pub fn webhook_secret(project: &str, endpoint_id: &str, n: u32) -> String {
    format!("we/{project}/{endpoint_id}/secret/{n}")
}

/// The key of its own that a purchase intent's credential is sealed under.
pub fn intent_credential_key(project: &str, intent_id: &str) -> String {
    ["pi/", project, "/", intent_id, "/credential-key"].concat()
}

/// The stored answer of an `Idempotency-Key`.
pub fn idempotent_answer(project: &str, entity: &str, key: &str) -> String {
    ["idem/", project, "/", entity, "/", key].concat()
}

/// A browser session's stand-in card values.
pub fn browser_stand_ins(project: &str, session_id: &str) -> String {
    ["bs/", project, "/", session_id, "/stand-ins"].concat()
}
