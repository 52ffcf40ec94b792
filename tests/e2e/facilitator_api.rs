//! The reference server's facilitator API (`/facilitator/verify`, `/settle`, `/supported`) over the on-chain
//! settler.

use alloy_primitives::U256;
use serde_json::{Value, json};
use workspace_tests::chain::{CHAIN_ID, Chain};
use workspace_tests::pay::{Knobs, cancel_calldata, decode_b64_json, pay_v2};

use crate::common::{
    ARTICLE_PRICE, FACILITATOR_TOKEN, assert_balance_and_nothing_sent, broadcast_elsewhere,
    facilitator_for, http, pay_to, payer, relayer_transactions,
};
use crate::onchain_settler::payment_required;

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let resp = http()
        .post(url)
        .bearer_auth(FACILITATOR_TOKEN)
        .json(body)
        .send()
        .await
        .expect("POST");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON answer"))
}

fn body_for(chain: &Chain, key: &str, knobs: &Knobs) -> Value {
    let required = payment_required(chain);
    let payload = decode_b64_json(&pay_v2(key, &required, knobs));
    json!({"x402Version": 2, "paymentPayload": payload, "paymentRequirements": required["accepts"][0]})
}

#[tokio::test]
async fn verify_settle_supported_speak_the_facilitator_api() {
    let chain = Chain::start().await;
    let base = facilitator_for(&chain).await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;

    // Without the token (or with another one) nothing is answered.
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("token e2e-facilitator-token"),
    ] {
        for path in ["supported", "verify", "settle"] {
            let mut req = if path == "supported" {
                http().get(format!("{base}/{path}"))
            } else {
                http().post(format!("{base}/{path}")).json(&json!({}))
            };
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let resp = req.send().await.expect("request");
            assert_eq!(resp.status(), 401, "{path} with {auth:?}");
        }
    }

    let supported: Value = http()
        .get(format!("{base}/supported"))
        .bearer_auth(FACILITATOR_TOKEN)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert!(
        supported["kinds"]
            .as_array()
            .expect("kinds")
            .iter()
            .any(|k| k["x402Version"] == 2
                && k["scheme"] == "exact"
                && k["network"] == format!("eip155:{CHAIN_ID}")),
        "{supported}"
    );

    let body = body_for(&chain, key, &Knobs::default());
    let (status, verdict) = post(&format!("{base}/verify"), &body).await;
    assert_eq!(status, 200);
    assert_eq!(verdict["isValid"], true, "{verdict}");
    assert!(
        verdict["payer"]
            .as_str()
            .is_some_and(|p| p.eq_ignore_ascii_case(&from.to_string()))
    );

    let before = chain.balance(pay_to()).await;
    let (status, settled) = post(&format!("{base}/settle"), &body).await;
    assert_eq!(status, 200);
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["network"], format!("eip155:{CHAIN_ID}"));
    assert!(
        settled["transaction"]
            .as_str()
            .is_some_and(|t| t.len() == 66)
    );
    assert_eq!(
        chain.balance(pay_to()).await,
        before + U256::from(ARTICLE_PRICE)
    );

    // The identical request again (a caller that lost the answer): the stored settlement, no second transfer.
    let (_, again) = post(&format!("{base}/settle"), &body).await;
    assert_eq!(again, settled);
    assert_eq!(
        chain.balance(pay_to()).await,
        before + U256::from(ARTICLE_PRICE)
    );
    let (_, verdict) = post(&format!("{base}/verify"), &body).await;
    assert_eq!(verdict["isValid"], true, "its retry may go on to /settle");
    // The same authorization for another resource: used.
    let mut elsewhere = body.clone();
    elsewhere["paymentPayload"]["resource"] = json!({"url": "http://127.0.0.1:1/other"});
    let (_, verdict) = post(&format!("{base}/verify"), &elsewhere).await;
    assert_eq!(
        verdict["invalidReason"],
        "invalid_exact_evm_nonce_already_used"
    );
    let (_, other) = post(&format!("{base}/settle"), &elsewhere).await;
    assert_eq!(other["errorReason"], "invalid_exact_evm_nonce_already_used");

    // Checked locally before the chain: a wrong domain is a bad signature, an amount change a mismatch.
    let (_, verdict) = post(
        &format!("{base}/verify"),
        &body_for(
            &chain,
            key,
            &Knobs {
                domain_name: Some("USDC".into()),
                ..Knobs::default()
            },
        ),
    )
    .await;
    assert_eq!(
        verdict["invalidReason"], "invalid_exact_evm_payload_signature",
        "{verdict}"
    );
    let mut tampered = body_for(&chain, key, &Knobs::default());
    tampered["paymentPayload"]["payload"]["authorization"]["value"] = json!("1");
    let (_, verdict) = post(&format!("{base}/verify"), &tampered).await;
    assert_eq!(
        verdict["invalidReason"], "invalid_exact_evm_payload_authorization_value_mismatch",
        "{verdict}"
    );

    // An authorization valid for longer than the facilitator's own horizon (600 s + 120 s of skew) would
    // hold a payment record for that long: refused before the chain, whatever the caller's maxTimeoutSeconds.
    let (_, verdict) = post(
        &format!("{base}/verify"),
        &body_for(
            &chain,
            key,
            &Knobs {
                valid_before: Some(workspace_tests::pay::now() + 86_400),
                ..Knobs::default()
            },
        ),
    )
    .await;
    assert_eq!(
        verdict["invalidReason"], "invalid_exact_evm_payload_authorization_valid_before",
        "{verdict}"
    );

    // Not a facilitator request at all.
    let resp = http()
        .post(format!("{base}/verify"))
        .bearer_auth(FACILITATOR_TOKEN)
        .body("nope")
        .header("content-type", "application/json")
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 400);
}

/// A resource server fails over to this facilitator after another one broadcast the payment and never
/// answered: the chain says the nonce is used, and FiatToken's own `AuthorizationUsed` log names the
/// transaction that paid it. `/verify` is valid and `/settle` answers success with that transaction; nothing
/// is sent again and one transfer moved.
#[tokio::test]
async fn a_payment_another_facilitator_broadcast_settles_here_with_its_transaction() {
    let chain = Chain::start().await;
    let base = facilitator_for(&chain).await;
    let (key, from) = payer(3);
    chain.mint(from, 1_000_000).await;
    let body = body_for(&chain, key, &Knobs::default());
    let theirs = broadcast_elsewhere(
        &chain,
        &body["paymentPayload"],
        &body["paymentRequirements"],
    )
    .await;
    let sent_before = relayer_transactions(&chain).await;

    let (_, verdict) = post(&format!("{base}/verify"), &body).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");
    let (status, settled) = post(&format!("{base}/settle"), &body).await;
    assert_eq!(status, 200);
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["transaction"], theirs.as_str());
    let one_transfer = U256::from(1_000_000 - ARTICLE_PRICE);
    assert_balance_and_nothing_sent(&chain, from, one_transfer, sent_before).await;
}

/// A payment its payer cancelled (EIP-3009 `cancelAuthorization` on the real FiatTokenV2_2) is invalid at
/// `/verify`, which names the cancelling transaction (read from the token's `AuthorizationCanceled` log),
/// and fails for good at `/settle` (called alone, as a resource server settling without verifying does)
/// with the same message; nothing is sent and no money moves.
#[tokio::test]
async fn a_payment_its_payer_cancelled_is_refused_for_good_and_nothing_is_sent() {
    let chain = Chain::start().await;
    let base = facilitator_for(&chain).await;
    let (key, from) = payer(3);
    chain.mint(from, 1_000_000).await;
    let body = body_for(&chain, key, &Knobs::default());
    let nonce = body["paymentPayload"]["payload"]["authorization"]["nonce"]
        .as_str()
        .expect("nonce")
        .parse()
        .expect("bytes32");
    let cancelled = chain
        .transact(chain.usdc, cancel_calldata(key, chain.usdc, nonce))
        .await;
    let theirs = cancelled["transactionHash"].as_str().expect("hash");
    let sent_before = relayer_transactions(&chain).await;

    let (_, verdict) = post(&format!("{base}/verify"), &body).await;
    assert_eq!(verdict["isValid"], false, "{verdict}");
    assert_eq!(
        verdict["invalidReason"], "invalid_exact_evm_nonce_already_used",
        "{verdict}"
    );
    let message = verdict["invalidMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("the payer cancelled the authorization") && message.contains(theirs),
        "the cancellation named: {verdict}"
    );
    let (_, settled) = post(&format!("{base}/settle"), &body).await;
    assert_eq!(settled["success"], false, "{settled}");
    assert_eq!(
        settled["errorReason"], "invalid_exact_evm_nonce_already_used",
        "{settled}"
    );
    assert_eq!(
        settled["errorMessage"], verdict["invalidMessage"],
        "the settler's message: {settled}"
    );
    assert_balance_and_nothing_sent(&chain, from, U256::from(1_000_000u64), sent_before).await;
}
