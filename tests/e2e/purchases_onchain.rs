//! Purchases that really move USDC on anvil: the official v2 client buys from the reference server (which
//! settles through its facilitator API and the on-chain settler), an official `@x402/express` server uses
//! the same facilitator, and the chain's refusals come back as 402s with the right reason.

use alloy_primitives::{B256, U256};
use serde_json::{Value, json};
use workspace_tests::chain::{CHAIN_ID, Chain, PERMIT2_CHAIN_ID, quantity};
use workspace_tests::clients::{Client, ExpressServer, buy};
use workspace_tests::pay::{Knobs, cancel_calldata, decode_b64_json, now, pay_permit2, pay_v2};

use crate::common::{
    ARTICLE_PRICE, ChildDir, ChildServer, FACILITATOR_TOKEN, RefServer,
    assert_balance_and_nothing_sent, broadcast_elsewhere, check_purchase, facilitator_for,
    get_paid, http, offer, pay_to, payer, receipt_of, relayer_transactions, settlements_at,
};

#[tokio::test]
async fn v2_client_purchase_moves_exactly_the_price_on_chain_and_a_replay_is_refused() {
    let chain = Chain::start().await;
    let facilitator = facilitator_for(&chain).await;
    let server = RefServer::on_chain(&chain, &facilitator).await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    let before = (chain.balance(from).await, chain.balance(pay_to()).await);

    let purchase = buy(Client::JsV2, &server.article_url(), key).await;
    let tx = check_purchase(&purchase, from).await;
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(chain.balance(from).await, before.0 - price);
    assert_eq!(chain.balance(pay_to()).await, before.1 + price);
    let receipt = chain
        .receipt(tx.parse::<B256>().expect("a transaction hash"))
        .await
        .expect("tx on chain");
    assert_eq!(receipt["status"], "0x1");

    // The same payment header again (a buyer who lost the answer): the same article and receipt, no second
    // transfer. For another article: refused before the handler.
    let header = purchase.payment_header.as_str().expect("payment header");
    let resp = server.pay(header).await;
    assert_eq!(resp.status(), 200);
    let again_receipt = receipt_of(&resp);
    assert_eq!(again_receipt["transaction"], tx);
    let body: Value = resp.json().await.expect("article");
    let first: Value = serde_json::from_str(&purchase.body).expect("article JSON");
    assert_eq!(body["receipt"], first["receipt"], "the same receipt");
    assert_eq!(chain.balance(from).await, before.0 - price);

    let accepted = accepted_payments(&server).await;
    let resp = // Another resource URL (an extra query parameter) at the same price.
        server
        .pay_at(&format!("{}&copy=2", server.article_url()), header)
        .await;
    assert_eq!(resp.status(), 402);
    let body: Value = resp.json().await.expect("402 body");
    assert_eq!(
        body["error"], "invalid_exact_evm_nonce_already_used",
        "{body}"
    );
    assert!(body.get("article").is_none());
    assert_eq!(chain.balance(from).await, before.0 - price);
    assert_eq!(
        accepted_payments(&server).await,
        accepted,
        "the replay reached the handler"
    );
}

/// The layer's count of payments passed to the handler, from the server's `/metrics`.
async fn accepted_payments(server: &RefServer) -> u64 {
    let text = crate::common::metrics_text(&server.url).await;
    workspace_tests::metrics::value(&text, "x402_payments_total{outcome=\"accepted\"}")
        .unwrap_or_else(|| panic!("no accepted counter in /metrics:\n{text}"))
}

#[tokio::test]
async fn official_express_server_settles_through_the_reference_facilitator() {
    let chain = Chain::start().await;
    let facilitator = facilitator_for(&chain).await;
    let express = ExpressServer::start(&crate::common::express_config(
        &chain,
        &format!("eip155:{CHAIN_ID}"),
        facilitator,
    ))
    .await;
    let (key, from) = payer(3);
    chain.mint(from, 1_000_000).await;
    let before = chain.balance(pay_to()).await;
    let purchase = buy(Client::JsV2, &express.url, key).await;
    assert_eq!(purchase.status, 200, "{}", purchase.body);
    assert!(purchase.body.contains("sunny"));
    assert_eq!(purchase.receipt["success"], true);
    let tx: B256 = purchase.receipt["transaction"]
        .as_str()
        .expect("tx")
        .parse()
        .expect("hash");
    assert!(chain.receipt(tx).await.is_some());
    assert_eq!(
        chain.balance(pay_to()).await,
        before + U256::from(10_000u64)
    );
    assert_eq!(chain.balance(from).await, U256::from(1_000_000u64 - 10_000));
}

/// Pays the article with a Rust-signed payment; expects 402 with `reason` and no content.
async fn refused(server: &RefServer, key: &str, knobs: &Knobs, reason: &str) {
    let required = offer(&server.article_url()).await;
    let header = pay_v2(key, &required, knobs);
    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 402);
    let body: Value = resp.json().await.expect("402 body");
    assert_eq!(body["error"], reason, "{body}");
    assert!(body.get("article").is_none(), "{body}");
}

#[tokio::test]
async fn chain_refusals_are_402_with_the_right_reason_and_no_content() {
    let chain = Chain::start().await;
    let facilitator = facilitator_for(&chain).await;
    let server = RefServer::on_chain(&chain, &facilitator).await;
    let before = chain.balance(pay_to()).await;

    // A payer without enough USDC.
    let (poor, poor_addr) = payer(4);
    chain.mint(poor_addr, ARTICLE_PRICE - 1).await;
    refused(&server, poor, &Knobs::default(), "insufficient_funds").await;

    // A wrong EIP-712 domain name.
    let (rich, rich_addr) = payer(5);
    chain.mint(rich_addr, 1_000_000).await;
    refused(
        &server,
        rich,
        &Knobs {
            domain_name: Some("USDC".into()),
            ..Knobs::default()
        },
        "invalid_exact_evm_payload_signature",
    )
    .await;

    // An EIP-1271 wallet that refuses (a payer address with code).
    let (wallet_key, wallet) = payer(6);
    chain.mint(wallet, 1_000_000).await;
    let code = chain.erc1271_wallet_code(payer(9).1).await;
    chain.set_code(wallet, &code).await;
    refused(
        &server,
        wallet_key,
        &Knobs::default(),
        "invalid_exact_evm_payload_signature",
    )
    .await;

    // An authorization already expired: by the server's clock, then by the chain's.
    refused(
        &server,
        rich,
        &Knobs {
            valid_before: Some(now() - 1),
            ..Knobs::default()
        },
        "invalid_exact_evm_payload_authorization_valid_before",
    )
    .await;
    chain.advance_time(3600).await;
    refused(
        &server,
        rich,
        &Knobs {
            valid_before: Some(now() + 60),
            ..Knobs::default()
        },
        "invalid_exact_evm_payload_authorization_valid_before",
    )
    .await;

    assert_eq!(
        chain.balance(pay_to()).await,
        before,
        "no refused payment moved money"
    );
}

#[tokio::test]
async fn python_client_purchase_moves_the_price_on_chain() {
    let chain = Chain::start().await;
    let facilitator = facilitator_for(&chain).await;
    let server = RefServer::on_chain(&chain, &facilitator).await;
    let (key, from) = payer(7);
    chain.mint(from, 1_000_000).await;
    let purchase = buy(Client::Python, &server.article_url(), key).await;
    let tx = check_purchase(&purchase, from).await;
    assert!(
        chain
            .receipt(tx.parse::<B256>().expect("a transaction hash"))
            .await
            .is_some()
    );
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
    assert_eq!(chain.balance(pay_to()).await, U256::from(ARTICLE_PRICE));
}

#[tokio::test]
async fn legacy_v1_client_purchase_settles_on_chain() {
    // The legacy client knows networks by name only: anvil runs as Base Sepolia's chain id, with our token.
    let chain = Chain::start_as(84532).await;
    let facilitator = facilitator_for(&chain).await;
    let server = RefServer::on_network(&chain, &facilitator, "base-sepolia").await;
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    let purchase = buy(Client::JsV1, &server.article_url(), key).await;
    let tx = check_purchase(&purchase, from).await;
    assert!(
        chain
            .receipt(tx.parse::<B256>().expect("a transaction hash"))
            .await
            .is_some()
    );
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
    assert_eq!(chain.balance(pay_to()).await, U256::from(ARTICLE_PRICE));
    let sent =
        workspace_tests::pay::decode_b64_json(purchase.payment_header.as_str().expect("X-PAYMENT"));
    assert_eq!(sent["x402Version"], 1);
}

#[tokio::test]
async fn server_with_rpc_url_and_settler_key_settles_on_chain_itself() {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |c| {
        c.facilitator.facilitator_token = Some(FACILITATOR_TOKEN.into());
    })
    .await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    let purchase = buy(Client::JsV2, &server.article_url(), key).await;
    let tx = check_purchase(&purchase, from).await;
    assert!(
        chain
            .receipt(tx.parse::<B256>().expect("a transaction hash"))
            .await
            .is_some()
    );
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
    assert_eq!(chain.balance(pay_to()).await, U256::from(ARTICLE_PRICE));
    // The same server is a facilitator for others, behind its token (nobody else spends the relayer's gas).
    let anonymous = http()
        .get(format!("{}/facilitator/supported", server.url))
        .send()
        .await
        .expect("GET");
    assert_eq!(anonymous.status(), 401);
    let supported: Value = http()
        .get(format!("{}/facilitator/supported", server.url))
        .bearer_auth(FACILITATOR_TOKEN)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        supported["kinds"][0]["network"],
        format!("eip155:{CHAIN_ID}"),
        "{supported}"
    );
}

#[tokio::test]
async fn a_buyer_whose_connection_dropped_resends_and_gets_the_same_receipt_with_one_transfer() {
    use tokio::io::AsyncWriteExt as _;
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |c| {
        c.registry.api_token = Some("op".into());
    })
    .await;
    let (key, from) = payer(5);
    chain.mint(from, 1_000_000).await;
    let required = offer(&server.article_url()).await;
    let header = pay_v2(key, &required, &Knobs::default());

    // Send the paid request on a raw connection and hang up before any answer.
    let authority = server.url.trim_start_matches("http://").to_owned();
    let path = server.article_url().replacen(&server.url, "", 1);
    let mut tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nPAYMENT-SIGNATURE: {header}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("send");
    drop(tcp);

    // The buyer resends the identical header (the official clients' retry): the settlement either finished
    // meanwhile (the article, from the record) or is still running (settlement_pending: try again).
    let mut delivered = None;
    for _ in 0..100 {
        let resp = server.pay(&header).await;
        if resp.status() == 200 {
            delivered = Some(resp.json::<Value>().await.expect("article"));
            break;
        }
        assert_eq!(resp.status(), 402);
        let body: Value = resp.json().await.expect("402 body");
        assert_eq!(body["error"], "settlement_pending", "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let delivered = delivered.expect("the article after the dropped request");
    let again: Value = server.pay(&header).await.json().await.expect("article");
    assert_eq!(again["receipt"], delivered["receipt"]);
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE),
        "exactly one transfer"
    );
    let rows = server.settlements("op").await;
    assert_eq!(rows["totals"]["settled"], 1, "{rows}");
}

#[tokio::test]
async fn a_settlement_not_mined_in_time_is_pending_then_the_resend_delivers_with_one_transfer() {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |c| {
        c.payment.rpc_receipt_timeout_secs = 1;
        c.registry.api_token = Some("op".into());
    })
    .await;
    let (key, from) = payer(6);
    chain.mint(from, 1_000_000).await;
    let required = offer(&server.article_url()).await;
    let header = pay_v2(key, &required, &Knobs::default());

    // Blocks stop: the settlement is broadcast, its receipt does not come in time.
    chain
        .rpc
        .call("evm_setAutomine", serde_json::json!([false]))
        .await;
    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 402);
    let pending = receipt_of(&resp);
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    let tx = pending["transaction"]
        .as_str()
        .expect("the hash")
        .to_owned();
    assert_eq!(tx.len(), 66, "{pending}");
    let body: Value = resp.json().await.expect("402 body");
    assert!(body.get("article").is_none(), "no content before the money");

    // The resend while it is still in the mempool: pending again, nothing broadcast a second time.
    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 402);

    // Mined: the resend gets the article with the same transaction; exactly one transfer.
    chain.rpc.call("evm_mine", serde_json::json!([])).await;
    chain
        .rpc
        .call("evm_setAutomine", serde_json::json!([true]))
        .await;
    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 200);
    let receipt = receipt_of(&resp);
    assert_eq!(receipt["transaction"], tx);
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
    let rows = server.settlements("op").await;
    assert_eq!(rows["totals"]["settled"], 1, "{rows}");
    assert_eq!(rows["totals"]["unknown"], 0, "{rows}");
    assert_eq!(rows["settlements"][0]["resolved_from"], "unknown", "{rows}");
}

/// The server is killed (SIGKILL) after it broadcast a settlement's `transferWithAuthorization` and before
/// its receipt came: the payment's record is left `in_flight`, marked as settling but without the
/// transaction's hash, and the buyer's request dies unanswered. The transaction is then mined. A restarted
/// server on the same database
/// answers `settlement_pending` while the record may still belong to a live request; once it is stale
/// (75 s here: the 5 s receipt wait, five 2 s JSON-RPC calls and a minute) the buyer's resend (or the
/// background reconciler) finds the transaction that used the authorization from the token's own
/// `AuthorizationUsed` log: the article is delivered with that transaction, exactly one transfer moved, and
/// the relayer never broadcast a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_after_broadcasting_a_settlement_delivers_it_after_restart_with_one_transfer()
 {
    killed_after_broadcasting(ChildDir::new("onchain-kill"), Method::Eip3009).await;
}

/// The same for a payment in `exact` over Permit2 on PostgreSQL: Permit2 logs no use of a nonce, so the
/// restarted server finds the settlement by the proxy call that moved the payer's tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_server_killed_after_broadcasting_a_permit2_settlement_delivers_it_after_restart_with_one_transfer()
 {
    killed_after_broadcasting(
        ChildDir::on_postgres("onchain-kill-permit2-pg").await,
        Method::Permit2,
    )
    .await;
}

/// How the buyer's tokens move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Eip3009,
    Permit2,
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_server_killed_after_broadcasting_a_settlement_delivers_it_after_restart_with_one_transfer()
 {
    killed_after_broadcasting(
        ChildDir::on_postgres("onchain-kill-pg").await,
        Method::Eip3009,
    )
    .await;
}

async fn killed_after_broadcasting(dir: ChildDir, method: Method) {
    let (chain, chain_id) = match method {
        Method::Eip3009 => (Chain::start().await, CHAIN_ID),
        Method::Permit2 => {
            let chain = Chain::start_as(PERMIT2_CHAIN_ID).await;
            chain.install_permit2().await;
            (chain, PERMIT2_CHAIN_ID)
        }
    };
    let (key, from) = payer(7);
    chain.mint(from, 1_000_000).await;
    if method == Method::Permit2 {
        chain.approve_permit2(chain.usdc, from).await;
    }
    let sent_before = relayer_transactions(&chain).await;
    let methods = match method {
        Method::Eip3009 => "eip3009",
        Method::Permit2 => "permit2",
    };
    let flags = crate::common::onchain_flags(
        &chain,
        chain_id,
        methods,
        &[
            "--rpc-receipt-timeout-secs",
            "5",
            "--rpc-timeout-secs",
            "2",
            "--payment-stale-after-secs",
            "10",
            "--api-token",
            "op",
        ],
    );
    let first = ChildServer::start(&dir, &flags);
    let required = offer(&first.article_url()).await;
    let header = match method {
        Method::Eip3009 => pay_v2(key, &required, &Knobs::default()),
        Method::Permit2 => pay_permit2(key, &required, |_| {}),
    };

    // Blocks stop: the settlement waits in the mempool for its receipt, and the server is killed there.
    chain.rpc.call("evm_setAutomine", json!([false])).await;
    let lost = tokio::spawn({
        let (url, header) = (first.article_url(), header.clone());
        async move {
            http()
                .get(url)
                .header("PAYMENT-SIGNATURE", header)
                .send()
                .await
        }
    });
    let broadcast_by = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let pool = chain.rpc.call("txpool_status", json!([])).await;
        if quantity(&pool["pending"]) > U256::ZERO {
            break;
        }
        assert!(
            std::time::Instant::now() < broadcast_by,
            "no settlement broadcast; the server's log:\n{}",
            first.log_tail()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    first.kill();
    let lost = lost.await.expect("the buyer's task");
    assert!(
        lost.is_err(),
        "the killed server answered: {:?}",
        lost.map(|r| r.status())
    );
    chain.rpc.call("evm_mine", json!([])).await;
    chain.rpc.call("evm_setAutomine", json!([true])).await;
    let block = chain
        .rpc
        .call("eth_getBlockByNumber", json!(["latest", false]))
        .await;
    let mined = block["transactions"][0]
        .as_str()
        .expect("the settlement, mined")
        .to_owned();
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(chain.balance(from).await, U256::from(1_000_000u64) - price);

    // Restarted on the same database. The buyer resends every second until the article comes (bounded).
    let restarted = ChildServer::start(&dir, &flags);
    let started = std::time::Instant::now();
    let mut pending_answers = 0;
    let delivered = loop {
        let resp = http()
            .get(restarted.article_url())
            .header("PAYMENT-SIGNATURE", &header)
            .send()
            .await
            .expect("the restarted server answers");
        if resp.status() == 200 {
            break resp;
        }
        assert_eq!(resp.status(), 402, "{}", restarted.log_tail());
        let receipt = receipt_of(&resp);
        assert_eq!(
            receipt["errorReason"],
            "settlement_pending",
            "{receipt}; the server's log:\n{}",
            restarted.log_tail()
        );
        pending_answers += 1;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(150),
            "not delivered within 150 s; the server's log:\n{}",
            restarted.log_tail()
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    assert!(
        pending_answers > 0,
        "delivered before the record was stale: the dead request's record was not respected"
    );
    let receipt = receipt_of(&delivered);
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["transaction"], mined.as_str(), "{receipt}");
    let body: Value = delivered.json().await.expect("the article");
    assert!(body["article"]["content"].is_string(), "{body}");

    // Exactly one transfer, one transaction from the relayer, one settlement in the log.
    assert_eq!(chain.balance(from).await, U256::from(1_000_000u64) - price);
    assert_eq!(
        relayer_transactions(&chain).await,
        sent_before + U256::from(1)
    );
    let rows = settlements_at(&restarted.url, "op").await;
    assert_eq!(rows["totals"]["settled"], 1, "{rows}");
    assert_eq!(
        rows["settlements"][0]["transaction"],
        mined.as_str(),
        "{rows}"
    );
}

/// Somebody else broadcast the buyer's signed authorization before the buyer presented it (another
/// facilitator the buyer's first attempt reached, anybody watching the mempool): the money moved to payTo
/// exactly as signed. The server finds that transaction from FiatToken's own `AuthorizationUsed` log and
/// delivers the article with it: its relayer sends nothing, one transfer moved. The same authorization for
/// another resource is still refused (the payment store).
#[tokio::test]
async fn an_authorization_somebody_else_broadcast_first_is_delivered_with_that_transaction() {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |_| {}).await;
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    let header = pay_v2(key, &offer(&server.article_url()).await, &Knobs::default());
    let payload = decode_b64_json(&header);
    let theirs = broadcast_elsewhere(&chain, &payload, &payload["accepted"]).await;
    let paid = U256::from(1_000_000 - ARTICLE_PRICE);
    assert_eq!(chain.balance(from).await, paid);
    let sent_before = relayer_transactions(&chain).await;

    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(receipt_of(&resp)["transaction"], theirs.as_str());
    let body: Value = resp.json().await.expect("article");
    assert!(body["article"]["content"].is_string(), "{body}");
    assert_balance_and_nothing_sent(&chain, from, paid, sent_before).await;

    let other = server
        .pay_at(&format!("{}&copy=2", server.article_url()), &header)
        .await;
    assert_eq!(other.status(), 402);
    let body: Value = other.json().await.expect("402 body");
    assert_eq!(body["error"], "invalid_exact_evm_nonce_already_used");
}

/// A payer who cancelled the authorization (EIP-3009 `cancelAuthorization`, on the real FiatTokenV2_2)
/// before the server settled it: 402 with "nonce already used" and no article, nothing sent, no money moved.
#[tokio::test]
async fn an_authorization_its_payer_cancelled_is_refused_and_moves_nothing() {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |_| {}).await;
    refused_after_a_cancellation(&chain, &server, 0, 1).await;
}

/// A payer signs a new authorization under a nonce they cancelled long before (more blocks ago than the
/// server's log lookback): nothing of the server's can have used it, and it is no payment made within its
/// window. Refused for good at once, and again on the resend, instead of `settlement_pending` (which would
/// keep the payment reconciled from the chain until it expired, for free); nothing sent, no money moved.
#[tokio::test]
async fn an_authorization_under_a_nonce_used_before_the_lookback_is_refused_at_once() {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |c| c.payment.rpc_log_lookback_blocks = 10).await;
    refused_after_a_cancellation(&chain, &server, 100, 2).await;
}

/// The same across the deployment's boundaries: copies of such a payment sent at once to two instances on
/// one database. Every copy is refused with "nonce already used" (or answered `settlement_pending` while
/// another copy holds the record, and refused on the resend); nothing is sent, no money moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_on_two_instances_of_a_payment_under_a_nonce_used_long_ago_are_all_refused()
 {
    let chain = Chain::start().await;
    let (_dir, a, b) = RefServer::deployment_on(&chain, "old-nonce", |c| {
        c.payment.rpc_log_lookback_blocks = 10
    })
    .await;
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    let nonce = B256::repeat_byte(0x43);
    chain
        .transact(chain.usdc, cancel_calldata(key, chain.usdc, nonce))
        .await;
    chain.mine(100).await;
    let knobs = Knobs {
        nonce: Some(nonce),
        ..Knobs::default()
    };
    let header = pay_v2(key, &offer(&a.article_url()).await, &knobs);
    let sent_before = relayer_transactions(&chain).await;
    let copies = [&a, &b, &a, &b].map(|server| {
        let (url, header) = (server.article_url(), header.clone());
        tokio::spawn(async move { get_paid(&url, &header).await })
    });
    for (copy, server) in copies.into_iter().zip([&a, &b, &a, &b]) {
        let mut body: Value = copy.await.expect("task").json().await.expect("402 body");
        if body["error"] == "settlement_pending" {
            body = server.pay(&header).await.json().await.expect("402 body");
        }
        assert_eq!(
            body["error"], "invalid_exact_evm_nonce_already_used",
            "{body}"
        );
        assert!(body.get("article").is_none(), "{body}");
    }
    assert_balance_and_nothing_sent(&chain, from, U256::from(1_000_000u64), sent_before).await;
}

/// A payer cancels a nonce, `blocks` empty blocks are mined, then the payer pays `server`'s article under
/// that nonce, `sends` times: each is refused with "nonce already used" and no article; nothing is sent and
/// no money moves.
async fn refused_after_a_cancellation(
    chain: &Chain,
    server: &RefServer,
    blocks: u64,
    sends: usize,
) {
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    let nonce = B256::repeat_byte(0x42);
    chain
        .transact(chain.usdc, cancel_calldata(key, chain.usdc, nonce))
        .await;
    if blocks > 0 {
        chain.mine(blocks).await;
    }
    let knobs = Knobs {
        nonce: Some(nonce),
        ..Knobs::default()
    };
    let sent_before = relayer_transactions(chain).await;
    for _ in 0..sends {
        refused(server, key, &knobs, "invalid_exact_evm_nonce_already_used").await;
    }
    assert_balance_and_nothing_sent(chain, from, U256::from(1_000_000u64), sent_before).await;
}

/// The same case across the deployment's boundaries: two instances on one database, and copies of the
/// payment sent to both at once. Every copy is answered with the transaction that paid (or
/// `settlement_pending` while another copy holds the record, then that transaction on the resend); the
/// relayers send nothing and one transfer moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_on_two_instances_of_a_payment_broadcast_elsewhere_get_its_transaction() {
    let chain = Chain::start().await;
    let (_dir, a, b) = RefServer::deployment_on(&chain, "broadcast-elsewhere", |_| {}).await;
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    let header = pay_v2(key, &offer(&a.article_url()).await, &Knobs::default());
    let payload = decode_b64_json(&header);
    let theirs = broadcast_elsewhere(&chain, &payload, &payload["accepted"]).await;
    let sent_before = relayer_transactions(&chain).await;

    let copies = [&a, &b, &a, &b].map(|server| {
        let (url, header) = (server.article_url(), header.clone());
        tokio::spawn(async move { get_paid(&url, &header).await })
    });
    for (copy, server) in copies.into_iter().zip([&a, &b, &a, &b]) {
        let mut resp = copy.await.expect("task");
        if resp.status() == 402 {
            if !resp.headers().contains_key("payment-response") {
                panic!(
                    "a 402 without a receipt: {}",
                    resp.text().await.unwrap_or_default()
                );
            }
            assert_eq!(receipt_of(&resp)["errorReason"], "settlement_pending");
            resp = server.pay(&header).await;
        }
        assert_eq!(resp.status(), 200);
        assert_eq!(receipt_of(&resp)["transaction"], theirs.as_str());
    }
    let one_transfer = U256::from(1_000_000 - ARTICLE_PRICE);
    assert_balance_and_nothing_sent(&chain, from, one_transfer, sent_before).await;
}
