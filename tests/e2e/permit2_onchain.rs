//! `exact` over Permit2 and `upto` settled on anvil: Permit2 from `@uniswap/v4-periphery`'s runtime and the
//! project's x402 proxies at their canonical addresses, FiatTokenV2_2 and a plain ERC-20, on chain 84532
//! (Permit2 cannot be tested on 31337). The reference server settles on chain itself; the official v2
//! client pays it.

use alloy_primitives::{Address, B256, U256};
use serde_json::Value;
use workspace_tests::chain::{Chain, DEV_KEYS, PERMIT2_CHAIN_ID, TOKEN_NAME, TOKEN_VERSION};
use workspace_tests::clients::{Client, buy};
use workspace_tests::pay::decode_b64_json;

use crate::common::{ARTICLE_PRICE, RefServer, check_purchase, pay_to, payer, receipt_of};

/// Chain 84532 with USDC, Permit2, the proxies and a plain token (returned).
async fn chain() -> (Chain, Address) {
    let chain = Chain::start_as(PERMIT2_CHAIN_ID).await;
    let plain = chain.install_permit2().await;
    (chain, plain)
}

/// The reference server settling on `chain` itself (relayer: dev account #1), selling articles over
/// `methods` (`--transfer-methods`), then adjusted.
async fn server(
    chain: &Chain,
    methods: &[&str],
    adjust: impl FnOnce(&mut reference_server::config::Config),
) -> RefServer {
    let usdc = chain.usdc.to_checksum(None);
    let rpc_url = chain.anvil.url.clone();
    let methods: Vec<String> = methods.iter().map(|m| m.to_string()).collect();
    RefServer::start(move |c| {
        c.payment.network = format!("eip155:{PERMIT2_CHAIN_ID}");
        c.payment.asset = Some(usdc);
        c.payment.asset_name = Some(TOKEN_NAME.into());
        c.payment.asset_version = Some(TOKEN_VERSION.into());
        c.payment.rpc_url = Some(rpc_url);
        c.payment.settler_key = Some(DEV_KEYS[1].into());
        c.payment.transfer_methods = methods;
        adjust(c);
    })
    .await
}

/// The Permit2 authorization a purchase sent.
fn permit_of(purchase: &workspace_tests::clients::Purchase) -> Value {
    let sent = decode_b64_json(purchase.payment_header.as_str().expect("payment header"));
    sent["payload"]["permit2Authorization"].clone()
}

fn hash_of(receipt: &Value) -> B256 {
    receipt["transaction"]
        .as_str()
        .expect("a transaction")
        .parse()
        .expect("a transaction hash")
}

#[tokio::test]
async fn the_official_client_pays_an_article_over_permit2_on_chain_and_a_resend_moves_nothing_more()
{
    let (chain, _) = chain().await;
    let server = server(&chain, &["permit2"], |_| {}).await;
    let (key, from) = payer(2);
    chain.mint(from, 1_000_000).await;
    chain.approve_permit2(chain.usdc, from).await;
    let before = (chain.balance(from).await, chain.balance(pay_to()).await);

    let purchase = buy(Client::JsV2, &server.article_url(), key).await;
    let tx = check_purchase(&purchase, from).await;
    let auth = permit_of(&purchase);
    assert_eq!(
        crate::common::address_in(&auth["spender"]),
        x402_tower::scheme::EXACT_PERMIT2_PROXY
    );
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(chain.balance(from).await, before.0 - price);
    assert_eq!(chain.balance(pay_to()).await, before.1 + price);
    let mined = chain
        .receipt(tx.parse().expect("hash"))
        .await
        .expect("mined");
    assert_eq!(
        crate::common::address_in(&mined["to"]),
        x402_tower::scheme::EXACT_PERMIT2_PROXY,
        "settled through the exact proxy"
    );

    // The buyer lost the answer and resends: the same receipt, nothing moves again.
    let header = purchase.payment_header.as_str().expect("payment header");
    let resp = server.pay(header).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(receipt_of(&resp)["transaction"], tx);
    assert_eq!(chain.balance(from).await, before.0 - price);
}

#[tokio::test]
async fn a_buyer_who_never_approved_permit2_gets_412_and_pays_nothing() {
    let (chain, _) = chain().await;
    let server = server(&chain, &["permit2"], |_| {}).await;
    let (key, from) = payer(3);
    chain.mint(from, 1_000_000).await;
    let purchase = buy(Client::JsV2, &server.article_url(), key).await;
    assert_eq!(purchase.status, 412, "{}", purchase.body);
    assert!(
        purchase.body.contains("permit2_allowance_required"),
        "{}",
        purchase.body
    );
    assert_eq!(chain.balance(from).await, U256::from(1_000_000u64));
}

#[tokio::test]
async fn the_official_client_buys_registry_records_with_upto_and_is_charged_per_record_returned() {
    let (chain, _) = chain().await;
    let per_record = 100u64;
    let server = server(&chain, &["eip3009"], |c| {
        c.registry.export_price = per_record
    })
    .await;
    let (key, from) = payer(4);
    chain.mint(from, 1_000_000).await;
    chain.approve_permit2(chain.usdc, from).await;
    let relayer = workspace_tests::chain::address_of(DEV_KEYS[1]);
    let start = (chain.balance(from).await, chain.balance(pay_to()).await);

    // Three records of the five seeded: signed for ten, charged three.
    let purchase = buy(
        Client::JsV2,
        &format!("{}/api/v3/assets/export/?limit=10&offset=2", server.url),
        key,
    )
    .await;
    assert_eq!(purchase.status, 200, "{}", purchase.body);
    let auth = permit_of(&purchase);
    assert_eq!(auth["permitted"]["amount"], (10 * per_record).to_string());
    assert_eq!(
        crate::common::address_in(&auth["witness"]["facilitator"]),
        relayer,
        "the relayer settles"
    );
    let charged = U256::from(3 * per_record);
    assert_eq!(purchase.receipt["amount"], charged.to_string());
    let mined = chain
        .receipt(hash_of(&purchase.receipt))
        .await
        .expect("mined");
    assert_eq!(
        crate::common::address_in(&mined["to"]),
        x402_tower::scheme::UPTO_PERMIT2_PROXY
    );
    assert_eq!(chain.balance(from).await, start.0 - charged);
    assert_eq!(chain.balance(pay_to()).await, start.1 + charged);

    // An empty page: charged nothing, no transaction.
    let sent = crate::common::relayer_transactions(&chain).await;
    let purchase = buy(
        Client::JsV2,
        &format!("{}/api/v3/assets/export/?limit=10&offset=100", server.url),
        key,
    )
    .await;
    assert_eq!(purchase.status, 200, "{}", purchase.body);
    assert_eq!(purchase.receipt["amount"], "0", "{}", purchase.receipt);
    assert_eq!(chain.balance(from).await, start.0 - charged);
    assert_eq!(crate::common::relayer_transactions(&chain).await, sent);
}

alloy_sol_types::sol! {
    /// Permit2: the caller cancels its unordered nonces of `mask` in word `wordPos`.
    function invalidateUnorderedNonces(uint256 wordPos, uint256 mask);
}

/// Pays the article with a Permit2 payment signed by the workspace's client after `tweak`: 402 with
/// `reason`, no article.
async fn refused_permit2(
    server: &RefServer,
    key: &str,
    tweak: impl FnOnce(&mut x402_tower::scheme::Permit2Payment),
    reason: &str,
) {
    let required = crate::common::offer(&server.article_url()).await;
    let header = workspace_tests::pay::pay_permit2(key, &required, tweak);
    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 402, "{reason}");
    let body: Value = resp.json().await.expect("402 body");
    assert_eq!(body["error"], reason, "{body}");
    assert!(body.get("article").is_none(), "{body}");
}

/// A wrong spender, a witness naming another recipient, an expired deadline and a nonce the payer
/// cancelled in Permit2 each get the official error; nothing moves and the relayer sends nothing.
#[tokio::test]
async fn permit2_payments_the_contracts_would_refuse_get_the_official_error_and_move_nothing() {
    use alloy_sol_types::SolCall as _;
    let (chain, _) = chain().await;
    let server = server(&chain, &["permit2"], |_| {}).await;
    let (key, from) = payer(5);
    chain.mint(from, 1_000_000).await;
    chain.approve_permit2(chain.usdc, from).await;
    let sent = crate::common::relayer_transactions(&chain).await;

    refused_permit2(
        &server,
        key,
        |p| p.spender = x402_tower::scheme::UPTO_PERMIT2_PROXY,
        "invalid_permit2_spender",
    )
    .await;
    refused_permit2(
        &server,
        key,
        |p| p.to = from,
        "invalid_permit2_recipient_mismatch",
    )
    .await;
    refused_permit2(
        &server,
        key,
        |p| p.deadline = U256::from(workspace_tests::pay::now() - 1),
        "permit2_deadline_expired",
    )
    .await;

    // The payer cancels the nonce in Permit2 (its own transaction), then presents the payment.
    let nonce = U256::from(0x1234_5678u64);
    let cancel = invalidateUnorderedNoncesCall {
        wordPos: nonce >> 8,
        mask: U256::from(1u8) << (0x78usize),
    };
    chain
        .transact_from(from, x402_tower::scheme::PERMIT2, cancel.abi_encode())
        .await;
    refused_permit2(&server, key, |p| p.nonce = nonce, "permit2_invalid_nonce").await;

    crate::common::assert_balance_and_nothing_sent(&chain, from, U256::from(1_000_000u64), sent)
        .await;
}

/// Somebody settled the buyer's signed permit through the exact proxy first: the money moved exactly as
/// signed. Permit2 logs no nonce, so the server finds that transaction among the payer's transfers to
/// payTo by its call to the proxy, and delivers with it; its relayer sends nothing.
#[tokio::test]
async fn a_permit2_payment_somebody_else_settled_first_is_delivered_with_that_transaction() {
    let (chain, _) = chain().await;
    let server = server(&chain, &["permit2"], |_| {}).await;
    let (key, from) = payer(6);
    chain.mint(from, 1_000_000).await;
    chain.approve_permit2(chain.usdc, from).await;
    let required = crate::common::offer(&server.article_url()).await;
    let header = workspace_tests::pay::pay_permit2(key, &required, |_| {});
    let payload = decode_b64_json(&header);
    let theirs = crate::common::broadcast_elsewhere(&chain, &payload, &payload["accepted"]).await;
    let sent = crate::common::relayer_transactions(&chain).await;

    let resp = server.pay(&header).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(receipt_of(&resp)["transaction"], theirs.as_str());
    let one_transfer = U256::from(1_000_000 - ARTICLE_PRICE);
    crate::common::assert_balance_and_nothing_sent(&chain, from, one_transfer, sent).await;
}

/// Two instances of one deployment on one PostgreSQL database, each sent the same Permit2 payment twice at
/// once: every copy gets the article with the one settlement; one transfer, one transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_two_instances_settle_one_permit2_payment_once() {
    let (chain, _) = chain().await;
    let (key, from) = payer(7);
    chain.mint(from, 1_000_000).await;
    chain.approve_permit2(chain.usdc, from).await;
    let dir = crate::common::ChildDir::on_postgres("permit2-two-instances").await;
    let flags = crate::common::onchain_flags(&chain, PERMIT2_CHAIN_ID, "permit2", &[]);
    let a = crate::common::ChildServer::start(&dir, &flags);
    let b = crate::common::ChildServer::start(&dir, &flags);
    let required = crate::common::offer(&a.article_url()).await;
    let header = workspace_tests::pay::pay_permit2(key, &required, |_| {});
    let sent = crate::common::relayer_transactions(&chain).await;

    let urls = [
        a.article_url(),
        b.article_url(),
        a.article_url(),
        b.article_url(),
    ];
    let copies = urls.clone().map(|url| {
        let header = header.clone();
        tokio::spawn(async move { crate::common::get_paid(&url, &header).await })
    });
    let mut transactions = std::collections::BTreeSet::new();
    for (copy, url) in copies.into_iter().zip(urls) {
        let mut resp = copy.await.expect("task");
        // A copy that met another in flight is told to come back (settlement_pending); it does.
        for _ in 0..30 {
            if resp.status() != 402 {
                break;
            }
            assert_eq!(
                receipt_of(&resp)["errorReason"],
                "settlement_pending",
                "{}",
                a.log_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            resp = crate::common::get_paid(&url, &header).await;
        }
        assert_eq!(resp.status(), 200, "{}", b.log_tail());
        transactions.insert(receipt_of(&resp)["transaction"].to_string());
    }
    assert_eq!(transactions.len(), 1, "{transactions:?}");
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
    assert_eq!(
        crate::common::relayer_transactions(&chain).await,
        sent + U256::from(1u8)
    );
}

/// A token without EIP-3009 (an OpenZeppelin ERC-20) is sold over Permit2 alone: the official client pays
/// an article with it, and exactly the price moves.
#[tokio::test]
async fn an_article_priced_in_a_token_without_eip3009_is_bought_over_permit2() {
    let (chain, plain) = chain().await;
    let server = server(&chain, &["permit2"], |c| {
        c.payment.asset = Some(plain.to_checksum(None));
        c.payment.asset_name = Some("Plain Dollar".into());
        c.payment.asset_version = Some("1".into());
    })
    .await;
    let (key, from) = payer(9);
    chain.mint_plain(plain, from, 1_000_000).await;
    chain.approve_permit2(plain, from).await;

    let purchase = buy(Client::JsV2, &server.article_url(), key).await;
    check_purchase(&purchase, from).await;
    assert_eq!(
        permit_of(&purchase)["permitted"]["token"]
            .as_str()
            .unwrap()
            .parse::<Address>()
            .unwrap(),
        plain
    );
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(
        chain.balance_of(plain, from).await,
        U256::from(1_000_000u64) - price
    );
    assert_eq!(chain.balance_of(plain, pay_to()).await, price);
    assert_eq!(chain.balance(from).await, U256::ZERO, "no USDC moved");
}

/// A buyer who never approved Permit2 and whose client can read the chain signs an EIP-2612 permit
/// (`eip2612GasSponsoring`, declared by the server): the relayer applies it in the settlement
/// (`settleWithPermit`), the buyer sends no transaction, exactly the price moves, for an article (`exact`) and
/// for registry records (`upto`).
#[tokio::test]
async fn a_buyer_without_allowance_pays_with_an_eip2612_permit_the_relayer_applies() {
    let (chain, _) = chain().await;
    let server = server(&chain, &["permit2"], |c| c.registry.export_price = 100).await;
    let offered = crate::common::offer(&server.article_url()).await;
    assert!(
        offered["extensions"]["eip2612GasSponsoring"]["info"].is_object(),
        "{offered}"
    );
    let (key, from) = payer(9);
    chain.mint(from, 1_000_000).await;
    let nonce_before = chain
        .rpc
        .call(
            "eth_getTransactionCount",
            serde_json::json!([from, "latest"]),
        )
        .await;

    let purchase =
        workspace_tests::clients::buy_reading_chain(&server.article_url(), key, &chain.anvil.url)
            .await;
    check_purchase(&purchase, from).await;
    let sent = decode_b64_json(purchase.payment_header.as_str().expect("payment header"));
    let info = &sent["extensions"]["eip2612GasSponsoring"]["info"];
    assert_eq!(info["amount"], ARTICLE_PRICE.to_string(), "{sent}");
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(chain.balance(from).await, U256::from(1_000_000u64) - price);
    assert_eq!(
        selector_of(&chain, &purchase.receipt).await,
        "settleWithPermit((uint256,uint256,bytes32,bytes32,uint8),((address,uint256),uint256,uint256),address,(address,uint256),bytes)",
    );

    // Registry records with upto, the permit for the maximum: charged for what was returned.
    let records = workspace_tests::clients::buy_reading_chain(
        &format!("{}/api/v3/assets/export/?limit=10&offset=3", server.url),
        key,
        &chain.anvil.url,
    )
    .await;
    assert_eq!(records.status, 200, "{}", records.body);
    assert_eq!(records.receipt["amount"], "200", "{}", records.receipt);
    assert_eq!(
        selector_of(&chain, &records.receipt).await,
        "settleWithPermit((uint256,uint256,bytes32,bytes32,uint8),((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)",
    );
    assert_eq!(
        chain.balance(from).await,
        U256::from(1_000_000u64) - price - U256::from(200u64)
    );
    let nonce_after = chain
        .rpc
        .call(
            "eth_getTransactionCount",
            serde_json::json!([from, "latest"]),
        )
        .await;
    assert_eq!(nonce_before, nonce_after, "the buyer sent no transaction");
}

/// The signature of the function the receipt's transaction called, among the proxies' four.
async fn selector_of(chain: &Chain, receipt: &Value) -> &'static str {
    const FUNCTIONS: [&str; 4] = [
        "settle(((address,uint256),uint256,uint256),address,(address,uint256),bytes)",
        "settle(((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)",
        "settleWithPermit((uint256,uint256,bytes32,bytes32,uint8),((address,uint256),uint256,uint256),address,(address,uint256),bytes)",
        "settleWithPermit((uint256,uint256,bytes32,bytes32,uint8),((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)",
    ];
    let tx = chain
        .rpc
        .call(
            "eth_getTransactionByHash",
            serde_json::json!([hash_of(receipt)]),
        )
        .await;
    let input = tx["input"].as_str().expect("input").to_owned();
    FUNCTIONS
        .into_iter()
        .find(|f| input.starts_with(&alloy_primitives::keccak256(f.as_bytes()).to_string()[..10]))
        .unwrap_or_else(|| panic!("not a proxy call: {}", &input[..10]))
}

/// A contract wallet (EIP-1271: it accepts its owner's signatures) pays over Permit2: the server leaves the
/// signature, which is not the wallet's own key's, to the chain, where Permit2 asks the wallet. A signature by
/// somebody else is refused by the wallet in the simulation, and nothing moves. The same wallet pays over
/// EIP-3009 too.
#[tokio::test]
async fn a_contract_wallet_pays_over_permit2_with_its_owners_signature() {
    let (chain, _) = chain().await;
    let server = server(&chain, &["permit2"], |_| {}).await;
    let (owner_key, owner) = payer(4);
    let wallet: Address = "0x00000000000000000000000000000000c0de1271"
        .parse()
        .unwrap();
    let code = chain.erc1271_wallet_code(owner).await;
    chain.set_code(wallet, &code).await;
    // Its owner lives in storage slot 0, which anvil_setCode does not copy.
    chain
        .rpc
        .call(
            "anvil_setStorageAt",
            serde_json::json!([wallet, "0x0", owner.into_word()]),
        )
        .await;
    chain.mint(wallet, 1_000_000).await;
    // The wallet approves Permit2 (its own transaction, sent here by impersonation).
    chain
        .rpc
        .call("anvil_impersonateAccount", serde_json::json!([wallet]))
        .await;
    chain
        .rpc
        .call(
            "anvil_setBalance",
            serde_json::json!([wallet, "0xde0b6b3a7640000"]),
        )
        .await;
    chain.approve_permit2(chain.usdc, wallet).await;
    let required = crate::common::offer(&server.article_url()).await;

    let (stranger_key, _) = payer(5);
    let forged = workspace_tests::pay::pay_permit2(stranger_key, &required, |p| p.from = wallet);
    let resp = server.pay(&forged).await;
    assert_eq!(resp.status(), 402);
    let body: Value = resp.json().await.expect("402 body");
    assert_eq!(body["error"], "invalid_permit2_signature", "{body}");
    assert_eq!(chain.balance(wallet).await, U256::from(1_000_000u64));

    let header = workspace_tests::pay::pay_permit2(owner_key, &required, |p| p.from = wallet);
    let resp = server.pay(&header).await;
    let status = resp.status();
    assert_eq!(status, 200, "{}", resp.text().await.unwrap_or_default());
    assert_eq!(
        chain.balance(wallet).await,
        U256::from(1_000_000 - ARTICLE_PRICE)
    );
    assert_eq!(chain.balance(pay_to()).await, U256::from(ARTICLE_PRICE));

    // The same wallet pays over EIP-3009 (FiatToken asks the wallet too).
    let usdc_server = self::server(&chain, &["eip3009"], |_| {}).await;
    let required = crate::common::offer(&usdc_server.article_url()).await;
    let knobs = workspace_tests::pay::Knobs {
        from: Some(wallet),
        ..Default::default()
    };
    let resp = usdc_server
        .pay(&workspace_tests::pay::pay_v2(owner_key, &required, &knobs))
        .await;
    let status = resp.status();
    assert_eq!(status, 200, "{}", resp.text().await.unwrap_or_default());
    assert_eq!(
        chain.balance(wallet).await,
        U256::from(1_000_000 - 2 * ARTICLE_PRICE)
    );
}

/// An `X402Layer` selling `upto` settled on chain, whose handler reports a charge above the signed maximum:
/// the buyer gets a 500 and nothing is sent or moved (the official core would ask the facilitator to settle
/// it). The same route charging within the maximum settles exactly that.
#[tokio::test]
async fn an_upto_charge_above_the_maximum_is_refused_before_any_transaction() {
    use std::sync::Arc;
    use x402_tower::network::Token;
    use x402_tower::scheme::{Charge, FACILITATOR_ADDRESS};
    use x402_tower::settle::onchain::OnchainSettler;
    use x402_tower::{PaymentEngine, PaymentOffer, Price, X402Layer};

    let (chain, _) = chain().await;
    let settler = OnchainSettler::builder(&chain.anvil.url, DEV_KEYS[1])
        .build()
        .expect("settler");
    let engine = Arc::new(
        PaymentEngine::builder()
            .settler(Arc::new(settler.clone()))
            .build()
            .expect("engine"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let offer = PaymentOffer::new(
        format!("eip155:{PERMIT2_CHAIN_ID}")
            .parse()
            .expect("network"),
        Token::new(chain.usdc, TOKEN_NAME, TOKEN_VERSION, 6),
        pay_to(),
        Price::from(10_000u64),
    )
    .scheme("upto")
    .extra(FACILITATOR_ADDRESS, settler.relayer().to_checksum(None));
    let charging = |amount: u128| {
        move || async move {
            let mut res = axum::response::Response::new(axum::body::Body::from("records"));
            res.extensions_mut().insert(Charge::atomic(amount));
            res
        }
    };
    let layer = X402Layer::builder(&base)
        .offer(offer)
        .engine(engine)
        .build()
        .expect("layer");
    let app = axum::Router::new()
        .route("/over", axum::routing::get(charging(10_001)))
        .route("/within", axum::routing::get(charging(9_999)))
        .route_layer(layer);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (key, from) = payer(5);
    chain.mint(from, 1_000_000).await;
    chain.approve_permit2(chain.usdc, from).await;
    let sent = crate::common::relayer_transactions(&chain).await;
    let over = buy(Client::JsV2, &format!("{base}/over"), key).await;
    assert_eq!(over.status, 500, "{over:?}");
    crate::common::assert_balance_and_nothing_sent(&chain, from, U256::from(1_000_000u64), sent)
        .await;

    let within = buy(Client::JsV2, &format!("{base}/within"), key).await;
    assert_eq!(within.status, 200, "{within:?}");
    assert_eq!(within.receipt["amount"], "9999", "{}", within.receipt);
    assert_eq!(chain.balance(from).await, U256::from(1_000_000u64 - 9_999));
}
