//! Domain types of one payment, shared by the engine, its doors (the layer, a facilitator API), the settlers
//! and the observers: [`VerifiedPayment`], [`SettleTiming`] and [`SettleRequest`].

use std::sync::Arc;

use alloy_primitives::{Address, B256, U256};

use crate::offer::PaymentOffer;
use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};
use crate::scheme::Authorized;

/// When the payment is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SettleTiming {
    /// After the inner service answered below 400, holding its response (body untouched) until then; a
    /// response >= 400 is passed through unsettled (the payer is not charged). The official middlewares' way.
    #[default]
    AfterResponse,
    /// Before the inner service runs; the inner service then sees the settlement in
    /// [`VerifiedPayment::settlement`]. The payment record (settled) and the settlement observer's report are
    /// written while the inner service runs, and its response is released only once they are done, so the
    /// service's own writes (a receipt) can share their commit. The receipt goes with whatever the inner
    /// service answers, an error too (the money moved): the buyer's resend of the identical payment is served
    /// again, never settled twice.
    BeforeHandler,
}

/// A payment that passed verification (and the replay guard), put in the request extensions for the inner
/// service, so a handler can issue a license or a receipt.
///
/// ```
/// use x402_tower::VerifiedPayment;
///
/// async fn handler(req: http::Request<String>) -> Result<http::Response<String>, std::convert::Infallible> {
///     let paid = req.extensions().get::<VerifiedPayment>().map(|p| p.payer.to_string());
///     Ok(http::Response::new(format!("paid by {paid:?}")))
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPayment {
    /// The scheme paid under (`"exact"`).
    pub scheme: &'static str,
    /// The payer (`authorization.from`).
    pub payer: Address,
    /// The amount authorized, atomic units.
    pub amount: U256,
    /// The network.
    pub network: crate::network::Network,
    /// The token contract.
    pub asset: Address,
    /// The recipient.
    pub pay_to: Address,
    /// The authorization nonce (in the contract of [`PaymentKey::nonce_space`](crate::store::PaymentKey)).
    pub nonce: B256,
    /// `validBefore` of the authorization (unix seconds, saturated to `u64`).
    pub valid_before: u64,
    /// 1 or 2: the version the client spoke.
    pub x402_version: u8,
    /// The settlement, when settled before the handler ([`SettleTiming::BeforeHandler`]) or when this is a
    /// redelivery.
    pub settlement: Option<SettleResponse>,
    /// `true` when this payment was settled by an earlier request for the same resource (the client lost the
    /// answer and resent the identical payment): deliver the same thing again, do not issue anything new.
    /// Nothing was settled for this request.
    pub redelivered: bool,
    /// For a scheme that settles what was used (`upto`): what was charged, once the protected service
    /// answered (`amount` is then the signed maximum). `None` for other schemes.
    pub charge: Option<U256>,
    /// What the route's extensions carried from the paid request ([`Extension::on_request`](crate::extensions::Extension::on_request)),
    /// for the settlement observer. Empty for a reconciliation by the background pass (no request).
    pub context: crate::extensions::PaymentContext,
    /// Which of the offers the price source returned this payment pays (their position): the license
    /// bought when one resource is sold under several (0 for a facilitator's request, which has one).
    pub offer_index: usize,
}

impl VerifiedPayment {
    /// The payment a settle request describes (nothing settled yet).
    pub fn from_request(request: &SettleRequest) -> Self {
        let paid = &request.authorized;
        VerifiedPayment {
            scheme: paid.scheme,
            payer: paid.payer,
            amount: paid.amount,
            network: request.offer.network.clone(),
            asset: request.offer.token.address,
            pay_to: request.offer.pay_to,
            nonce: paid.key.nonce,
            valid_before: paid.valid_before,
            x402_version: request.payload.x402_version(),
            settlement: None,
            redelivered: false,
            charge: request.charge,
            context: Default::default(),
            offer_index: 0,
        }
    }
}

/// Everything a settler may need about one payment. Built by the layer after local verification passed.
#[derive(Debug, Clone)]
pub struct SettleRequest {
    /// The decoded payment, typed.
    pub payload: PaymentPayload,
    /// The decoded payment's JSON text exactly as the client sent it (what a facilitator receives). A
    /// reconciliation's request is rebuilt from the payment record, which keeps this text less the
    /// extensions echoed from the 402 ([`StoredPayment::new`](crate::store::StoredPayment::new)).
    pub payload_text: Arc<str>,
    /// The requirements the payment matched, in the payment's version.
    pub requirements: PaymentRequirements,
    /// The offer the payment matched: network (chain id) and token (address, EIP-712 name/version).
    pub offer: PaymentOffer,
    /// The payment as its scheme read it: payer, amount, key, and the scheme's typed payload for a settler
    /// that calls the chain ([`Authorized::details`]).
    pub authorized: Authorized,
    /// For a scheme that settles what was used (`upto`): the amount to settle, at most the authorized
    /// maximum ([`Authorized::amount`]); `requirements` then carry it as their amount, as the official
    /// servers send a facilitator. `None`: the amount authorized.
    pub charge: Option<U256>,
}

impl SettleRequest {
    /// The amount to settle: the [`charge`](Self::charge), else the amount authorized.
    pub fn amount_to_settle(&self) -> U256 {
        self.charge.unwrap_or(self.authorized.amount)
    }

    /// Settles `charge` (at most the authorized maximum, checked by the caller) instead of the maximum:
    /// [`charge`](Self::charge) and the requirements' amount.
    pub(crate) fn set_charge(&mut self, charge: U256) {
        self.charge = Some(charge);
        match &mut self.requirements {
            PaymentRequirements::V1(r) => r.max_amount_required = charge,
            PaymentRequirements::V2(r) => r.amount = charge,
        }
    }

    /// The payer.
    pub fn payer(&self) -> Address {
        self.authorized.payer
    }

    /// The network string in the client's version (v1 name or CAIP-2).
    pub fn wire_network(&self) -> String {
        match &self.requirements {
            PaymentRequirements::V1(r) => r.network.clone(),
            PaymentRequirements::V2(r) => r.network.clone(),
        }
    }
}
