//! The workspace's Rust client (`x402_tower::client`) buys from the official servers and from the reference
//! server, the money moving on anvil where a chain is involved: `@x402/express` v2 and the Python package's
//! Flask middleware (x402 v2, through the reference facilitator), the legacy `x402-express` v1 server (JSON
//! body only), and the reference server in verify-only and on-chain modes. Both adapters are used: the
//! Tower layer over hyper-util's client, and the reqwest-middleware adapter.

use alloy_primitives::{Address, B256, U256};
use workspace_tests::buyer::{Bought, buy_with_layer, buy_with_middleware, policy};
use workspace_tests::chain::{CHAIN_ID, Chain, PERMIT2_CHAIN_ID};
use workspace_tests::clients::{ExpressServer, Server};
use x402_tower::client::ReceiptError;
use x402_tower::extensions::bazaar::{DiscoveryQuery, list_resources};
use x402_tower::extensions::offer_receipt::ProofError;
use x402_tower::network::Network;

use crate::common::{ARTICLE_PRICE, PAY_TO, RefServer, facilitator_for, http, pay_to, payer};

/// Checks a settled purchase of `price` by `from` on `chain`: 200, the receipt's transaction is mined, the
/// balances moved by exactly the price.
async fn settled(
    chain: &Chain,
    bought: &Bought,
    from: alloy_primitives::Address,
    before: (U256, U256),
    price: u64,
) {
    assert_eq!(bought.status, 200, "{}", bought.body);
    let paid = bought.paid.as_ref().expect("Paid in the extensions");
    assert_eq!(paid.payer, from);
    let receipt = paid.settlement.as_ref().expect("a settlement receipt");
    assert!(receipt.success, "{receipt:?}");
    let tx: B256 = receipt.transaction.parse().expect("a transaction hash");
    assert!(
        chain.receipt(tx).await.is_some(),
        "the transaction is on chain"
    );
    let price = U256::from(price);
    assert_eq!(chain.balance(from).await, before.0 - price);
    assert_eq!(chain.balance(pay_to()).await, before.1 + price);
}

async fn official(server: Server, chain: &Chain, network: &str, payer_index: usize, layer: bool) {
    let facilitator = facilitator_for(chain).await;
    let official = ExpressServer::start_kind(
        server,
        &crate::common::express_config(chain, network, facilitator),
    )
    .await;
    let (key, from) = payer(payer_index);
    chain.mint(from, 1_000_000).await;
    let before = (chain.balance(from).await, chain.balance(pay_to()).await);
    let net: Network = network.parse().expect("network");
    let policy = policy(Some(chain), &net, "0.05");
    let bought = if layer {
        buy_with_layer(&official.url, key, policy).await
    } else {
        buy_with_middleware(&official.url, key, policy).await
    };
    assert!(bought.body.contains("sunny"), "{}", bought.body);
    settled(chain, &bought, from, before, 10_000).await;
    let version = bought.paid.as_ref().map(|p| p.payment.x402_version);
    assert_eq!(
        version,
        Some(if server == Server::ExpressV1 { 1 } else { 2 })
    );
}

#[tokio::test]
async fn buys_from_the_official_express_v2_server_money_moving_on_anvil() {
    let chain = Chain::start().await;
    official(
        Server::ExpressV2,
        &chain,
        &format!("eip155:{CHAIN_ID}"),
        3,
        true,
    )
    .await;
}

/// The official `@x402/express` server sells `exact` over Permit2 and `upto` (charging a quarter of the
/// maximum with `setSettlementOverrides`) through the reference facilitator, which settles on anvil: the
/// workspace's client pays both, and the balances move by the price and by the charge.
#[tokio::test]
async fn buys_permit2_and_upto_from_the_official_express_v2_server_money_moving_on_anvil() {
    let chain = Chain::start_as(PERMIT2_CHAIN_ID).await;
    chain.install_permit2().await;
    let facilitator = facilitator_for(&chain).await;
    let official = ExpressServer::start(&crate::common::express_config(
        &chain,
        &format!("eip155:{PERMIT2_CHAIN_ID}"),
        facilitator,
    ))
    .await;
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    // The buyer approves Permit2 with its own key, as the client's docs show.
    let (to, data) = x402_tower::client::permit2_approval(chain.usdc);
    let wallet = x402_tower::settle::onchain::OnchainSettler::builder(&chain.anvil.url, key)
        .build()
        .expect("a wallet");
    let approval = wallet
        .send_transaction(to, data)
        .await
        .expect("approval sent");
    assert_eq!(wallet.transaction_succeeded(approval).await, Ok(true));
    let net: Network = format!("eip155:{PERMIT2_CHAIN_ID}").parse().unwrap();
    for (route, charged) in [("-permit2", 10_000), ("-upto", 2_500)] {
        let before = (chain.balance(from).await, chain.balance(pay_to()).await);
        let bought = buy_with_layer(
            &format!("{}{route}", official.url),
            key,
            policy(Some(&chain), &net, "0.05"),
        )
        .await;
        assert!(bought.body.contains("sunny"), "{route}: {}", bought.body);
        settled(&chain, &bought, from, before, charged).await;
        let paid = bought.paid.as_ref().expect("paid");
        let sent = &paid.payment.payload["payload"]["permit2Authorization"];
        assert_eq!(sent["permitted"]["amount"], "10000", "{route}: {sent}");
    }
}

#[tokio::test]
async fn buys_from_the_legacy_v1_express_server() {
    // v1 knows networks by name: anvil runs as Base Sepolia's chain id, with our token.
    let chain = Chain::start_as(84532).await;
    official(Server::ExpressV1, &chain, "base-sepolia", 4, false).await;
}

#[tokio::test]
async fn buys_from_the_python_flask_middleware() {
    let chain = Chain::start().await;
    official(
        Server::Flask,
        &chain,
        &format!("eip155:{CHAIN_ID}"),
        5,
        true,
    )
    .await;
}

#[tokio::test]
async fn buys_an_article_from_the_reference_server_verify_only_and_on_chain() {
    // Verify-only (the default: Base Sepolia, nothing settles): the receipt says so.
    let server = RefServer::start(|_| {}).await;
    let (key, _) = payer(6);
    let bought = buy_with_middleware(
        &server.article_url(),
        key,
        policy(None, &"base-sepolia".parse().unwrap(), "0.10"),
    )
    .await;
    assert_eq!(bought.status, 200, "{}", bought.body);
    assert!(bought.body.contains("\"article\""), "{}", bought.body);
    let paid = bought.paid.expect("paid");
    assert_eq!(
        paid.settlement.as_ref().expect("receipt").transaction,
        "verify-only"
    );
    // The signed receipt checks out against the key that signed the offer, which is the key the server
    // publishes; against another key it does not.
    let published: Address = http()
        .get(format!("{}/receipts/signer", server.url))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(paid.offer_signer, Some(published));
    let receipt = paid.verify_receipt(None).expect("a valid signed receipt");
    assert_eq!(receipt.payload.resource_url, server.article_url());
    paid.verify_receipt(Some(published))
        .expect("the published key");
    assert!(matches!(
        paid.verify_receipt(Some(pay_to())),
        Err(ReceiptError::Proof(ProofError::WrongSigner { .. }))
    ));

    // The discovery listing through the client's bazaar reader: every article, with its price.
    let listing = list_resources(
        &reqwest::Client::new(),
        &format!("{}/facilitator", server.url),
        &DiscoveryQuery {
            kind: Some("http".into()),
            limit: Some(100),
            offset: None,
        },
    )
    .await
    .expect("listing");
    assert_eq!(listing.items.len(), server.state.articles.list().len());
    let item = listing
        .items
        .iter()
        .find(|i| i.resource == server.article_url())
        .expect("the article is listed");
    assert_eq!(item.accepts[0]["amount"], ARTICLE_PRICE.to_string());

    // On chain: the reference server settles itself (--rpc-url, --settler-key).
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |_| {}).await;
    let (key, from) = payer(7);
    chain.mint(from, 1_000_000).await;
    let before = (chain.balance(from).await, chain.balance(pay_to()).await);
    let net: Network = format!("eip155:{CHAIN_ID}").parse().unwrap();
    let bought = buy_with_layer(
        &server.article_url(),
        key,
        policy(Some(&chain), &net, "0.10"),
    )
    .await;
    settled(&chain, &bought, from, before, ARTICLE_PRICE).await;
    // On chain the signed receipt names the transaction (the server includes it).
    let paid = bought.paid.as_ref().expect("paid");
    let receipt = paid.verify_receipt(None).expect("signed receipt");
    assert_eq!(
        receipt.payload.transaction,
        paid.settlement.as_ref().expect("settlement").transaction
    );
    assert!(receipt.payload.transaction.starts_with("0x"));
    let body: serde_json::Value = serde_json::from_str(&bought.body).expect("JSON");
    assert!(body["receipt"]["nft"]["tokenId"].is_string(), "{body}");

    // Reading it again costs nothing: the client signs in with x, the chain does not move.
    let after = (chain.balance(from).await, chain.balance(pay_to()).await);
    let again = buy_with_layer(
        &server.article_url(),
        key,
        policy(Some(&chain), &net, "0.10"),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.paid.is_none(), "paid twice");
    assert_eq!(again.body, bought.body, "the same article and receipt");
    assert_eq!(
        (chain.balance(from).await, chain.balance(pay_to()).await),
        after
    );
}

/// A contract wallet (ERC-1271, its owner's ECDSA signature) that bought an article signs in with x and reads
/// it again: the reference server, settling on chain, asks the wallet through the same node (EIP-1271).
/// The wallet's receipt is written directly: this layer's local verification takes only a payer key's own
/// 65-byte signature, so a contract wallet cannot buy through it yet (it may have bought elsewhere).
#[tokio::test]
async fn a_contract_wallet_signs_in_through_eip1271() {
    use alloy_signer::SignerSync as _;
    use base64::Engine as _;

    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |_| {}).await;
    let (owner_key, owner) = payer(9);
    let wallet = chain
        .deploy_artifact(
            "test/MockERC1271Wallet.sol/MockERC1271Wallet.json",
            owner.into_word().as_slice(),
        )
        .await;
    chain.mint(wallet, 1_000_000).await;
    server
        .state
        .licensing
        .insert_receipt(std::sync::Arc::new(reference_server::domain::Receipt {
            token_id: reference_server::domain::token::token_id(
                &format!("eip155:{CHAIN_ID}"),
                &chain.usdc.to_checksum(None),
                &wallet.to_checksum(None),
                &format!("0x{}", "11".repeat(32)),
                1_764_547_200,
            ),
            article_id: crate::common::ARTICLE.into(),
            payer: wallet.to_checksum(None),
            pay_to: PAY_TO.into(),
            amount_atomic: ARTICLE_PRICE.to_string(),
            network: format!("eip155:{CHAIN_ID}"),
            asset: chain.usdc.to_checksum(None),
            nonce: format!("0x{}", "11".repeat(32)),
            x402_version: 2,
            settlement: format!("0x{}", "22".repeat(32)),
            created_at: "2026-11-23T00:00:00Z".into(),
            signed: None,
            license_id: None,
            license_version: None,
            agent: None,
        }))
        .await
        .expect("receipt");
    let before = chain.balance(wallet).await;

    // The proof: the declaration of a fresh 402, signed by the owner for the wallet's address.
    let required = crate::common::offer(&server.article_url()).await;
    let info = &required["extensions"]["sign-in-with-x"]["info"];
    let text = |k: &str| info[k].as_str().map(str::to_owned);
    let mut proof = x402_tower::extensions::siwx::Proof {
        domain: text("domain").unwrap(),
        address: wallet.to_checksum(None),
        uri: text("uri").unwrap(),
        version: "1".into(),
        chain_id: format!("eip155:{CHAIN_ID}"),
        kind: "eip191".into(),
        nonce: text("nonce").unwrap(),
        issued_at: text("issuedAt").unwrap(),
        expiration_time: text("expirationTime"),
        not_before: None,
        request_id: None,
        statement: text("statement"),
        resources: Some(vec![text("uri").unwrap()]),
        signature: String::new(),
        signature_scheme: Some("eip1271".into()),
    };
    let owner_signer: alloy_signer_local::PrivateKeySigner = owner_key.parse().unwrap();
    let message = x402_tower::extensions::siwx::message(&proof).unwrap();
    let sig = owner_signer.sign_message_sync(message.as_bytes()).unwrap();
    proof.signature = format!("0x{}", alloy_primitives::hex::encode(sig.as_bytes()));
    let header =
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&proof).unwrap());
    let res = crate::common::http()
        .get(server.article_url())
        .header("SIGN-IN-WITH-X", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{:?}", res.text().await);
    assert_eq!(chain.balance(wallet).await, before, "nothing paid");

    // The same proof with a signature the wallet refuses (another key): refused, 402.
    let other = alloy_signer_local::PrivateKeySigner::random();
    let fresh = crate::common::offer(&server.article_url()).await;
    proof.nonce = fresh["extensions"]["sign-in-with-x"]["info"]["nonce"]
        .as_str()
        .unwrap()
        .into();
    proof.issued_at = fresh["extensions"]["sign-in-with-x"]["info"]["issuedAt"]
        .as_str()
        .unwrap()
        .into();
    proof.expiration_time = fresh["extensions"]["sign-in-with-x"]["info"]["expirationTime"]
        .as_str()
        .map(str::to_owned);
    let message = x402_tower::extensions::siwx::message(&proof).unwrap();
    proof.signature = format!(
        "0x{}",
        alloy_primitives::hex::encode(
            other
                .sign_message_sync(message.as_bytes())
                .unwrap()
                .as_bytes()
        )
    );
    let header =
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&proof).unwrap());
    let res = crate::common::http()
        .get(server.article_url())
        .header("SIGN-IN-WITH-X", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 402);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["error"], "siwx_invalid_signature");
}
