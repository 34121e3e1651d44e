//! Minting development JWTs (`paycred jwt`) and making development key pairs.
//!
//! The service itself only ever verifies; a real deployment's backend signs its own tokens.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde::Serialize;
use std::time::Duration;

/// Why a token could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("not a PEM private key of type RSA, P-256 or Ed25519")]
    Key,
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
pub fn encoding_key(pem: &[u8]) -> Result<(Algorithm, EncodingKey), MintError> {
    if let Ok(k) = EncodingKey::from_rsa_pem(pem) {
        return Ok((Algorithm::RS256, k));
    }
    if let Ok(k) = EncodingKey::from_ec_pem(pem) {
        return Ok((Algorithm::ES256, k));
    }
    if let Ok(k) = EncodingKey::from_ed_pem(pem) {
        return Ok((Algorithm::EdDSA, k));
    }
    Err(MintError::Key)
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
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey, EncodePublicKey};
    let signing = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
    let private = signing
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| MintError::Generate(e.to_string()))?;
    let public = signing
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| MintError::Generate(e.to_string()))?;
    Ok((zeroize::Zeroizing::new(private.to_string()), public))
}
