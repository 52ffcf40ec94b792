//! x402 v2 payments signed by the workspace's client (`x402_tower::client::sign`), exactly as `@x402/evm`
//! signs them (validAfter 0), with knobs to make them wrong on purpose (domain name, time window, payer,
//! signature bytes).

use alloy_primitives::{Address, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use x402_tower::client::sign::{Requirements, SignOptions, sign_sync, wrap};
use x402_tower::network::Token;

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A fresh random EIP-3009 nonce.
pub fn random_nonce() -> B256 {
    B256::random()
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
    /// The EIP-3009 nonce (default a random one).
    pub nonce: Option<B256>,
}

/// Decodes a Base64 JSON header.
pub fn decode_b64_json(header: &str) -> Value {
    let bytes = B64
        .decode(header.trim())
        .unwrap_or_else(|e| panic!("not Base64 ({e}): {header}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {header}"))
}

/// Signs a v2 payment for the first offer of the decoded `PAYMENT-REQUIRED` document with the workspace's
/// client (`x402_tower::client::sign`), bent by `knobs`; returns the `PAYMENT-SIGNATURE` header value.
pub fn pay_v2(key: &str, payment_required: &Value, knobs: &Knobs) -> String {
    let signer: PrivateKeySigner = key.parse().expect("key");
    let requirements = Requirements::from_document(payment_required).expect("requirements");
    let offer = requirements.offers.first().expect("a signable offer");
    let token = Token::new(
        offer.asset,
        knobs
            .domain_name
            .clone()
            .unwrap_or_else(|| offer.domain_name.clone().expect("extra.name")),
        offer.domain_version.clone().expect("extra.version"),
        6,
    );
    let options = SignOptions {
        valid_before: knobs.valid_before.map(U256::from),
        from: knobs.from,
        nonce: knobs.nonce,
        ..Default::default()
    };
    let mut payment = sign_sync(&signer, &requirements, offer, &token, &options).expect("sign");
    if let Some(signature) = &knobs.signature {
        payment = wrap(
            &requirements,
            offer,
            payment.authorization,
            signature.clone(),
            &options,
        );
    }
    payment.header_value
}

/// Signs a v2 payment for the first Permit2 offer (`exact` over Permit2, or `upto`) of the decoded
/// `PAYMENT-REQUIRED` document with the workspace's client, after `tweak` changed the permit (a wrong
/// spender, recipient or deadline); returns the `PAYMENT-SIGNATURE` header value.
pub fn pay_permit2(
    key: &str,
    payment_required: &Value,
    tweak: impl FnOnce(&mut x402_tower::scheme::Permit2Payment),
) -> String {
    use alloy_signer::SignerSync as _;
    use x402_tower::client::sign::{TransferMethod, permit2, wrap_permit2};
    let signer: PrivateKeySigner = key.parse().expect("key");
    let requirements = Requirements::from_document(payment_required).expect("requirements");
    let (offer, facilitator) = requirements
        .offers
        .iter()
        .find_map(|o| match o.method {
            TransferMethod::Permit2 { facilitator } => Some((o, facilitator)),
            TransferMethod::Eip3009 => None,
        })
        .expect("a Permit2 offer");
    let options = SignOptions::default();
    let mut permit = permit2(signer.address(), offer, facilitator, &options);
    tweak(&mut permit);
    let hash = permit.signing_hash(offer.network.chain_id());
    let signature = signer.sign_hash_sync(&hash).expect("sign");
    wrap_permit2(
        &requirements,
        offer,
        permit,
        signature.as_bytes().to_vec(),
        &options,
    )
    .header_value
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
    let header = pay_v2(key, &payment_required(usdc, amount), knobs);
    let payload_json = decode_b64_json(&header);
    // Read as a facilitator reads it (the offer from the requirements, the payload by its scheme); nothing
    // is checked, so the knobs' broken payments stay broken.
    x402_tower::engine::facilitator::settle_request(
        payload_json.to_string().into(),
        &payload_json["accepted"].to_string(),
    )
    .expect("a payment a settler can read")
}

alloy_sol_types::sol! {
    /// EIP-3009's cancellation, as FiatTokenV2_2 hashes it.
    struct CancelAuthorization {
        address authorizer;
        bytes32 nonce;
    }
    /// FiatTokenV2_2's `cancelAuthorization` with a (v, r, s) signature.
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s);
}

/// The calldata of the anvil token `usdc`'s `cancelAuthorization` by `key` for the authorization `nonce`:
/// anybody may send it; the token then refuses every authorization of the payer under that nonce and logs
/// `AuthorizationCanceled`.
pub fn cancel_calldata(key: &str, usdc: Address, nonce: B256) -> Vec<u8> {
    use crate::chain::{CHAIN_ID, TOKEN_NAME, TOKEN_VERSION};
    use alloy_signer::SignerSync as _;
    use alloy_sol_types::{SolCall as _, SolStruct as _};

    let signer: PrivateKeySigner = key.parse().expect("key");
    let domain = alloy_sol_types::eip712_domain! {
        name: TOKEN_NAME,
        version: TOKEN_VERSION,
        chain_id: CHAIN_ID,
        verifying_contract: usdc,
    };
    let hash = CancelAuthorization {
        authorizer: signer.address(),
        nonce,
    }
    .eip712_signing_hash(&domain);
    let signature = signer.sign_hash_sync(&hash).expect("sign");
    cancelAuthorizationCall {
        authorizer: signer.address(),
        nonce,
        v: 27 + u8::from(signature.v()),
        r: signature.r().into(),
        s: signature.s().into(),
    }
    .abi_encode()
}
