//! Offers compiled for their scheme, and matching a payment to one of them (step 1 of verification).

use std::sync::Arc;

use alloy_primitives::B256;

use super::{Authorized, Check, Prepared, Scheme};
use crate::network::Network;
use crate::offer::PaymentOffer;
use crate::proto::{PaymentPayload, PaymentRequirementsV1, PaymentRequirementsV2};
use crate::verify::{Decoded, RejectReason, Rejection};

/// An offer with everything that can be computed once: its v2 requirements (also as JSON), the scheme
/// that sells it and what that scheme prepared for it.
#[derive(Debug, Clone)]
pub(crate) struct CompiledOffer {
    pub(crate) offer: PaymentOffer,
    pub(crate) v2: PaymentRequirementsV2,
    /// `v2` serialised once (the 402 header and the payment records use it).
    pub(crate) v2_json: std::sync::Arc<str>,
    pub(crate) scheme: Arc<dyn Scheme>,
    pub(crate) prepared: Prepared,
}

impl CompiledOffer {
    pub(crate) fn new(offer: PaymentOffer, scheme: Arc<dyn Scheme>, prepared: Prepared) -> Self {
        let v2 = offer.requirements_v2_with(|offer, extra| scheme.extra(offer, extra));
        let v2_json = serde_json::to_string(&v2).unwrap_or_default().into();
        CompiledOffer {
            offer,
            v2,
            v2_json,
            scheme,
            prepared,
        }
    }

    /// v1 requirements of the offer, or `None` when legacy v1 clients do not know its network.
    pub(crate) fn v1_requirements(&self, resource_url: &str) -> Option<PaymentRequirementsV1> {
        if !self.scheme.speaks_v1() {
            return None;
        }
        let network = self.offer.network.legacy_v1_name()?;
        Some(PaymentRequirementsV1 {
            scheme: self.v2.scheme.clone(),
            network: network.to_owned(),
            max_amount_required: self.offer.amount.atomic_units(),
            resource: resource_url.to_owned(),
            description: self.offer.description.clone(),
            mime_type: self.offer.mime_type.clone(),
            output_schema: None,
            pay_to: self.offer.pay_to,
            max_timeout_seconds: self.offer.max_timeout_seconds,
            asset: self.offer.token.address,
            extra: self.v2.extra.clone(),
        })
    }

    /// Checks `paid` (read for this offer) as of `now`, in the payment's version, a signature that does not
    /// recover to the payer left to the settler when it judges `contract_wallets`: its fingerprint.
    pub(crate) fn check(
        &self,
        paid: &Authorized,
        x402_version: u8,
        now: u64,
        contract_wallets: bool,
    ) -> Result<B256, Rejection> {
        self.scheme.check(
            paid,
            Check {
                offer: &self.offer,
                prepared: &self.prepared,
                x402_version,
                now,
                contract_wallets,
            },
        )
    }
}

/// A payment matched to one of the offers and read by its scheme (not checked yet).
#[derive(Debug, Clone)]
pub(crate) struct Matched {
    /// The payment as decoded.
    pub(crate) decoded: Decoded,
    pub(crate) offer_index: usize,
    pub(crate) authorized: Authorized,
}

/// Step 1 of the spec's verification: the scheme, the network, and the offer the payment pays, whose
/// scheme then reads the payment ([`Scheme::read`]). The checks of steps 2 to 5 are the scheme's
/// ([`CompiledOffer::check`]).
pub(crate) fn matched(decoded: Decoded, offers: &[CompiledOffer]) -> Result<Matched, Rejection> {
    let payload = &decoded.payload;
    let scheme = payload.scheme();
    if !offers.iter().any(|o| o.scheme.name() == scheme) {
        return Err(Rejection::new(
            RejectReason::InvalidScheme,
            "no offer is sold under the payment's scheme",
        ));
    }
    let (offer_index, authorized) = match payload {
        PaymentPayload::V1(p) => {
            let network = Network::from_v1_name(&p.network).ok_or_else(|| {
                Rejection::new(RejectReason::InvalidNetwork, "unknown v1 network")
            })?;
            // Only the offers advertised to v1 clients (the legacy networks) can be paid in v1: an offer on a
            // v2-only network has no v1 requirements to match or to hand a facilitator. A v1 payment names no
            // offer, only its amount: among several offers on its network (two licenses of one resource at two
            // prices), the one whose price it pays exactly, else the first (which it must then cover).
            let payable = |o: &CompiledOffer| {
                o.scheme.name() == scheme
                    && o.scheme.speaks_v1()
                    && o.offer.network == network
                    && network.legacy_v1_name().is_some()
            };
            let first = offers.iter().position(payable).ok_or_else(no_match)?;
            let read = offers[first]
                .scheme
                .read(&p.payload, &offers[first].offer)?;
            let exact = offers
                .iter()
                .position(|o| payable(o) && o.offer.amount.atomic_units() == read.amount);
            match exact {
                Some(i) if i != first => (i, offers[i].scheme.read(&p.payload, &offers[i].offer)?),
                _ => (first, read),
            }
        }
        PaymentPayload::V2(p) => {
            p.accepted.network.parse::<Network>().map_err(|_| {
                Rejection::new(RejectReason::InvalidNetwork, "unknown CAIP-2 network")
            })?;
            let i = offers
                .iter()
                .position(|o| o.v2 == p.accepted)
                .ok_or_else(no_match)?;
            (i, offers[i].scheme.read(&p.payload, &offers[i].offer)?)
        }
    };
    Ok(Matched {
        decoded,
        offer_index,
        authorized,
    })
}

fn no_match() -> Rejection {
    Rejection::new(
        RejectReason::NoMatchingRequirements,
        "the payment matches none of the offers",
    )
}
