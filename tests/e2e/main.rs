//! End-to-end tests across the workspace: the official x402 clients (JavaScript v1 and v2, Python) buy
//! articles from the reference server; on anvil with Circle's FiatTokenV2_2, the on-chain settler moves real
//! (test) USDC, directly and through the reference server's facilitator API, also for an official
//! `@x402/express` server.
//!
//! Needs the tools `scripts/test.sh` installs (npm, PyPI, anvil); without them every test here fails with
//! a message saying what to run.

mod browser;
mod common;
mod extensions;
mod facilitator_api;
mod license_tokens;
mod official_clients;
mod onchain_settler;
mod openapi;
mod permit2_onchain;
mod purchases_onchain;
mod rust_client;
mod schemes;
mod snippets;
