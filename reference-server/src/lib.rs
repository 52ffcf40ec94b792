//! Reference server: x402 content licensing (interface A) and a DRF-style asset registry (interface B).
#![warn(missing_docs)]

pub mod licensing;
pub mod registry;
pub mod store;
