//! AWS credentials for the `aws_kms` provider, from the usual sources of AWS's standard chain,
//! first found wins:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!    `~/.aws/credentials`), profile `AWS_PROFILE` (else `default`), when it has keys;
//! 3. the container credentials endpoint (ECS tasks, EKS Pod Identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)`;
//! 4. the EC2 instance metadata service, IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, else
//!    `http://169.254.169.254`; `AWS_EC2_METADATA_DISABLED=true` skips it).
//!
//! Not read: web identity tokens (EKS IRSA), SSO, `credential_process`, and profiles that
//! assume a role: give such a deployment its keys through one of the sources above.
//!
//! The secret key and session token are never logged, printed or put in a message, and are
//! zeroized on drop. Which source gave the credentials is logged (not what they are).

use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// Credentials for one request.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AwsCredentials({}, ..)", self.access_key_id)
    }
}

impl AwsCredentials {
    /// As the signer takes them.
    pub(super) fn identity(&self) -> aws_smithy_runtime_api::client::identity::Identity {
        aws_credential_types::Credentials::new(
            &self.access_key_id,
            &self.secret_access_key,
            self.session_token.clone(),
            None,
            "paycred",
        )
        .into()
    }
}

/// How long the metadata services get (they answer at once where they exist).
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

/// The first credentials of the chain, or why there are none.
pub fn chain() -> Result<AwsCredentials, String> {
    if let Some(found) = environment()? {
        tracing::debug!("AWS credentials from the environment");
        return Ok(found);
    }
    if let Some(found) = shared_file()? {
        return Ok(found);
    }
    if let Some(found) = container()? {
        tracing::debug!("AWS credentials from the container credentials endpoint");
        return Ok(found);
    }
    if let Some(found) = instance_metadata()? {
        return Ok(found);
    }
    Err(
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, give a profile in \
         the shared credentials file, or run where the container or instance metadata \
         endpoint gives a role's credentials"
            .into(),
    )
}

fn var(name: &str) -> Option<Zeroizing<String>> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Zeroizing::new)
}

fn environment() -> Result<Option<AwsCredentials>, String> {
    match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Ok(Some(AwsCredentials {
            access_key_id: id.to_string(),
            secret_access_key: secret.to_string(),
            session_token: var("AWS_SESSION_TOKEN").map(|t| t.to_string()),
        })),
        (None, None) => Ok(None),
        _ => Err("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together".into()),
    }
}

/// The profile's keys in the shared credentials file, if it has them.
fn shared_file() -> Result<Option<AwsCredentials>, String> {
    let path = match var("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => PathBuf::from(p.as_str()),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".aws").join("credentials"),
            None => return Ok(None),
        },
    };
    let Ok(text) = std::fs::read_to_string(&path).map(Zeroizing::new) else {
        return Ok(None);
    };
    let profile = var("AWS_PROFILE").map_or_else(|| "default".to_string(), |p| p.to_string());
    let mut section = String::new();
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        if section != profile {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let value = Some(value.trim().to_string());
            match key.trim() {
                "aws_access_key_id" => id = value,
                "aws_secret_access_key" => secret = value,
                "aws_session_token" => token = value,
                _ => {}
            }
        }
    }
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => {
            tracing::debug!(
                "AWS credentials from profile {profile} of {}",
                path.display()
            );
            Ok(Some(AwsCredentials {
                access_key_id,
                secret_access_key,
                session_token: token,
            }))
        }
        (None, None) => Ok(None),
        (id, mut secret) => {
            secret.zeroize();
            drop(id);
            Err(format!(
                "profile {profile} of {} has only one of aws_access_key_id and \
                 aws_secret_access_key",
                path.display()
            ))
        }
    }
}

/// What the container and instance metadata endpoints answer.
#[derive(Deserialize, Zeroize, ZeroizeOnDrop)]
struct Served {
    #[serde(rename = "AccessKeyId")]
    access_key_id: String,
    #[serde(rename = "SecretAccessKey")]
    secret_access_key: String,
    #[serde(rename = "Token", default)]
    token: Option<String>,
}

impl Served {
    fn parse(text: &str, source: &str) -> Result<AwsCredentials, String> {
        let served: Served = serde_json::from_str(text)
            .map_err(|_| format!("{source}: the answer holds no credentials"))?;
        Ok(AwsCredentials {
            access_key_id: served.access_key_id.clone(),
            secret_access_key: served.secret_access_key.clone(),
            session_token: served.token.clone(),
        })
    }
}

fn metadata_agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(METADATA_TIMEOUT)
        .timeout(METADATA_TIMEOUT)
        .redirects(0)
        .build()
}

/// The ECS (and EKS Pod Identity) container credentials endpoint, when configured.
fn container() -> Result<Option<AwsCredentials>, String> {
    let url = match (
        var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        var("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
    ) {
        (Some(relative), _) => format!("http://169.254.170.2{}", relative.as_str()),
        (None, Some(full)) => full.to_string(),
        (None, None) => return Ok(None),
    };
    let token = match var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
        Some(file) => Some(Zeroizing::new(
            std::fs::read_to_string(file.as_str())
                .map_err(|e| format!("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {}: {e}", *file))?
                .trim()
                .to_string(),
        )),
        None => var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    };
    let mut request = metadata_agent().get(&url);
    if let Some(token) = &token {
        request = request.set("Authorization", token);
    }
    let source = "the container credentials endpoint";
    let text = fetch(request).map_err(|e| format!("{source} {url}: {e}"))?;
    Served::parse(&text, source).map(Some)
}

/// The instance's role credentials from IMDSv2; `None` where there is no such service.
fn instance_metadata() -> Result<Option<AwsCredentials>, String> {
    if var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let base = var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .map_or_else(|| "http://169.254.169.254".to_string(), |v| v.to_string());
    let base = base.trim_end_matches('/');
    let agent = metadata_agent();
    // No service (not on EC2): no token, and the chain ends without credentials.
    let Ok(token) = fetch(
        agent
            .put(&format!("{base}/latest/api/token"))
            .set("X-aws-ec2-metadata-token-ttl-seconds", "300"),
    ) else {
        return Ok(None);
    };
    let get = |path: &str| {
        let url = format!("{base}/latest/meta-data/iam/security-credentials/{path}");
        fetch(agent.get(&url).set("X-aws-ec2-metadata-token", &token))
            .map_err(|e| format!("the instance metadata service {base}: {e}"))
    };
    let roles = get("")?;
    let role = roles.lines().next().unwrap_or("").trim().to_string();
    if role.is_empty() {
        return Err(format!(
            "the instance metadata service {base} gives no role: attach one to the instance"
        ));
    }
    let found = Served::parse(&get(&role)?, "the instance metadata service")?;
    tracing::debug!("AWS credentials of role {role} from the instance metadata service");
    Ok(Some(found))
}

/// The body of `request`'s answer (zeroized on drop), or what failed.
fn fetch(request: ureq::Request) -> Result<Zeroizing<String>, String> {
    let response = request.call().map_err(|e| e.to_string())?;
    response
        .into_string()
        .map(Zeroizing::new)
        .map_err(|e| e.to_string())
}
