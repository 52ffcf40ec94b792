//! Integration tests of `registry-pagination`: DRF's tables and unit tests, Tower and axum wiring,
//! pass-through, HEAD, zero-copy and property tests.

mod axum_router;
mod drf;
mod drf_vectors;
mod properties;
mod support;
mod tower_service;
mod zero_copy;
