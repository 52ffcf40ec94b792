//! [`X402Layer`] and its builder [`X402Config`].

use std::sync::Arc;

use http::{HeaderValue, Method};
use tower_layer::Layer;

use super::service::X402;
use crate::engine::metrics::X402Metrics;
use crate::engine::{EngineConfigError, PaymentEngine, Route};
use crate::extensions::payment_identifier::PaymentIdentifier;
use crate::extensions::{Extension, Fixed, Offered, Settled};
use crate::offer::PaymentOffer;
use crate::payment::SettleTiming;
use crate::pricing::{PriceSource, offer_problem};
use crate::scheme::CompiledOffer;

pub use crate::engine::DEFAULT_MAX_HEADER_LEN;

/// Invalid configuration, reported by [`X402Config::build`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// No method is sold.
    #[error("no paid methods")]
    NoMethods,
    /// The sign-in-with-x key is shorter than 16 bytes.
    #[error("the sign-in-with-x key must be at least 16 bytes")]
    SignInKeyTooShort,
    /// The default (verify-only) payment engine refused its settings.
    #[error(transparent)]
    Engine(#[from] EngineConfigError),
}

pub(crate) enum Pricing {
    Static(Arc<[CompiledOffer]>),
    Dynamic(Arc<dyn PriceSource>),
}

/// Everything the layer shares between requests.
pub(crate) struct Shared {
    pub(crate) base_url: String,
    pub(crate) pricing: Pricing,
    pub(crate) engine: Arc<PaymentEngine>,
    pub(crate) route: Route,
    pub(crate) expose_headers: bool,
    /// Whether 402s carry `X-Payment-Required`.
    pub(crate) x_payment_required: bool,
    pub(crate) methods: Vec<Method>,
    /// `Allow` of the 405 for a method that is not sold.
    pub(crate) allow: HeaderValue,
    /// The extensions the 402 declares, in order.
    pub(crate) extensions: Vec<Arc<dyn Extension>>,
    /// No-payment 402s, ready.
    pub(crate) prebuilt: super::response::Prebuilt402s,
    /// The sign-in-with-x extension, when declared.
    pub(crate) siwx: Option<Arc<crate::extensions::siwx::SignInWithX>>,
    /// What browsers get.
    pub(crate) paywall: crate::layer::paywall::Paywall,
    /// Whether the `terms` of a 402 come from the request (`Arc<Terms>` in its extensions).
    pub(crate) terms_per_request: bool,
}

impl Shared {
    /// The optional headers of this layer's 402s.
    pub(crate) fn header_options(&self) -> super::response::HeaderOptions {
        super::response::HeaderOptions {
            expose: self.expose_headers,
            x_payment_required: self.x_payment_required,
        }
    }

    /// Whether `method` is sold (HEAD is answered as the 402 of GET, never charged).
    pub(crate) fn sells(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    /// The 402's v2 `extensions` for `offers` at `resource_url`: the layer's fixed declarations, the signed
    /// offers (offer-receipt) and, with `sign_in`, the sign-in-with-x declaration with that nonce (issued at
    /// `now`); and until when (unix seconds) the same value may be sent again. Assembled from pre-serialised
    /// parts.
    pub(crate) fn extensions_for(
        &self,
        offers: &[CompiledOffer],
        info: &super::response::RequestInfo,
        sign_in: Option<&str>,
        now: u64,
    ) -> (Option<String>, u64) {
        let resource_url = info.resource_url.as_str();
        let sign_in = sign_in.zip(self.siwx.as_ref());
        if self.extensions.is_empty() && sign_in.is_none() && info.terms.is_none() {
            return (None, u64::MAX);
        }
        let mut until = u64::MAX;
        let mut out = String::with_capacity(4096);
        out.push('{');
        let mut add = |key: &str, value: &str| {
            if out.len() > 1 {
                out.push(',');
            }
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
            out.push_str(value);
        };
        let offered = Offered {
            resource_url,
            offers,
            now,
        };
        for extension in &self.extensions {
            if let Some(d) = extension.declare(&offered) {
                add(extension.key(), &d.json);
                until = until.min(d.until);
            }
        }
        if let Some(terms) = &info.terms {
            add(crate::extensions::terms::KEY, terms.declaration());
        }
        if let Some((nonce, siwx)) = sign_in {
            let mut nets: Vec<&str> = offers.iter().map(|o| o.offer.network.caip2()).collect();
            nets.dedup();
            add(
                crate::extensions::siwx::KEY,
                &siwx.declare_with_nonce(resource_url, &nets, now, nonce),
            );
            // The nonce's tag binds the second it was issued in.
            until = until.min(now + 1);
        }
        out.push('}');
        ((out.len() > 2).then_some(out), until)
    }
}

/// Sells the wrapped service's responses for x402 payments. Build it with [`X402Layer::builder`].
///
/// Cloning is cheap (an `Arc`); every clone shares the engine (payment store, settler, metrics).
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
            engine: None,
            timing: SettleTiming::default(),
            expose_headers: false,
            x_payment_required: false,
            methods: vec![Method::GET],
            identifier: None,
            settle_without_verify: false,
            siwx: None,
            extensions: Vec::new(),
            terms_per_request: false,
            paywall: Default::default(),
        }
    }

    /// The layer's counters (the engine's).
    pub fn metrics(&self) -> Arc<X402Metrics> {
        self.shared.engine.metrics()
    }

    /// The payment engine behind this layer: give it to another door (a facilitator API) so both share one
    /// store and settle each authorization at most once, or run its reconciler.
    pub fn engine(&self) -> Arc<PaymentEngine> {
        self.shared.engine.clone()
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
/// use x402_tower::settle::{SettleTiming, VerifyOnlySettler};
/// use x402_tower::{PaymentEngine, PaymentOffer, Price, X402Layer};
///
/// // The engine decides payments: its settler, store, observer and limits are set here.
/// let engine = PaymentEngine::builder().settler(Arc::new(VerifyOnlySettler)).build().unwrap();
/// let layer = X402Layer::builder("https://api.example.com")
///     .engine(Arc::new(engine))
///     .offer(PaymentOffer::usdc(
///         "base-sepolia".parse().unwrap(),
///         address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
///         Price::from_usdc_decimal("0.01").unwrap(),
///     ).unwrap())
///     .settle_timing(SettleTiming::AfterResponse)
///     .expose_headers(true)
///     .build()
///     .unwrap();
/// ```
#[must_use]
pub struct X402Config {
    public_base_url: String,
    offers: Vec<PaymentOffer>,
    source: Option<Arc<dyn PriceSource>>,
    engine: Option<Arc<PaymentEngine>>,
    timing: SettleTiming,
    expose_headers: bool,
    x_payment_required: bool,
    methods: Vec<Method>,
    identifier: Option<PaymentIdentifier>,
    settle_without_verify: bool,
    siwx: Option<crate::extensions::siwx::SignInWithX>,
    extensions: Vec<Arc<dyn Extension>>,
    terms_per_request: bool,
    paywall: crate::layer::paywall::Paywall,
}

impl std::fmt::Debug for X402Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X402Config")
            .field("public_base_url", &self.public_base_url)
            .field("offers", &self.offers)
            .field("timing", &self.timing)
            .field("methods", &self.methods)
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

    /// The methods sold (default: `GET`). Any other method is answered `405 Method Not Allowed` by the layer,
    /// never a 402 and never a settlement, so nobody pays for a request the service would refuse. `HEAD` is
    /// answered with the 402 of `GET` (the price, no body) and never takes a payment: a HEAD answer has no
    /// content to pay for.
    ///
    /// ```
    /// # use alloy_primitives::address;
    /// # use x402_tower::{PaymentOffer, Price, X402Layer};
    /// # let offer = PaymentOffer::usdc("base".parse().unwrap(), address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"), Price::from(10_000u64)).unwrap();
    /// let layer = X402Layer::builder("https://api.example.com")
    ///     .offer(offer)
    ///     .methods([http::Method::POST]) // an API that is called with POST
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().filter(|m| *m != Method::HEAD).collect();
        self.methods.dedup();
        self
    }

    /// Declares the `payment-identifier` extension in the 402s (v2), `required` or optional: a client's id
    /// binds to its payment and request; a retry with the same id and payment is answered again, another
    /// payment under the same id is refused with 409, and a missing id where required with 400. See
    /// [`crate::extensions::payment_identifier`]. Default: not declared (ids are ignored).
    pub fn payment_identifier(mut self, required: bool) -> Self {
        let identifier = PaymentIdentifier { required };
        self.identifier = Some(identifier);
        self.extension(Arc::new(Fixed::payment_identifier(identifier)))
    }

    /// Declares the `sign-in-with-x` extension in the no-payment 402s (v2) with a fresh nonce each, and lets
    /// through, without a payment, a request whose `SIGN-IN-WITH-X` proof checks out and whose signer paid
    /// for the resource: the handler finds [`SignedIn`](crate::extensions::siwx::SignedIn) in its extensions instead of a
    /// [`VerifiedPayment`](crate::VerifiedPayment), and nothing is settled. A proof that fails gets the 402
    /// with the reason in `error` (`siwx_...`). See [`crate::extensions::siwx`]. Default: not declared.
    pub fn sign_in_with_x(mut self, siwx: crate::extensions::siwx::SignInWithX) -> Self {
        self.siwx = Some(siwx);
        self
    }

    /// Declares the `offer-receipt` extension (feature `offer-receipt`): every offer of the 402s is signed by
    /// `signer` (with a `validUntil`; a signed offer is reused while half its validity is left), and every
    /// successful settlement's answer (`PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`) carries a signed receipt in
    /// `extensions["offer-receipt"].info.receipt` — also visible to the handler in
    /// [`VerifiedPayment::settlement`](crate::VerifiedPayment) when settling before it. See
    /// [`crate::extensions::offer_receipt`]. Default: not declared.
    #[cfg(feature = "offer-receipt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "offer-receipt")))]
    pub fn offer_receipt(
        self,
        signer: Arc<crate::extensions::offer_receipt::OfferReceipt>,
    ) -> Self {
        self.extension(signer)
    }

    /// What a browser (`Accept` preferring HTML) gets with a 402: the built-in page that pays from a browser
    /// wallet (default), your template, or [`Paywall::Off`](crate::layer::paywall::Paywall::Off) (the JSON 402). See
    /// [`crate::layer::paywall`].
    pub fn paywall(mut self, paywall: crate::layer::paywall::Paywall) -> Self {
        self.paywall = paywall;
        self
    }

    /// Declares the `bazaar` extension in the 402s (v2): how the route is called and what it answers, so a
    /// facilitator that settles its payments can list it for discovery (the client echoes the declaration
    /// into its payment). See [`crate::extensions::bazaar`]. Default: not declared.
    pub fn discovery(self, discovery: crate::extensions::bazaar::Discovery) -> Self {
        self.extension(Arc::new(Fixed::bazaar(&discovery)))
    }

    /// Declares the `terms` extension in every 402 (v2): what a payment buys the right to do. See
    /// [`crate::extensions::terms`]. Default: not declared.
    pub fn terms(self, terms: crate::extensions::terms::Terms) -> Self {
        self.extension(Arc::new(Fixed::terms(&terms)))
    }

    /// Declares the `terms` extension per request: the `Arc<`[`Terms`](crate::extensions::terms::Terms)`>` an earlier layer
    /// put in the request extensions (none there: no `terms` in that 402). For resources sold under terms of
    /// their own, such as articles each with its license.
    pub fn terms_per_request(mut self) -> Self {
        self.terms_per_request = true;
        self
    }

    /// Declares `extension` in the 402s (after the ones declared before it) and lets it add to every
    /// successful settlement: an extension of your own, or one of [`crate::extensions`] (which the settings
    /// above add for you). A later extension with the same key replaces the earlier one. See
    /// [`Extension`].
    pub fn extension(mut self, extension: Arc<dyn Extension>) -> Self {
        self.extensions.retain(|e| e.key() != extension.key());
        self.extensions.push(extension);
        self
    }

    /// The [`PaymentEngine`] that decides payments: its settler, store, observer, limits and clock are
    /// configured on it ([`PaymentEngine::builder`]), and one engine may serve several layers and a
    /// facilitator API. Without one, the layer builds a verify-only engine: payments are checked and
    /// **nothing is settled** (no money moves), with a warning when built and on the first payment.
    pub fn engine(mut self, engine: Arc<PaymentEngine>) -> Self {
        self.engine = Some(engine);
        self
    }

    /// When to settle (default [`SettleTiming::AfterResponse`]).
    pub fn settle_timing(mut self, timing: SettleTiming) -> Self {
        self.timing = timing;
        self
    }

    /// With [`SettleTiming::BeforeHandler`], settle without asking the settler's verify first (default: ask).
    ///
    /// Settling checks everything the verify step does — a facilitator's `/settle` verifies again, the
    /// on-chain settler's gas estimate simulates the transfer — and a payment it refuses is released exactly
    /// as a refused verify would be (nothing was charged; the client gets 402 with the reason, here with a
    /// `success:false` receipt, and the settlement observer sees a failed attempt). Skipping it saves a round
    /// trip to the facilitator (or an `eth_call`) per purchase. With [`SettleTiming::AfterResponse`] the
    /// verify step always runs: it keeps the protected service from working for a payment that cannot settle.
    pub fn settle_without_verify(mut self, skip: bool) -> Self {
        self.settle_without_verify = skip;
        self
    }

    /// Adds `Access-Control-Expose-Headers: PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE,
    /// X-Payment-Required` to the responses the layer writes or receipts (default off). A CORS layer must
    /// still sit *outside* this one, so preflights and CORS headers reach 402 answers too.
    pub fn expose_headers(mut self, expose: bool) -> Self {
        self.expose_headers = expose;
        self
    }

    /// Adds `X-Payment-Required` to the 402s (default off): the v2 document again, without its
    /// `extensions`, for clients of an interface that names this header (the reference server's). No
    /// official x402 client reads it: v2 clients read `PAYMENT-REQUIRED`, v1 clients the body.
    pub fn x_payment_required(mut self, send: bool) -> Self {
        self.x_payment_required = send;
        self
    }

    /// Checks the configuration and builds the layer.
    pub fn build(self) -> Result<X402Layer, ConfigError> {
        let base_url = check_base_url(&self.public_base_url)?;
        for (index, o) in self.offers.iter().enumerate() {
            if let Some(why) = offer_problem(o) {
                return Err(ConfigError::BadOffer { index, why });
            }
        }
        if self.methods.is_empty() {
            return Err(ConfigError::NoMethods);
        }
        let engine = match self.engine {
            Some(e) => e,
            None => Arc::new(PaymentEngine::builder().verify_only_default().build()?),
        };
        for (index, o) in self.offers.iter().enumerate() {
            if let Some(why) = engine.offer_problem(o, self.timing) {
                return Err(ConfigError::BadOffer { index, why });
            }
        }
        if engine.defaulted_to_verify_only() {
            tracing::warn!(
                base_url,
                "x402 layer built without a settler: payments are verified but NOT settled (no money moves); \
                 give it an engine with a settler: .engine(PaymentEngine::builder().settler(...).build()?)"
            );
        }
        let pricing = match (self.offers.is_empty(), self.source) {
            (true, None) => return Err(ConfigError::NoPricing),
            (false, Some(_)) => return Err(ConfigError::BothPricings),
            (false, None) => Pricing::Static(engine.compile(self.offers)),
            (true, Some(s)) => Pricing::Dynamic(s),
        };
        let mut allow: Vec<&str> = self.methods.iter().map(Method::as_str).collect();
        if self.methods.contains(&Method::GET) {
            allow.push("HEAD");
        }
        let allow = HeaderValue::try_from(allow.join(", "))
            .unwrap_or_else(|_| HeaderValue::from_static("GET, HEAD"));
        let siwx = match self.siwx {
            Some(s) if !s.key_ok() => return Err(ConfigError::SignInKeyTooShort),
            Some(s) => Some(Arc::new(s.bind(&base_url))),
            None => None,
        };
        // What the extensions add to a settlement is added before the engine records it, so a redelivery
        // answers the same.
        let on_settled = (!self.extensions.is_empty()).then(|| {
            let extensions = self.extensions.clone();
            crate::engine::SettledHook(Arc::new(
                move |sr: &mut crate::proto::SettleResponse, resource: &str, how: Settled| {
                    for extension in &extensions {
                        extension.on_settled(sr, resource, how);
                    }
                },
            ))
        });
        // What a payment echoes of this route's own declarations, and no settlement reads: left out of its
        // record (sign-in-with-x and per-request terms are declared outside the extension list).
        let left_out: Arc<[Box<str>]> = self
            .extensions
            .iter()
            .filter(|e| !e.keeps_echo())
            .map(|e| e.key())
            .chain(siwx.is_some().then_some(crate::extensions::siwx::KEY))
            .chain(
                self.terms_per_request
                    .then_some(crate::extensions::terms::KEY),
            )
            .map(Box::from)
            .collect();
        Ok(X402Layer {
            shared: Arc::new(Shared {
                base_url,
                pricing,
                engine,
                route: Route {
                    timing: self.timing,
                    identifier: self.identifier,
                    settle_without_verify: self.settle_without_verify,
                    on_settled,
                    left_out,
                },
                expose_headers: self.expose_headers,
                x_payment_required: self.x_payment_required,
                methods: self.methods,
                allow,
                extensions: self.extensions,
                prebuilt: Default::default(),
                siwx,
                paywall: self.paywall,
                terms_per_request: self.terms_per_request,
            }),
        })
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
