//! AWS credentials for the `aws_kms` provider, from the sources of AWS's standard chain that a
//! server uses, in the chain's order, first found wins:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. web identity (EKS IAM roles for service accounts): the token in
//!    `AWS_WEB_IDENTITY_TOKEN_FILE` (read afresh each time) exchanged for the role
//!    `AWS_ROLE_ARN`'s credentials by STS's `AssumeRoleWithWebIdentity`, a call that is not
//!    signed; session `AWS_ROLE_SESSION_NAME`, else `paycred-<unix seconds>`; STS at
//!    `AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, else the regional endpoint of
//!    `AWS_REGION`, else of the KMS key's region;
//! 3. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!    `~/.aws/credentials`), profile `AWS_PROFILE` (else `default`), when it has keys;
//! 4. the container credentials endpoint (ECS tasks, EKS Pod Identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)`;
//! 5. the EC2 instance metadata service, IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, else
//!    `http://169.254.169.254`; `AWS_EC2_METADATA_DISABLED=true` skips it).
//!
//! Not read: SSO (IAM Identity Center), `credential_process`, and profiles that assume a role.
//! A server takes its role through one of the sources above (its platform hands it the
//! role's credentials or a web identity token); SSO is a person's login, which expires and
//! needs a browser, and a program or a role chain run at each start is a second place for
//! the secrets to live. Give such a deployment the role through one of the sources above.
//!
//! The web identity token, secret key and session token are never logged, printed or put in
//! a message, and are zeroized on drop. Which source gave the credentials is logged (not what
//! they are).

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

/// The first credentials of the chain, or why there are none; `region` is the KMS key's
/// (web identity's STS is that region's unless the environment names another).
pub fn chain(region: &str) -> Result<AwsCredentials, String> {
    if let Some(found) = environment()? {
        tracing::debug!("AWS credentials from the environment");
        return Ok(found);
    }
    if let Some(found) = web_identity(region)? {
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
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
         AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, give a profile in the shared \
         credentials file, or run where the container or instance metadata endpoint gives a \
         role's credentials"
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

/// The role's credentials for the web identity token of `AWS_WEB_IDENTITY_TOKEN_FILE`, from
/// STS's `AssumeRoleWithWebIdentity`; `None` where the token file is not set.
fn web_identity(region: &str) -> Result<Option<AwsCredentials>, String> {
    const FILE: &str = "AWS_WEB_IDENTITY_TOKEN_FILE";
    let (file, role) = match (var(FILE), var("AWS_ROLE_ARN")) {
        (Some(file), Some(role)) => (file, role),
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(format!(
                "{FILE} is set without AWS_ROLE_ARN: web identity needs both"
            ))
        }
        // As AWS's SDKs do: a role alone (set for other tools) is not web identity, and the
        // chain goes on.
        (None, Some(_)) => {
            tracing::debug!("AWS_ROLE_ARN without {FILE}: web identity skipped");
            return Ok(None);
        }
    };
    let source = format!("web identity ({FILE} {}, role {})", *file, *role);
    let token = Zeroizing::new(
        std::fs::read_to_string(file.as_str())
            .map_err(|e| format!("{source}: reading the token file failed: {e}"))?,
    );
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("{source}: the token file is empty"));
    }
    let session = var("AWS_ROLE_SESSION_NAME").map_or_else(
        || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            format!("paycred-{now}")
        },
        |name| name.to_string(),
    );
    let endpoint = match var("AWS_ENDPOINT_URL_STS").or_else(|| var("AWS_ENDPOINT_URL")) {
        Some(url) => crate::config::master_key::aws_endpoint(&url).map_err(|e| {
            format!("{source}: the STS endpoint (AWS_ENDPOINT_URL_STS or AWS_ENDPOINT_URL): {e}")
        })?,
        // The region paycred runs in (EKS sets AWS_REGION), whose STS a private cluster
        // reaches through its VPC endpoint; else the KMS key's.
        None => match var("AWS_REGION") {
            Some(own) if crate::config::master_key::is_region(&own) => {
                format!("https://sts.{}.amazonaws.com", *own)
            }
            Some(own) => return Err(format!("AWS_REGION {}: is not a region", *own)),
            None => format!("https://sts.{region}.amazonaws.com"),
        },
    };
    // Room for the token escaped, so that the body holding it is not reallocated (a copy
    // left behind unzeroized).
    let capacity = 3 * (token.len() + role.len() + session.len()) + 128;
    let body = Zeroizing::new(
        form_urlencoded::Serializer::new(String::with_capacity(capacity))
            .append_pair("Action", "AssumeRoleWithWebIdentity")
            .append_pair("Version", "2011-06-15")
            .append_pair("RoleArn", &role)
            .append_pair("RoleSessionName", &session)
            .append_pair("WebIdentityToken", token)
            .finish(),
    );
    let sts = format!("STS AssumeRoleWithWebIdentity at {endpoint}");
    let request = super::aws_kms::agent()?
        .post(&format!("{endpoint}/"))
        .set("content-type", "application/x-www-form-urlencoded");
    let text = match request.send_string(&body) {
        Ok(response) => Zeroizing::new(
            response
                .into_string()
                .map_err(|e| format!("{source}: {sts}: reading the answer failed: {e}"))?,
        ),
        Err(ureq::Error::Status(status, response)) => {
            let text = Zeroizing::new(response.into_string().unwrap_or_default());
            return Err(format!(
                "{source}: {sts} was refused: {status} {}",
                sts_error(&text, token)
            ));
        }
        Err(e) => return Err(format!("{source}: cannot reach {sts}: {e}")),
    };
    let (found, expiration) =
        sts_credentials(&text).map_err(|e| format!("{source}: {sts}: {e}"))?;
    tracing::debug!("AWS credentials from {source}, session {session}, until {expiration}");
    Ok(Some(found))
}

/// What STS answers `AssumeRoleWithWebIdentity` (the fields paycred reads).
#[derive(Deserialize)]
struct StsAnswer {
    #[serde(rename = "AssumeRoleWithWebIdentityResult")]
    result: StsResult,
}

#[derive(Deserialize)]
struct StsResult {
    #[serde(rename = "Credentials")]
    credentials: StsCredentials,
}

/// Zeroized on drop.
#[derive(Deserialize, Zeroize, ZeroizeOnDrop)]
struct StsCredentials {
    #[serde(rename = "AccessKeyId")]
    access_key_id: String,
    #[serde(rename = "SecretAccessKey")]
    secret_access_key: String,
    #[serde(rename = "SessionToken")]
    session_token: String,
    #[serde(rename = "Expiration", default)]
    expiration: String,
}

/// The credentials of STS's XML answer, and until when they hold.
fn sts_credentials(text: &str) -> Result<(AwsCredentials, String), String> {
    let answer: StsAnswer =
        quick_xml::de::from_str(text).map_err(|_| "the answer holds no credentials".to_string())?;
    let c = &answer.result.credentials;
    if c.access_key_id.is_empty() || c.secret_access_key.is_empty() {
        return Err("the answer holds no credentials".into());
    }
    Ok((
        AwsCredentials {
            access_key_id: c.access_key_id.clone(),
            secret_access_key: c.secret_access_key.clone(),
            session_token: Some(c.session_token.clone()).filter(|t| !t.is_empty()),
        },
        c.expiration.clone(),
    ))
}

/// STS's error answer: `<ErrorResponse><Error><Code>..</Code><Message>..</Message>..`.
#[derive(Deserialize)]
struct StsErrorAnswer {
    #[serde(rename = "Error")]
    error: StsError,
}

#[derive(Deserialize)]
struct StsError {
    #[serde(rename = "Code", default)]
    code: String,
    #[serde(rename = "Message", default)]
    message: String,
}

/// `Code: Message` of STS's error answer; the message left out should it quote `token`.
fn sts_error(text: &str, token: &str) -> String {
    let Ok(answer) = quick_xml::de::from_str::<StsErrorAnswer>(text) else {
        return "(the answer is not STS's error XML)".into();
    };
    let StsError { code, message } = answer.error;
    let code = if code.is_empty() {
        "no error code".into()
    } else {
        code
    };
    if message.is_empty() || message.contains(token) {
        code
    } else {
        format!("{code}: {}", message.chars().take(300).collect::<String>())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sts_credentials_are_read_from_its_xml_answer() {
        let answer = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:pay:paycred</SubjectFromWebIdentityToken>
    <Credentials>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY</SecretAccessKey>
      <SessionToken>FQoGZXIvYXdzEBY=</SessionToken>
      <Expiration>2026-11-29T16:00:00Z</Expiration>
    </Credentials>
    <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/paycred/s</Arn></AssumedRoleUser>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;
        let (found, until) = sts_credentials(answer).unwrap();
        assert_eq!(found.access_key_id, "ASIAEXAMPLE");
        assert_eq!(
            found.secret_access_key,
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        );
        assert_eq!(found.session_token.as_deref(), Some("FQoGZXIvYXdzEBY="));
        assert_eq!(until, "2026-11-29T16:00:00Z");
        // The secret key is not in what Debug shows.
        assert_eq!(format!("{found:?}"), "AwsCredentials(ASIAEXAMPLE, ..)");

        for no in [
            "",
            "not xml",
            "<AssumeRoleWithWebIdentityResponse/>",
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
             <AccessKeyId></AccessKeyId><SecretAccessKey></SecretAccessKey><SessionToken/>\
             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        ] {
            assert_eq!(
                sts_credentials(no).err().as_deref(),
                Some("the answer holds no credentials"),
                "{no}"
            );
        }
    }

    #[test]
    fn an_sts_error_answer_gives_its_code_and_message_never_the_token() {
        let error = |code: &str, message: &str| {
            format!(
                "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error>\
                 <Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>\
                 <RequestId>1</RequestId></ErrorResponse>"
            )
        };
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwYXljcmVkIn0.c2ln";
        assert_eq!(
            sts_error(
                &error("InvalidIdentityToken", "No OpenIDConnect provider found"),
                token
            ),
            "InvalidIdentityToken: No OpenIDConnect provider found"
        );
        assert_eq!(
            sts_error(
                &error("ExpiredTokenException", &format!("token {token} expired")),
                token
            ),
            "ExpiredTokenException"
        );
        assert_eq!(sts_error(&error("", ""), token), "no error code");
        assert_eq!(
            sts_error("<html>502</html>", token),
            "(the answer is not STS's error XML)"
        );
    }
}
