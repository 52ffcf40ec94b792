//! x402 v2 payments signed in Rust with alloy, exactly as `@x402/evm` signs them (validAfter 0), with knobs
//! to make them wrong on purpose (domain name, time window).

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use x402_tower::network::Token;
use x402_tower::proto::Authorization;
use x402_tower::verify::{authorization_digest, domain_separator};

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A fresh random EIP-3009 nonce.
pub fn random_nonce() -> B256 {
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        let r = std::collections::hash_map::RandomState::new();
        use std::hash::{BuildHasher, Hasher};
        let mut h = r.build_hasher();
        h.write_u64(now());
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    B256::from(bytes)
}

/// How to sign, beyond the offer.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    /// Sign under this EIP-712 name instead of the offer's.
    pub domain_name: Option<String>,
    /// `validBefore` (default now + maxTimeoutSeconds).
    pub valid_before: Option<u64>,
    /// `authorization.from` (default the signer's address): a smart wallet the signer owns.
    pub from: Option<Address>,
    /// Send these signature bytes instead of the ECDSA signature (a smart wallet's own format).
    pub signature: Option<Vec<u8>>,
}

/// Decodes a Base64 JSON header.
pub fn decode_b64_json(header: &str) -> Value {
    let bytes = B64
        .decode(header.trim())
        .unwrap_or_else(|e| panic!("not Base64 ({e}): {header}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {header}"))
}

/// Signs a v2 payment for the first offer of the decoded `PAYMENT-REQUIRED` document; returns the
/// `PAYMENT-SIGNATURE` header value.
pub fn pay_v2(key: &str, payment_required: &Value, knobs: &Knobs) -> String {
    let signer: PrivateKeySigner = key.parse().expect("key");
    let accepted = &payment_required["accepts"][0];
    let network = accepted["network"].as_str().expect("network");
    let chain_id: u64 = network
        .strip_prefix("eip155:")
        .and_then(|c| c.parse().ok())
        .expect("eip155 network");
    let asset: Address = accepted["asset"]
        .as_str()
        .expect("asset")
        .parse()
        .expect("asset address");
    let pay_to: Address = accepted["payTo"]
        .as_str()
        .expect("payTo")
        .parse()
        .expect("payTo address");
    let amount =
        U256::from_str_radix(accepted["amount"].as_str().expect("amount"), 10).expect("amount");
    let timeout = accepted["maxTimeoutSeconds"]
        .as_u64()
        .expect("maxTimeoutSeconds");
    let name = knobs
        .domain_name
        .clone()
        .unwrap_or_else(|| accepted["extra"]["name"].as_str().expect("name").to_owned());
    let version = accepted["extra"]["version"].as_str().expect("version");
    let auth = Authorization {
        from: knobs.from.unwrap_or(signer.address()),
        to: pay_to,
        value: amount,
        valid_after: U256::ZERO,
        valid_before: U256::from(knobs.valid_before.unwrap_or(now() + timeout)),
        nonce: random_nonce(),
    };
    let token = Token::new(asset, name, version, 6);
    let digest = authorization_digest(&auth, &domain_separator(chain_id, &token));
    let sig = signer.sign_hash_sync(&digest).expect("sign");
    let payload = json!({
        "x402Version": 2,
        "resource": payment_required["resource"],
        "accepted": accepted,
        "payload": {
            "authorization": {
                "from": auth.from.to_checksum(None),
                "to": auth.to.to_checksum(None),
                "value": auth.value.to_string(),
                "validAfter": "0",
                "validBefore": auth.valid_before.to_string(),
                "nonce": auth.nonce.to_string(),
            },
            "signature": format!(
                "0x{}",
                alloy_primitives::hex::encode(knobs.signature.clone().unwrap_or_else(|| sig.as_bytes().to_vec()))
            ),
        },
    });
    B64.encode(payload.to_string())
}

/// Where the tests' payments go (`PAY_TO` of the reference server's demo).
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// A v2 `PAYMENT-REQUIRED` document for `amount` atomic units of the anvil token `usdc`, paid to [`PAY_TO`].
pub fn payment_required(usdc: Address, amount: u64) -> Value {
    use crate::chain::{CHAIN_ID, TOKEN_NAME, TOKEN_VERSION};
    json!({
        "x402Version": 2,
        "resource": {"url": "http://127.0.0.1/test", "description": "", "mimeType": ""},
        "accepts": [{
            "scheme": "exact",
            "network": format!("eip155:{CHAIN_ID}"),
            "amount": amount.to_string(),
            "asset": usdc.to_checksum(None),
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 300,
            "extra": {"name": TOKEN_NAME, "version": TOKEN_VERSION},
        }],
    })
}

/// A [`SettleRequest`](x402_tower::settle::SettleRequest) for a payment of `amount` by `key` to [`PAY_TO`] on
/// the anvil token `usdc`, as the layer would hand it to a settler.
pub fn settle_request(
    usdc: Address,
    amount: u64,
    key: &str,
    knobs: &Knobs,
) -> x402_tower::settle::SettleRequest {
    use crate::chain::{CHAIN_ID, TOKEN_NAME, TOKEN_VERSION};
    use x402_tower::network::Network;
    use x402_tower::offer::PaymentOffer;
    use x402_tower::price::Price;
    use x402_tower::proto::{PaymentPayload, PaymentPayloadV2, PaymentRequirements};

    let header = pay_v2(key, &payment_required(usdc, amount), knobs);
    let payload_json = decode_b64_json(&header);
    let payload: PaymentPayloadV2 =
        serde_json::from_value(payload_json.clone()).expect("v2 payload");
    let signature: alloy_primitives::Bytes =
        payload.payload.signature.parse().expect("hex signature");
    let requirements = PaymentRequirements::V2(payload.accepted.clone());
    let offer = PaymentOffer::new(
        Network::from_chain_id(CHAIN_ID),
        Token::new(usdc, TOKEN_NAME, TOKEN_VERSION, 6),
        PAY_TO.parse().expect("address"),
        Price::from(amount),
    );
    x402_tower::settle::SettleRequest {
        payload: PaymentPayload::V2(payload),
        payload_json,
        requirements,
        offer,
        signature,
    }
}
