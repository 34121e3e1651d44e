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
    proxy: Mutex<ProxyMetrics>,
}

/// What the proxy route adds: target latency, target errors, templates substituted.
#[derive(Default)]
struct ProxyMetrics {
    target_latency: Histogram,
    /// Answers of targets by status class (`2xx` … `5xx`).
    target_responses: BTreeMap<&'static str, u64>,
    /// Targets not reached (`unreachable`) or too slow (`timeout`).
    target_errors: BTreeMap<&'static str, u64>,
    templates: u64,
}

fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Histogram {
    fn observe(&mut self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braced = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braced} {}", self.count);
    }
}

impl Metrics {
    /// Records one finished request.
    pub fn record(&self, route: &'static str, status: u16, elapsed: Duration) {
        *self.requests.lock().entry((route, status)).or_default() += 1;
        self.latency
            .lock()
            .entry(route)
            .or_default()
            .observe(elapsed);
    }

    /// Records one proxied request: `upstream` is the time since the request to the target
    /// was started (`None`: the target was never contacted); `failed` when pingora gave up
    /// on the target (then `status` is paycred's 502 or 504).
    pub fn record_proxy(
        &self,
        status: u16,
        upstream: Option<Duration>,
        failed: bool,
        templates: usize,
    ) {
        let mut p = self.proxy.lock();
        p.templates += templates as u64;
        let Some(elapsed) = upstream else { return };
        p.target_latency.observe(elapsed);
        if failed && (status == 502 || status == 504) {
            let kind = if status == 504 {
                "timeout"
            } else {
                "unreachable"
            };
            *p.target_errors.entry(kind).or_default() += 1;
        } else {
            *p.target_responses.entry(status_class(status)).or_default() += 1;
        }
    }

    fn render_proxy(&self, out: &mut String) {
        let p = self.proxy.lock();
        out.push_str("# HELP paycred_target_duration_seconds Proxy: time from sending to the target to the end of its answer.\n");
        out.push_str("# TYPE paycred_target_duration_seconds histogram\n");
        p.target_latency
            .render(out, "paycred_target_duration_seconds", "");
        out.push_str(
            "# HELP paycred_target_responses_total Proxy: target answers by status class.\n",
        );
        out.push_str("# TYPE paycred_target_responses_total counter\n");
        for (class, n) in &p.target_responses {
            let _ = writeln!(
                out,
                "paycred_target_responses_total{{class=\"{class}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP paycred_target_errors_total Proxy: targets unreachable or too slow.\n",
        );
        out.push_str("# TYPE paycred_target_errors_total counter\n");
        for kind in ["unreachable", "timeout"] {
            let n = p.target_errors.get(kind).copied().unwrap_or(0);
            let _ = writeln!(out, "paycred_target_errors_total{{kind=\"{kind}\"}} {n}");
        }
        out.push_str("# HELP paycred_templates_substituted_total Proxy: templates replaced by credential values.\n");
        out.push_str("# TYPE paycred_templates_substituted_total counter\n");
        let _ = writeln!(out, "paycred_templates_substituted_total {}", p.templates);
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
        self.render_proxy(&mut out);
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
