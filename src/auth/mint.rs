//! Minting development JWTs (`paycred jwt`) and making development key pairs.
//!
//! The service itself only ever verifies; a real deployment's backend signs its own tokens.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde::Serialize;
use std::time::Duration;

/// Why a token could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("{0}")]
    Key(String),
    #[error("signing failed: {0}")]
    Sign(String),
    #[error("key generation failed: {0}")]
    Generate(String),
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    roles: [&'a str; 1],
    iat: u64,
    exp: u64,
}

/// The signing key and its algorithm, from a PEM private key.
/// The formats accepted are those of [`crate::config::keys`].
pub fn encoding_key(pem: &[u8]) -> Result<(Algorithm, EncodingKey), MintError> {
    crate::config::keys::private_key(pem).map_err(MintError::Key)
}

/// A token for `project`/`sub` with `role`, valid for `ttl` from `now` (unix seconds).
pub fn mint(
    pem: &[u8],
    kid: Option<&str>,
    project: &str,
    sub: &str,
    role: &str,
    ttl: Duration,
    now: u64,
) -> Result<String, MintError> {
    let (alg, key) = encoding_key(pem)?;
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    let claims = Claims {
        iss: project,
        sub,
        roles: [role],
        iat: now,
        exp: now + ttl.as_secs(),
    };
    encode(&header, &claims, &key).map_err(|e| MintError::Sign(e.to_string()))
}

/// A fresh Ed25519 key pair as (private PKCS#8 PEM, public SPKI PEM).
pub fn generate_ed25519() -> Result<(zeroize::Zeroizing<String>, String), MintError> {
    let generate = |e: openssl::error::ErrorStack| MintError::Generate(e.to_string());
    let key = openssl::pkey::PKey::generate_ed25519().map_err(generate)?;
    let private = zeroize::Zeroizing::new(key.private_key_to_pem_pkcs8().map_err(generate)?);
    let public = key.public_key_to_pem().map_err(generate)?;
    let text = |pem: &[u8]| String::from_utf8_lossy(pem).into_owned();
    Ok((zeroize::Zeroizing::new(text(&private)), text(&public)))
}
