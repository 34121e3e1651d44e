//! The token vault: `POST /projects/:projectId/tokens` stores a card (from `card` or
//! `encryptedCard`) for the caller's entity and answers the Token object
//! `{id, fingerprint, createdAt, maskedData}` (201). `tokenId` on create payment method
//! consumes it once, within [`TOKEN_LIFETIME`], for the same project and entity only.

use crate::app::App;
use crate::auth::Principal;
use crate::clock::iso8601;
use crate::domain::card;
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use crate::service::intake::{card_input, pick_source, Source};
use crate::service::{aad, audit_event};
use crate::store::{CardTokenRecord, Scope};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// How long an unused token works.
pub const TOKEN_LIFETIME: time::Duration = time::Duration::hours(1);

/// The Token object of a payment method's create answer, plus `expiresAt`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Token)]
pub struct TokenView {
    id: String,
    fingerprint: String,
    created_at: String,
    masked_data: String,
    expires_at: String,
}

/// The create body, read field by field so that every bad field is named: exactly one of
/// `card` or `encryptedCard`.
#[derive(ToSchema)]
#[schema(as = CreateToken, rename_all = "camelCase")]
pub struct CreateBody {
    /// Must be the token's `sub` when given.
    pub entity_id: Option<String>,
    pub card: Option<super::CardBody>,
    /// A compact JWE (ECDH-ES, A256GCM) of the card JSON.
    pub encrypted_card: Option<String>,
}

/// Token vault: store a card for one later tokenId (public or private role).
#[utoipa::path(post, path = "/projects/{projectId}/tokens", operation_id = "createToken",
    request_body = CreateBody,
    responses(
        (status = 201, description = "The token", body = TokenView),
        (status = 409, description = super::CONFLICT, body = crate::error::Envelope),
    ))]
pub async fn create(app: &App, principal: &Principal, body: &[u8]) -> ApiResult<Response> {
    let mut obj = super::json_object(body)?;
    super::check_entity(&obj, principal, false)?;
    let unknown: BTreeMap<String, String> = obj
        .keys()
        .filter(|k| !matches!(k.as_str(), "entityId" | "card" | "encryptedCard"))
        .map(|k| (k.clone(), "unknown field".to_string()))
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::invalid_fields(unknown));
    }
    let source = pick_source(&obj, &[Source::Card, Source::EncryptedCard], principal)?;
    let raw = obj.remove(source.field()).unwrap_or(Value::Null);
    let input = card_input(app, principal, source, raw).await?.input;
    let now = app.clock.now();
    let valid =
        card::validate(&input, source.field(), now.date()).map_err(ApiError::invalid_fields)?;
    drop(input);

    let project = principal.project.as_str();
    let id = format!("tok_{}", uuid::Uuid::new_v4().simple());
    let micros = crate::clock::micros;
    let expires = now + TOKEN_LIFETIME;
    let rec = CardTokenRecord {
        fingerprint: app.vault.fingerprint(project, &valid.number)?,
        masked_data: valid.number.masked(),
        created_micros: micros(now),
        expires_micros: micros(expires),
        expiration_month: valid.expiration_month.clone(),
        expiration_year: valid.expiration_year.clone(),
        number_sealed: Some(app.vault.seal(
            project,
            &aad::token_number(project, &id),
            valid.number.expose().as_bytes(),
        )?),
        cvc_sealed: app
            .vault
            .seal_cvc(&aad::token_cvc(project, &id), &valid.cvc, app.now_secs()),
        used: false,
        id,
    };
    drop(valid);
    let scope = Scope {
        project,
        entity: &principal.entity,
    };
    app.store.insert_card_token(scope, &rec).await?;
    app.store
        .append_audit(audit_event(app, principal, "token.create", &rec.id))
        .await?;
    Response::json(
        201,
        &TokenView {
            id: rec.id,
            fingerprint: rec.fingerprint,
            created_at: iso8601(now),
            masked_data: rec.masked_data,
            expires_at: iso8601(expires),
        },
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::auth::Role;
    use crate::clock::ManualClock;
    use crate::config::Config;

    use crate::store::{SledStore, Store};
    use crate::vault::master::MasterKey;
    use crate::vault::Vault;
    use serde_json::json;
    use std::sync::Arc;
    use time::macros::datetime;

    fn app(dir: &std::path::Path) -> (Arc<App>, Arc<ManualClock>) {
        let (_, public) = crate::auth::mint::generate_ed25519().unwrap();
        let key = dir.join("ed.pem");
        std::fs::write(&key, public).unwrap();
        let yaml = format!(
            "data_dir: {d}/data\nmaster_key_file: {d}/master.key\nprojects:\n  - id: p1\n    jwt: {{keys: [{{kid: k1, public_key_file: {k}}}]}}\n",
            d = dir.display(),
            k = key.display()
        );
        let config = Config::from_yaml(&yaml).unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SledStore::open(&dir.join("data"), Default::default()).unwrap());
        let master = MasterKey::from_hex(&"42".repeat(32)).unwrap();
        let vault = Arc::new(Vault::new(
            master,
            store.clone(),
            std::time::Duration::from_secs(3 * 3600),
        ));
        let clock = Arc::new(ManualClock::new(datetime!(2026-11-21 10:00 UTC)));
        let app = Arc::new(App::new(config, store, vault, clock.clone()));
        (app, clock)
    }

    #[tokio::test]
    async fn an_unused_token_expires_after_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let (app, clock) = app(dir.path());
        let who = Principal {
            project: "p1".into(),
            entity: "e1".into(),
            role: Role::Private,
            exp: u64::MAX,
        };
        let card = json!({"card": {"number": "4242424242424242", "expirationMonth": "12",
            "expirationYear": "2031", "cvc": "123"}});
        let mut ids = Vec::new();
        for _ in 0..2 {
            let r = create(&app, &who, card.to_string().as_bytes())
                .await
                .unwrap();
            assert_eq!(r.status, 201);
            let v: Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
            ids.push(v["id"].as_str().unwrap().to_string());
        }
        let use_token = |id: &str| json!({"entityId": "e1", "tokenId": id}).to_string();
        clock.advance(time::Duration::minutes(59));
        let r = super::super::payment_methods::create(&app, &who, use_token(&ids[0]).as_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 201, "within the hour");

        // The cvc moved into the payment method keeps the retention it started with when the
        // token was stored (3 h here, in 15 min buckets), not a fresh one from its use.
        let pm: Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
        let scope = Scope {
            project: "p1",
            entity: "e1",
        };
        let rec = app
            .store
            .get_payment_method(scope, pm["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        let sealed = rec.card.cvc_sealed.as_ref().unwrap();
        let aad = crate::service::aad::pm_cvc("p1", &rec.id);
        let stored = u64::try_from(datetime!(2026-11-21 10:00 UTC).unix_timestamp()).unwrap();
        let open = |secs: u64| app.vault.open_cvc(&aad, sealed, stored + secs).is_some();
        assert!(open(3 * 3600 - 1), "within the token's retention");
        assert!(
            !open(3 * 3600 + 15 * 60),
            "past the token's retention and its bucket"
        );

        clock.advance(time::Duration::minutes(2));
        let e = super::super::payment_methods::create(&app, &who, use_token(&ids[1]).as_bytes())
            .await
            .unwrap_err();
        let env = e.to_envelope();
        assert_eq!(
            env["error"]["details"]["fields"]["tokenId"], "the token has expired",
            "{env}"
        );
    }
}
