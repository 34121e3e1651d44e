//! The checked `store:` section: which backend holds the data. A PostgreSQL URL is parsed
//! here (so `paycred check` refuses a malformed one without connecting) and never printed
//! with its password: [`DatabaseUrl`]'s `Debug` and [`DatabaseUrl::describe`] name only the
//! user, hosts, ports and database.

use super::{invalid, require_file, ConfigError};
use std::path::PathBuf;

/// Replaces `store.url` when set, so that the password need not be written in the file.
pub const DATABASE_URL_ENV: &str = "PAYCRED_DATABASE_URL";

/// Where the data lives.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The embedded sled store in `data_dir`.
    Sled,
    /// A PostgreSQL database shared by any number of instances.
    Postgres(Box<PostgresConfig>),
}

/// `store: {kind: postgres, …}`.
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    pub url: DatabaseUrl,
    /// Most connections open at once (per instance).
    pub pool_size: usize,
    /// CA certificates for the server's certificate; the system's when absent.
    pub ca_file: Option<PathBuf>,
    /// The longest a cached record is served after it was read, whatever messages say
    /// (`store.cache_ttl`, default 5 s, at most 60 s; zero: nothing is cached).
    pub cache_ttl: std::time::Duration,
}

/// A parsed PostgreSQL connection string. Its password stays inside.
#[derive(Clone)]
pub struct DatabaseUrl(tokio_postgres::Config);

impl DatabaseUrl {
    /// Parses `postgres://…` (or the `key=value` form).
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: tokio_postgres::Config = text
            .parse()
            .map_err(|e: tokio_postgres::Error| format!("is not a PostgreSQL URL ({e})"))?;
        if config.get_hosts().is_empty() {
            return Err("names no host".into());
        }
        Ok(Self(config))
    }

    /// The driver's configuration.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.0
    }

    /// `user@host:port/dbname` (hosts joined by `,`), for messages: never the password.
    pub fn describe(&self) -> String {
        let ports = self.0.get_ports();
        let hosts: Vec<String> = self
            .0
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let host = match h {
                    tokio_postgres::config::Host::Tcp(name) => name.clone(),
                    tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                };
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                format!("{host}:{port}")
            })
            .collect();
        format!(
            "{}@{}/{}",
            self.0.get_user().unwrap_or(""),
            hosts.join(","),
            self.0.get_dbname().unwrap_or("")
        )
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({})", self.describe())
    }
}

/// Checks `store:`; `env_url` is the value of [`DATABASE_URL_ENV`], if set.
pub fn check(
    file: super::file::StoreFile,
    env_url: Option<String>,
) -> Result<StoreConfig, ConfigError> {
    match file.kind.as_str() {
        "sled" => {
            if file.url.is_some() || file.tls.is_some() {
                return Err(invalid("store", "url and tls are for kind postgres"));
            }
            Ok(StoreConfig::Sled)
        }
        "postgres" => {
            let (key, text) = match (env_url, file.url) {
                (Some(url), _) => (DATABASE_URL_ENV, url),
                (None, Some(url)) => ("store.url", url),
                (None, None) => {
                    return Err(invalid(
                        "store.url",
                        format!("is required for kind postgres (or set {DATABASE_URL_ENV})"),
                    ))
                }
            };
            let url = DatabaseUrl::parse(&text).map_err(|m| invalid(key, m))?;
            if !(1..=1024).contains(&file.pool_size) {
                return Err(invalid("store.pool_size", "must be between 1 and 1024"));
            }
            let ca_file = match file.tls {
                Some(tls) => {
                    require_file("store.tls.ca_file", &tls.ca_file)?;
                    Some(tls.ca_file)
                }
                None => None,
            };
            let cache_ttl = super::duration("store.cache_ttl", &file.cache_ttl)?;
            if cache_ttl > std::time::Duration::from_secs(60) {
                return Err(invalid("store.cache_ttl", "must be at most 60s"));
            }
            Ok(StoreConfig::Postgres(Box::new(PostgresConfig {
                url,
                pool_size: file.pool_size,
                ca_file,
                cache_ttl,
            })))
        }
        _ => Err(invalid("store.kind", "must be sled or postgres")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn postgres(url: Option<&str>, env: Option<&str>) -> Result<StoreConfig, ConfigError> {
        check(
            super::super::file::StoreFile {
                kind: "postgres".into(),
                url: url.map(str::to_string),
                ..Default::default()
            },
            env.map(str::to_string),
        )
    }

    #[test]
    fn the_password_is_never_shown() {
        let Ok(StoreConfig::Postgres(pg)) = postgres(
            Some("postgres://paycred:s3cret-pw@db.internal:6432/pay"),
            None,
        ) else {
            panic!("valid url refused")
        };
        assert_eq!(pg.url.describe(), "paycred@db.internal:6432/pay");
        let shown = format!("{pg:?}");
        assert!(!shown.contains("s3cret-pw"), "{shown}");
        assert!(shown.contains("db.internal"), "{shown}");
    }

    #[test]
    fn a_url_may_name_a_primary_and_its_standbys() {
        let Ok(StoreConfig::Postgres(pg)) = postgres(
            Some("postgres://paycred:s3cret-pw@db-a:5432,db-b:6432/pay?target_session_attrs=read-write"),
            None,
        ) else {
            panic!("multi-host url refused")
        };
        assert_eq!(pg.url.describe(), "paycred@db-a:5432,db-b:6432/pay");
        assert_eq!(pg.url.config().get_hosts().len(), 2);
        assert_eq!(
            pg.url.config().get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        let shown = format!("{pg:?}");
        assert!(!shown.contains("s3cret-pw"), "{shown}");
    }

    #[test]
    fn the_environment_wins_and_a_url_is_required() {
        let Ok(StoreConfig::Postgres(pg)) = postgres(
            Some("postgres://a@file-host/x"),
            Some("postgres://b@env-host/y"),
        ) else {
            panic!("valid url refused")
        };
        assert_eq!(pg.url.describe(), "b@env-host:5432/y");
        let e = postgres(None, None).unwrap_err().to_string();
        assert!(
            e.contains("store.url") && e.contains(DATABASE_URL_ENV),
            "{e}"
        );
        let e = postgres(Some("postgres://u:pw@h/d?sslmode=bogus"), None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("store.url:") && !e.contains("pw@"), "{e}");
        let e = check(
            super::super::file::StoreFile {
                kind: "mysql".into(),
                ..Default::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("store.kind"), "{e}");
    }

    #[test]
    fn the_cache_ttl_defaults_to_5s_and_is_bounded() {
        let ttl = |text: &str| {
            check(
                super::super::file::StoreFile {
                    kind: "postgres".into(),
                    url: Some("postgres://a@h/d".into()),
                    cache_ttl: text.into(),
                    ..Default::default()
                },
                None,
            )
            .map(|c| match c {
                StoreConfig::Postgres(pg) => pg.cache_ttl,
                StoreConfig::Sled => panic!("not postgres"),
            })
        };
        let Ok(StoreConfig::Postgres(pg)) = postgres(Some("postgres://a@h/d"), None) else {
            panic!("valid url refused")
        };
        assert_eq!(pg.cache_ttl, std::time::Duration::from_secs(5));
        assert_eq!(ttl("0s").unwrap(), std::time::Duration::ZERO);
        let e = ttl("61s").unwrap_err().to_string();
        assert!(e.contains("store.cache_ttl"), "{e}");
    }
}
