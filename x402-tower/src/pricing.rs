//! How a route is priced: statically or per request, asynchronously.

use std::sync::{Arc, OnceLock};

use alloy_primitives::Address;
use bytes::Bytes;
use http_body_util::Full;

use crate::scheme::CompiledOffer;

pub use crate::boxed::BoxFuture;
pub use crate::offer::{DEFAULT_MAX_TIMEOUT_SECONDS, OfferError, PaymentOffer};
pub use crate::price::{Price, PriceError};

/// The offers a [`PriceSource`] charges: a list of [`PaymentOffer`]s behind an `Arc`, cheap to clone.
///
/// The layer checks a list and compiles it (v2 requirements, their JSON, the token's EIP-712 domain) the
/// first time it sees it and keeps the result in the `Offers`: a price source that keeps one `Offers` per
/// price (an article, a plan) and returns clones of it pays for that once, not on every request. A list
/// built afresh per request (`vec.into()`) works too; the engine then finds its compiled form by content.
///
/// ```
/// use alloy_primitives::address;
/// use x402_tower::pricing::{Offers, PriceDecision};
/// use x402_tower::{PaymentOffer, Price};
///
/// let pay_to = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
/// let price = Price::from_usdc_decimal("0.25").unwrap();
/// // One per article, kept beside it; every request for the article returns a clone.
/// let article = Offers::new(vec![PaymentOffer::usdc("base".parse().unwrap(), pay_to, price).unwrap()]);
/// let decision = PriceDecision::Charge(article.clone());
/// assert_eq!(article.as_slice().len(), 1);
/// # let _ = decision;
/// ```
#[derive(Clone)]
pub struct Offers(Arc<OffersInner>);

struct OffersInner {
    list: Vec<PaymentOffer>,
    /// The checked and compiled list, or what is wrong with it (set once, by the first request).
    compiled: OnceLock<Result<Arc<[CompiledOffer]>, &'static str>>,
}

impl Offers {
    /// These offers, in the order clients see them (at least one for a valid price).
    pub fn new(list: Vec<PaymentOffer>) -> Self {
        Offers(Arc::new(OffersInner {
            list,
            compiled: OnceLock::new(),
        }))
    }

    /// The offers.
    pub fn as_slice(&self) -> &[PaymentOffer] {
        &self.0.list
    }

    /// The compiled offers, or what is wrong with them (no offers, a zero amount...): worked out once.
    pub(crate) fn compiled(
        &self,
        compile: impl FnOnce(Vec<PaymentOffer>) -> Arc<[CompiledOffer]>,
    ) -> Result<Arc<[CompiledOffer]>, &'static str> {
        self.0
            .compiled
            .get_or_init(|| {
                let list = &self.0.list;
                match list
                    .iter()
                    .find_map(offer_problem)
                    .or(list.is_empty().then_some("no offers"))
                {
                    Some(why) => Err(why),
                    None => Ok(compile(list.clone())),
                }
            })
            .clone()
    }
}

impl From<Vec<PaymentOffer>> for Offers {
    fn from(list: Vec<PaymentOffer>) -> Self {
        Offers::new(list)
    }
}

impl std::fmt::Debug for Offers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.0.list).finish()
    }
}

/// What the price code decided for one request.
#[derive(Debug)]
pub enum PriceDecision {
    /// Charge: the client must pay one of these offers (at least one). From a `Vec<PaymentOffer>` with
    /// `.into()`, or a clone of [`Offers`] the price source keeps.
    Charge(Offers),
    /// The request is free: the inner service runs, no payment is asked for or checked.
    Free,
    /// Answer with this response, without a 402 and without calling the inner service
    /// (an unknown article gets the application's 404, a missing parameter a 400).
    Respond(http::Response<Full<Bytes>>),
}

/// Decides the price of a request.
///
/// Implemented for [`StaticPrice`] and for closures `Fn(&http::request::Parts) -> impl Future<Output =
/// PriceDecision>`: the closure runs synchronously with the request head, takes what it needs from it, and
/// returns a `'static` future (which may query a database).
///
/// ```
/// use x402_tower::pricing::{PriceDecision, PriceSource};
///
/// let source = |parts: &http::request::Parts| {
///     let free = parts.uri.path() == "/free";
///     async move { if free { PriceDecision::Free } else { PriceDecision::Charge(vec![].into()) } }
/// };
/// fn takes(_: impl PriceSource) {}
/// takes(source);
/// ```
pub trait PriceSource: Send + Sync + 'static {
    /// The decision for a request with this head.
    fn price(&self, parts: &http::request::Parts) -> BoxFuture<'static, PriceDecision>;
}

impl<F, Fut> PriceSource for F
where
    F: Fn(&http::request::Parts) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = PriceDecision> + Send + 'static,
{
    fn price(&self, parts: &http::request::Parts) -> BoxFuture<'static, PriceDecision> {
        Box::pin(self(parts))
    }
}

/// The same offers for every request (a clone of one [`Offers`]: checked and compiled once).
#[derive(Debug, Clone)]
pub struct StaticPrice(pub Offers);

impl PriceSource for StaticPrice {
    fn price(&self, _parts: &http::request::Parts) -> BoxFuture<'static, PriceDecision> {
        let offers = self.0.clone();
        Box::pin(async move { PriceDecision::Charge(offers) })
    }
}

/// What is wrong with an offer, if anything (checked at build for static offers, once per [`Offers`] for dynamic).
pub(crate) fn offer_problem(o: &PaymentOffer) -> Option<&'static str> {
    if o.amount.atomic_units().is_zero() {
        Some("amount is zero")
    } else if o.pay_to == Address::ZERO {
        Some("payTo is the zero address")
    } else if o.token.address == Address::ZERO {
        Some("token address is zero")
    } else if o.max_timeout_seconds == 0 {
        Some("maxTimeoutSeconds is zero")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PaymentEngine;
    use crate::price::Price;
    use crate::settle::VerifyOnlySettler;
    use alloy_primitives::address;

    fn engine() -> PaymentEngine {
        PaymentEngine::builder()
            .settler(Arc::new(VerifyOnlySettler))
            .build()
            .unwrap()
    }

    fn offer(atomic: u64) -> PaymentOffer {
        PaymentOffer::usdc(
            "base-sepolia".parse().unwrap(),
            address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            Price::from(atomic),
        )
        .unwrap()
    }

    #[test]
    fn a_kept_list_is_compiled_once_and_an_equal_fresh_list_finds_it() {
        let engine = engine();
        let kept = Offers::new(vec![offer(10_000)]);
        let first = kept.compiled(|l| engine.compile(l)).unwrap();
        assert!(Arc::ptr_eq(
            &first,
            &kept.clone().compiled(|l| engine.compile(l)).unwrap()
        ));
        let fresh: Offers = vec![offer(10_000)].into();
        assert!(Arc::ptr_eq(
            &first,
            &fresh.compiled(|l| engine.compile(l)).unwrap()
        ));
        let other: Offers = vec![offer(20_000)].into();
        let other = other.compiled(|l| engine.compile(l)).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other[0].v2.amount.to_string(), "20000");
    }

    #[test]
    fn a_bad_list_is_refused_every_time() {
        let engine = engine();
        assert_eq!(
            Offers::new(vec![])
                .compiled(|l| engine.compile(l))
                .unwrap_err(),
            "no offers"
        );
        let bad = Offers::new(vec![offer(10_000), offer(0)]);
        for _ in 0..2 {
            assert_eq!(
                bad.compiled(|l| engine.compile(l)).unwrap_err(),
                "amount is zero"
            );
        }
    }
}
