//! How a route is priced: statically or per request, asynchronously.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http_body_util::Full;

use crate::offer::PaymentOffer;

/// A boxed, `Send` future (the trait objects of this crate return these).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the price code decided for one request.
#[derive(Debug)]
pub enum PriceDecision {
    /// Charge: the client must pay one of these offers (at least one).
    Charge(Vec<PaymentOffer>),
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
///     async move { if free { PriceDecision::Free } else { PriceDecision::Charge(vec![]) } }
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

/// The same offers for every request.
#[derive(Debug, Clone)]
pub struct StaticPrice(pub Vec<PaymentOffer>);

impl PriceSource for StaticPrice {
    fn price(&self, _parts: &http::request::Parts) -> BoxFuture<'static, PriceDecision> {
        let offers = self.0.clone();
        Box::pin(async move { PriceDecision::Charge(offers) })
    }
}
