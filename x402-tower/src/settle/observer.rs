//! [`SettlementObserver`]: how an application learns every settlement outcome durably.

use crate::boxed::BoxFuture;
use crate::payment::{SettleTiming, VerifiedPayment};

/// What became of one settlement attempt, as an observer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservedOutcome {
    /// The payment settled.
    Settled {
        /// Transaction hash (or [`VERIFY_ONLY_TRANSACTION`](super::VERIFY_ONLY_TRANSACTION)).
        transaction: String,
    },
    /// The settlement failed; the client got 402 with a `success:false` receipt.
    Failed {
        /// Spec error string (`"insufficient_funds"`).
        reason: String,
        /// Detail, if the settler gave one.
        message: Option<String>,
    },
    /// Nobody knows whether money moved (timeout after broadcast, no or a garbled answer from a
    /// facilitator's `/settle`); the client got 402 `settlement_pending`, and the payment is reconciled
    /// later (a resend, or [`PaymentEngine::reconcile_unresolved`](crate::engine::PaymentEngine::reconcile_unresolved)).
    Unknown {
        /// What happened.
        message: String,
        /// The transaction hash, when one was broadcast.
        transaction: Option<String>,
    },
}

impl ObservedOutcome {
    /// `"settled"`, `"failed"` or `"unknown"`: a stable label for storage and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            ObservedOutcome::Settled { .. } => "settled",
            ObservedOutcome::Failed { .. } => "failed",
            ObservedOutcome::Unknown { .. } => "unknown",
        }
    }
}

/// One settlement attempt, reported to a [`SettlementObserver`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct SettlementEvent<'a> {
    /// The verified payment: payer, amount, network, asset, recipient, nonce, x402 version.
    /// (`settlement` is `None`: the outcome is in [`SettlementEvent::outcome`].)
    pub payment: &'a VerifiedPayment,
    /// The absolute resource URL paid for (public base URL + the request's path and query).
    pub resource: &'a str,
    /// What became of the settlement.
    pub outcome: &'a ObservedOutcome,
    /// When the settlement ran (before or after the inner service); `None` for a facilitator API's
    /// settlement and for a background reconciliation.
    pub timing: Option<SettleTiming>,
    /// `true` when this is the reconciliation of an earlier outcome that was unknown (or of a request that
    /// died mid-flight): the outcome replaces the earlier one; it is not another payment.
    pub reconciled: bool,
}

/// An observer could not record a settlement. The layer logs it and counts it; the client's answer is
/// unchanged.
#[derive(Debug, thiserror::Error)]
#[error("settlement observer failed: {0}")]
pub struct ObserverError(#[source] Box<dyn std::error::Error + Send + Sync + 'static>);

impl ObserverError {
    /// Wraps any error (or a message: `ObserverError::new("disk full")`).
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        ObserverError(error.into())
    }
}

/// Learns every settlement outcome, before the client does. Dyn-compatible: the layer holds an
/// `Arc<dyn SettlementObserver>`.
///
/// The layer logs and counts settlements, but money may move even when the client hears an error (a
/// settler that timed out after broadcasting, a facilitator that did not answer `/settle`). An application
/// that must keep books gives the layer an observer
/// ([`PaymentEngineBuilder::settlement_observer`](crate::engine::PaymentEngineBuilder::settlement_observer)); the layer calls it **once
/// per settlement attempt**, with the verified payment, the resource and the outcome, and **awaits it before
/// answering the client**, so a record exists before anybody hears anything:
///
/// - [`ObservedOutcome::Settled`]: the settler reported success (the transaction hash, or
///   [`VERIFY_ONLY_TRANSACTION`](super::VERIFY_ONLY_TRANSACTION));
/// - [`ObservedOutcome::Failed`]: the settler reported a failure (the client gets 402 with a
///   `success:false` receipt);
/// - [`ObservedOutcome::Unknown`]: nobody knows whether money moved (timeout after broadcast, a facilitator
///   that timed out or answered garbage on `/settle`; the client gets 402 `settlement_pending`). Not a
///   success, not a failure: the engine reconciles it later and reports again, with
///   [`SettlementEvent::reconciled`] set.
///
/// Both [`SettleTiming`](crate::settle::SettleTiming)s report. Nothing is reported when no settlement was attempted
/// (a rejected payment, a settler *verify* that failed or did not answer, an inner service that answered
/// `>= 400` with settle-after): no money can have moved then. A future that is dropped while settling (a
/// server that cancels requests whose client went away) never reaches the observer: run the paid route to
/// completion (for example on its own task) when every outcome must be recorded.
///
/// An observer that fails returns an [`ObserverError`]: the layer logs it (`error` level, with the payment)
/// and counts it ([`MetricsSnapshot::settlement_observer_errors`](crate::engine::MetricsSnapshot)); the client's
/// answer does not change, and nothing panics. Without an observer the layer does no extra work.
///
/// ```
/// use std::sync::Arc;
/// use x402_tower::pricing::BoxFuture;
/// use x402_tower::settle::{ObserverError, SettlementEvent, SettlementObserver};
///
/// struct Books; // a database in real life
///
/// impl SettlementObserver for Books {
///     fn on_settlement<'a>(&'a self, event: SettlementEvent<'a>) -> BoxFuture<'a, Result<(), ObserverError>> {
///         Box::pin(async move {
///             println!(
///                 "{} paid {} for {}: {}",
///                 event.payment.payer, event.payment.amount, event.resource, event.outcome.as_str()
///             );
///             Ok(())
///         })
///     }
/// }
///
/// let engine = x402_tower::PaymentEngine::builder()
///     .settler(Arc::new(x402_tower::settle::VerifyOnlySettler))
///     .settlement_observer(Arc::new(Books))
///     .build();
/// # assert!(engine.is_ok());
/// ```
pub trait SettlementObserver: Send + Sync + 'static {
    /// Records one settlement attempt. The layer awaits the future before answering the client; keep it
    /// short (a database insert) and make it fail rather than hang.
    fn on_settlement<'a>(
        &'a self,
        event: SettlementEvent<'a>,
    ) -> BoxFuture<'a, Result<(), ObserverError>>;
}

impl<T: SettlementObserver + ?Sized> SettlementObserver for std::sync::Arc<T> {
    fn on_settlement<'a>(
        &'a self,
        event: SettlementEvent<'a>,
    ) -> BoxFuture<'a, Result<(), ObserverError>> {
        (**self).on_settlement(event)
    }
}
