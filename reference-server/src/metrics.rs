//! The server's metrics, through the `metrics` facade, rendered by `metrics-exporter-prometheus` (one
//! renderer for every family: HELP and TYPE lines, histograms with their buckets, sum and count).
//!
//! Each server owns its recorder (not the process-global one): several servers in one process (tests,
//! embedding) keep separate counts. The per-request families are registered once, as handles the request
//! path only increments; [`Metrics::record`] makes this server's recorder current for a closure; counts kept
//! elsewhere (the x402 layer's, the settlement log's, the
//! database's, the connection loop's) are copied in when `/metrics` is scraped ([`Metrics::render`]).
//!
//! Families: `http_requests_total{route,status}` and `http_request_duration_seconds{route,status}` (a
//! histogram; `route` is one of [`ROUTES`], `status` a class like `2xx`), `http_payment_required_total`,
//! `license_receipts_issued_total`, `license_receipt_failures_total`, `license_rereads_total`, `build_info{version,commit}`,
//! `process_*` (CPU, memory, file descriptors), and the families the other modules record.

use std::time::Duration;

use metrics::{
    Counter, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// Route groups counted separately (a fixed set, so a client cannot blow up label cardinality).
pub const ROUTES: &[&str] = &[
    "/x402Article/list",
    "/x402Article",
    "/serveLlmsTxt",
    "/receipts",
    "/api/v3/assets/",
    "/media",
    "/verify",
    "/openapi.json",
    "/healthz",
    "/metrics",
    "/operator",
    "other",
];

const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Request latency buckets, seconds (a 402 takes tens of µs, a registry page a few ms, a settlement seconds).
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The server's recorder and what renders it.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    process: metrics_process::Collector,
    /// Registered once: a request increments a handle, it builds no key and looks nothing up.
    requests: Vec<[RouteClass; 5]>,
    payment_required: Counter,
    receipts_issued: Counter,
    receipt_failures: Counter,
    rereads: Counter,
}

/// The handles of one route group and status class.
struct RouteClass {
    count: Counter,
    latency: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full("http_request_duration_seconds".into()),
                LATENCY_BUCKETS,
            )
            // A fixed bucket list for a fixed name cannot be refused; fall back to summaries if it were.
            .unwrap_or_else(|_| PrometheusBuilder::new())
            .build_recorder();
        let handle = recorder.handle();
        let process = metrics_process::Collector::default();
        let (requests, payment_required, receipts_issued, receipt_failures, rereads) =
            metrics::with_local_recorder(&recorder, || {
                describe_counter!(
                    "http_requests_total",
                    "HTTP requests answered, by route group and status class."
                );
                describe_histogram!(
                    "http_request_duration_seconds",
                    Unit::Seconds,
                    "Time to answer, by route group and status class."
                );
                describe_counter!(
                    "http_payment_required_total",
                    "Responses with status 402 Payment Required."
                );
                describe_counter!(
                    "license_receipts_issued_total",
                    "License receipts stored since start."
                );
                describe_counter!(
                    "license_receipt_failures_total",
                    "Paid requests whose receipt could not be stored (answered 500)."
                );
                describe_counter!(
                    "license_rereads_total",
                    "Bought articles read again by signing in with x (no payment, no new receipt)."
                );
                describe_gauge!("build_info", "Always 1; the labels say what is running.");
                gauge!(
                    "build_info",
                    "version" => env!("CARGO_PKG_VERSION"),
                    "commit" => option_env!("REFERENCE_SERVER_GIT_COMMIT").unwrap_or("unknown"),
                    "x402_tower" => x402_tower::VERSION,
                )
                .set(1.0);
                process.describe();
                // Every route and class registered from the start (rates have a zero to start from).
                let requests = ROUTES
                .iter()
                .map(|route| {
                    STATUS_CLASSES.map(|class| RouteClass {
                        count: counter!("http_requests_total", "route" => *route, "status" => class),
                        latency: histogram!(
                            "http_request_duration_seconds", "route" => *route, "status" => class
                        ),
                    })
                })
                .collect();
                (
                    requests,
                    counter!("http_payment_required_total"),
                    counter!("license_receipts_issued_total"),
                    counter!("license_receipt_failures_total"),
                    counter!("license_rereads_total"),
                )
            });
        Self {
            recorder,
            handle,
            process,
            requests,
            payment_required,
            receipts_issued,
            receipt_failures,
            rereads,
        }
    }
}

/// The route group of a request path.
pub fn route_of(path: &str) -> &'static str {
    match path {
        "/x402Article/list" => "/x402Article/list",
        "/x402Article" => "/x402Article",
        "/serveLlmsTxt" => "/serveLlmsTxt",
        "/openapi.json" => "/openapi.json",
        "/healthz" => "/healthz",
        "/metrics" => "/metrics",
        p if p.starts_with("/receipts/") => "/receipts",
        p if p.starts_with("/api/v3/assets") => "/api/v3/assets/",
        p if p.starts_with("/media/") => "/media",
        p if p.starts_with("/verify/") => "/verify",
        p if p.starts_with("/operator/") => "/operator",
        _ => "other",
    }
}

/// The position in [`ROUTES`] of a request path's route group ([`route_of`]).
pub fn route_index(path: &str) -> usize {
    let route = route_of(path);
    ROUTES
        .iter()
        .position(|x| *x == route)
        .unwrap_or(ROUTES.len() - 1)
}

impl Metrics {
    /// Runs `f` with this server's recorder current: the `metrics` macros inside it record here.
    pub fn record<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// Count one answered request to `path` and its latency.
    pub fn record_request(&self, path: &str, status: u16, latency: Duration) {
        self.record_route(route_index(path), status, latency);
    }

    /// Count one answered request to the route group at `route` in [`ROUTES`] ([`route_index`]).
    pub fn record_route(&self, route: usize, status: u16, latency: Duration) {
        let r = route.min(ROUTES.len() - 1);
        let handles = &self.requests[r][usize::from(status / 100).clamp(1, 5) - 1];
        handles.count.increment(1);
        handles.latency.record(latency.as_secs_f64());
        if status == 402 {
            self.payment_required.increment(1);
        }
    }

    /// Count one stored receipt.
    pub fn record_receipt(&self, ok: bool) {
        if ok {
            self.receipts_issued.increment(1);
        } else {
            self.receipt_failures.increment(1);
        }
    }

    /// Count one article read again by sign-in-with-x.
    pub fn record_reread(&self) {
        self.rereads.increment(1);
    }

    /// The Prometheus text exposition, after `collect` copied in the counts kept elsewhere (it runs with
    /// this server's recorder current).
    pub fn render(&self, collect: impl FnOnce()) -> String {
        self.record(|| {
            self.process.collect();
            collect();
        });
        self.handle.render()
    }
}

/// Sets counter `name` to `value` (a count kept elsewhere), with its help text.
pub(crate) fn counter(name: &'static str, help: &'static str, value: u64) {
    describe_counter!(name, help);
    counter!(name).absolute(value);
}

/// Sets gauge `name` to `value`, with its help text.
pub(crate) fn gauge(name: &'static str, help: &'static str, value: u64) {
    describe_gauge!(name, help);
    gauge!(name).set(value as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_histograms_and_build_info_per_server() {
        let m = Metrics::default();
        let other = Metrics::default();
        m.record_request("/x402Article", 402, Duration::from_micros(40));
        m.record_request("/x402Article", 200, Duration::from_millis(3));
        m.record_request("/nope", 404, Duration::from_millis(1));
        let text = m.render(|| counter("extra_total", "An extra count.", 7));
        assert!(
            text.contains("http_requests_total{route=\"/x402Article\",status=\"4xx\"} 1"),
            "{text}"
        );
        assert!(text.contains("http_requests_total{route=\"other\",status=\"4xx\"} 1"));
        assert!(text.contains("http_payment_required_total 1"));
        assert!(text.contains("extra_total 7"));
        assert!(text.contains("# TYPE http_request_duration_seconds histogram"));
        assert!(text.contains("build_info{"));
        // Another server's recorder saw none of it.
        assert!(
            other
                .render(|| ())
                .contains("http_payment_required_total 0")
        );
    }
}
