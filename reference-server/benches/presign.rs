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
//! It fetches the 402 once, then signs `PRESIGN_COUNT` payments exactly as `@x402/fetch` does (first offer,
//! validAfter "0", validBefore now + maxTimeoutSeconds, random nonce), one Base64 `PAYMENT-SIGNATURE` a line.

use std::io::Write as _;

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use x402_tower::verify::TransferWithAuthorization;

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
    let accepted = &required["accepts"][0];
    let chain_id: u64 = accepted["network"]
        .as_str()
        .and_then(|n| n.strip_prefix("eip155:"))
        .and_then(|n| n.parse().ok())
        .expect("CAIP-2 network");
    let asset: Address = accepted["asset"]
        .as_str()
        .expect("asset")
        .parse()
        .expect("asset");
    let to: Address = accepted["payTo"]
        .as_str()
        .expect("payTo")
        .parse()
        .expect("payTo");
    let value: U256 = accepted["amount"]
        .as_str()
        .expect("amount")
        .parse()
        .expect("amount");
    let timeout = accepted["maxTimeoutSeconds"]
        .as_u64()
        .expect("maxTimeoutSeconds");
    let domain = Eip712Domain::new(
        Some(
            accepted["extra"]["name"]
                .as_str()
                .expect("name")
                .to_owned()
                .into(),
        ),
        Some(
            accepted["extra"]["version"]
                .as_str()
                .expect("version")
                .to_owned()
                .into(),
        ),
        Some(U256::from(chain_id)),
        Some(asset),
        None,
    );
    let signer = PrivateKeySigner::random();
    let valid_before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + timeout;
    let mut file = std::io::BufWriter::new(std::fs::File::create(&out).expect("create output"));
    for _ in 0..count {
        let mut nonce = [0u8; 32];
        nonce[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        nonce[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        let nonce = B256::from(nonce);
        let msg = TransferWithAuthorization {
            from: signer.address(),
            to,
            value,
            validAfter: U256::ZERO,
            validBefore: U256::from(valid_before),
            nonce,
        };
        let sig = signer
            .sign_hash_sync(&msg.eip712_signing_hash(&domain))
            .expect("sign");
        let doc = json!({
            "x402Version": 2,
            "payload": {
                "authorization": {
                    "from": signer.address().to_checksum(None),
                    "to": to.to_checksum(None),
                    "value": value.to_string(),
                    "validAfter": "0",
                    "validBefore": valid_before.to_string(),
                    "nonce": nonce.to_string(),
                },
                "signature": format!("0x{}", alloy_primitives::hex::encode(sig.as_bytes())),
            },
            "resource": required["resource"],
            "accepted": accepted,
        });
        writeln!(file, "{}", B64.encode(doc.to_string())).expect("write");
    }
    file.flush().expect("flush");
    eprintln!("presign: wrote {count} payments to {out} (valid until {valid_before})");
}
