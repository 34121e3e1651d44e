//! Authentication: a bearer JWT becomes a [`Principal`] {project, entity, role}.
//!
//! The token is verified with the keys of the project it names as `iss`; the algorithm
//! comes from the configured key, never from the token (`none` and HMAC cannot match an
//! RSA, P-256 or Ed25519 key). Then:
//! - missing, malformed, badly signed or expired token, unknown `kid`, lifetime over the
//!   project's maximum, missing `sub`, `roles` that name no role, both roles, or a role other
//!   than `private` and `public` → 401 `unauthorized`;
//! - a valid token of another project than the path's → 403 `forbidden`.
//!
//! Verified tokens are cached (bounded, keyed by the whole token) until their `exp`.
//!
//! May import: `config`, `secret`, `error`.

pub mod mint;

use crate::config::ProjectConfig;
use crate::error::ApiError;
use crate::secret::BearerToken;
use jsonwebtoken::{decode, decode_header, Validation};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Accepted clock skew, seconds.
pub const LEEWAY_SECS: u64 = 30;
/// Longest token accepted, bytes.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
/// Verified tokens kept.
const CACHE_CAPACITY: usize = 8 * 1024;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Backend calls: everything.
    Private,
    /// Frontend SDK calls: collecting cards, verification.
    Public,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Private => "private",
            Role::Public => "public",
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub project: String,
    pub entity: String,
    pub role: Role,
    /// Token expiry, unix seconds.
    pub exp: u64,
}

impl Principal {
    /// 403 unless the role is private.
    pub fn require_private(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Private => Ok(()),
            Role::Public => Err(ApiError::forbidden(
                "This route needs a private-role token.",
            )),
        }
    }
}

#[derive(Deserialize)]
struct IssuerOnly {
    iss: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    exp: u64,
    #[serde(default)]
    iat: Option<u64>,
    #[serde(default)]
    roles: Vec<String>,
}

/// Verifies tokens for every configured project.
pub struct Authenticator {
    projects: BTreeMap<String, Arc<ProjectConfig>>,
    /// Keyed by the whole token: a hit is the very token that was verified. Tokens are
    /// wiped from memory when they leave the cache.
    cache: quick_cache::sync::Cache<BearerToken, Arc<Principal>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authenticator({} projects)", self.projects.len())
    }
}

fn denied(message: &str) -> ApiError {
    ApiError::unauthorized(message)
}

/// Entity ids become store keys: bounded, printable, no `\0`.
pub fn valid_entity(sub: &str) -> bool {
    (1..=256).contains(&sub.len()) && !sub.chars().any(|c| c.is_control())
}

impl Authenticator {
    pub fn new(projects: BTreeMap<String, Arc<ProjectConfig>>) -> Self {
        Self {
            projects,
            cache: quick_cache::sync::Cache::new(CACHE_CAPACITY),
        }
    }

    /// Authenticates `authorization` (the header value) for a request on `path_project`;
    /// `None` for a path without a project (`/mcp`), where the token's project is meant.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        path_project: Option<&str>,
        now: u64,
    ) -> Result<Arc<Principal>, ApiError> {
        let header = authorization
            .ok_or_else(|| denied("Missing API key: send Authorization: Bearer <JWT>."))?;
        let token = bearer_token(header)
            .ok_or_else(|| denied("Invalid API key: expected Authorization: Bearer <JWT>."))?;
        let principal = self.verify(token, now)?;
        if path_project.is_some_and(|p| p != principal.project) {
            return Err(ApiError::forbidden(
                "The token was issued for another project.",
            ));
        }
        Ok(principal)
    }

    /// Verifies a token (cached) without looking at the path.
    pub fn verify(&self, token: &str, now: u64) -> Result<Arc<Principal>, ApiError> {
        let invalid = || denied("Invalid API key.");
        if token.len() > MAX_TOKEN_LEN {
            return Err(invalid());
        }
        if let Some(p) = self.cache.get(&TokenRef(token)) {
            if p.exp + LEEWAY_SECS > now {
                return Ok(p);
            }
            self.cache.remove(&TokenRef(token));
            return Err(denied("Invalid API key: the token has expired."));
        }
        let header = decode_header(token).map_err(|_| invalid())?;
        let unverified: IssuerOnly =
            jsonwebtoken::dangerous::insecure_decode_claims(token).map_err(|_| invalid())?;
        let Some(serde_json::Value::String(iss)) = unverified.iss else {
            return Err(invalid());
        };
        let project = self.projects.get(&iss).ok_or_else(invalid)?;
        let keys: Vec<_> = match &header.kid {
            Some(kid) => project.jwt_keys.iter().filter(|k| &k.kid == kid).collect(),
            None => project.jwt_keys.iter().collect(),
        };
        if keys.is_empty() {
            return Err(invalid());
        }
        let mut last_error = invalid();
        for key in keys {
            let mut v = Validation::new(key.alg);
            v.leeway = LEEWAY_SECS;
            v.validate_exp = true;
            v.validate_nbf = true;
            v.validate_aud = false;
            v.set_required_spec_claims(&["exp", "iss", "sub"]);
            v.set_issuer(&[iss.as_str()]);
            let claims = match decode::<Claims>(token, &key.key, &v) {
                Ok(data) => data.claims,
                Err(e) => {
                    if matches!(e.kind(), jsonwebtoken::errors::ErrorKind::ExpiredSignature) {
                        last_error = denied("Invalid API key: the token has expired.");
                    }
                    continue;
                }
            };
            let principal = check_claims(claims, project, now)?;
            let principal = Arc::new(principal);
            self.cache
                .insert(BearerToken::new(token), principal.clone());
            return Ok(principal);
        }
        Err(last_error)
    }
}

fn check_claims(c: Claims, project: &ProjectConfig, now: u64) -> Result<Principal, ApiError> {
    let max = project.jwt_max_lifetime.as_secs();
    match c.iat {
        Some(iat) if iat > now + LEEWAY_SECS => {
            return Err(denied("Invalid API key: issued in the future."));
        }
        Some(iat) if c.exp.saturating_sub(iat) > max => {
            return Err(denied(
                "Invalid API key: the token lives longer than this project allows.",
            ));
        }
        None if c.exp.saturating_sub(now) > max + LEEWAY_SECS => {
            return Err(denied(
                "Invalid API key: the token lives longer than this project allows.",
            ));
        }
        _ => {}
    }
    if !valid_entity(&c.sub) {
        return Err(denied("Invalid API key: bad subject."));
    }
    let role = role(&c.roles)?;
    Ok(Principal {
        project: c.iss,
        entity: c.sub,
        role,
        exp: c.exp,
    })
}

/// The one role `roles` names. A token that names both roles, or any other, is refused: a
/// role is what the token may do, and a claim that cannot be read one way only is not
/// guessed at (taking the stronger of two would let a public token carry private powers).
fn role(roles: &[String]) -> Result<Role, ApiError> {
    let mut found = None;
    for r in roles {
        let this = match r.as_str() {
            "private" => Role::Private,
            "public" => Role::Public,
            _ => return Err(denied("Invalid API key: unknown role.")),
        };
        if found.is_some_and(|f| f != this) {
            return Err(denied("Invalid API key: more than one role."));
        }
        found = Some(this);
    }
    found.ok_or_else(|| denied("Invalid API key: no role."))
}

/// A token as the cache looks it up: it hashes and compares as the [`BearerToken`] it
/// stands for, without copying it.
#[derive(Hash)]
struct TokenRef<'a>(&'a str);

impl quick_cache::Equivalent<BearerToken> for TokenRef<'_> {
    fn equivalent(&self, key: &BearerToken) -> bool {
        crate::secret::constant_time_eq(self.0.as_bytes(), key.expose().as_bytes())
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive).
pub fn bearer_token(header: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(header).ok()?.trim();
    let (scheme, token) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer_token(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b"abc"), None);
    }

    #[test]
    fn a_token_names_exactly_one_known_role() {
        let roles = |r: &[&str]| role(&r.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(roles(&["private"]).ok(), Some(Role::Private));
        assert_eq!(roles(&["public"]).ok(), Some(Role::Public));
        assert_eq!(roles(&["public", "public"]).ok(), Some(Role::Public));
        for refused in [
            &["public", "private"][..],
            &["private", "public"],
            &["private", "admin"],
            &["Private"],
            &[],
        ] {
            assert_eq!(
                roles(refused).map_err(|e| e.status()),
                Err(401),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn entity_ids() {
        assert!(valid_entity("user_42"));
        assert!(!valid_entity(""));
        assert!(!valid_entity("a\0b"));
        assert!(!valid_entity(&"x".repeat(257)));
    }

    #[test]
    fn a_verified_token_is_found_again_by_reference() {
        use std::hash::{BuildHasher, RandomState};
        let state = RandomState::new();
        let token = "eyJhbGciOiJFZERTQSJ9.e30.sig";
        assert_eq!(
            state.hash_one(BearerToken::new(token)),
            state.hash_one(TokenRef(token)),
            "a lookup hashes as the stored key"
        );
        let cache = quick_cache::sync::Cache::<BearerToken, u8>::new(4);
        cache.insert(BearerToken::new(token), 1);
        assert_eq!(cache.get(&TokenRef(token)), Some(1));
        assert_eq!(cache.get(&TokenRef("eyJ.other")), None);
    }
}
