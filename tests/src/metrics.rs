//! Reading a server's Prometheus text (`/metrics`).

/// The value of one series of `text`: `series` is the name with its labels as rendered
/// (`x402_payments_total{outcome="accepted"}`, or a bare name); `None` when it is absent or not an integer.
///
/// ```
/// let text = "# TYPE a_total counter\na_total 3\nb_total{k=\"v\"} 5\n";
/// assert_eq!(workspace_tests::metrics::value(text, "a_total"), Some(3));
/// assert_eq!(workspace_tests::metrics::value(text, "b_total{k=\"v\"}"), Some(5));
/// assert_eq!(workspace_tests::metrics::value(text, "b_total"), None);
/// ```
pub fn value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}
