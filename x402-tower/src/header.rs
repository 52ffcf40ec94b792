//! The HTTP header names of x402, and the `Access-Control-Expose-Headers` value that lets browsers read them.
//!
//! | header | version | direction | what it carries |
//! |---|---|---|---|
//! | [`PAYMENT_REQUIRED`] | v2 | 402 answer | Base64 JSON `PaymentRequired` |
//! | [`X_PAYMENT_REQUIRED`] | clients of this workspace's interface | 402 answer | the same document without `extensions` |
//! | [`PAYMENT_SIGNATURE`] | v2 | request | Base64 JSON `PaymentPayload` |
//! | [`X_PAYMENT`] | v1 | request | Base64 JSON `PaymentPayload` |
//! | [`PAYMENT_RESPONSE`] | v2 | paid answer | Base64 JSON `SettleResponse` |
//! | [`X_PAYMENT_RESPONSE`] | v1 | paid answer | Base64 JSON `SettleResponse` |

use http::header::HeaderName;

/// `X-Payment-Required` (interfaces.md): Base64 of the v2 PaymentRequired without its `extensions` (only v2
/// clients read them, from [`PAYMENT_REQUIRED`]).
pub const X_PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("x-payment-required");
/// `PAYMENT-REQUIRED` (x402 v2): Base64 of the v2 PaymentRequired, with its `extensions`.
pub const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
/// `X-PAYMENT` (x402 v1 payment).
pub const X_PAYMENT: HeaderName = HeaderName::from_static("x-payment");
/// `PAYMENT-SIGNATURE` (x402 v2 payment).
pub const PAYMENT_SIGNATURE: HeaderName = HeaderName::from_static("payment-signature");
/// `X-PAYMENT-RESPONSE` (v1 receipt).
pub const X_PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("x-payment-response");
/// `PAYMENT-RESPONSE` (v2 receipt).
pub const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
/// The value the layer puts in `Access-Control-Expose-Headers` when asked to.
pub const EXPOSE_HEADERS_VALUE: &str =
    "PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-Payment-Required";
