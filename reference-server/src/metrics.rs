//! Prometheus text metrics of the server (the x402 layer's payment counters are appended by the app).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

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

const STATUS_CLASSES: &[&str] = &["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Counters updated by the request-counting middleware and the handlers.
#[derive(Debug)]
pub struct Metrics {
    requests: Vec<[AtomicU64; 5]>,
    payment_required: AtomicU64,
    receipts_issued: AtomicU64,
    receipt_write_failures: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: ROUTES.iter().map(|_| Default::default()).collect(),
            payment_required: AtomicU64::new(0),
            receipts_issued: AtomicU64::new(0),
            receipt_write_failures: AtomicU64::new(0),
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

impl Metrics {
    /// Count one answered request.
    pub fn record_request(&self, path: &str, status: u16) {
        let route = route_of(path);
        let r = ROUTES
            .iter()
            .position(|x| *x == route)
            .unwrap_or(ROUTES.len() - 1);
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.requests[r][class].fetch_add(1, Ordering::Relaxed);
        if status == 402 {
            self.payment_required.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count one stored receipt.
    pub fn record_receipt(&self, ok: bool) {
        let c = if ok {
            &self.receipts_issued
        } else {
            &self.receipt_write_failures
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Render in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(2048);
        out.push_str(
            "# HELP http_requests_total HTTP requests answered, by route group and status class.\n",
        );
        out.push_str("# TYPE http_requests_total counter\n");
        for (route, counts) in ROUTES.iter().zip(&self.requests) {
            for (class, c) in STATUS_CLASSES.iter().zip(counts) {
                let n = c.load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "http_requests_total{{route=\"{route}\",status=\"{class}\"}} {n}"
                    );
                }
            }
        }
        counter(
            &mut out,
            "http_payment_required_total",
            "Responses with status 402 Payment Required.",
            self.payment_required.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "license_receipts_issued_total",
            "License receipts stored since start.",
            self.receipts_issued.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "license_receipt_failures_total",
            "Paid requests whose receipt could not be stored (answered 500).",
            self.receipt_write_failures.load(Ordering::Relaxed),
        );
        out
    }
}

pub(crate) fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
    );
}

pub(crate) fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts() {
        let m = Metrics::default();
        m.record_request("/x402Article", 402);
        m.record_request("/x402Article", 200);
        m.record_request("/nope", 404);
        let text = m.render();
        assert!(
            text.contains("http_requests_total{route=\"/x402Article\",status=\"4xx\"} 1"),
            "{text}"
        );
        assert!(text.contains("http_requests_total{route=\"other\",status=\"4xx\"} 1"));
        assert!(text.contains("http_payment_required_total 1"));
    }
}
