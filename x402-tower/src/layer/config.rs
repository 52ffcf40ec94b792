//! [`X402Layer`] and its builder [`X402Config`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, B256, U256};
use tower_layer::Layer;

use super::service::X402;
use crate::metrics::X402Metrics;
use crate::network::Token;
use crate::offer::PaymentOffer;
use crate::pricing::PriceSource;
use crate::proto::SettleResponse;
use crate::replay::{InMemoryReplayStore, ReplayStore};
use crate::settle::{SettlementObserver, Settler, VerifyOnlySettler};
use crate::verify::{CompiledOffer, domain_separator};

/// Default cap on the length of a payment header (bytes, before decoding).
pub const DEFAULT_MAX_HEADER_LEN: usize = 16 * 1024;

/// When the payment is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SettleTiming {
    /// After the inner service answered below 400, holding its response (body untouched) until then; a
    /// response >= 400 is passed through unsettled (the payer is not charged). The official middlewares' way.
    #[default]
    AfterResponse,
    /// Before the inner service runs; the inner service then sees the settlement in
    /// [`VerifiedPayment::settlement`].
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
    /// The authorization nonce.
    pub nonce: B256,
    /// `validBefore` of the authorization (unix seconds, saturated to `u64`).
    pub valid_before: u64,
    /// 1 or 2: the version the client spoke.
    pub x402_version: u8,
    /// The settlement, when settled before the handler ([`SettleTiming::BeforeHandler`]).
    pub settlement: Option<SettleResponse>,
}

/// Invalid configuration, reported by [`X402Config::build`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The public base URL is not an absolute `http(s)://host[:port][/path]` without query or fragment.
    #[error("public base URL {0:?} must be an absolute http(s) URL without query or fragment")]
    BadBaseUrl(String),
    /// Neither offers nor a price source were given.
    #[error("no pricing: give offers or a price source")]
    NoPricing,
    /// Both offers and a price source were given.
    #[error("give either static offers or a price source, not both")]
    BothPricings,
    /// An offer is unusable.
    #[error("offer {index} is invalid: {why}")]
    BadOffer {
        /// Its position.
        index: usize,
        /// Why.
        why: &'static str,
    },
    /// `max_header_len` is too small to hold any payment.
    #[error("max_header_len {0} is too small (at least 512)")]
    HeaderLimitTooSmall(usize),
}

pub(crate) type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub(crate) enum Pricing {
    Static(Arc<[CompiledOffer]>),
    Dynamic(Arc<dyn PriceSource>),
}

/// Everything the layer shares between requests.
pub(crate) struct Shared {
    pub(crate) base_url: String,
    pub(crate) pricing: Pricing,
    pub(crate) settler: Arc<dyn Settler>,
    pub(crate) observer: Option<Arc<dyn SettlementObserver>>,
    pub(crate) store: Arc<dyn ReplayStore>,
    pub(crate) timing: SettleTiming,
    pub(crate) expose_headers: bool,
    pub(crate) max_header_len: usize,
    pub(crate) metrics: Arc<X402Metrics>,
    pub(crate) clock: Clock,
    domains: Mutex<HashMap<(u64, Token), B256>>,
}

const DOMAIN_CACHE: usize = 256;

impl Shared {
    pub(crate) fn now(&self) -> u64 {
        (self.clock)()
    }

    /// Compiles per-request offers, reusing cached domain separators.
    pub(crate) fn compile(&self, offers: Vec<PaymentOffer>) -> Arc<[CompiledOffer]> {
        offers
            .into_iter()
            .map(|o| {
                let key = (o.network.chain_id(), o.token.clone());
                let mut cache = self.domains.lock().unwrap_or_else(|e| e.into_inner());
                let sep = match cache.get(&key) {
                    Some(s) => *s,
                    None => {
                        let s = domain_separator(key.0, &key.1);
                        if cache.len() < DOMAIN_CACHE {
                            cache.insert(key, s);
                        }
                        s
                    }
                };
                drop(cache);
                CompiledOffer::new(o, sep)
            })
            .collect()
    }
}

/// Sells the wrapped service's responses for x402 payments. Build it with [`X402Layer::builder`].
///
/// Cloning is cheap (an `Arc`); every clone shares the replay store and the metrics.
#[derive(Clone)]
pub struct X402Layer {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for X402Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X402Layer")
            .field("base_url", &self.shared.base_url)
            .finish_non_exhaustive()
    }
}

impl X402Layer {
    /// Starts a configuration. `public_base_url` (`https://api.example.com`) is where clients reach this
    /// service: the absolute `resource` URLs of the 402 answers are built from it and the request's path and
    /// query, never from the `Host` a client sends.
    pub fn builder(public_base_url: impl Into<String>) -> X402Config {
        X402Config {
            public_base_url: public_base_url.into(),
            offers: Vec::new(),
            source: None,
            settler: None,
            observer: None,
            store: None,
            timing: SettleTiming::default(),
            expose_headers: false,
            max_header_len: DEFAULT_MAX_HEADER_LEN,
            clock: None,
        }
    }

    /// The layer's counters.
    pub fn metrics(&self) -> Arc<X402Metrics> {
        self.shared.metrics.clone()
    }
}

impl<S> Layer<S> for X402Layer {
    type Service = X402<S>;

    fn layer(&self, inner: S) -> X402<S> {
        X402::new(inner, self.clone())
    }
}

/// Configuration of an [`X402Layer`], by value; [`X402Config::build`] checks it.
///
/// ```
/// use std::sync::Arc;
/// use alloy_primitives::address;
/// use x402_tower::{X402Layer, SettleTiming, offer::PaymentOffer, price::Price, settle::VerifyOnlySettler};
///
/// let layer = X402Layer::builder("https://api.example.com")
///     .offer(PaymentOffer::usdc(
///         "base-sepolia".parse().unwrap(),
///         address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
///         Price::from_usdc_decimal("0.01").unwrap(),
///     ).unwrap())
///     .settler(Arc::new(VerifyOnlySettler))
///     .settle_timing(SettleTiming::AfterResponse)
///     .expose_headers(true)
///     .build()
///     .unwrap();
/// ```
pub struct X402Config {
    public_base_url: String,
    offers: Vec<PaymentOffer>,
    source: Option<Arc<dyn PriceSource>>,
    settler: Option<Arc<dyn Settler>>,
    observer: Option<Arc<dyn SettlementObserver>>,
    store: Option<Arc<dyn ReplayStore>>,
    timing: SettleTiming,
    expose_headers: bool,
    max_header_len: usize,
    clock: Option<Clock>,
}

impl std::fmt::Debug for X402Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X402Config")
            .field("public_base_url", &self.public_base_url)
            .field("offers", &self.offers)
            .field("timing", &self.timing)
            .field("settlement_observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl X402Config {
    /// Adds a static offer (same price for every request). Several offers = several ways to pay.
    pub fn offer(mut self, offer: PaymentOffer) -> Self {
        self.offers.push(offer);
        self
    }

    /// Adds static offers.
    pub fn offers(mut self, offers: impl IntoIterator<Item = PaymentOffer>) -> Self {
        self.offers.extend(offers);
        self
    }

    /// Prices each request with `source` (a closure `Fn(&http::request::Parts) -> impl Future<Output =
    /// PriceDecision>`, or any [`PriceSource`]), instead of static offers.
    pub fn price_source(mut self, source: impl PriceSource) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The settler (default: [`VerifyOnlySettler`], which moves no money).
    pub fn settler(mut self, settler: Arc<dyn Settler>) -> Self {
        self.settler = Some(settler);
        self
    }

    /// Reports every settlement outcome (settled, failed, unknown) to `observer`, awaited before the client
    /// is answered, so the application can keep a durable record even of a settlement whose outcome is
    /// unknown (the client then gets 502, but money may have moved). Default: none (no extra work per
    /// request). See [`SettlementObserver`].
    pub fn settlement_observer(mut self, observer: Arc<dyn SettlementObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The replay store (default: an [`InMemoryReplayStore`] of 100 000 entries).
    pub fn replay_store(mut self, store: Arc<dyn ReplayStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// When to settle (default [`SettleTiming::AfterResponse`]).
    pub fn settle_timing(mut self, timing: SettleTiming) -> Self {
        self.timing = timing;
        self
    }

    /// Adds `Access-Control-Expose-Headers: PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE,
    /// X-Payment-Required` to the responses the layer writes or receipts (default off). A CORS layer must
    /// still sit *outside* this one, so preflights and CORS headers reach 402 answers too.
    pub fn expose_headers(mut self, expose: bool) -> Self {
        self.expose_headers = expose;
        self
    }

    /// Cap on the payment header's length, checked before decoding (default 16 KiB).
    pub fn max_header_len(mut self, len: usize) -> Self {
        self.max_header_len = len;
        self
    }

    /// Replaces the clock (unix seconds). For tests with fixed signatures.
    pub fn clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Checks the configuration and builds the layer.
    pub fn build(self) -> Result<X402Layer, ConfigError> {
        let base_url = check_base_url(&self.public_base_url)?;
        if self.max_header_len < 512 {
            return Err(ConfigError::HeaderLimitTooSmall(self.max_header_len));
        }
        for (index, o) in self.offers.iter().enumerate() {
            if let Some(why) = offer_problem(o) {
                return Err(ConfigError::BadOffer { index, why });
            }
        }
        let mut shared = Shared {
            base_url,
            pricing: Pricing::Static(Arc::from(Vec::new())),
            settler: self.settler.unwrap_or_else(|| Arc::new(VerifyOnlySettler)),
            observer: self.observer,
            store: self
                .store
                .unwrap_or_else(|| Arc::new(InMemoryReplayStore::default())),
            timing: self.timing,
            expose_headers: self.expose_headers,
            max_header_len: self.max_header_len,
            metrics: Arc::new(X402Metrics::default()),
            clock: self.clock.unwrap_or_else(|| Arc::new(system_now)),
            domains: Mutex::new(HashMap::new()),
        };
        shared.pricing = match (self.offers.is_empty(), self.source) {
            (true, None) => return Err(ConfigError::NoPricing),
            (false, Some(_)) => return Err(ConfigError::BothPricings),
            (false, None) => Pricing::Static(shared.compile(self.offers)),
            (true, Some(s)) => Pricing::Dynamic(s),
        };
        Ok(X402Layer {
            shared: Arc::new(shared),
        })
    }
}

/// What is wrong with an offer, if anything (checked at build for static offers, per request for dynamic).
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

fn check_base_url(url: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadBaseUrl(url.to_owned());
    let uri: http::Uri = url.parse().map_err(|_| bad())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
        return Err(bad());
    }
    if uri.query().is_some() || url.contains('#') {
        return Err(bad());
    }
    Ok(url.trim_end_matches('/').to_owned())
}

fn system_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_checked() {
        for bad in [
            "",
            "/relative",
            "ftp://x",
            "http://",
            "https://a.b/?q=1",
            "https://a.b/#x",
            "not a url",
        ] {
            assert!(
                matches!(check_base_url(bad), Err(ConfigError::BadBaseUrl(_))),
                "{bad}"
            );
        }
        assert_eq!(
            check_base_url("https://a.b/shop/").unwrap(),
            "https://a.b/shop"
        );
    }
}
