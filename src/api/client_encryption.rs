//! Client encryption: `GET /projects/:projectId/client-encryption-key`, the key browsers
//! encrypt `encryptedCard` to (see `service::intake` for how such a card is taken).

use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::Response;

/// `GET /projects/:projectId/client-encryption-key` (public or private role): the current
/// public key as a JWK (`kty` EC, `crv` P-256, `x`, `y`, `kid`, `use` enc, `alg` ECDH-ES).
pub async fn get_key(app: &App, principal: &Principal) -> ApiResult<Response> {
    let jwk = app.vault.client_public_key(&principal.project)?;
    Response::json(200, &jwk)
}
