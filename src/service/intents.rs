//! Purchase intents' credentials, as the REST API and the proxy both reach them: revealing
//! an intent's credential, the credential a proxy template names, and counting a use.

use super::aad;
use crate::app::App;
use crate::domain::issuer::{Credential, CredentialType};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::secret::CardNumber;
use crate::store::{IntentRecord, PaymentMethodRecord, Scope, UseOutcome};

/// The intent's credential in clear (no audit here: the REST answer and the proxy each
/// audit what they reveal, and the sandbox's authorization only compares it): sealed with the intent, or for `pan`
/// read from the payment method while the project enables `pan`. `None` when there is none
/// (e.g. the payment method is gone).
pub async fn reveal(app: &App, rec: &IntentRecord) -> ApiResult<Option<Credential>> {
    match (&rec.credential_sealed, rec.credential_type) {
        (_, CredentialType::Pan) => {
            stored_card_credential(app, &rec.project, &rec.entity, &rec.payment_method_id).await
        }
        (Some(sealed), _) => {
            let at = aad::intent_credential(&rec.project, &rec.id);
            let plain = match &rec.credential_key {
                Some(key) => app.vault.open_under_own_key(
                    &rec.project,
                    &at,
                    &aad::intent_credential_key(&rec.project, &rec.id),
                    sealed,
                    key,
                )?,
                // Sealed under the data key itself (issued before intents had keys of their own).
                None => app.vault.open(&rec.project, &at, sealed)?,
            };
            let c: Credential = serde_json::from_slice(&plain).map_err(|_| {
                tracing::error!(intent = %rec.id, "sealed credential does not decode");
                ApiError::internal()
            })?;
            Ok(Some(c))
        }
        (None, _) => Ok(None),
    }
}

/// Seals an issued credential for the intent `id` under a key of its own: the sealed
/// credential and the wrapped key ([`IntentRecord::credential_key`]), which the store keeps
/// where the intent's end destroys it.
pub fn seal_credential(
    app: &App,
    project: &str,
    id: &str,
    credential: &Credential,
) -> ApiResult<(crate::store::Sealed, crate::store::Sealed)> {
    let plain =
        zeroize::Zeroizing::new(serde_json::to_vec(credential).map_err(|_| ApiError::internal())?);
    Ok(app.vault.seal_under_own_key(
        project,
        &aad::intent_credential(project, id),
        &aad::intent_credential_key(project, id),
        &plain,
    )?)
}

/// The stored card of a payment method: number, expiry, and the cvc while it is retained.
fn card_of(app: &App, pm: &PaymentMethodRecord) -> ApiResult<Credential> {
    let number = open_number(app, pm)?;
    let cvc = pm.card.cvc_sealed.as_ref().and_then(|sealed| {
        app.vault
            .open_cvc(&aad::pm_cvc(&pm.project, &pm.id), sealed, app.now_secs())
    });
    Ok(Credential {
        number,
        expiration_month: pm.card.expiration_month.clone(),
        expiration_year: pm.card.expiration_year.clone(),
        cvc,
        cryptogram: None,
    })
}

pub fn open_number(app: &App, pm: &PaymentMethodRecord) -> ApiResult<CardNumber> {
    let plain = app.vault.open(
        &pm.project,
        &aad::pm_number(&pm.project, &pm.id),
        &pm.card.number_sealed,
    )?;
    let number = std::str::from_utf8(&plain).map_err(|_| {
        tracing::error!(payment_method = %pm.id, "stored card number is not text");
        ApiError::internal()
    })?;
    Ok(CardNumber::new(number))
}

/// The newest `active`, unexpired intent of `kind` for the payment method, and its
/// credential: the intent's id ([`active_intent`] gives the whole intent). `Ok(None)` when
/// there is none.
pub async fn active_credential(
    app: &App,
    project: &str,
    entity: &str,
    payment_method_id: &str,
    kind: CredentialType,
) -> ApiResult<Option<(String, Credential)>> {
    let found = active_intent(app, project, entity, payment_method_id, kind).await?;
    Ok(found.map(|(rec, credential)| (rec.id, credential)))
}

/// For the proxy: the newest `active`, unexpired intent of `kind` for the payment method, and
/// its credential. `Ok(None)` when there is none. The proxy audits the reveal: its
/// `proxy.use` entry lists the intent.
/// (`pan` templates read the stored card: see [`stored_card_credential`].)
pub async fn active_intent(
    app: &App,
    project: &str,
    entity: &str,
    payment_method_id: &str,
    kind: CredentialType,
) -> ApiResult<Option<(IntentRecord, Credential)>> {
    let sc = Scope { project, entity };
    let Some(rec) = app
        .store
        .newest_active_intent(sc, payment_method_id, kind, app.clock.now())
        .await?
    else {
        return Ok(None);
    };
    let Some(credential) = reveal(app, &rec).await? else {
        return Ok(None);
    };
    Ok(Some((rec, credential)))
}

/// Prefix of a vault token id: the Delegate Payment route (`edge::acp`) answers the purchase
/// intent it created as `vt_…`, the intent's `pi_…` id with the other prefix.
pub const VAULT_TOKEN_PREFIX: &str = "vt_";
const INTENT_PREFIX: &str = "pi_";

/// The vault token id of the purchase intent `intent_id`.
pub fn vault_token_of(intent_id: &str) -> String {
    let rest = intent_id.strip_prefix(INTENT_PREFIX).unwrap_or(intent_id);
    format!("{VAULT_TOKEN_PREFIX}{rest}")
}

/// The purchase intent id a vault token id names; `None` for any other id.
pub fn intent_of_vault_token(id: &str) -> Option<String> {
    id.strip_prefix(VAULT_TOKEN_PREFIX)
        .filter(|rest| !rest.is_empty())
        .map(|rest| format!("{INTENT_PREFIX}{rest}"))
}

/// For the proxy: the intent `intent_id` and its credential while it is an `active` intent of
/// `kind` (a vault token names one intent, not the newest of a payment method). `Ok(None)`
/// otherwise. The proxy audits the reveal, as for [`active_intent`].
pub async fn intent_credential(
    app: &App,
    project: &str,
    entity: &str,
    intent_id: &str,
    kind: CredentialType,
) -> ApiResult<Option<(IntentRecord, Credential)>> {
    let sc = Scope { project, entity };
    let rec = app.store.get_intent(sc, intent_id).await?;
    match rec {
        Some(rec) if rec.is_active_of(kind, app.now_micros()) => {
            Ok(reveal(app, &rec).await?.map(|c| (rec, c)))
        }
        _ => Ok(None),
    }
}

/// For the proxy's `pan` templates: the stored card of the payment method (cvc only while it
/// is retained), when the project has `pan: enabled`. The proxy audits the reveal: its
/// `proxy.use` entry lists the payment method.
/// `Ok(None)` when the payment method does not exist in this scope or pan is disabled.
pub async fn stored_card_credential(
    app: &App,
    project: &str,
    entity: &str,
    payment_method_id: &str,
) -> ApiResult<Option<Credential>> {
    if !app.config.project(project).is_some_and(|p| p.pan_enabled) {
        return Ok(None);
    }
    let sc = Scope { project, entity };
    let Some(pm) = app.store.get_payment_method(sc, payment_method_id).await? else {
        return Ok(None);
    };
    card_of(app, &pm).map(Some)
}

/// For the proxy: counts one use of the intent whose credential a forwarded request carried.
/// 404 `notFound` for an unknown intent; 409 `conflict` when it can no longer be used
/// (expired, usage limit reached, not active).
pub async fn record_proxy_use(
    app: &App,
    project: &str,
    entity: &str,
    intent_id: &str,
) -> ApiResult<()> {
    let outcome = app
        .store
        .record_use(Scope { project, entity }, intent_id, app.clock.now())
        .await?;
    let why = match outcome {
        UseOutcome::Recorded(_) => return Ok(()),
        UseOutcome::NotFound => return Err(ApiError::not_found("Purchase intent")),
        UseOutcome::NotActive => "is not active",
        UseOutcome::Expired => "has expired",
        UseOutcome::UsageLimitReached => "has used up its usage limit",
    };
    Err(ApiError::new(
        ErrorKind::Conflict,
        format!("The purchase intent {why}."),
    ))
}

/// How often the finalizer looks for intents whose end is due.
pub const FINALIZE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Most intents one finalizer pass ends (the next pass takes the rest).
const FINALIZE_BATCH: usize = 500;

/// Ends the intents whose end is due at the app's time (past `expiresAt`, or a used-up limit
/// no use ended), and their browser sessions, through
/// [`IntentStore::end_intent`](crate::store::IntentStore::end_intent), which destroys their
/// credential; how many this call ended. Instances sharing a store may run it together: each
/// end is conditional, so an intent ends once.
pub async fn end_due_intents(app: &App) -> ApiResult<usize> {
    let now = app.now_micros();
    let due = app.store.intents_due_to_end(now, FINALIZE_BATCH).await?;
    let mut ended = 0;
    for d in due {
        let scope = Scope {
            project: &d.project,
            entity: &d.entity,
        };
        if app
            .store
            .end_intent(scope, &d.id, d.end, now)
            .await?
            .is_some()
        {
            ended += 1;
            end_browser_sessions(app, scope, &d.id, now).await?;
        }
    }
    Ok(ended)
}

/// Ends the `active` browser sessions of the intent `id`, which has just ended (each once,
/// with its `browser_session.ended` event).
async fn end_browser_sessions(app: &App, scope: Scope<'_>, id: &str, now: i64) -> ApiResult<()> {
    for session in app.store.list_browser_sessions(scope, id).await? {
        if session.status == crate::store::BrowserSessionStatus::Active {
            app.store
                .change_browser_session(&session.id, crate::store::SessionChange::End, now, None)
                .await?;
        }
    }
    Ok(())
}

/// Runs [`end_due_intents`] every [`FINALIZE_EVERY`] on a thread of its own while `app` lives.
pub fn spawn_finalizer(app: std::sync::Weak<App>) {
    let mut last_purge = std::time::Instant::now();
    super::spawn_every("intent-ends", FINALIZE_EVERY, app, move |runtime, app| {
        match runtime.block_on(end_due_intents(app)) {
            Ok(0) => {}
            Ok(n) => tracing::info!(ended = n, "intents ended by time"),
            Err(e) => tracing::warn!(error = ?e, "ending due intents"),
        }
        if last_purge.elapsed() >= crate::store::PURGE_EVERY {
            last_purge = std::time::Instant::now();
            if let Err(e) = runtime.block_on(app.store.purge_erased_keys()) {
                tracing::warn!(error = %e, "purging erased intent keys");
            }
        }
    });
}
