//! Counters a server can export (to Prometheus, say): plain atomics, read as a [`MetricsSnapshot`].
//!
//! With the `metrics` feature, every count is also recorded through the [`metrics`](https://docs.rs/metrics)
//! facade, to whatever recorder the application installed (`metrics-exporter-prometheus`, StatsD, ...):
//! `x402_payment_required_total`, `x402_payments_total{outcome, reason}` (outcomes `accepted`, `rejected`
//! with the x402 reason, `settlement_failed`, `settlement_unknown`, `upstream_error`) and
//! `x402_settlement_observer_errors_total`. `describe` (feature `metrics`) registers their help texts.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::verify::RejectReason;

/// The layer's counters. Shared by every clone of the layer; read with [`X402Metrics::snapshot`].
#[derive(Debug, Default)]
pub struct X402Metrics {
    payment_required: AtomicU64,
    accepted: AtomicU64,
    rejected: [AtomicU64; RejectReason::COUNT],
    settlements_failed: AtomicU64,
    settlements_unknown: AtomicU64,
    upstream_errors: AtomicU64,
    observer_errors: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// 402 answers sent (for any reason, including rejections and failed settlements).
    pub payment_required_sent: u64,
    /// Payments verified and passed to the inner service.
    pub payments_accepted: u64,
    /// Rejected payments, by spec error string (every reason listed, zeros included).
    pub rejected: Vec<(&'static str, u64)>,
    /// Settlements that failed (the client got a 402 with `success:false`).
    pub settlements_failed: u64,
    /// Settlements whose outcome is unknown (timeout after broadcast; the client got a 502).
    pub settlements_unknown: u64,
    /// Settler or replay-store errors answered with 502/503.
    pub upstream_errors: u64,
    /// Settlements the [`SettlementObserver`](crate::settle::SettlementObserver) failed to record (logged).
    pub settlement_observer_errors: u64,
}

impl X402Metrics {
    /// Reads all counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            payment_required_sent: self.payment_required.load(Relaxed),
            payments_accepted: self.accepted.load(Relaxed),
            rejected: RejectReason::ALL
                .iter()
                .map(|r| (r.as_str(), self.rejected[*r as usize].load(Relaxed)))
                .collect(),
            settlements_failed: self.settlements_failed.load(Relaxed),
            settlements_unknown: self.settlements_unknown.load(Relaxed),
            upstream_errors: self.upstream_errors.load(Relaxed),
            settlement_observer_errors: self.observer_errors.load(Relaxed),
        }
    }

    pub(crate) fn payment_required(&self) {
        self.payment_required.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("x402_payment_required_total").increment(1);
    }
    pub(crate) fn accepted(&self) {
        self.accepted.fetch_add(1, Relaxed);
        facade_outcome("accepted");
    }
    pub(crate) fn rejected(&self, reason: RejectReason) {
        self.rejected[reason as usize].fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("x402_payments_total", "outcome" => "rejected", "reason" => reason.as_str())
            .increment(1);
    }
    pub(crate) fn settlement_failed(&self) {
        self.settlements_failed.fetch_add(1, Relaxed);
        facade_outcome("settlement_failed");
    }
    pub(crate) fn settlement_unknown(&self) {
        self.settlements_unknown.fetch_add(1, Relaxed);
        facade_outcome("settlement_unknown");
    }
    pub(crate) fn observer_error(&self) {
        self.observer_errors.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("x402_settlement_observer_errors_total").increment(1);
    }
    pub(crate) fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Relaxed);
        facade_outcome("upstream_error");
    }
}

/// Records one payment outcome through the facade (feature `metrics`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn facade_outcome(outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("x402_payments_total", "outcome" => outcome).increment(1);
}

/// Registers the help texts of the facade's x402 counters with the current recorder (feature `metrics`).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe() {
    metrics::describe_counter!(
        "x402_payment_required_total",
        "402 answers sent by the x402 layer."
    );
    metrics::describe_counter!(
        "x402_payments_total",
        "Payments by outcome (rejected ones by the x402 reason)."
    );
    metrics::describe_counter!(
        "x402_settlement_observer_errors_total",
        "Settlements the settlement observer failed to record."
    );
}

impl MetricsSnapshot {
    /// The count for one reason (`"invalid_exact_evm_payload_signature"`).
    pub fn rejected_for(&self, reason: &str) -> u64 {
        self.rejected
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }
}
