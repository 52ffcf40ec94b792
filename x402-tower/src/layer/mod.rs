//! The middleware: [`X402Layer`], [`X402`], [`ResponseFuture`], [`ResponseBody`]. A thin adapter over the
//! [`PaymentEngine`](crate::engine::PaymentEngine): it prices the request, hands the payment header to the
//! engine, calls the inner service, and renders the engine's answers as HTTP responses.

mod body;
mod config;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod faults;
mod future;
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
pub mod openapi;
pub mod paywall;
mod response;
mod service;

pub use body::ResponseBody;
pub use config::{ConfigError, DEFAULT_MAX_HEADER_LEN, X402Config, X402Layer};
pub use future::ResponseFuture;
pub use response::{payment_required_response, prefers_html};
pub use service::X402;

/// The error of a 402 sent because no payment came with the request, as the v2 document says it (v2
/// clients pay in `PAYMENT-SIGNATURE`).
pub const NO_PAYMENT_ERROR: &str = "PAYMENT-SIGNATURE header is required";

/// The same error in the v1 body (v1 clients pay in `X-PAYMENT`).
pub const NO_PAYMENT_ERROR_V1: &str = "X-PAYMENT header is required";
