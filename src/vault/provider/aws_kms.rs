//! `provider: aws_kms`: the root key from AWS KMS's `GenerateDataKey` (AES-256 under the
//! configured KMS key), kept as the ciphertext KMS returned and opened at start with
//! `Decrypt`. Both name the KMS key and the encryption context `{"paycred": "root-key"}`, so a
//! ciphertext of another key or purpose is refused by KMS.
//!
//! A small client of KMS's JSON protocol (`TrentService.*` over HTTPS POST, signed with
//! Signature Version 4 by the `aws-sigv4` crate), on `ureq` with OpenSSL's TLS and the system's
//! roots. The credentials come from the standard chain's usual sources
//! ([`super::aws_credentials`]); they are never logged or put in a message.

use super::aws_credentials::{self, AwsCredentials};
use super::root_key;
use crate::config::master_key::AwsKmsProvider;
use crate::secret::KeyMaterial;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// How the root key was wrapped, as the wrapped key file names it.
pub const MECHANISM: &str = "GenerateDataKey";

/// The encryption context of the root key's ciphertext.
const CONTEXT: (&str, &str) = ("paycred", "root-key");

/// Longest wait for KMS to accept a connection, and for its whole answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(20);

/// What `GenerateDataKey` and `Decrypt` answer (the fields paycred reads), zeroized on drop:
/// `Plaintext` is the root key.
#[derive(Deserialize, Zeroize, ZeroizeOnDrop)]
struct Answer {
    #[serde(rename = "Plaintext", default)]
    plaintext: String,
    #[serde(rename = "CiphertextBlob", default)]
    ciphertext_blob: String,
    #[serde(rename = "KeyId", default)]
    key_id: String,
}

impl Answer {
    /// The bytes of a base64 field, zeroized on drop.
    fn bytes(field: &str, name: &str) -> Result<Zeroizing<Vec<u8>>, String> {
        B64.decode(field)
            .ok()
            .filter(|b| !b.is_empty())
            .map(Zeroizing::new)
            .ok_or_else(|| format!("KMS's answer has no base64 {name}"))
    }
}

/// A new root key, its ciphertext, and the ARN of the KMS key that encrypted it.
pub fn generate(config: &AwsKmsProvider) -> Result<(KeyMaterial, Vec<u8>, String), String> {
    let answer = call(
        config,
        "GenerateDataKey",
        &json!({"KeyId": config.key_id, "KeySpec": "AES_256",
                "EncryptionContext": {CONTEXT.0: CONTEXT.1}}),
    )?;
    let blob = Answer::bytes(&answer.ciphertext_blob, "CiphertextBlob")?;
    let root = root_key(&Answer::bytes(&answer.plaintext, "Plaintext")?)?;
    let arn = if answer.key_id.is_empty() {
        config.key_id.clone()
    } else {
        answer.key_id.clone()
    };
    // Opened once before the file is written: the key must allow Decrypt too.
    if decrypt(config, &blob)? != root {
        return Err("KMS decrypted the new root key to other bytes".into());
    }
    Ok((root, blob.to_vec(), arn))
}

/// Opens a root key that [`generate`] made.
pub fn decrypt(config: &AwsKmsProvider, blob: &[u8]) -> Result<KeyMaterial, String> {
    let answer = call(
        config,
        "Decrypt",
        &json!({"KeyId": config.key_id, "CiphertextBlob": B64.encode(blob),
                "EncryptionContext": {CONTEXT.0: CONTEXT.1}}),
    )?;
    root_key(&Answer::bytes(&answer.plaintext, "Plaintext")?)
}

/// KMS's `action` with `body`: its answer, or what failed.
fn call(config: &AwsKmsProvider, action: &str, body: &Value) -> Result<Answer, String> {
    let credentials = aws_credentials::chain(&config.region)?;
    let body = body.to_string().into_bytes();
    let url = format!("{}/", config.endpoint);
    let headers = [
        ("content-type", "application/x-amz-json-1.1".to_string()),
        ("x-amz-target", format!("TrentService.{action}")),
    ];
    let signed = sign(&credentials, &config.region, &url, &headers, &body)
        .map_err(|e| format!("signing the {action} request failed: {e}"))?;
    let mut request = agent()?.post(&url);
    let unsigned = headers.iter().map(|(n, v)| (*n, v.as_str()));
    for (name, value) in unsigned.chain(signed.iter().map(|(n, v)| (n.as_str(), v.as_str()))) {
        request = request.set(name, value);
    }
    let what = format!("KMS key {} at {}", config.key_id, config.endpoint);
    match request.send_bytes(&body) {
        Ok(response) => {
            let text = Zeroizing::new(
                response
                    .into_string()
                    .map_err(|e| format!("{action} on {what}: reading the answer failed: {e}"))?,
            );
            serde_json::from_str(&text)
                .map_err(|_| format!("{action} on {what}: the answer is not KMS's JSON"))
        }
        Err(ureq::Error::Status(status, response)) => {
            let text = response.into_string().unwrap_or_default();
            let error: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            // `__type` may carry a namespace before a `#`.
            let kind = error["__type"]
                .as_str()
                .map(|t| t.rsplit('#').next().unwrap_or(t))
                .unwrap_or("no error type");
            let message = error["message"]
                .as_str()
                .or(error["Message"].as_str())
                .unwrap_or("");
            Err(format!(
                "{action} on {what} was refused: {status} {kind}{}{}",
                if message.is_empty() { "" } else { ": " },
                message.chars().take(300).collect::<String>()
            ))
        }
        Err(e) => Err(format!("{action}: cannot reach {what}: {e}")),
    }
}

/// The Signature Version 4 headers (`authorization`, `x-amz-date`, `x-amz-security-token`)
/// of a POST of `body` to `url` with `headers`.
fn sign(
    credentials: &AwsCredentials,
    region: &str,
    url: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    use aws_sigv4::sign::v4;
    let identity = credentials.identity();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("kms")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()?
        .into();
    let request = SignableRequest::new(
        "POST",
        url,
        headers.iter().map(|(n, v)| (*n, v.as_str())),
        SignableBody::Bytes(body),
    )?;
    let (instructions, _) = sign(request, &params)?.into_parts();
    Ok(instructions
        .headers()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect())
}

/// An HTTP client with OpenSSL's TLS (the system's roots) and bounded waits.
pub(super) fn agent() -> Result<ureq::Agent, String> {
    let tls = native_tls::TlsConnector::new().map_err(|e| format!("TLS: {e}"))?;
    Ok(ureq::AgentBuilder::new()
        .tls_connector(std::sync::Arc::new(tls))
        .timeout_connect(CONNECT_TIMEOUT)
        .timeout(TIMEOUT)
        .redirects(0)
        .build())
}
