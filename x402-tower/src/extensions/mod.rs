//! The x402 extensions this crate speaks: each one a module that knows nothing of Tower.
//!
//! | module | extension key | what it does |
//! |---|---|---|
//! | [`payment_identifier`] | `payment-identifier` | a client-chosen id per purchase: a retry is told from a new purchase |
//! | [`siwx`] | `sign-in-with-x` | a wallet that paid reads the resource again by signing in, without paying |
//! | [`offer_receipt`] | `offer-receipt` | signed offers in the 402, a signed receipt of every settlement |
//! | [`bazaar`] | `bazaar` | how a paid route is called, for a facilitator's discovery catalogue |
//! | [`terms`] | `terms` | the license terms a payment buys under |
//!
//! Each is an [`Extension`]: it declares itself in a 402 and may add to a successful settlement. The ones
//! whose declaration never changes (payment-identifier, bazaar, fixed terms) are a [`Fixed`], serialised once
//! per layer; offer-receipt signs each 402's offers and each settlement's receipt. The layer
//! declares the extensions its configuration names ([`X402Config`](crate::X402Config) has one setting per
//! extension of this crate, and [`X402Config::extension`](crate::X402Config::extension) takes any other), so
//! each route chooses what its 402 declares, and a 402 that declares none has no `extensions` at all.
//!
//! Two extensions are more than a declaration and are wired by the layer and the engine themselves:
//! `sign-in-with-x` is a second way in (a wallet that paid signs in instead of paying: the layer checks its
//! header before asking for a payment), and `payment-identifier` is part of the engine's admission (an id
//! bound to one payment). `terms` declared per request ([`X402Config::terms_per_request`](crate::X402Config::terms_per_request))
//! come from the request itself.
//!
//! # What a 402 declares
//!
//! A declaration is `{"info": …, "schema": …}`, and the `schema` is sent where someone validates against
//! it: `bazaar` (a facilitator must check `info` against it before cataloguing) and `payment-identifier`
//! (official clients check the id they add). `offer-receipt` and `sign-in-with-x` declare `info` (and
//! sign-in-with-x its `supportedChains`) without a schema: the offers' format is the extension's, checked
//! by their signatures, and the sign-in proof is checked by this server; no official client reads either
//! schema (`@x402/extensions` 2.27), and leaving them out keeps a two-offer 402 with every extension under
//! 8 KB. Sign-in-with-x's `info` has no `resources` either (it would repeat `uri`).
//!
//! # Your own extension
//!
//! ```
//! use std::sync::Arc;
//! use x402_tower::extensions::{Declaration, Extension, Offered};
//!
//! /// Tells buyers where support is.
//! struct Support;
//!
//! impl Extension for Support {
//!     fn key(&self) -> &str {
//!         "support"
//!     }
//!     fn declare(&self, offered: &Offered<'_>) -> Option<Declaration> {
//!         Some(Declaration::lasting(format!(
//!             r#"{{"info":{{"url":"https://example.com/help","resource":{:?}}}}}"#,
//!             offered.resource_url()
//!         )))
//!     }
//! }
//!
//! let layer = x402_tower::X402Layer::builder("https://example.com")
//!     .offer(x402_tower::PaymentOffer::usdc(
//!         "base-sepolia".parse().unwrap(),
//!         alloy_primitives::address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
//!         x402_tower::Price::from_usdc_decimal("0.01").unwrap(),
//!     ).unwrap())
//!     .extension(Arc::new(Support))
//!     .build()
//!     .unwrap();
//! # let _ = layer;
//! ```

use std::sync::Arc;

use crate::pricing::PaymentOffer;
use crate::proto::{PaymentRequirementsV2, SettleResponse};
use crate::scheme::CompiledOffer;

pub mod bazaar;
pub mod gas_sponsoring;
pub mod offer_receipt;
pub mod payment_identifier;
pub mod siwx;
pub mod terms;

/// The extensions a server declares that no settlement reads, when a v2 client echoes them in its payment:
/// discovery ([`bazaar`]), signed offers ([`offer_receipt`]), sign-in-with-x ([`siwx`]) and license terms
/// ([`terms`]). What a facilitator door leaves out of its payment records by default
/// ([`FacilitatorPolicy::left_out`](crate::engine::facilitator::FacilitatorPolicy::left_out)); a route leaves
/// out what it declared itself ([`Extension::keeps_echo`]).
pub const SERVER_DECLARATIONS: [&str; 4] = [bazaar::KEY, offer_receipt::KEY, siwx::KEY, terms::KEY];

/// An x402 extension a layer declares in its 402s (under [`key`](Extension::key) in `extensions`) and that
/// may add to every successful settlement of its route (the `extensions` of `PAYMENT-RESPONSE`).
pub trait Extension: Send + Sync + 'static {
    /// Its key in `extensions`.
    fn key(&self) -> &str;

    /// Its declaration in a 402 that sells [`Offered`]: the JSON value under [`key`](Extension::key), and
    /// until when it may be sent again. `None`: nothing to declare in this 402. The layer keeps the no-payment
    /// 402 ready per resource and offer list, so there this runs when one is built; a 402 that refuses a
    /// payment is written for its request and asks again: keep anything costly made once (as [`Fixed`]
    /// does).
    fn declare(&self, offered: &Offered<'_>) -> Option<Declaration>;

    /// Adds to a successful settlement of `resource_url` before it is recorded and answered (its
    /// `extensions`). Called again with [`Settled::Recorded`] when a recorded settlement is delivered again
    /// (a resend): add only what is missing, so every delivery answers the same. Default: nothing.
    fn on_settled(&self, settlement: &mut SettleResponse, resource_url: &str, settled: Settled) {
        let _ = (settlement, resource_url, settled);
    }

    /// Whether the copy of this declaration a v2 client echoes in its payment is kept in the payment record
    /// (what a reconciliation sends a facilitator). Default `false`: the declaration is this server's own and
    /// nothing after the payment reads the echo (3.4 KB of the 4.3 KB payment an official client sends for
    /// one of the reference server's articles). An extension whose echo carries what the client added and a
    /// settlement may read keeps it (`payment-identifier`, with the client's id).
    fn keeps_echo(&self) -> bool {
        false
    }

    /// Sees a paid request before its payment is verified, and puts in `context` what the payment's
    /// settlement observer should know of it (who the caller is, say): the observer finds it in
    /// [`VerifiedPayment::context`](crate::VerifiedPayment::context), whether the settlement runs before
    /// the handler, after it, or in a task of its own. Default: nothing.
    fn on_request(&self, request: &RequestView<'_>, context: &mut http::Extensions) {
        let _ = (request, context);
    }
}

/// A paid request as [`Extension::on_request`] sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestView<'a> {
    /// The method.
    pub method: &'a http::Method,
    /// The URI as received.
    pub uri: &'a http::Uri,
    /// The headers.
    pub headers: &'a http::HeaderMap,
    /// What earlier layers put in the request.
    pub extensions: &'a http::Extensions,
}

impl<'a> RequestView<'a> {
    /// A view of `request`.
    pub fn of<B>(request: &'a http::Request<B>) -> Self {
        RequestView {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }
}

/// What the route's extensions carried from a paid request to its settlement ([`Extension::on_request`]):
/// typed values, one per type. Empty, and free, unless an extension added one.
#[derive(Clone, Default)]
pub struct PaymentContext(Option<Arc<http::Extensions>>);

impl PaymentContext {
    /// The value of type `T`, if an extension put one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.as_deref()?.get()
    }

    /// What `extensions` (the route's) make of `request`: nothing allocated when they add nothing.
    pub(crate) fn of(extensions: &[Arc<dyn Extension>], request: &RequestView<'_>) -> Self {
        let mut context = http::Extensions::new();
        for extension in extensions {
            extension.on_request(request, &mut context);
        }
        PaymentContext((!context.is_empty()).then(|| Arc::new(context)))
    }
}

impl std::fmt::Debug for PaymentContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "PaymentContext(..)"
        } else {
            "PaymentContext(empty)"
        })
    }
}

/// Two contexts are equal when they are the same one (or both empty): their values need not be comparable.
impl PartialEq for PaymentContext {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for PaymentContext {}

/// What a 402 sells, as an [`Extension`] sees it when declaring itself.
#[derive(Debug, Clone, Copy)]
pub struct Offered<'a> {
    pub(crate) resource_url: &'a str,
    pub(crate) offers: &'a [CompiledOffer],
    pub(crate) now: u64,
}

impl<'a> Offered<'a> {
    /// The absolute URL of the resource.
    pub fn resource_url(&self) -> &'a str {
        self.resource_url
    }

    /// The offers, in the order of the 402's `accepts`.
    pub fn offers(&self) -> impl ExactSizeIterator<Item = &'a PaymentOffer> + 'a {
        self.offers.iter().map(|o| &o.offer)
    }

    /// The v2 requirements of the offers, in the order of `accepts`.
    pub fn requirements(&self) -> impl ExactSizeIterator<Item = &'a PaymentRequirementsV2> + 'a {
        self.offers.iter().map(|o| &o.v2)
    }

    /// The unix time the 402 is built at.
    pub fn now(&self) -> u64 {
        self.now
    }
}

/// An extension's declaration in a 402: its JSON value, and the last unix second it may be sent again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The JSON value, serialised.
    pub json: Arc<str>,
    /// Sent again until this unix second (excluded); `u64::MAX` while the 402's offers are the same.
    pub until: u64,
}

impl Declaration {
    /// A declaration that holds as long as the offers it was made for.
    pub fn lasting(json: impl Into<Arc<str>>) -> Self {
        Declaration {
            json: json.into(),
            until: u64::MAX,
        }
    }

    /// A declaration to make anew from `until` on (signed offers expire).
    pub fn until(json: impl Into<Arc<str>>, until: u64) -> Self {
        Declaration {
            json: json.into(),
            until,
        }
    }
}

/// How a successful settlement reaches [`Extension::on_settled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Settled for this request at these unix seconds, not recorded yet: add what the extension adds.
    Now(u64),
    /// Read from the payment's record, settled at these unix seconds (the record's last change): add only
    /// what is missing. A record written without the extension (by the background reconciler, which serves
    /// no route, or before the extension was configured) is completed from the record alone, so every
    /// delivery of it answers the same.
    Recorded(u64),
}

/// An extension whose declaration never changes, serialised once when it is made: what payment-identifier,
/// bazaar and fixed terms put in a 402 ([`X402Config`](crate::X402Config)'s settings build them), and the
/// simplest extension of your own.
///
/// ```
/// use x402_tower::extensions::Fixed;
///
/// let support = Fixed::new("support", r#"{"info":{"url":"https://example.com/help"}}"#);
/// # let _ = support;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    key: String,
    json: Arc<str>,
    keeps_echo: bool,
}

impl Fixed {
    /// The declaration `json` (a JSON value, serialised) under `key`.
    pub fn new(key: impl Into<String>, json: impl Into<Arc<str>>) -> Self {
        Fixed {
            key: key.into(),
            json: json.into(),
            keeps_echo: false,
        }
    }

    /// Keeps the client's echo of it in the payment record ([`Extension::keeps_echo`]).
    pub fn keeping_echo(mut self) -> Self {
        self.keeps_echo = true;
        self
    }

    /// `payment-identifier`, `required` or optional.
    pub fn payment_identifier(policy: payment_identifier::PaymentIdentifier) -> Self {
        // The client's id is in the echo, and a facilitator reads it.
        Fixed::new(payment_identifier::KEY, policy.declaration().to_string()).keeping_echo()
    }

    /// `bazaar`: how the route is called.
    pub fn bazaar(discovery: &bazaar::Discovery) -> Self {
        Fixed::new(bazaar::KEY, discovery.declaration().to_string())
    }

    /// `eip2612GasSponsoring`: buyers without an allowance for Permit2 may sign an EIP-2612 permit, which the
    /// settler applies ([`gas_sponsoring`]). The buyer's permit is kept in the payment record, so a settlement
    /// made anew after a restart applies it too.
    pub fn eip2612_gas_sponsoring() -> Self {
        Fixed::new(gas_sponsoring::KEY, gas_sponsoring::declaration()).keeping_echo()
    }

    /// `terms`: the same terms in every 402.
    pub fn terms(terms: &terms::Terms) -> Self {
        Fixed::new(terms::KEY, terms.declaration())
    }
}

impl Extension for Fixed {
    fn key(&self) -> &str {
        &self.key
    }

    fn declare(&self, _: &Offered<'_>) -> Option<Declaration> {
        Some(Declaration::lasting(self.json.clone()))
    }

    fn keeps_echo(&self) -> bool {
        self.keeps_echo
    }
}
