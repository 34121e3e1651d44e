//! `Idempotency-Key` on the REST POST routes, with Stripe's semantics (and on the Delegate
//! Payment route, `super::acp`, which requires the key and answers its 409s in ACP's terms):
//!
//! - The key is scoped by (project, entity) of the token: two entities may use the same key.
//! - The first request with a key runs; a 2xx answer is stored (status and body, the body
//!   sealed by the vault) for 24 h.
//! - The same key again with the same request (method, path, body bytes and the token's
//!   role) answers the stored response, with `Idempotent-Replayed: true`, without running
//!   anything.
//! - An answer that shows a purchase intent (a create) is stored as the intent's id, not as
//!   its body: a replay shows the same intent as it is then, with the credential only under
//!   GET's rules (while `active`, the cvc while retained, each reveal audited). So a replay
//!   never outlives the cvc's retention or the payment method's deletion, and no credential
//!   is kept for replays. It follows the intent both ways: a create answered `verify` (no
//!   credential yet) replays with the credential once the intent is verified, as GET would.
//! - The same key with another request: 409 `conflict`.
//! - A record keeps of its request only a fingerprint keyed per project ([`fingerprint`]:
//!   HMAC-SHA256, `k1:` and hex), never a plain hash: a body may carry a card (a payment
//!   method's create, ACP's delegate payment), and a plain hash of it could be searched offline
//!   from a copy of the store (the IIN, last four and expiry leave a few million numbers to
//!   try). The key is derived from the project's fingerprint key, which only a paycred with
//!   the master key opens: every instance on the store derives the same, and data-key and
//!   master-key rotations leave it as it is, so a replay matches on any instance at any time
//!   within [`TTL`]. A fingerprint without a version (a plain SHA-256, as earlier releases
//!   stored: [`legacy_fingerprint`]) is compared the plain way, so a replay across an
//!   upgrade still matches; no record is written that way.
//! - While the first request with a key is still running, another one with that key gets
//!   409 `conflict` at once (it does not wait); the caller retries later and gets the replay.
//! - Errors (4xx validation failures, 5xx) are not stored: the same key may be retried.
//!
//! In-flight keys are held in memory, and, where several instances share the store
//! (PostgreSQL), also claimed in the store with a lease of [`LEASE`]
//! ([`IdempotencyStore::claim_idempotent`](crate::store::IdempotencyStore::claim_idempotent)):
//! the same key sent to several instances at once runs once, the others answer 409 (or the
//! stored answer once it is there). A claim is released when its request ends; one whose
//! instance crashed (or whose client went away mid-request) lapses after [`LEASE`], so a key
//! is never locked for longer. Known window: a crash after the write became durable but before the
//! stored response did leaves the key free, so a retry runs again (a payment method then
//! answers 200 with the existing card, found by fingerprint; a purchase intent is issued anew).
//! The proxy route is not covered: its `Idempotency-Key` header goes to the target, whose own
//! idempotency applies.

use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::http::Response;
use crate::store::{IdempotentRecord, Scope};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// How long a response is replayed.
pub const TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a claim on a key holds in the store without being released.
pub const LEASE: Duration = Duration::from_secs(60);
/// Longest accepted key.
pub const MAX_KEY_LEN: usize = 255;
/// The request header.
pub const HEADER: &str = "idempotency-key";

/// The `Idempotency-Key` header of a request, checked: 1–255 visible ASCII characters.
pub fn key_from(headers: &http::HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(HEADER) else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY_LEN || !bytes.iter().all(|b| b.is_ascii_graphic())
    {
        return Err(ApiError::invalid_field(
            "Idempotency-Key",
            "1 to 255 visible ASCII characters",
        ));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// Keys whose first request is running.
pub type InFlight = crate::app::InFlight<Vec<u8>>;

/// The fingerprint a record keeps of its request: keyed by the project's key
/// ([`Vault::request_fingerprint`](crate::vault::Vault::request_fingerprint), `k1:…`).
pub(crate) fn fingerprint(
    app: &App,
    project: &str,
    (method, path, body): (&str, &str, &[u8]),
) -> ApiResult<String> {
    let parts: [&[u8]; 3] = [method.as_bytes(), path.as_bytes(), body];
    Ok(app.vault.request_fingerprint(project, &parts)?)
}

/// The unkeyed fingerprint of records stored by earlier releases: SHA-256 (hex) of method,
/// path and body joined by NUL bytes. Only compared with such records, never stored.
pub(crate) fn legacy_fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(path.as_bytes());
    h.update([0]);
    h.update(body);
    hex::encode(h.finalize())
}

/// Whether a stored fingerprint is this request's: a keyed one (`k1:…`) against `keyed`, in
/// constant time; one without a version (a record of an earlier release, kept at most
/// [`TTL`]) against the request's [`legacy_fingerprint`].
fn same_request(stored: &str, keyed: &str, (method, path, body): (&str, &str, &[u8])) -> bool {
    if stored.contains(':') {
        stored.as_bytes().ct_eq(keyed.as_bytes()).into()
    } else {
        stored == legacy_fingerprint(method, path, body)
    }
}

/// The intent id of a purchase-intent answer stored whole, as records were before
/// [`IdempotentRecord::intent_id`] (and `role`) existed: such a record is replayed as the
/// intent is now, like a new one. Only `id` and `credentialType` are read from the body.
fn legacy_intent_id(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct IntentShape {
        id: String,
        #[serde(rename = "credentialType")]
        _credential_type: serde::de::IgnoredAny,
    }
    serde_json::from_slice::<IntentShape>(body)
        .ok()
        .map(|shape| shape.id)
}

pub(crate) fn aad(principal: &Principal, key: &str) -> String {
    format!("idem/{}/{}/{key}", principal.project, principal.entity)
}

fn micros(app: &App) -> i64 {
    i64::try_from(app.clock.now().unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// The 409 messages: the key's first request still runs; the key was used with another
/// request.
const IN_PROGRESS: &str = "A request with this Idempotency-Key is still in progress; retry later.";
const REUSED: &str = "This Idempotency-Key was used with a different request.";

fn in_progress() -> ApiError {
    ApiError::new(ErrorKind::Conflict, IN_PROGRESS)
}

/// Whether `e` is [`run`]'s 409 for a key whose first request still runs.
pub fn is_in_progress(e: &ApiError) -> bool {
    e.kind == ErrorKind::Conflict && e.message == IN_PROGRESS
}

/// Whether `e` is [`run`]'s 409 for a key used with another request.
pub fn is_reused(e: &ApiError) -> bool {
    e.kind == ErrorKind::Conflict && e.message == REUSED
}

/// Runs `execute` at most once per (project, entity, key) within [`TTL`].
pub async fn run<F>(
    app: &App,
    in_flight: &InFlight,
    principal: &Principal,
    request: (&str, &str, &[u8]),
    key: &str,
    execute: F,
) -> ApiResult<Response>
where
    F: Future<Output = ApiResult<Response>>,
{
    let scope = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    let fp = fingerprint(app, &principal.project, request)?;
    let Some(_held) = in_flight.enter(crate::store::sled::idempotency::key(scope, key)) else {
        return Err(in_progress());
    };
    let now = micros(app);
    let lease_until = now.saturating_add(i64::try_from(LEASE.as_micros()).unwrap_or(0));
    let claimed = app
        .store
        .claim_idempotent(scope, key, now, lease_until)
        .await?;
    let answer = run_claimed(app, principal, (&fp, request), key, claimed, execute).await;
    if claimed {
        if let Err(e) = app.store.release_idempotent(scope, key).await {
            tracing::warn!(error = %e, "releasing an Idempotency-Key (it lapses with its lease)");
        }
    }
    answer
}

/// [`run`] once the key is held in this process; `claimed`: also in the store.
async fn run_claimed<F>(
    app: &App,
    principal: &Principal,
    (fp, request): (&str, (&str, &str, &[u8])),
    key: &str,
    claimed: bool,
    execute: F,
) -> ApiResult<Response>
where
    F: Future<Output = ApiResult<Response>>,
{
    let scope = Scope {
        project: &principal.project,
        entity: &principal.entity,
    };
    let path = request.1;
    let now = micros(app);
    if let Some(rec) = app.store.get_idempotent(scope, key, now).await? {
        let other_role = rec
            .role
            .as_deref()
            .is_some_and(|role| role != principal.role.as_str());
        if !same_request(&rec.fingerprint, fp, request) || other_role {
            return Err(ApiError::new(ErrorKind::Conflict, REUSED));
        }
        let body = match &rec.body_sealed {
            Some(sealed) => Some(app.vault.open(
                &principal.project,
                &aad(principal, key),
                sealed,
            )?),
            None => None,
        };
        let intent_id = match (&rec.intent_id, &rec.role, &body) {
            (Some(id), _, _) => Some(id.clone()),
            (None, None, Some(body)) if path.ends_with("/purchase-intents") => {
                legacy_intent_id(body)
            }
            _ => None,
        };
        if let Some(intent_id) = intent_id {
            let shown =
                crate::api::purchase_intents::show(app, principal, &intent_id, rec.status).await?;
            return Ok(shown.with_header("Idempotent-Replayed", "true".to_string()));
        }
        let body = body.map(|b| Bytes::from(b.to_vec()));
        return Ok(Response {
            status: rec.status,
            headers: vec![("Idempotent-Replayed", "true".to_string())],
            body,
            intent: None,
        });
    }
    if !claimed {
        return Err(in_progress());
    }
    let response = execute.await?;
    if (200..300).contains(&response.status) {
        let body_sealed = match (&response.intent, &response.body) {
            (Some(_), _) | (None, None) => None,
            (None, Some(b)) => Some(
                app.vault
                    .seal(&principal.project, &aad(principal, key), b)?,
            ),
        };
        let rec = IdempotentRecord {
            fingerprint: fp.to_string(),
            status: response.status,
            body_sealed,
            intent_id: response.intent.clone(),
            role: Some(principal.role.as_str().to_string()),
            created_micros: now,
            expires_micros: now.saturating_add(i64::try_from(TTL.as_micros()).unwrap_or(0)),
        };
        // The work is done and durable: answer it even if the record cannot be stored.
        if let Err(e) = app.store.put_idempotent(scope, key, &rec).await {
            tracing::error!(error = %e, "storing an idempotent response");
        }
    }
    Ok(response)
}

/// Removes expired responses every minute while the store lives.
pub fn spawn_sweeper(store: std::sync::Weak<dyn crate::store::Store>) {
    let _ = std::thread::Builder::new()
        .name("paycred-idem-sweep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(60));
            let Some(store) = store.upgrade() else { return };
            let now = i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000)
                .unwrap_or(i64::MAX);
            if let Err(e) = store.sweep_idempotent(now) {
                tracing::warn!(error = %e, "sweeping idempotent responses");
            }
        });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::intents_tests::{
        add_card, env, get_intent, guide_usd, private, reply, scope, who, Env, PAN_PROJECT, VISA,
    };
    use crate::api::{payment_methods, purchase_intents::create};
    use crate::auth::Role;
    use crate::clock::micros;
    use serde_json::{json, Value};
    use time::Duration;

    #[test]
    fn keys_are_checked() {
        let mut h = http::HeaderMap::new();
        assert_eq!(key_from(&h).ok(), Some(None));
        h.insert(HEADER, http::HeaderValue::from_static("abc-123_x"));
        assert_eq!(key_from(&h).ok(), Some(Some("abc-123_x".into())));
        h.insert(HEADER, http::HeaderValue::from_static("a b"));
        assert!(key_from(&h).is_err());
        h.insert(
            HEADER,
            http::HeaderValue::from_str(&"k".repeat(256)).unwrap_or_else(|_| unreachable!()),
        );
        assert!(key_from(&h).is_err());
    }

    #[test]
    fn fingerprints_cover_method_path_and_body() {
        let a = legacy_fingerprint("POST", "/p", b"{}");
        assert_eq!(a, legacy_fingerprint("POST", "/p", b"{}"));
        assert_ne!(a, legacy_fingerprint("POST", "/q", b"{}"));
        assert_ne!(a, legacy_fingerprint("POST", "/p", b"{ }"));
        assert_ne!(a, legacy_fingerprint("PUT", "/p", b"{}"));
    }

    /// `execute` answered through `Idempotency-Key` as the POST of `req` to `route` under
    /// the project: status, body, and whether it was a replay.
    async fn run_once(
        app: &App,
        p: &Principal,
        (key, route, req): (&str, &str, &str),
        execute: impl Future<Output = ApiResult<Response>>,
    ) -> (u16, Value, bool) {
        let path = format!("/projects/{PAN_PROJECT}/{route}");
        let in_flight = super::InFlight::default();
        let request = ("POST", path.as_str(), req.as_bytes());
        let r = super::run(app, &in_flight, p, request, key, execute).await;
        let replayed = r
            .as_ref()
            .is_ok_and(|r| r.headers.iter().any(|(n, _)| *n == "Idempotent-Replayed"));
        let (status, v) = reply(r);
        (status, v, replayed)
    }

    /// A payment-method create (a card in its body) answered through `Idempotency-Key`.
    async fn add_card_once(app: &App, p: &Principal, key: &str, req: &str) -> (u16, Value, bool) {
        let execute = payment_methods::create(app, p, req.as_bytes());
        run_once(app, p, (key, "payment-methods", req), execute).await
    }

    #[tokio::test]
    async fn a_card_bearing_request_is_kept_only_as_a_keyed_fingerprint() {
        let env = env();
        let p = private("user_1");
        let req = json!({"entityId": "user_1", "card": {"number": VISA,
            "expirationMonth": "12", "expirationYear": "2031", "cvc": "123"}})
        .to_string();
        let path = format!("/projects/{PAN_PROJECT}/payment-methods");
        let (status, first, replayed) = add_card_once(&env.app, &p, "new", &req).await;
        assert_eq!((status, replayed), (201, false), "{first}");

        let sc = scope(PAN_PROJECT, "user_1");
        let now = micros(env.app.clock.now());
        let stored = env.app.store.get_idempotent(sc, "new", now).await.unwrap();
        let stored = stored.unwrap();
        let plain = legacy_fingerprint("POST", &path, req.as_bytes());
        let keyed = stored.fingerprint.starts_with("k1:") && !stored.fingerprint.contains(&plain);
        assert!(keyed, "not keyed: {}", stored.fingerprint);
        assert_eq!(
            Ok(stored.fingerprint.clone()),
            fingerprint(&env.app, PAN_PROJECT, ("POST", &path, req.as_bytes()))
                .map_err(|e| e.status())
        );

        // A record of an earlier release: the plain SHA-256, compared as such until it expires.
        let legacy = IdempotentRecord {
            fingerprint: plain,
            body_sealed: Some(
                env.app
                    .vault
                    .seal(PAN_PROJECT, &aad(&p, "old"), first.to_string().as_bytes())
                    .unwrap(),
            ),
            ..stored
        };
        env.app
            .store
            .put_idempotent(sc, "old", &legacy)
            .await
            .unwrap();

        // The same request replays both; another card conflicts with both.
        let other = req.replace(VISA, "5555555555554444");
        for key in ["new", "old"] {
            let (status, v, replayed) = add_card_once(&env.app, &p, key, &req).await;
            assert_eq!((status, &v, replayed), (201, &first, true), "{key}");
            assert_eq!(
                add_card_once(&env.app, &p, key, &other).await.0,
                409,
                "{key}"
            );
        }

        // A data-key rotation leaves the fingerprint key alone; another instance on the store
        // (a fresh vault) derives the same key: both still replay.
        env.app.vault.rotate_data_key(PAN_PROJECT).unwrap();
        let master = crate::vault::master::MasterKey::from_hex(&"42".repeat(32)).unwrap();
        let vault = crate::vault::Vault::new(
            master,
            env.app.store.clone(),
            std::time::Duration::from_secs(3600),
        );
        let instance = App::new(
            (*env.app.config).clone(),
            env.app.store.clone(),
            std::sync::Arc::new(vault),
            env.clock.clone(),
        );
        for app in [&*env.app, &instance] {
            for key in ["new", "old"] {
                let (status, v, replayed) = add_card_once(app, &p, key, &req).await;
                assert_eq!((status, &v, replayed), (201, &first, true), "{key}");
            }
        }
    }

    /// A create answered through `Idempotency-Key`: status, body, and whether it was a replay.
    async fn create_once(env: &Env, p: &Principal, key: &str, req: &str) -> (u16, Value, bool) {
        let execute = create(&env.app, p, req.as_bytes());
        run_once(&env.app, p, (key, "purchase-intents", req), execute).await
    }

    #[tokio::test]
    async fn idempotent_replays_of_a_create_follow_the_intent_and_the_cvc_retention() {
        let env = env();
        let p = private("user_1");
        let public = who(PAN_PROJECT, "user_1", Role::Public);
        let pm = add_card(&env, &p, VISA).await;
        let req =
            json!({"credentialType": "pan", "paymentMethodId": pm, "mandates": guide_usd("10")})
                .to_string();
        let (status, first, replayed) = create_once(&env, &p, "new", &req).await;
        assert_eq!((status, replayed), (201, false), "{first}");
        assert_eq!(first["pan"]["cvc"], "123");

        // A record as stored before intents were kept by id: the whole answer, no role.
        let path = format!("/projects/{PAN_PROJECT}/purchase-intents");
        let now = micros(env.app.clock.now());
        let legacy = crate::store::IdempotentRecord {
            fingerprint: super::legacy_fingerprint("POST", &path, req.as_bytes()),
            status: 201,
            body_sealed: Some(
                env.app
                    .vault
                    .seal(
                        PAN_PROJECT,
                        &super::aad(&p, "old"),
                        first.to_string().as_bytes(),
                    )
                    .unwrap(),
            ),
            intent_id: None,
            role: None,
            created_micros: now,
            expires_micros: now + 86_400_000_000,
        };
        let sc = scope(PAN_PROJECT, "user_1");
        env.app
            .store
            .put_idempotent(sc, "old", &legacy)
            .await
            .unwrap();

        for key in ["new", "old"] {
            let (status, v, replayed) = create_once(&env, &p, key, &req).await;
            assert_eq!((status, &v, replayed), (201, &first, true), "{key}");
        }
        // The entity's public token gets no card: another request for a new record, the
        // private role's answer for an old one.
        assert_eq!(create_once(&env, &public, "new", &req).await.0, 409);
        assert_eq!(create_once(&env, &public, "old", &req).await.0, 403);

        // Past the cvc's retention the replays carry the card without it, as GET does.
        env.clock.advance(Duration::hours(2));
        let (_, now_shown) = get_intent(&env, &p, first["id"].as_str().unwrap()).await;
        assert_eq!(now_shown["pan"]["number"], VISA, "{now_shown}");
        assert!(now_shown["pan"].get("cvc").is_none(), "{now_shown}");
        for key in ["new", "old"] {
            let (status, v, _) = create_once(&env, &p, key, &req).await;
            assert_eq!((status, &v), (201, &now_shown), "{key}");
        }

        // After the payment method is deleted: the intent, canceled, and no card.
        let (status, _) = reply(payment_methods::delete(&env.app, &p, &pm).await);
        assert_eq!(status, 204);
        for key in ["new", "old"] {
            let (status, v, _) = create_once(&env, &p, key, &req).await;
            assert_eq!(
                (status, v["status"].as_str()),
                (201, Some("canceled")),
                "{v}"
            );
            assert!(v.get("pan").is_none(), "{v}");
        }
    }
}
