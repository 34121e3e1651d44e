//! `retention:` checked: how long events, finished webhook deliveries and ended purchase
//! intents are kept before the store removes them (`service::retention`).

use super::file::RetentionFile;
use super::{duration, invalid, ConfigError};
use std::time::Duration;

/// The shortest retention: below it, an event could go before anyone looked at it.
const MIN: Duration = Duration::from_secs(3600);
/// The longest: ten years (beyond it, a typo more likely than a policy).
const MAX: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The checked `retention:` section (each 30 days unless set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub events: Duration,
    pub deliveries: Duration,
    pub ended_intents: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        let days30 = Duration::from_secs(30 * 24 * 3600);
        Retention {
            events: days30,
            deliveries: days30,
            ended_intents: days30,
        }
    }
}

/// Checks `retention:`; the message names the key.
pub fn check(file: &RetentionFile) -> Result<Retention, ConfigError> {
    let one = |name: &str, text: &str| {
        let key = format!("retention.{name}");
        let d = duration(&key, text)?;
        if !(MIN..=MAX).contains(&d) {
            return Err(invalid(
                key,
                format!("`{text}` must be between 1h and 3650d"),
            ));
        }
        Ok(d)
    };
    Ok(Retention {
        events: one("events", &file.events)?,
        deliveries: one("deliveries", &file.deliveries)?,
        ended_intents: one("ended_intents", &file.ended_intents)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::err;
    use super::super::Config;
    use super::*;

    #[test]
    fn thirty_days_each_unless_set() {
        let c = Config::from_yaml("{}").unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.retention, Retention::default());
        assert_eq!(c.retention.events, Duration::from_secs(30 * 86400));
        let c = Config::from_yaml("retention: {events: 7d, deliveries: 90d, ended_intents: 12h}")
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.retention.events, Duration::from_secs(7 * 86400));
        assert_eq!(c.retention.deliveries, Duration::from_secs(90 * 86400));
        assert_eq!(c.retention.ended_intents, Duration::from_secs(12 * 3600));
        let c = Config::from_yaml("retention: {deliveries: 1h}")
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.retention.events, Duration::from_secs(30 * 86400));
    }

    #[test]
    fn zero_absurd_or_unknown_values_are_refused_by_name() {
        assert_eq!(
            err("retention: {events: 0s}"),
            "retention.events: `0s` must be between 1h and 3650d"
        );
        assert_eq!(
            err("retention: {deliveries: 59m}"),
            "retention.deliveries: `59m` must be between 1h and 3650d"
        );
        assert_eq!(
            err("retention: {ended_intents: 100years}"),
            "retention.ended_intents: `100years` must be between 1h and 3650d"
        );
        assert_eq!(
            err("retention: {events: soon}"),
            "retention.events: `soon` is not a duration like 30s, 5m or 1h"
        );
        assert!(err("retention: {audit: 30d}").contains("unknown field"));
    }
}
