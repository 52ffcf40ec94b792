//! Sell HTTP resources for USDC with [x402](https://x402.org) payments: a Tower middleware.
//!
//! Put an [`X402Layer`] in front of any Tower HTTP service (axum, a bare hyper service, tonic's HTTP side).
//! A request without a payment gets `402 Payment Required` with the offers; a request with a valid payment
//! (`X-PAYMENT` or `PAYMENT-SIGNATURE`, x402 v1 or v2; `exact` over EIP-3009 or Permit2, `upto`, or a
//! [`scheme`] of your own) reaches the inner service, which finds
//! the [`VerifiedPayment`] in its request extensions; the payment is then settled and a receipt
//! (`X-PAYMENT-RESPONSE` / `PAYMENT-RESPONSE`) added.
//!
//! # Example: a bare `service_fn`
//!
//! ```
//! use std::convert::Infallible;
//! use alloy_primitives::address;
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use tower::{Layer, ServiceExt};
//! use x402_tower::{PaymentOffer, Price, VerifiedPayment, X402Layer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let layer = X402Layer::builder("https://api.example.com") // where clients reach us: resource URLs
//!     .offer(
//!         PaymentOffer::usdc(
//!             "base-sepolia".parse().unwrap(),
//!             address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
//!             Price::from_usdc_decimal("0.01").unwrap(),
//!         )
//!         .unwrap()
//!         .description("Weather report")
//!         .mime_type("application/json"),
//!     )
//!     .build() // the default settler is verify-only: no money moves
//!     .unwrap();
//!
//! let svc = layer.layer(tower::service_fn(|req: Request<Full<Bytes>>| async move {
//!     let payer = req.extensions().get::<VerifiedPayment>().map(|p| p.payer);
//!     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("sunny, paid by {payer:?}")))))
//! }));
//!
//! let res = svc.oneshot(Request::get("/weather").body(Full::default()).unwrap()).await.unwrap();
//! assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
//! assert!(res.headers().contains_key("payment-required"));
//! # }
//! ```
//!
//! # Example: axum, with a price per article from a database
//!
//! ```
//! use alloy_primitives::address;
//! use axum::{Extension, Router, routing::get};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use x402_tower::{PaymentOffer, Price, PriceDecision, VerifiedPayment, X402Layer};
//!
//! async fn article(Extension(paid): Extension<VerifiedPayment>) -> String {
//!     format!("the article, licensed to {}", paid.payer)
//! }
//!
//! let layer = X402Layer::builder("https://news.example")
//!     .price_source(|parts: &http::request::Parts| {
//!         // Take what the price needs from the request head, then look it up asynchronously.
//!         let id = parts.uri.query().and_then(|q| q.strip_prefix("articleId=")).map(str::to_owned);
//!         async move {
//!             let Some(id) = id else {
//!                 return PriceDecision::Respond(
//!                     http::Response::builder().status(400).body(Full::new(Bytes::from("articleId?"))).unwrap(),
//!                 );
//!             };
//!             let price = if id == "free-sample" { return PriceDecision::Free } else { "0.25" }; // a DB query
//!             PriceDecision::Charge(vec![
//!                 PaymentOffer::usdc(
//!                     "base".parse().unwrap(),
//!                     address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
//!                     Price::from_usdc_decimal(price).unwrap(),
//!                 )
//!                 .unwrap(),
//!             ]
//!             .into())
//!         }
//!     })
//!     .expose_headers(true)
//!     .build()
//!     .unwrap();
//!
//! let app: Router = Router::new()
//!     .route("/x402Article", get(article).route_layer(layer))
//!     .route("/health", get(|| async { "ok" }));
//! ```
//!
//! # What happens to a request
//!
//! 0. **Method**: only the methods sold ([`X402Config::methods`], default `GET`) are charged; any other gets
//!    `405` with `Allow` (never a 402, never a settlement); `HEAD` gets the 402 of `GET` and never spends a
//!    payment.
//! 1. **Price**: static offers, or the [`PriceSource`] decides `Charge(offers)`, `Free` or `Respond(response)`.
//! 2. **No payment header**: 402. `PAYMENT-REQUIRED` carries Base64 JSON of the v2 `PaymentRequired` (and
//!    `X-Payment-Required` the same without its extensions, when configured); the body is a v1
//!    `{x402Version:1, error, accepts}` (or an HTML page when `Accept` prefers `text/html`);
//!    `Cache-Control: no-store`. The absolute `resource` URL is the configured public
//!    base URL + the request's path and query (never the client's `Host`).
//! 3. **Payment header** (`PAYMENT-SIGNATURE`, else `X-PAYMENT`; length capped before decoding; version taken
//!    from the decoded `x402Version`): verified in the spec's order — scheme, network, offer match (v2:
//!    semantic equality of `accepted`), then the checks of the offer's [`scheme`]; for `exact` over
//!    EIP-3009: recipient, amount (v1 `>=`, v2 `==`), time window (`validAfter <= now`, `validBefore >= now +
//!    6`), then the signature as USDC checks it (65 bytes, `v` 27/28, low `s`, recovered address == `from`,
//!    domain separator precomputed per offer). Any failure: 402 with the spec's error string. See [`verify`].
//! 4. **Payment record**: the nonce the payment spends, `(chainId, nonce space, from, nonce)` (the nonce space
//!    is the token for EIP-3009, Permit2 for Permit2), is reserved atomically in the [`PaymentStore`] before
//!    the inner service runs. The identical payment resent for the same resource is served again with the
//!    stored settlement (a buyer who lost the answer), never settled twice; the same authorization for another
//!    resource gets 402 `invalid_exact_evm_nonce_already_used`. The rules are in [`engine`] and [`store`].
//! 5. **Settler verify** (a facilitator checks balance, nonce state): invalid → 402 with its reason; no answer →
//!    502.
//! 6. **Settlement** ([`settle::SettleTiming`]): after the inner service answered below 400 (the response is held,
//!    its body untouched) or before it runs. Success: receipt header in the client's version and
//!    `Cache-Control: private`. Failure: the held response is dropped, 402 with a `success:false` receipt.
//!    Unknown outcome (timeout after broadcast): 402 with a `settlement_pending` receipt; the payment is
//!    reconciled on the client's resend or by [`PaymentEngine::reconcile_unresolved`]. Settled before the
//!    handler, the receipt goes with whatever the inner service answers, an error too.
//! 7. **Faults**: a settlement and its writes run to their end in a task of their own (a client that goes
//!    away, or an inner service that panics, cannot cut them short); a request dropped before its payment
//!    was settled releases it; record writes are retried, store calls bounded
//!    ([`PaymentEngineBuilder::store_timeout`](engine::PaymentEngineBuilder::store_timeout)). What each
//!    fault comes to, with the tests that show it: the workspace's `docs/testing.md`. Feature `test-util`
//!    has the tools to inject them in your own tests.
//!
//! Nothing a client sends makes the layer return an error or panic: every bad input is a 402 (a malformed
//! payment identifier 400, a reused one 409). Server-side trouble is a response too: 502 (settler verify), 503
//! (payment store), 500 (a price source returning no offer).
//!
//! # Settlers
//!
//! [`settle::VerifyOnlySettler`] moves **no money**: it accepts every locally verified payment and its receipt says
//! `transaction: "verify-only"`. For demos and tests; it is what a layer built without `.engine(...)` uses, with
//! a warning at build and on the first payment.
#![cfg_attr(feature = "facilitator", doc = "[`settle::FacilitatorSettler`]")]
#![cfg_attr(not(feature = "facilitator"), doc = "`settle::FacilitatorSettler`")]
//! (feature `facilitator`, on by default) calls a remote facilitator. An on-chain settler plugs in behind the feature
//! `onchain`. Implement [`Settler`] for anything else.
//!
//! # CORS
//!
//! Browsers only let scripts read `PAYMENT-REQUIRED`/`PAYMENT-RESPONSE` cross-origin when they are listed in
//! `Access-Control-Expose-Headers`. [`X402Config::expose_headers`] adds them to the responses this layer
//! writes or receipts; a CORS layer (e.g. `tower_http::cors::CorsLayer`) must sit **outside** this layer so
//! that preflight requests and 402 answers get CORS headers too.
//!
//! # Observability
//!
//! Spans `x402.verify`, `x402.decode`, `x402.settler_verify`, `x402.settle` (and `x402.facilitator.*`,
//! `x402.onchain.*`), at `DEBUG`: an application logging at `INFO` creates none of them (at `INFO` they cost
//! a verify-only purchase 28,000 instructions together under the reference server's JSON subscriber), and
//! the warnings and errors written inside them carry their own fields. Counters in [`engine::X402Metrics`] (see [`X402Layer::metrics`]).
//!
//! # Keeping books
//!
//! Logs and counters are not a record. A [`settle::SettlementObserver`] ([`engine::PaymentEngineBuilder::settlement_observer`]) is
//! told every settlement outcome — settled, failed, or **unknown** (timeout after broadcast: money may have
//! moved although the client got `settlement_pending`), and every later reconciliation — with the verified
//! payment and the resource, and is awaited before the client is answered. See [`settle::SettlementObserver`].
//!
#![doc = include_str!("../docs/guide.md")]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

mod address;
mod boxed;
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client;
pub mod engine;
pub mod extensions;
pub mod header;
pub mod layer;
pub mod network;
mod offer;
mod payment;
mod price;
pub mod pricing;
pub mod proto;
pub mod scheme;
#[cfg(any(feature = "offer-receipt", feature = "onchain"))]
mod secp;
pub mod settle;
pub mod store;
pub mod verify;

pub use engine::PaymentEngine;
pub use layer::{ConfigError, X402Config, X402Layer};
pub use offer::PaymentOffer;
pub use payment::VerifiedPayment;
pub use price::Price;
pub use pricing::{PriceDecision, PriceSource};
pub use settle::{SettleError, Settler};
pub use store::PaymentStore;
