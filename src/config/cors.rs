//! `projects[].cors.allowed_origins` checked: the origins `edge::cors` compares, byte for byte,
//! with a browser's `Origin` header.

use super::file::CorsFile;

/// Checks `cors:` of the project at config key `key`; the message names the key.
pub fn validate(key: &str, file: &CorsFile) -> Result<Vec<String>, (String, String)> {
    let mut origins: Vec<String> = Vec::new();
    for (i, text) in file.allowed_origins.iter().enumerate() {
        let key = format!("{key}.cors.allowed_origins[{i}]");
        check_origin(text).map_err(|message| (key.clone(), format!("`{text}` {message}")))?;
        if origins.contains(text) {
            return Err((key, format!("`{text}` is listed twice")));
        }
        origins.push(text.clone());
    }
    Ok(origins)
}

/// An origin as browsers send it in `Origin`: `http://` or `https://`, a lowercase host, a port
/// only when it is not the scheme's default, nothing after it. Anything else would never
/// match, so it is refused here rather than ignored.
pub(super) fn check_origin(text: &str) -> Result<(), &'static str> {
    if text == "*" || text == "null" {
        return Err("is not an origin: list each page's exact origin (a token must not be usable from any page)");
    }
    let (default_port, rest) = if let Some(rest) = text.strip_prefix("https://") {
        (443, rest)
    } else if let Some(rest) = text.strip_prefix("http://") {
        (80, rest)
    } else {
        return Err("must start with https:// or http://");
    };
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or("has an unclosed `[`")?;
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err("has an IPv6 address that does not parse");
            }
            match after {
                "" => (addr, None),
                _ => (
                    addr,
                    Some(after.strip_prefix(':').ok_or("has text after the host")?),
                ),
            }
        }
        None => match rest.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        },
    };
    let v6 = rest.starts_with('[');
    let host_ok = !host.is_empty()
        && (v6
            || host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
    if !host_ok {
        return Err("needs a host of a-z 0-9 - . (lowercase, as browsers send it) and no path");
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p != 0 && p.to_string() == port && p != default_port => {}
            Ok(p) if p == default_port => {
                return Err("names the scheme's default port, which browsers leave out")
            }
            _ => return Err("needs a port of 1-65535 and no path"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_as_browsers_send_them() {
        for good in [
            "https://shop.example",
            "http://localhost:5173",
            "http://127.0.0.1:8080",
            "http://[::1]:3000",
            "https://a-b.example.co.uk",
        ] {
            assert_eq!(check_origin(good), Ok(()), "{good}");
        }
        for bad in [
            "*",
            "null",
            "shop.example",
            "ftp://shop.example",
            "https://shop.example/",
            "https://shop.example/path",
            "https://Shop.example",
            "https://shop.example:443",
            "http://shop.example:80",
            "http://localhost:0",
            "http://localhost:08080",
            "http://localhost:99999",
            "https://*.example",
            "https://user@shop.example",
            "http://[::1",
            "http://[nope]:1",
            "http://[::1]x",
            "https://",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_key_names_the_entry() {
        let file = |list: &[&str]| CorsFile {
            allowed_origins: list.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            validate(
                "projects[0]",
                &file(&["https://a.example", "http://b.example:81"])
            ),
            Ok(vec![
                "https://a.example".to_string(),
                "http://b.example:81".to_string()
            ])
        );
        let Err((key, message)) = validate("projects[1]", &file(&["https://a.example", "*"]))
        else {
            unreachable!()
        };
        assert_eq!(key, "projects[1].cors.allowed_origins[1]");
        assert!(message.starts_with("`*` is not an origin"), "{message}");
        let Err((key, _)) = validate("p", &file(&["https://a.example", "https://a.example"]))
        else {
            unreachable!()
        };
        assert_eq!(key, "p.cors.allowed_origins[1]");
    }
}
