//! A facilitator door's request body (`/verify` and `/settle`), as any caller may post it. Never a panic;
//! a malformed body is an error answer.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use x402_tower::PaymentEngine;
use x402_tower::engine::facilitator::FacilitatorPolicy;
use x402_tower::settle::VerifyOnlySettler;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

static ENGINE: LazyLock<PaymentEngine> = LazyLock::new(|| {
    PaymentEngine::builder()
        .settler(Arc::new(VerifyOnlySettler))
        .build()
        .expect("engine")
});

fuzz_target!(|data: &[u8]| {
    let policy = FacilitatorPolicy::default();
    RUNTIME.block_on(async {
        let _ = ENGINE.facilitator_verify(&policy, data).await;
        let _ = ENGINE.facilitator_settle(&policy, data).await;
    });
});
