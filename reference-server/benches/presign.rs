//! Pre-signs a batch of distinct x402 v2 payments for the wrk purchase benchmark (`paid.lua`).
//!
//! Not a measurement itself: `cargo bench -p reference-server --bench presign` does nothing unless
//! `PRESIGN_URL` is set, e.g.
//!
//! ```text
//! PRESIGN_URL='http://127.0.0.1:8080/x402Article?articleId=c2pa-explained' PRESIGN_COUNT=20000 \
//! PRESIGN_OUT=/tmp/payments.txt cargo bench -p reference-server --bench presign
//! ```
//!
//! It fetches the 402 once, then signs `PRESIGN_COUNT` payments with the workspace's client exactly as
//! `@x402/fetch` does (first offer, validAfter "0", validBefore now + maxTimeoutSeconds, random nonce), one
//! Base64 `PAYMENT-SIGNATURE` a line.

use std::io::Write as _;

use alloy_signer_local::PrivateKeySigner;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;
use x402_tower::client::sign::{Requirements, SignOptions, sign_sync};

fn main() {
    let Ok(url) = std::env::var("PRESIGN_URL") else {
        eprintln!(
            "presign: set PRESIGN_URL (and PRESIGN_COUNT, PRESIGN_OUT) to pre-sign payments; nothing to do"
        );
        return;
    };
    let count: usize = std::env::var("PRESIGN_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let out = std::env::var("PRESIGN_OUT").unwrap_or_else(|_| "payments.txt".into());
    // reqwest is built without a TLS provider in this workspace: install ring before building a client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let required: Value = rt.block_on(async {
        let resp = reqwest::get(&url).await.expect("GET the article");
        assert_eq!(resp.status(), 402, "expected a 402");
        let raw = resp
            .headers()
            .get("payment-required")
            .expect("PAYMENT-REQUIRED header")
            .clone();
        serde_json::from_slice(&B64.decode(raw.as_bytes()).expect("base64")).expect("json")
    });
    let requirements = Requirements::from_document(&required).expect("requirements");
    let offer = requirements.offers.first().expect("a signable offer");
    let token = offer.token().expect("extra.name and extra.version");
    let signer = PrivateKeySigner::random();
    let mut file = std::io::BufWriter::new(std::fs::File::create(&out).expect("create output"));
    let mut valid_before = 0;
    for _ in 0..count {
        let payment = sign_sync(
            &signer,
            &requirements,
            offer,
            &token,
            &SignOptions::default(),
        )
        .expect("sign");
        valid_before = payment.authorization.valid_before.to::<u64>();
        writeln!(file, "{}", payment.header_value).expect("write");
    }
    file.flush().expect("flush");
    eprintln!("presign: wrote {count} payments to {out} (valid until {valid_before})");
}
