//! The on-chain settler against anvil + FiatTokenV2_2: simulation verdicts, settlement, pipelining, unknown
//! outcomes, RPC errors.

use std::time::Duration;

use alloy_primitives::{B256, U256};
use serde_json::{Value, json};
use workspace_tests::chain::{CHAIN_ID, Chain, DEV_KEYS};
use workspace_tests::pay::{Knobs, now};
use x402_tower::settle::onchain::OnchainSettler;
use x402_tower::settle::{SettleOutcome, SettleRequest, Settler, VerifyOutcome};

use crate::common::{ARTICLE_PRICE, pay_to, payer, settler};

/// A v2 PAYMENT-REQUIRED document for the anvil token.
pub(crate) fn payment_required(chain: &Chain) -> Value {
    workspace_tests::pay::payment_required(chain.usdc, ARTICLE_PRICE)
}

/// A settle request for a payment by `key`, signed with `knobs`.
pub(crate) fn request(chain: &Chain, key: &str, knobs: &Knobs) -> SettleRequest {
    workspace_tests::pay::settle_request(chain.usdc, ARTICLE_PRICE, key, knobs)
}

fn invalid_reason(outcome: VerifyOutcome) -> String {
    match outcome {
        VerifyOutcome::Invalid { reason, .. } => reason,
        VerifyOutcome::Valid => panic!("expected an invalid verdict"),
    }
}

#[tokio::test]
async fn settles_on_chain_and_moves_exactly_the_amount() {
    let chain = Chain::start().await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    let settler = settler(&chain);
    let req = request(&chain, key, &Knobs::default());
    assert_eq!(
        settler.verify(&req).await.expect("rpc"),
        VerifyOutcome::Valid
    );
    let before = (chain.balance(from).await, chain.balance(pay_to()).await);
    let tx = match settler.settle(&req).await {
        SettleOutcome::Settled {
            transaction,
            payer,
            network,
        } => {
            assert_eq!(payer, from);
            assert_eq!(network, format!("eip155:{CHAIN_ID}"));
            transaction
        }
        other => panic!("not settled: {other:?}"),
    };
    let receipt = chain
        .receipt(tx.parse::<B256>().expect("hash"))
        .await
        .expect("tx on chain");
    assert_eq!(receipt["status"], "0x1");
    assert_eq!(
        receipt["to"].as_str().map(str::to_lowercase),
        Some(chain.usdc.to_string().to_lowercase())
    );
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(chain.balance(from).await, before.0 - price);
    assert_eq!(chain.balance(pay_to()).await, before.1 + price);
    // The same authorization again: the chain says the nonce is used, and FiatToken's own
    // `AuthorizationUsed` log names the transaction that paid it: reported again, nothing sent, no second
    // transfer (refusing it for another resource is the payment store's job, not the chain's).
    let relayer_sent = chain
        .rpc
        .call(
            "eth_getTransactionCount",
            json!([settler.relayer(), "latest"]),
        )
        .await;
    assert_eq!(
        settler.verify(&req).await.expect("rpc"),
        VerifyOutcome::Valid
    );
    match settler.settle(&req).await {
        SettleOutcome::Settled { transaction, .. } => assert_eq!(transaction, tx),
        other => panic!("not reported again: {other:?}"),
    }
    assert_eq!(
        chain
            .rpc
            .call(
                "eth_getTransactionCount",
                json!([settler.relayer(), "latest"])
            )
            .await,
        relayer_sent,
        "nothing sent"
    );
    assert_eq!(chain.balance(from).await, before.0 - price);
}

#[tokio::test]
async fn concurrent_settlements_from_one_relayer_do_not_collide() {
    let chain = Chain::start().await;
    let settler = settler(&chain);
    let mut requests = Vec::new();
    for n in 2..8 {
        let (key, from) = payer(n);
        chain.mint(from, 1_000_000).await;
        requests.push(request(&chain, key, &Knobs::default()));
        requests.push(request(&chain, key, &Knobs::default()));
    }
    let before = chain.balance(pay_to()).await;
    let outcomes = futures_join_all(&settler, &requests).await;
    let mut hashes = std::collections::HashSet::new();
    for outcome in outcomes {
        match outcome {
            SettleOutcome::Settled { transaction, .. } => assert!(hashes.insert(transaction)),
            other => panic!("not settled: {other:?}"),
        }
    }
    assert_eq!(
        chain.balance(pay_to()).await,
        before + U256::from(ARTICLE_PRICE * requests.len() as u64)
    );
}

async fn futures_join_all(
    settler: &OnchainSettler,
    requests: &[SettleRequest],
) -> Vec<SettleOutcome> {
    let mut set = tokio::task::JoinSet::new();
    for (i, r) in requests.iter().enumerate() {
        let s = settler.clone();
        let r = r.clone();
        set.spawn(async move { (i, s.settle(&r).await) });
    }
    let mut out: Vec<(usize, SettleOutcome)> = set.join_all().await;
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}

#[tokio::test]
async fn simulation_maps_every_on_chain_refusal_to_the_spec_string() {
    let chain = Chain::start().await;
    let settler = settler(&chain);
    let (rich_key, rich) = payer(2);
    chain.mint(rich, 1_000_000).await;

    // No USDC.
    let (poor_key, _) = payer(3);
    let verdict = settler
        .verify(&request(&chain, poor_key, &Knobs::default()))
        .await
        .expect("rpc");
    assert_eq!(invalid_reason(verdict), "insufficient_funds");

    // Wrong EIP-712 domain name ("USDC" where the token says "USD Coin").
    let knobs = Knobs {
        domain_name: Some("USDC".into()),
        ..Knobs::default()
    };
    let verdict = settler
        .verify(&request(&chain, rich_key, &knobs))
        .await
        .expect("rpc");
    assert_eq!(
        invalid_reason(verdict),
        "invalid_exact_evm_payload_signature"
    );

    // A payer with code (an ERC-1271 wallet that refuses): ECDSA would pass, the token asks the wallet.
    let (wallet_key, wallet) = payer(4);
    chain.mint(wallet, 1_000_000).await;
    let code = chain.erc1271_wallet_code(payer(9).1).await;
    chain.set_code(wallet, &code).await;
    let verdict = settler
        .verify(&request(&chain, wallet_key, &Knobs::default()))
        .await
        .expect("rpc");
    assert_eq!(
        invalid_reason(verdict),
        "invalid_exact_evm_payload_signature"
    );

    // Expired on chain: the chain's clock is past validBefore.
    let knobs = Knobs {
        valid_before: Some(now() + 30),
        ..Knobs::default()
    };
    let req = request(&chain, rich_key, &knobs);
    assert_eq!(
        settler.verify(&req).await.expect("rpc"),
        VerifyOutcome::Valid
    );
    chain.advance_time(3600).await;
    assert_eq!(
        invalid_reason(settler.verify(&req).await.expect("rpc")),
        "invalid_exact_evm_payload_authorization_valid_before"
    );
    match settler.settle(&req).await {
        SettleOutcome::Failed {
            reason,
            authorization_still_usable,
            ..
        } => {
            assert_eq!(
                reason,
                "invalid_exact_evm_payload_authorization_valid_before"
            );
            assert!(authorization_still_usable, "nothing was sent");
        }
        other => panic!("expired settled: {other:?}"),
    }

    // Paused token.
    chain.pause().await;
    let verdict = settler
        .verify(&request(&chain, rich_key, &Knobs::default()))
        .await
        .expect("rpc");
    assert_eq!(invalid_reason(verdict), "invalid_transaction_state");
}

#[tokio::test]
async fn a_receipt_that_never_comes_is_an_unknown_outcome() {
    let chain = Chain::start().await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    chain.rpc.call("evm_setAutomine", json!([false])).await;
    let settler = OnchainSettler::builder(chain.anvil.url.clone(), DEV_KEYS[1])
        .receipt_timeout(Duration::from_millis(300))
        .build()
        .expect("settler");
    match settler
        .settle(&request(&chain, key, &Knobs::default()))
        .await
    {
        SettleOutcome::Unknown {
            message,
            transaction,
        } => {
            assert!(message.contains("no receipt"), "{message}");
            assert!(
                transaction.is_some_and(|t| t.len() == 66),
                "the hash is reported"
            );
        }
        other => panic!("expected unknown: {other:?}"),
    }
    // Once mined, the transfer did happen: "unknown" was right not to call it a failure.
    chain.rpc.call("evm_mine", json!([])).await;
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
}

#[tokio::test]
async fn rpc_errors_are_reported_not_swallowed() {
    let chain = Chain::start().await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    let req = request(&chain, key, &Knobs::default());
    // A node that is not there.
    let dead = OnchainSettler::builder("http://127.0.0.1:9", DEV_KEYS[1])
        .build()
        .expect("settler");
    assert!(
        dead.verify(&req).await.is_err(),
        "an unreachable node must be an error, not a verdict"
    );
    match dead.settle(&req).await {
        SettleOutcome::Failed {
            reason,
            message,
            authorization_still_usable,
        } => {
            assert_eq!(reason, "unexpected_settle_error");
            assert!(message.is_some_and(|m| m.contains("JSON-RPC")));
            assert!(authorization_still_usable);
        }
        other => panic!("{other:?}"),
    }
    // A relayer without ETH for gas: the node refuses the transaction, the error says why.
    let broke_key = "0x0000000000000000000000000000000000000000000000000000000000000a11";
    let broke = OnchainSettler::builder(chain.anvil.url.clone(), broke_key)
        .build()
        .expect("settler");
    match broke.settle(&req).await {
        SettleOutcome::Failed {
            reason,
            message,
            authorization_still_usable,
        } => {
            assert_eq!(reason, "unexpected_settle_error");
            assert!(message.is_some(), "the node's reason is reported");
            assert!(authorization_still_usable);
        }
        other => panic!("{other:?}"),
    }
    // Bad configuration fails at build time.
    assert!(
        OnchainSettler::builder("ftp://x", DEV_KEYS[1])
            .build()
            .is_err()
    );
    assert!(
        OnchainSettler::builder("http://127.0.0.1:1", "0x1234")
            .build()
            .is_err()
    );
}

/// The selector of the transaction that settled `transaction`.
async fn selector_of(chain: &Chain, transaction: &str) -> String {
    let tx = chain
        .rpc
        .call("eth_getTransactionByHash", json!([transaction]))
        .await;
    tx["input"].as_str().expect("input")[..10].to_owned()
}

fn settled(outcome: SettleOutcome) -> String {
    match outcome {
        SettleOutcome::Settled { transaction, .. } => transaction,
        other => panic!("not settled: {other:?}"),
    }
}

#[tokio::test]
async fn smart_wallet_payers_settle_through_the_right_overload() {
    let chain = Chain::start().await;
    let settler = settler(&chain);
    let (owner_key, owner) = payer(9);

    // An ERC-1271 wallet that checks its owner's ECDSA signature: 65 bytes, the (v,r,s) overload.
    let wallet = chain
        .deploy_artifact(
            "test/MockERC1271Wallet.sol/MockERC1271Wallet.json",
            owner.into_word().as_slice(),
        )
        .await;
    chain.mint(wallet, 1_000_000).await;
    let knobs = Knobs {
        from: Some(wallet),
        ..Knobs::default()
    };
    let req = request(&chain, owner_key, &knobs);
    assert_eq!(
        settler.verify(&req).await.expect("rpc"),
        VerifyOutcome::Valid
    );
    let tx = settled(settler.settle(&req).await);
    assert_eq!(selector_of(&chain, &tx).await, "0xe3ee160e");
    assert_eq!(
        chain.balance(wallet).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );

    // A wallet with its own signature format (here: any bytes, once enabled): longer than 65 bytes, the
    // `bytes` overload of FiatTokenV2_2.
    let custom = chain
        .deploy_artifact(
            "test/MockERC1271Wallet.sol/MockERC1271WalletWithCustomValidation.json",
            owner.into_word().as_slice(),
        )
        .await;
    chain.mint(custom, 1_000_000).await;
    let knobs = Knobs {
        from: Some(custom),
        signature: Some(vec![0x42; 100]),
        ..Knobs::default()
    };
    let req = request(&chain, owner_key, &knobs);
    assert_eq!(
        req.authorized
            .details::<x402_tower::scheme::Eip3009Payment>()
            .unwrap()
            .signature
            .len(),
        100
    );
    // Not yet enabled: the wallet refuses, the simulation says so.
    assert_eq!(
        invalid_reason(settler.verify(&req).await.expect("rpc")),
        "invalid_exact_evm_payload_signature"
    );
    let mut enable = Vec::new();
    enable.extend_from_slice(&alloy_primitives::keccak256("setSignatureValid(bool)")[..4]);
    enable.extend_from_slice(U256::from(1).to_be_bytes::<32>().as_slice());
    chain.transact(custom, enable).await;
    assert_eq!(
        settler.verify(&req).await.expect("rpc"),
        VerifyOutcome::Valid
    );
    let tx = settled(settler.settle(&req).await);
    assert_eq!(selector_of(&chain, &tx).await, "0xcf092995");
    assert_eq!(
        chain.balance(custom).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
}

#[tokio::test]
async fn a_relayer_nonce_used_elsewhere_is_re_read() {
    let chain = Chain::start().await;
    let settler = settler(&chain);
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    settled(
        settler
            .settle(&request(&chain, key, &Knobs::default()))
            .await,
    );
    // Another process sends from the same relayer account: the settler's cached nonce is now stale.
    let relayer = settler.relayer();
    chain
        .rpc
        .call(
            "eth_sendTransaction",
            json!([{"from": relayer, "to": relayer, "value": "0x1"}]),
        )
        .await;
    settled(
        settler
            .settle(&request(&chain, key, &Knobs::default()))
            .await,
    );
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - 2 * ARTICLE_PRICE)
    );
}
