//! Passkeys (WebAuthn), shared by the passkey routes (registration) and verification (the
//! assertion a purchase intent asks for). The WebAuthn library checks every ceremony:
//! challenge, origin, RP ID, signature, user presence and verification, and the signature
//! counter. Its ceremony state is kept in the store ([`PasskeyStore::put_webauthn_state`]), so any
//! instance finishes what another started, and is taken once.
//!
//! [`PasskeyStore::put_webauthn_state`]: crate::store::PasskeyStore::put_webauthn_state

use crate::app::App;
use crate::config::passkeys::Passkeys;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::store::{IntentRecord, PasskeyRecord, Scope, WebauthnStateRecord};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use webauthn_rs::prelude::{
    Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Uuid, WebauthnError,
};

/// How long a ceremony's options stay usable (a purchase intent's: at most until it expires).
pub const CEREMONY_MICROS: i64 = 5 * 60 * 1_000_000;

/// The project's passkey settings; `None` when passkeys are off.
pub fn settings(app: &App, project: &str) -> Option<Passkeys> {
    app.config.project(project).and_then(|p| p.passkeys.clone())
}

/// The project's passkey settings, or 404 when passkeys are off.
pub fn required(app: &App, project: &str) -> ApiResult<Passkeys> {
    settings(app, project).ok_or_else(|| {
        ApiError::new(
            ErrorKind::NotFound,
            "Passkeys are not enabled for this project (verification.passkeys).",
        )
    })
}

/// A passkey refused: 400 `invalidPasskey`, `details.reason` naming the check that failed.
pub fn refused(reason: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::InvalidPasskey, message).with_details(json!({ "reason": reason }))
}

/// What a WebAuthn library error means to the caller: (reason, message). Never the
/// credential's bytes.
fn explain(e: &WebauthnError) -> (&'static str, &'static str) {
    match e {
        WebauthnError::MismatchedChallenge | WebauthnError::ChallengeNotFound => (
            "challenge",
            "The passkey signed another challenge (replayed, or for another request).",
        ),
        WebauthnError::InvalidRPOrigin => (
            "origin",
            "The passkey was used from a page whose origin is not allowed.",
        ),
        WebauthnError::InvalidRPIDHash => ("rpId", "The passkey is for another relying party."),
        WebauthnError::UserNotPresent => ("userPresence", "The user was not present."),
        WebauthnError::UserNotVerified => ("userVerification", "The user was not verified."),
        WebauthnError::CredentialPossibleCompromise => (
            "counter",
            "The passkey's signature counter did not grow: a cloned authenticator is refused.",
        ),
        WebauthnError::CredentialNotFound => ("unknownPasskey", "The passkey is not registered."),
        WebauthnError::InvalidClientDataType => {
            ("clientData", "The client data is of another ceremony.")
        }
        _ => ("signature", "The passkey's response does not verify."),
    }
}

fn webauthn_refused(e: &WebauthnError) -> ApiError {
    let (reason, message) = explain(e);
    refused(reason, message)
}

/// A fresh id: `prefix` and 32 hex digits.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// The WebAuthn user handle of an entity: stable, and tells nothing of the entity's id.
fn user_handle(scope: Scope<'_>) -> Uuid {
    let digest = Sha256::new()
        .chain_update(scope.project.as_bytes())
        .chain_update([0u8])
        .chain_update(scope.entity.as_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(bytes)
}

fn to_value<T: serde::Serialize>(value: &T) -> ApiResult<Value> {
    serde_json::to_value(value).map_err(|_| ApiError::internal())
}

fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> ApiResult<T> {
    serde_json::from_value(value).map_err(|_| ApiError::internal())
}

/// The `publicKey` member of the library's options, as `navigator.credentials` takes it.
fn public_key(options: &impl serde::Serialize) -> ApiResult<Value> {
    let mut value = to_value(options)?;
    Ok(value
        .get_mut("publicKey")
        .map(Value::take)
        .unwrap_or(Value::Null))
}

/// The scope's passkeys with their decoded credentials.
pub async fn passkeys_of(app: &App, scope: Scope<'_>) -> ApiResult<Vec<(PasskeyRecord, Passkey)>> {
    let records = app.store.list_passkeys(scope).await?;
    records
        .into_iter()
        .map(|r| {
            let key: Passkey = from_value(r.credential.clone())?;
            Ok((r, key))
        })
        .collect()
}

/// Starts a registration: the creation options (user verification required, a resident key
/// preferred) and the id the finish names; the state is stored.
pub async fn start_registration(
    app: &App,
    settings: &Passkeys,
    scope: Scope<'_>,
) -> ApiResult<(String, Value)> {
    let existing: Vec<_> = passkeys_of(app, scope)
        .await?
        .into_iter()
        .map(|(_, k)| k.cred_id().clone())
        .collect();
    let (options, state) = settings
        .webauthn
        .start_passkey_registration(
            user_handle(scope),
            scope.entity,
            scope.entity,
            Some(existing),
        )
        .map_err(|_| ApiError::internal())?;
    let mut options = public_key(&options)?;
    if let Some(selection) = options
        .get_mut("authenticatorSelection")
        .and_then(Value::as_object_mut)
    {
        // A discoverable credential where the authenticator can: the end user picks it
        // without typing anything. Verification does not depend on it.
        selection.insert("residentKey".into(), json!("preferred"));
        selection.insert("requireResidentKey".into(), json!(false));
    }
    let id = new_id("pkr_");
    let now = app.now_micros();
    let record = WebauthnStateRecord {
        expires_micros: now.saturating_add(CEREMONY_MICROS),
        state: to_value(&state)?,
    };
    app.store
        .put_webauthn_state(scope, &registration_key(&id), &record, now)
        .await?;
    Ok((id, options))
}

fn registration_key(id: &str) -> String {
    format!("registration:{id}")
}

fn assertion_key(intent_id: &str) -> String {
    format!("intent:{intent_id}")
}

/// Finishes a registration: the new passkey's credential, checked. 400 naming
/// `registrationId` when it is unknown, used or expired; `invalidPasskey` when the
/// credential does not verify.
pub async fn finish_registration(
    app: &App,
    settings: &Passkeys,
    scope: Scope<'_>,
    registration_id: &str,
    credential: Value,
) -> ApiResult<Passkey> {
    let credential: RegisterPublicKeyCredential =
        serde_json::from_value(credential).map_err(|_| {
            ApiError::invalid_field(
                "credential",
                "must be the PublicKeyCredential navigator.credentials.create made, as JSON",
            )
        })?;
    let Some(state) = app
        .store
        .take_webauthn_state(scope, &registration_key(registration_id), app.now_micros())
        .await?
    else {
        return Err(ApiError::invalid_field(
            "registrationId",
            "unknown, already used or expired: ask for new registration options",
        ));
    };
    let state: PasskeyRegistration = from_value(state.state)?;
    settings
        .webauthn
        .finish_passkey_registration(&credential, &state)
        .map_err(|e| webauthn_refused(&e))
}

/// The assertion options for a purchase intent in `verify`, when its project has passkeys and
/// its entity at least one: the state stored for the intent (in place of an earlier one), to
/// expire with the options or the intent, whichever comes first. `None`: the one-time code.
pub async fn start_assertion(
    app: &App,
    scope: Scope<'_>,
    intent: &IntentRecord,
) -> ApiResult<Option<Value>> {
    let Some(settings) = settings(app, scope.project) else {
        return Ok(None);
    };
    let keys: Vec<Passkey> = passkeys_of(app, scope)
        .await?
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    if keys.is_empty() {
        return Ok(None);
    }
    let (options, state) = settings
        .webauthn
        .start_passkey_authentication(&keys)
        .map_err(|_| ApiError::internal())?;
    let now = app.now_micros();
    let record = WebauthnStateRecord {
        expires_micros: now
            .saturating_add(CEREMONY_MICROS)
            .min(intent.expires_micros),
        state: to_value(&state)?,
    };
    app.store
        .put_webauthn_state(scope, &assertion_key(&intent.id), &record, now)
        .await?;
    Ok(Some(public_key(&options)?))
}

/// Whether the scope verifies with a passkey (project configured, one registered).
pub async fn uses_passkeys(app: &App, scope: Scope<'_>) -> ApiResult<bool> {
    if settings(app, scope.project).is_none() {
        return Ok(false);
    }
    Ok(!app.store.list_passkeys(scope).await?.is_empty())
}

/// Checks an assertion for the intent's waiting challenge (taken now, once), and stores the
/// passkey's grown counter and last use. `invalidPasskey` when it does not verify, with
/// `reason`: `challenge` (none waiting: replayed, or never asked for), the library's checks,
/// `unknownPasskey` (deleted meanwhile) or `counter` (did not grow past the stored one).
pub async fn finish_assertion(
    app: &App,
    scope: Scope<'_>,
    intent_id: &str,
    assertion: Value,
) -> ApiResult<()> {
    let settings = required(app, scope.project)?;
    let assertion: PublicKeyCredential = serde_json::from_value(assertion).map_err(|_| {
        ApiError::invalid_field(
            "assertion",
            "must be the PublicKeyCredential navigator.credentials.get made, as JSON",
        )
    })?;
    let Some(state) = app
        .store
        .take_webauthn_state(scope, &assertion_key(intent_id), app.now_micros())
        .await?
    else {
        return Err(refused(
            "challenge",
            "No passkey challenge is waiting for this purchase intent (used, expired or never \
             asked for): ask for the next step again.",
        ));
    };
    let state: PasskeyAuthentication = from_value(state.state)?;
    let result = settings
        .webauthn
        .finish_passkey_authentication(&assertion, &state)
        .map_err(|e| webauthn_refused(&e))?;
    // The stored passkey as it is now: deleted meanwhile, or used since the challenge.
    let Some((mut record, mut key)) = passkeys_of(app, scope)
        .await?
        .into_iter()
        .find(|(_, k)| k.cred_id() == result.cred_id())
    else {
        return Err(webauthn_refused(&WebauthnError::CredentialNotFound));
    };
    let stored = stored_counter(&record);
    if (result.counter() > 0 || stored > 0) && result.counter() <= stored {
        return Err(webauthn_refused(
            &WebauthnError::CredentialPossibleCompromise,
        ));
    }
    key.update_credential(&result);
    record.credential = to_value(&key)?;
    record.last_used_micros = Some(app.now_micros());
    if !app.store.put_passkey(&record, None).await? {
        return Err(webauthn_refused(&WebauthnError::CredentialNotFound));
    }
    Ok(())
}

/// The signature counter of a stored credential.
fn stored_counter(record: &PasskeyRecord) -> u32 {
    record
        .credential
        .pointer("/cred/counter")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}
