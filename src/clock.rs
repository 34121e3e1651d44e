//! Time as a dependency: the server reads [`SystemClock`]; tests drive a [`ManualClock`]
//! to walk through expiry without sleeping.

use parking_lot::Mutex;
use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> OffsetDateTime;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<OffsetDateTime>);

impl ManualClock {
    pub fn new(start: OffsetDateTime) -> Self {
        Self(Mutex::new(start))
    }

    pub fn advance(&self, by: time::Duration) {
        *self.0.lock() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.0.lock()
    }
}

/// Unix microseconds of `t` (how records keep time); saturates far in the future.
pub fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// The time of `micros` unix microseconds (the epoch for a value out of range).
pub fn from_micros(micros: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// RFC 3339 / ISO 8601 text with millisecond precision, e.g. `2026-11-21T22:31:12.123Z`.
pub fn iso8601(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_is_utc_with_millis() {
        let t = time::macros::datetime!(2026-01-02 03:04:05.678 UTC);
        assert_eq!(iso8601(t), "2026-01-02T03:04:05.678Z");
    }

    #[test]
    fn manual_clock_advances() {
        let c = ManualClock::new(time::macros::datetime!(2026-01-01 0:00 UTC));
        c.advance(time::Duration::hours(25));
        assert_eq!(c.now(), time::macros::datetime!(2026-01-02 1:00 UTC));
    }
}
