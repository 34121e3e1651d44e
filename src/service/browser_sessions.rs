//! Browser sessions as the REST API and the browser proxy both reach them: the stand-ins of
//! a session with the intent's real values ([`card_of`]), the keyed hash that finds a
//! session by its stand-in number ([`stand_in_key`]), the proxy password ([`new_password`],
//! [`password_matches`]), and the live session a proxy credential names ([`authenticate`]).
//!
//! The password is 32 random bytes (base64url), so its SHA-256 is all that is stored: a
//! value of 256 bits needs no slow hash, and the proxy checks it on every connection.

use super::{aad, intents};
use crate::app::App;
use crate::domain::card::standin::StandIns;
use crate::domain::issuer::Credential;
use crate::error::{ApiError, ApiResult};
use crate::store::{BrowserSessionRecord, IntentRecord, IntentStatus, SessionChange};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// The master-key derivation context of the stand-in number's keyed hash.
const STAND_IN_CONTEXT: &str = "paycred browser checkout stand-in index";

/// The stand-ins as sealed in a session (not secret, but card-shaped: kept like card data).
#[derive(Serialize, Deserialize)]
pub struct StoredStandIns {
    pub number: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cvc: Option<String>,
    /// The real credential's expiry, which the session shows as it is.
    pub expiration_month: String,
    pub expiration_year: String,
}

/// The keyed hash (hex HMAC-SHA-256 under a key derived from the master key) of a stand-in
/// number: what finds its session, and keeps it to one live session.
pub fn stand_in_key(app: &App, number: &str) -> ApiResult<String> {
    let key = app.vault.derive_secret(STAND_IN_CONTEXT);
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key.expose()).map_err(|_| ApiError::internal())?;
    mac.update(number.as_bytes());
    Ok(hex::encode(mac.finalize().into_bytes()))
}

/// A fresh proxy password and its stored hash.
pub fn new_password() -> (Zeroizing<String>, String) {
    let mut bytes = Zeroizing::new([0u8; 32]);
    rand::rngs::OsRng.fill_bytes(bytes.as_mut());
    let password = Zeroizing::new(URL_SAFE_NO_PAD.encode(bytes.as_ref()));
    let hash = password_hash(&password);
    (password, hash)
}

fn password_hash(password: &str) -> String {
    hex::encode(Sha256::digest(password.as_bytes()))
}

/// Whether `password` is the session's (compared in constant time).
pub fn password_matches(session: &BrowserSessionRecord, password: &str) -> bool {
    let given = password_hash(password);
    given
        .as_bytes()
        .ct_eq(session.password_hash.as_bytes())
        .into()
}

/// Seals a session's stand-ins for the record.
pub fn seal_stand_ins(
    app: &App,
    project: &str,
    id: &str,
    stored: &StoredStandIns,
) -> ApiResult<crate::store::Sealed> {
    let plain = Zeroizing::new(serde_json::to_vec(stored).map_err(|_| ApiError::internal())?);
    Ok(app
        .vault
        .seal(project, &aad::browser_stand_ins(project, id), &plain)?)
}

/// The session's stand-ins as stored.
pub fn open_stand_ins(app: &App, session: &BrowserSessionRecord) -> ApiResult<StoredStandIns> {
    let plain = app.vault.open(
        &session.project,
        &aad::browser_stand_ins(&session.project, &session.id),
        &session.stand_ins_sealed,
    )?;
    serde_json::from_slice(&plain).map_err(|_| {
        tracing::error!(session = %session.id, "sealed stand-ins do not decode");
        ApiError::internal()
    })
}

/// The session's card: its stand-ins with the real values of `intent` (the session's, as
/// [`settled_with_intent`] read it); `None` when the intent has no credential to reveal any
/// more (it ended).
pub async fn card_of(
    app: &App,
    session: &BrowserSessionRecord,
    intent: &IntentRecord,
) -> ApiResult<Option<StandIns>> {
    let Some(credential) = intents::reveal(app, intent).await? else {
        return Ok(None);
    };
    let stored = open_stand_ins(app, session)?;
    let Credential { number, cvc, .. } = credential;
    let cvc = match (cvc, stored.cvc) {
        (Some(real), Some(stand_in)) => Some((real, stand_in)),
        _ => None,
    };
    StandIns::from_stored(number, stored.number, cvc)
        .map(Some)
        .map_err(|e| {
            tracing::error!(session = %session.id, error = %e, "stored stand-ins do not fit the credential");
            ApiError::internal()
        })
}

/// The session as it is at the app's time: a session past its `expiresAt`, or whose intent
/// is no longer `active`, is ended now (once, with its event) and answered ended.
pub async fn settled(app: &App, session: BrowserSessionRecord) -> ApiResult<BrowserSessionRecord> {
    Ok(settled_with_intent(app, session).await?.0)
}

/// [`settled`], with the intent it read when the session is live (the proxy reveals its
/// credential next, without reading it again).
pub async fn settled_with_intent(
    app: &App,
    session: BrowserSessionRecord,
) -> ApiResult<(BrowserSessionRecord, Option<IntentRecord>)> {
    if session.status != crate::store::BrowserSessionStatus::Active {
        return Ok((session, None));
    }
    let now = app.now_micros();
    let intent = app
        .store
        .get_intent(session.scope(), &session.intent_id)
        .await?
        .filter(|i| i.status_at(now) == IntentStatus::Active);
    if intent.is_some() && session.live_at(now) {
        return Ok((session, intent));
    }
    Ok((end(app, &session, None).await?, None))
}

/// Ends the session now (with `audit`, if any): the ended record, also when another request
/// ended it first.
pub async fn end(
    app: &App,
    session: &BrowserSessionRecord,
    audit: Option<crate::audit::AuditEvent>,
) -> ApiResult<BrowserSessionRecord> {
    let now = app.now_micros();
    let change = app
        .store
        .change_browser_session(&session.id, SessionChange::End, now, audit)
        .await?;
    if let Some(ended) = change {
        return Ok(ended);
    }
    Ok(app
        .store
        .get_browser_session(&session.id)
        .await?
        .unwrap_or_else(|| session.ended(now)))
}

/// The live session the proxy credential (`username`, `password`) names, as it is now;
/// `None` for an unknown user name, a wrong password or a session that has ended.
pub async fn authenticate(
    app: &App,
    username: &str,
    password: &str,
) -> ApiResult<Option<BrowserSessionRecord>> {
    let Some(session) = app.store.get_browser_session(username).await? else {
        return Ok(None);
    };
    if !password_matches(&session, password) {
        return Ok(None);
    }
    let session = settled(app, session).await?;
    Ok(session.live_at(app.now_micros()).then_some(session))
}

/// The caller's session `id` of its intent `intent_id` (private role only), settled
/// ([`settled`]); 404 for any other.
pub async fn find(
    app: &App,
    principal: &crate::auth::Principal,
    intent_id: &str,
    id: &str,
) -> ApiResult<BrowserSessionRecord> {
    principal.require_private()?;
    match app.store.get_browser_session(id).await? {
        Some(s)
            if s.project == principal.project
                && s.entity == principal.entity
                && s.intent_id == intent_id =>
        {
            settled(app, s).await
        }
        _ => Err(ApiError::not_found("Browser session")),
    }
}
