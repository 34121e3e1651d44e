//! `projects[].verification.passkeys` checked: the relying party id and the origins passkeys
//! are used from, built into the WebAuthn library's relying party (which checks origin and
//! RP ID of every ceremony).

use super::file::PasskeysFile;
use std::sync::Arc;
use webauthn_rs::prelude::Url;
use webauthn_rs::{Webauthn, WebauthnBuilder};

/// A project's passkey settings.
#[derive(Debug, Clone)]
pub struct Passkeys {
    pub rp_id: String,
    pub origins: Vec<String>,
    /// The relying party, built from the two.
    pub webauthn: Arc<Webauthn>,
}

/// Checks `verification.passkeys` of the project at config key `key`; the message names the
/// key. Absent: `None` (passkeys off).
pub fn validate(
    key: &str,
    file: Option<&PasskeysFile>,
) -> Result<Option<Passkeys>, (String, String)> {
    let Some(file) = file else {
        return Ok(None);
    };
    let key = format!("{key}.verification.passkeys");
    let rp_id = file.rp_id.as_str();
    let domain_ok = !rp_id.is_empty()
        && rp_id.len() <= 253
        && !rp_id.starts_with('.')
        && !rp_id.ends_with('.')
        && rp_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && rp_id.parse::<std::net::Ipv4Addr>().is_err();
    if !domain_ok {
        return Err((
            format!("{key}.rp_id"),
            format!(
                "`{rp_id}` must be a lowercase domain name (no scheme, port, path or IP address)"
            ),
        ));
    }
    if file.origins.is_empty() {
        return Err((
            format!("{key}.origins"),
            "must list at least one origin".into(),
        ));
    }
    let mut urls: Vec<Url> = Vec::new();
    for (i, text) in file.origins.iter().enumerate() {
        let at = format!("{key}.origins[{i}]");
        super::cors::check_origin(text).map_err(|m| (at.clone(), format!("`{text}` {m}")))?;
        let url = Url::parse(text).map_err(|e| (at.clone(), format!("`{text}`: {e}")))?;
        let host = url.host_str().unwrap_or_default();
        if host != rp_id && !host.ends_with(&format!(".{rp_id}")) {
            return Err((
                at,
                format!("`{text}` is not on `{rp_id}` or a subdomain of it (browsers refuse it)"),
            ));
        }
        if url.scheme() != "https" && host != "localhost" && !host.ends_with(".localhost") {
            return Err((
                at,
                format!("`{text}` must be https (http only for localhost)"),
            ));
        }
        if urls.contains(&url) {
            return Err((at, format!("`{text}` is listed twice")));
        }
        urls.push(url);
    }
    let mut builder = None;
    for url in &urls {
        builder = Some(
            match builder {
                None => WebauthnBuilder::new(rp_id, url),
                Some(b) => Ok(WebauthnBuilder::append_allowed_origin(b, url)),
            }
            .map_err(|e| (format!("{key}.origins"), e.to_string()))?,
        );
    }
    let webauthn = builder
        .ok_or_else(|| {
            (
                format!("{key}.origins"),
                "must list at least one origin".into(),
            )
        })?
        .rp_name("paycred")
        .build()
        .map_err(|e| (key.clone(), e.to_string()))?;
    Ok(Some(Passkeys {
        rp_id: rp_id.to_string(),
        origins: file.origins.clone(),
        webauthn: Arc::new(webauthn),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rp_id: &str, origins: &[&str]) -> Result<Option<Passkeys>, (String, String)> {
        let file = PasskeysFile {
            rp_id: rp_id.into(),
            origins: origins.iter().map(|o| o.to_string()).collect(),
        };
        validate("projects[0]", Some(&file))
    }

    #[test]
    fn passkey_settings_are_checked_at_load() {
        assert!(validate("projects[0]", None)
            .unwrap_or_else(|e| unreachable!("{e:?}"))
            .is_none());
        let ok = check(
            "shop.example",
            &["https://shop.example", "https://pay.shop.example"],
        )
        .unwrap_or_else(|e| unreachable!("{e:?}"))
        .unwrap_or_else(|| unreachable!());
        assert_eq!(ok.webauthn.get_allowed_origins().len(), 2);
        assert!(check("localhost", &["http://localhost:5173"]).is_ok());
        for (rp_id, origins, key, says) in [
            (
                "https://shop.example",
                &["https://shop.example"][..],
                "rp_id",
                "domain",
            ),
            (
                "127.0.0.1",
                &["http://127.0.0.1:80"][..],
                "rp_id",
                "IP address",
            ),
            ("shop.example", &[][..], "origins", "at least one"),
            (
                "shop.example",
                &["https://other.example"][..],
                "origins[0]",
                "not on",
            ),
            (
                "shop.example",
                &["http://shop.example"][..],
                "origins[0]",
                "https",
            ),
            (
                "shop.example",
                &["https://shop.example/pay"][..],
                "origins[0]",
                "no path",
            ),
            (
                "shop.example",
                &["https://shop.example", "https://shop.example"][..],
                "origins[1]",
                "twice",
            ),
        ] {
            let Err((k, message)) = check(rp_id, origins) else {
                unreachable!("{rp_id} {origins:?} accepted")
            };
            assert_eq!(
                k,
                format!("projects[0].verification.passkeys.{key}"),
                "{message}"
            );
            assert!(message.contains(says), "{message}");
        }
    }
}
