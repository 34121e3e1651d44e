//! Prometheus text metrics. Labels are route shapes and status codes only: never an id,
//! a token or a card value.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Latency buckets, seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Request counters and latency histograms.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Records one finished request.
    pub fn record(&self, route: &'static str, status: u16, elapsed: Duration) {
        *self.requests.lock().entry((route, status)).or_default() += 1;
        let secs = elapsed.as_secs_f64();
        let mut latency = self.latency.lock();
        let h = latency.entry(route).or_default();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// The exposition text; `extra` adds gauges and counters owned elsewhere.
    pub fn render(&self, extra: &[(&str, &str, u64)]) -> String {
        let mut out = String::new();
        out.push_str("# HELP paycred_requests_total Requests answered, by route and status.\n");
        out.push_str("# TYPE paycred_requests_total counter\n");
        for ((route, status), n) in self.requests.lock().iter() {
            let _ = writeln!(
                out,
                "paycred_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP paycred_request_duration_seconds Time to answer, by route.\n");
        out.push_str("# TYPE paycred_request_duration_seconds histogram\n");
        for (route, h) in self.latency.lock().iter() {
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "paycred_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "paycred_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "paycred_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "paycred_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        for (name, help, value) in extra {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.record("health", 200, Duration::from_micros(300));
        m.record("health", 200, Duration::from_millis(30));
        let text = m.render(&[("paycred_store_flushes_total", "Flushes.", 7)]);
        assert!(text.contains("paycred_requests_total{route=\"health\",status=\"200\"} 2"));
        assert!(text
            .contains("paycred_request_duration_seconds_bucket{route=\"health\",le=\"0.0005\"} 1"));
        assert!(text.contains("paycred_request_duration_seconds_count{route=\"health\"} 2"));
        assert!(text.contains("paycred_store_flushes_total 7"));
    }
}
