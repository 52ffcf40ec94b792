//! Shared helpers for the workspace end-to-end tests: where the installed tools are ([`tools`]), a local
//! chain running Circle's FiatTokenV2_2 ([`chain`]), the official x402 clients and servers ([`clients`]), and
//! x402 payments signed in Rust ([`pay`]), the workspace's own paying client driven as a program uses it
//! ([`buyer`]), a server's `/metrics` read ([`metrics`]), and what the benchmark tools share ([`mod@bench`]).
//!
//! The tools are installed by `scripts/test.sh` (or `source scripts/test-deps.sh`), which exports their
//! paths; a test that needs one and does not find it fails with a message saying so, it never skips.
#![warn(missing_docs)]

pub mod bench;
pub mod buyer;
pub mod chain;
pub mod clients;
pub mod metrics;
pub mod pay;
pub mod tools;
