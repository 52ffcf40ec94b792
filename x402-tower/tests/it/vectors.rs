//! The EIP-3009 test vectors of eip3009.md, through the whole layer (clock fixed inside their window).

use alloy_primitives::{U256, address, b256};
use http::StatusCode;
use tower::Layer;

use crate::support::*;

const SIG_A: &str = "0xdc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c3157b4b4030f1bebc53d55ace15c2377dff501a60e1e56c291f1000d6e78f082f1b";
const SIG_A_HIGH_S: &str = "0xdc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c3ea84b4bfcf0e4143ac2aa531ea3dc880bb5ec285cd633412a0c25db5e8a739121c";
const SIG_B: &str = "0xa70a7d235fd4218a3ed6625525892efed6fd1ac6a193ba612bb9da921620bce74885a8f7f56d2dc2f46005b7d6a089ae3469455a911004b6c4a6ab600677f56c1c";
const SPEC_FROM: alloy_primitives::Address = address!("0x857b06519E91e3A54538791bDbb0E22373e36b66");
const SPEC_SIG: &str = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";

fn message_m(from: alloy_primitives::Address) -> Auth {
    Auth {
        from,
        to: PAY_TO,
        value: U256::from(10_000u64),
        valid_after: 1_740_672_089,
        valid_before: 1_740_672_154,
        nonce: b256!("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
    }
}

async fn through_layer(auth: &Auth, sig: &str, v1: bool) -> Answer {
    let inner = Inner::new();
    // validAfter < now, validBefore >= now + 6.
    let svc = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .clock(|| 1_740_672_100)
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let (name, value) = if v1 {
        ("x-payment", b64(&payload_v1(auth, sig)))
    } else {
        ("payment-signature", b64(&payload_v2(auth, sig)))
    };
    let a = send(svc, req("/report", &[(name, &value)])).await;
    assert_eq!(inner.calls(), usize::from(a.status == StatusCode::OK));
    a
}

#[tokio::test]
async fn vector_a_accepted_in_both_versions() {
    assert_eq!(
        through_layer(&message_m(ACCOUNT0), SIG_A, false)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        through_layer(&message_m(ACCOUNT0), SIG_A, true)
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn vector_a_twins_rejected() {
    let m = message_m(ACCOUNT0);
    let sig = "invalid_exact_evm_payload_signature";
    assert_eq!(
        through_layer(&m, SIG_A_HIGH_S, false).await.error(),
        sig,
        "high s"
    );
    let v0 = format!("{}00", &SIG_A[..SIG_A.len() - 2]);
    let v1 = format!("{}01", &SIG_A[..SIG_A.len() - 2]);
    assert_eq!(through_layer(&m, &v0, false).await.error(), sig, "v=0");
    assert_eq!(through_layer(&m, &v1, false).await.error(), sig, "v=1");
    assert_eq!(
        through_layer(&m, &SIG_A[..2 + 128], false).await.error(),
        sig,
        "64 bytes"
    );
    // Vector B is a good signature under Base mainnet's domain: not under Base Sepolia's.
    assert_eq!(
        through_layer(&m, SIG_B, false).await.error(),
        sig,
        "domain B"
    );
}

#[tokio::test]
async fn spec_example_accepted_with_its_own_from() {
    assert_eq!(
        through_layer(&message_m(SPEC_FROM), SPEC_SIG, false)
            .await
            .status,
        StatusCode::OK
    );
    // ... and not as account #0.
    assert_eq!(
        through_layer(&message_m(ACCOUNT0), SPEC_SIG, false)
            .await
            .error(),
        "invalid_exact_evm_payload_signature"
    );
}

#[tokio::test]
async fn vector_b_accepted_on_base_mainnet() {
    let inner = Inner::new();
    let offer =
        x402_tower::PaymentOffer::usdc(network("base"), PAY_TO, x402_tower::Price::from(10_000u64))
            .unwrap();
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(offer)
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .clock(|| 1_740_672_100)
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(
        svc,
        req(
            "/r",
            &[(
                "x-payment",
                &b64(&serde_json::json!({
                    "x402Version": 1, "scheme": "exact", "network": "base",
                    "payload": {"signature": SIG_B, "authorization": message_m(ACCOUNT0).json()}
                })),
            )],
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
}
