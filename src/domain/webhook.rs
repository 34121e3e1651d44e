//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>): what a receiver checks
//! with any of the specification's libraries. A message `id`, its send time `timestamp` (unix
//! seconds) and its `body` are signed as `v1,<base64 HMAC-SHA256(secret, "id.timestamp.body")>`;
//! with several secrets (the overlap after a rotation) the `webhook-signature` header holds
//! one signature per secret, separated by spaces.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A secret in its shown form: `whsec_` and the base64 of its bytes.
pub const SECRET_PREFIX: &str = "whsec_";

/// The `webhook-signature` header of a message, signed with each of `secrets` (raw bytes).
pub fn signature_header(secrets: &[&[u8]], id: &str, timestamp: i64, body: &[u8]) -> String {
    let signed_prefix = format!("{id}.{timestamp}.");
    secrets
        .iter()
        .filter_map(|secret| {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
            mac.update(signed_prefix.as_bytes());
            mac.update(body);
            Some(format!("v1,{}", B64.encode(mac.finalize().into_bytes())))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The shown form of a secret's bytes.
pub fn shown_secret(bytes: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", B64.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn the_specification_example_signs_alike() {
        let secret = B64
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap_or_default();
        let header = signature_header(
            &[&secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(header, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let two = signature_header(&[&secret, b"other"], "m", 1, b"{}");
        assert_eq!(two.split(' ').count(), 2);
    }
}
