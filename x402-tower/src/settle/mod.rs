//! Settlement: the [`Settler`] trait and its implementations.
//!
//! - [`VerifyOnlySettler`]: checks nothing beyond the layer's local verification and **moves no money**. Its
//!   receipts carry `transaction: "verify-only"`. For demos and tests only.
#![cfg_attr(feature = "facilitator", doc = "- [`FacilitatorSettler`]")]
#![cfg_attr(not(feature = "facilitator"), doc = "- `FacilitatorSettler`")]
//!   (feature `facilitator`, default): a remote x402 facilitator over HTTP (`/verify`, `/settle`,
//!   `/supported`).
//! - `onchain::OnchainSettler` (feature `onchain`): calls `transferWithAuthorization` over JSON-RPC.
//!
//! Every settlement outcome (settled, failed, unknown) can be reported to a [`SettlementObserver`] before the
//! client is answered, so an application keeps a durable record even when the client only hears a 502.
//!
//! A settler receives the whole [`SettleRequest`]: the client's payload (typed and as sent), the requirements
//! it matched in the client's version, and the offer (network with its chain id, token with its EIP-712
//! domain), so a settler that talks to a chain has everything it needs.

use alloy_primitives::Address;

use crate::proto::SupportedResponse;

#[cfg(feature = "facilitator")]
mod facilitator;
#[cfg(feature = "facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "facilitator")))]
pub use facilitator::{FacilitatorEndpoint, FacilitatorSettler, FacilitatorSettlerBuilder};

#[cfg(feature = "onchain")]
#[cfg_attr(docsrs, doc(cfg(feature = "onchain")))]
pub mod onchain;

pub use crate::boxed::BoxFuture;
pub use crate::payment::{SettleRequest, SettleTiming};

mod observer;
pub use observer::{ObservedOutcome, ObserverError, SettlementEvent, SettlementObserver};

/// The error reason of a settlement whose outcome is not known yet (x402 `settlement_pending`): the client
/// resends the identical payment later and is then answered from the reconciled outcome.
pub const SETTLEMENT_PENDING: &str = "settlement_pending";

/// The receipt `transaction` of a [`VerifyOnlySettler`]: says plainly that nothing was settled.
pub const VERIFY_ONLY_TRANSACTION: &str = "verify-only";

/// A settler's verdict on a payment before settlement (checks that need the chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyOutcome {
    /// Valid.
    Valid,
    /// Invalid, with the spec's error string (passed to the client unchanged) and detail.
    Invalid {
        /// Spec error string (`"insufficient_funds"`).
        reason: String,
        /// Detail.
        message: Option<String>,
    },
}

/// The result of a settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// The payment settled.
    Settled {
        /// Transaction hash (or [`VERIFY_ONLY_TRANSACTION`]).
        transaction: String,
        /// Payer.
        payer: Address,
        /// Network in the client's wire form.
        network: String,
    },
    /// The payment did not settle; the client gets 402 with a `success:false` receipt.
    Failed {
        /// Spec error string (`"insufficient_funds"`, `"unexpected_settle_error"`).
        reason: String,
        /// Detail.
        message: Option<String>,
        /// Whether the authorization may still be used on chain (nothing was broadcast, or it reverted before
        /// the nonce was spent). Decides whether the replay reservation is released.
        authorization_still_usable: bool,
    },
    /// Nobody knows (timeout after broadcast, no or a garbled answer): the client gets 402 with a
    /// `settlement_pending` receipt, the payment is recorded as pending and reconciled later
    /// ([`Settler::reconcile`]).
    Unknown {
        /// What happened.
        message: String,
        /// The transaction hash, when one was broadcast.
        transaction: Option<String>,
    },
}

/// A settler could not answer (transport error, timeout, garbage): the layer answers 502.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// The call timed out.
    #[error("settler timed out")]
    Timeout,
    /// Transport failure.
    #[error("settler transport error: {0}")]
    Transport(String),
    /// An answer that is not what the protocol says.
    #[error("settler answered garbage: {0}")]
    BadResponse(String),
    /// The request could not be sent as it is (a payment text that is not JSON): nothing was sent.
    #[error("settle request not sent: {0}")]
    InvalidRequest(String),
}

/// Verifies (with the chain) and settles payments. Dyn-compatible: the layer holds an `Arc<dyn Settler>`.
pub trait Settler: Send + Sync + 'static {
    /// Checks that need the chain (balance, nonce state, smart wallets). Called after the layer's local
    /// verification passed and the payment key was reserved.
    fn verify<'a>(
        &'a self,
        request: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>>;
    /// Moves the money.
    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome>;
    /// The kinds this settler supports.
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>>;
    /// The longest one `settle` call can take (its timeouts), if bounded. The engine never takes a payment
    /// still being settled for abandoned before that (see
    /// [`PaymentEngineBuilder::stale_after`](crate::engine::PaymentEngineBuilder::stale_after)). Default:
    /// `None` (unknown; the engine's threshold alone applies).
    fn settle_deadline(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether [`settle`](Self::settle) moves money (default `true`). [`VerifyOnlySettler`] moves none, so
    /// the engine skips the write that guards money in motion (it marks a record before settling it; see
    /// the [store's states](crate::store#states-and-the-keeprelease-rule)).
    fn moves_money(&self) -> bool {
        true
    }

    /// Whether this settler judges, before the handler runs ([`verify`](Self::verify), or a settlement
    /// before the handler), signatures a contract wallet makes (EIP-1271) (default `false`). When it does,
    /// the schemes leave a signature that does not recover to the payer to it instead of refusing it
    /// ([`Check::contract_wallets`](crate::scheme::Check::contract_wallets)): the contract judges it.
    fn checks_contract_wallets(&self) -> bool {
        false
    }

    /// Finds out what became of a settlement whose outcome was [`SettleOutcome::Unknown`] (with the
    /// transaction it reported, if any), **without moving money a second time**:
    ///
    /// - [`SettleOutcome::Settled`]: it settled;
    /// - [`SettleOutcome::Failed`] with `authorization_still_usable: true`: nothing moved and nothing can
    ///   move any more under the earlier attempt: the engine settles the payment anew;
    /// - [`SettleOutcome::Failed`] otherwise: it failed for good;
    /// - [`SettleOutcome::Unknown`]: still unknown (pending); asked again later.
    ///
    /// The default settles again: an EIP-3009 authorization moves money at most once whatever is sent, so a
    /// second `settle` either completes the first attempt or fails with the nonce used. The on-chain settler
    /// reads the transaction receipt and `authorizationState` instead; a facilitator is asked `/settle` again
    /// (x402 facilitators answer a settled payment idempotently or with the nonce used).
    fn reconcile<'a>(
        &'a self,
        request: &'a SettleRequest,
        transaction: Option<&'a str>,
    ) -> BoxFuture<'a, SettleOutcome> {
        let _ = transaction;
        self.settle(request)
    }
}

/// A settler that moves no money: every locally verified payment counts as "settled" with the transaction
/// [`VERIFY_ONLY_TRANSACTION`]. For demos and tests only: the payer keeps the funds.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyOnlySettler;

impl Settler for VerifyOnlySettler {
    fn verify<'a>(
        &'a self,
        _request: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        Box::pin(std::future::ready(Ok(VerifyOutcome::Valid)))
    }

    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        Box::pin(std::future::ready(SettleOutcome::Settled {
            transaction: VERIFY_ONLY_TRANSACTION.to_owned(),
            payer: request.payer(),
            network: request.wire_network(),
        }))
    }

    fn moves_money(&self) -> bool {
        false
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        let kinds = crate::network::NETWORKS
            .iter()
            .map(|n| crate::proto::SupportedKind {
                x402_version: 2,
                scheme: crate::proto::SCHEME_EXACT.to_owned(),
                network: n.caip2.to_owned(),
                extra: None,
            })
            .collect();
        Box::pin(std::future::ready(Ok(SupportedResponse {
            kinds,
            ..Default::default()
        })))
    }
}
