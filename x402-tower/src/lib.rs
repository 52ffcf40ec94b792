//! x402 payments for Tower services.
#![warn(missing_docs)]
