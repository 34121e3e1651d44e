//! Client encryption: `GET /projects/:projectId/client-encryption-key`, the key browsers
//! encrypt `encryptedCard` to (see `service::intake` for how such a card is taken).

use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::Response;
use utoipa::ToSchema;

/// The answer: a public JWK, as the vault makes it.
#[derive(ToSchema)]
#[schema(as = Jwk)]
pub struct JwkView {
    /// `EC`.
    pub kty: String,
    /// `P-256`.
    pub crv: String,
    pub x: String,
    pub y: String,
    /// Names the key in the JWE header; keys rotate.
    pub kid: String,
    /// `enc`.
    #[schema(rename = "use")]
    pub use_: String,
    /// `ECDH-ES`.
    pub alg: String,
}

/// The public key (JWK) to encrypt encryptedCard to.
///
/// Public or private role: the current public key as a JWK (`kty` EC, `crv` P-256, `x`, `y`,
/// `kid`, `use` enc, `alg` ECDH-ES).
#[utoipa::path(get, path = "/projects/{projectId}/client-encryption-key",
    operation_id = "getClientEncryptionKey",
    responses((status = 200, description = "The current key", body = JwkView)))]
pub async fn get_key(app: &App, principal: &Principal) -> ApiResult<Response> {
    let jwk = app.vault.client_public_key(&principal.project)?;
    Response::json(200, &jwk)
}
