//! Integration tests of x402-tower (one binary).

mod support;

mod clients;
mod engine;
mod extension;
#[cfg(feature = "metrics")]
mod facade;
#[cfg(feature = "facilitator")]
mod facilitator;
mod faults;
mod observer;
mod offer_receipt;
mod paying_client;
mod paywall;
mod permit2;
mod protocol;
mod rejections;
mod replay;
mod schemes;
mod service;
mod settlement;
mod siwx;
mod stores;
mod terms;
mod vectors;
