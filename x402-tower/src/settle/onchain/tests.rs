//! The on-chain settler against a scripted JSON-RPC node on 127.0.0.1: relayer nonces under concurrency and
//! cancellation, revert mapping, unknown outcomes. (Real USDC on anvil is exercised by the reference server's
//! interoperability tests.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_consensus::Transaction as _;
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Address, B256, Bytes, U256, address, keccak256};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::token::{AuthorizationCanceled, AuthorizationUsed, Transfer};
use super::*;
use crate::network::{Network, Token};
use crate::offer::PaymentOffer;
use crate::price::Price;
use crate::proto::{
    Authorization, ExactEvmPayload, PaymentPayload, PaymentPayloadV2, PaymentRequirements,
    PaymentRequirementsV2,
};
use crate::scheme::Scheme as _;
use alloy_sol_types::SolEvent as _;

const TOKEN: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const FROM: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
const PAY_TO: Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
const RELAYER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

#[derive(Default)]
struct Node {
    /// The next nonce the node accepts from the relayer; lower nonces are taken by pending transactions.
    pending: u64,
    sent_nonces: Vec<u64>,
    count_reads: usize,
    /// Revert message of every simulation (`eth_call` of the transfer, `eth_estimateGas`).
    revert: Option<&'static str>,
    /// Answer receipts (else `null` forever).
    receipts: bool,
    receipt_status: &'static str,
    authorization_used: bool,
    /// Accept the second send, then never answer it.
    hang_second_send: bool,
    /// `eth_getTransactionByHash` finds sent transactions (they are in the mempool).
    in_mempool: bool,
    /// `eth_gasPrice` and `eth_maxPriorityFeePerGas` calls.
    fee_reads: usize,
    /// The address every sent transaction's signature recovers to.
    signers: Vec<Address>,
    /// Refuse the next send as under the block's base fee.
    refuse_fee: bool,
    /// Never answer `eth_gasPrice` and `eth_maxPriorityFeePerGas`.
    hang_fees: bool,
    /// `eth_chainId` calls.
    chain_id_reads: usize,
    /// Never answer `eth_chainId`.
    hang_chain_id: bool,
    /// Every method called, in order.
    calls: Vec<String>,
    /// The token's log of the authorization's use (`eth_getLogs`): its event, its transaction, and the value
    /// the `Transfer` in that transaction's receipt moved.
    use_log: Option<(B256, B256, u64)>,
    /// The `fromBlock` of every `eth_getLogs`.
    log_ranges: Vec<String>,
    /// Answer `eth_getLogs` with an error (a provider that refuses the range).
    logs_fail: bool,
    /// The block whose transaction used the authorization: `authorizationState` at an earlier block is
    /// false, at this one or later (or `latest`) true. `None`: `authorization_used` at every block.
    used_in_block: Option<u64>,
}

/// The latest block of the scripted node.
const LATEST_BLOCK: u64 = 20_000;

/// A receipt with `status` and the token's `Transfer(FROM, PAY_TO, value)`.
fn transfer_receipt(status: &str, value: u64) -> Value {
    let log = json!({
        "address": TOKEN,
        "topics": [Transfer::SIGNATURE_HASH, FROM.into_word(), PAY_TO.into_word()],
        "data": B256::from(U256::from(value)),
    });
    json!({"status": status, "logs": [log]})
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn answer(node: &Mutex<Node>, hung: &Notify, body: &Value) -> Option<Value> {
    let id = &body["id"];
    let params = &body["params"];
    let ok = |result: Value| Some(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let mut n = node.lock().unwrap();
    n.calls
        .push(body["method"].as_str().unwrap_or("").to_owned());
    match body["method"].as_str().unwrap_or("") {
        "eth_chainId" => {
            n.chain_id_reads += 1;
            if n.hang_chain_id {
                return None;
            }
            ok(json!("0x7a69"))
        }
        "eth_gasPrice" | "eth_maxPriorityFeePerGas" => {
            n.fee_reads += 1;
            if n.hang_fees {
                return None;
            }
            ok(json!("0x3b9aca00"))
        }
        "eth_getTransactionCount" => {
            n.count_reads += 1;
            ok(json!(format!("{:#x}", n.pending)))
        }
        "eth_estimateGas" => match n.revert {
            Some(m) => Some(rpc_error(id, 3, &format!("execution reverted: {m}"))),
            None => ok(json!("0x15f90")),
        },
        "eth_call" => {
            let data = params[0]["data"].as_str().unwrap_or("");
            if data.starts_with("0xe94a0102") {
                let at = match params[1].as_str() {
                    Some("latest") | None => LATEST_BLOCK,
                    Some(number) => {
                        u64::from_str_radix(number.trim_start_matches("0x"), 16).unwrap()
                    }
                };
                let used = n
                    .used_in_block
                    .map_or(n.authorization_used, |block| at >= block);
                let word = B256::with_last_byte(u8::from(used));
                ok(json!(word))
            } else if let Some(m) = n.revert {
                Some(rpc_error(id, 3, &format!("execution reverted: {m}")))
            } else {
                ok(json!("0x"))
            }
        }
        "eth_sendRawTransaction" => {
            let raw: Bytes = params[0].as_str().unwrap().parse().unwrap();
            let tx = alloy_consensus::TxEnvelope::decode_2718(&mut raw.as_ref()).unwrap();
            let nonce = tx.nonce();
            let signed = tx.as_eip1559().expect("an EIP-1559 transaction");
            let signer = signed
                .signature()
                .recover_address_from_prehash(&signed.tx().signature_hash())
                .expect("a recoverable signature");
            n.signers.push(signer);
            if std::mem::take(&mut n.refuse_fee) {
                return Some(rpc_error(
                    id,
                    -32003,
                    "max fee per gas less than block base fee",
                ));
            }
            if nonce < n.pending {
                // What geth answers when a pending transaction already holds the nonce.
                return Some(rpc_error(id, -32000, "replacement transaction underpriced"));
            }
            if nonce > n.pending {
                return Some(rpc_error(id, -32000, "nonce too high"));
            }
            n.pending += 1;
            n.sent_nonces.push(nonce);
            if n.hang_second_send && n.sent_nonces.len() == 2 {
                hung.notify_one();
                return None;
            }
            ok(json!(keccak256(&raw)))
        }
        "eth_getTransactionReceipt" => {
            let hash: B256 = params[0].as_str().unwrap().parse().unwrap();
            if let Some((_, tx, value)) = n.use_log
                && tx == hash
            {
                return ok(transfer_receipt("0x1", value));
            }
            if !n.receipts {
                return ok(Value::Null);
            }
            ok(transfer_receipt(n.receipt_status, 10_000))
        }
        "eth_blockNumber" => ok(json!(format!("{LATEST_BLOCK:#x}"))),
        "eth_getLogs" => {
            let filter = &params[0];
            n.log_ranges
                .push(filter["fromBlock"].as_str().unwrap_or("").to_owned());
            if n.logs_fail {
                return Some(rpc_error(
                    id,
                    -32005,
                    "query returned more than 10000 results",
                ));
            }
            assert_eq!(filter["address"], json!(TOKEN));
            assert_eq!(filter["toBlock"], json!(format!("{LATEST_BLOCK:#x}")));
            let logs: Vec<Value> = n
                .use_log
                .iter()
                .map(|(event, tx, _)| {
                    json!({
                        "address": TOKEN,
                        "topics": [event, FROM.into_word(), filter["topics"][2]],
                        "data": "0x",
                        "transactionHash": tx,
                        "blockNumber": "0x10",
                        "removed": false,
                    })
                })
                .collect();
            ok(json!(logs))
        }
        "eth_getTransactionByHash" => {
            if n.in_mempool {
                ok(json!({"hash": params[0]}))
            } else {
                ok(Value::Null)
            }
        }
        m => Some(rpc_error(id, -32601, &format!("no method {m}"))),
    }
}

async fn node(init: Node) -> (String, Arc<Mutex<Node>>, Arc<Notify>) {
    use axum::routing::post;
    let receipt_status = if init.receipt_status.is_empty() {
        "0x1"
    } else {
        init.receipt_status
    };
    let node = Arc::new(Mutex::new(Node {
        receipt_status,
        ..init
    }));
    let hung = Arc::new(Notify::new());
    let (n, h) = (node.clone(), hung.clone());
    let app = axum::Router::new().route(
        "/",
        post(move |axum::Json(body): axum::Json<Value>| {
            let (n, h) = (n.clone(), h.clone());
            async move {
                match answer(&n, &h, &body) {
                    Some(v) => axum::Json(v),
                    None => std::future::pending().await,
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, node, hung)
}

/// The tests' settler, changed by `with` (a timeout, a fee-quote TTL).
fn settler_with(
    url: &str,
    with: impl FnOnce(OnchainSettlerBuilder) -> OnchainSettlerBuilder,
) -> OnchainSettler {
    let builder = OnchainSettler::builder(url, RELAYER_KEY)
        .rpc_timeout(Duration::from_secs(30))
        .receipt_timeout(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(5));
    with(builder).build().unwrap()
}

fn settler(url: &str) -> OnchainSettler {
    settler_with(url, |b| b)
}

fn request(nonce: u8) -> SettleRequest {
    let offer = PaymentOffer::new(
        Network::from_chain_id(31337),
        Token::new(TOKEN, "USD Coin", "2", 6),
        PAY_TO,
        Price::from(10_000u64),
    );
    let requirements = PaymentRequirementsV2 {
        scheme: SCHEME_EXACT.to_owned(),
        network: "eip155:31337".to_owned(),
        amount: U256::from(10_000u64),
        asset: TOKEN,
        pay_to: PAY_TO,
        max_timeout_seconds: 300,
        extra: None,
    };
    let mut signature = vec![0x11u8; 64];
    signature.push(27);
    let exact = ExactEvmPayload {
        signature: format!("0x{}", alloy_primitives::hex::encode(&signature)),
        authorization: Authorization {
            from: FROM,
            to: PAY_TO,
            value: U256::from(10_000u64),
            valid_after: U256::ZERO,
            valid_before: U256::from(u64::MAX),
            nonce: B256::repeat_byte(nonce),
        },
    };
    let raw = serde_json::value::to_raw_value(&exact).unwrap();
    let authorized = crate::scheme::ExactEip3009::default()
        .read(&raw, &offer)
        .unwrap();
    let payload = PaymentPayloadV2 {
        x402_version: 2,
        resource: None,
        accepted: requirements.clone(),
        payload: raw,
        extensions: None,
    };
    SettleRequest {
        payload: PaymentPayload::V2(payload),
        payload_text: Arc::from("null"),
        requirements: PaymentRequirements::V2(requirements),
        offer,
        authorized,
        charge: None,
    }
}

/// Settles the payment with `nonce`, which must succeed.
async fn settles(s: &OnchainSettler, nonce: u8) {
    assert_settled(s.settle(&request(nonce)).await);
}

fn assert_settled(outcome: SettleOutcome) {
    assert!(
        matches!(outcome, SettleOutcome::Settled { .. }),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_settlements_use_consecutive_relayer_nonces() {
    let (url, node, _) = node(Node {
        pending: 5,
        receipts: true,
        ..Node::default()
    })
    .await;
    let s = settler(&url);
    let tasks: Vec<_> = (1..=8u8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.settle(&request(i)).await })
        })
        .collect();
    for t in tasks {
        assert_settled(t.await.unwrap());
    }
    let n = node.lock().unwrap();
    let mut sent = n.sent_nonces.clone();
    sent.sort_unstable();
    assert_eq!(sent, (5..13).collect::<Vec<u64>>());
    assert_eq!(
        n.count_reads, 1,
        "the relayer nonce is read once, then managed locally"
    );
    assert_eq!(n.fee_reads, 2, "one fee quote (two calls) for the eight");
    let relayer = s.relayer();
    assert_eq!(
        relayer,
        address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
    );
    assert_eq!(n.signers.len(), 8);
    assert!(
        n.signers.iter().all(|a| *a == relayer),
        "every transaction is signed by the relayer key: {:?}",
        n.signers
    );
}

#[tokio::test]
async fn a_fee_quote_serves_its_ttl_then_is_asked_again() {
    let (url, node, _) = node(Node {
        receipts: true,
        ..Node::default()
    })
    .await;
    let fee_reads = || node.lock().unwrap().fee_reads;
    // A TTL no pair of settlements outlasts, however loaded the machine: the quote is shared.
    let quoted = settler_with(&url, |b| b.fee_quote_ttl(Duration::from_secs(600)));
    settles(&quoted, 1).await;
    settles(&quoted, 2).await;
    assert_eq!(
        fee_reads(),
        2,
        "the second transaction uses the first one's quote"
    );
    // A TTL every pair outlasts (the wait is longer than it): the quote has expired.
    let brief = settler_with(&url, |b| b.fee_quote_ttl(Duration::from_millis(1)));
    settles(&brief, 3).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    settles(&brief, 6).await;
    assert_eq!(fee_reads(), 6, "an expired quote is asked for again");

    let unshared = settler_with(&url, |b| b.fee_quote_ttl(Duration::ZERO));
    settles(&unshared, 4).await;
    settles(&unshared, 5).await;
    assert_eq!(fee_reads(), 10, "a zero TTL asks for every transaction");
}

#[tokio::test]
async fn a_settlement_asks_the_node_three_times_once_the_chain_id_nonce_and_fees_are_known() {
    let (url, node, _) = node(Node {
        receipts: true,
        ..Node::default()
    })
    .await;
    // A long TTL: the test must not depend on how fast this machine settles twice.
    let s = settler_with(&url, |b| b.fee_quote_ttl(Duration::from_secs(600)));
    let calls = || std::mem::take(&mut node.lock().unwrap().calls);
    settles(&s, 1).await;
    let mut first = calls();
    first.sort_unstable();
    assert_eq!(
        first,
        [
            "eth_chainId",
            "eth_estimateGas",
            "eth_gasPrice",
            "eth_getTransactionCount",
            "eth_getTransactionReceipt",
            "eth_maxPriorityFeePerGas",
            "eth_sendRawTransaction",
        ]
    );
    settles(&s, 2).await;
    assert_eq!(
        calls(),
        [
            "eth_estimateGas",
            "eth_sendRawTransaction",
            "eth_getTransactionReceipt"
        ],
        "the gas estimate, the send, one receipt poll: the fee quote is shared"
    );
}

#[tokio::test]
async fn a_send_refused_for_its_fees_makes_the_next_one_ask_for_a_new_quote() {
    let (url, node, _) = node(Node {
        receipts: true,
        refuse_fee: true,
        ..Node::default()
    })
    .await;
    let s = settler(&url);
    match s.settle(&request(1)).await {
        SettleOutcome::Failed {
            authorization_still_usable: true,
            message: Some(m),
            ..
        } => assert!(m.contains("base fee"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(node.lock().unwrap().fee_reads, 2);
    settles(&s, 1).await;
    assert_eq!(
        node.lock().unwrap().fee_reads,
        4,
        "the refused quote was dropped, not reused within its TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_waiting_for_a_fee_quote_or_the_chain_id_take_its_failure_instead_of_each_timing_out_in_turn()
 {
    for hang_chain_id in [false, true] {
        waiting_settlements_share_one_attempt(hang_chain_id).await;
    }
}

async fn waiting_settlements_share_one_attempt(hang_chain_id: bool) {
    let (url, node, _) = node(Node {
        hang_fees: !hang_chain_id,
        hang_chain_id,
        ..Node::default()
    })
    .await;
    let s = settler_with(&url, |b| b.rpc_timeout(Duration::from_secs(1)));
    let tasks: Vec<_> = (1..=4u8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.settle(&request(i)).await })
        })
        .collect();
    for t in tasks {
        match t.await.unwrap() {
            SettleOutcome::Failed {
                authorization_still_usable: true,
                message: Some(m),
                ..
            } => assert!(m.contains("timed out"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    // One attempt for the four: asking in turn would have been four attempts, four timeouts one after the
    // other for the last settlement, beyond the send phase `settle_deadline` allows for.
    let n = node.lock().unwrap();
    if hang_chain_id {
        assert_eq!(n.chain_id_reads, 1);
    } else {
        assert_eq!(
            (n.chain_id_reads, n.fee_reads),
            (1, 2),
            "one chain id, one quote (two calls)"
        );
    }
    assert!(n.sent_nonces.is_empty());
}

#[tokio::test]
async fn the_chain_id_is_asked_once_after_a_failure_is_past() {
    let (url, node, _) = node(Node {
        hang_chain_id: true,
        receipts: true,
        ..Node::default()
    })
    .await;
    let s = settler_with(&url, |b| b.rpc_timeout(Duration::from_millis(200)));
    assert!(matches!(s.chain_id().await, Err(RpcError::Timeout { .. })));
    node.lock().unwrap().hang_chain_id = false;
    assert_eq!(s.chain_id().await.unwrap(), 31337, "a failure is not kept");
    settles(&s, 1).await;
    assert_eq!(
        node.lock().unwrap().chain_id_reads,
        2,
        "a success is kept for ever"
    );
}

#[tokio::test]
async fn a_relayer_key_that_is_not_a_key_is_refused() {
    for key in [
        "",
        "0x1234",
        "zz",
        "0x0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let built = OnchainSettler::builder("http://127.0.0.1:1/", key).build();
        assert!(
            matches!(built, Err(OnchainConfigError::Key(_))),
            "{key:?}: {built:?}"
        );
    }
}

#[tokio::test]
async fn a_settlement_dropped_mid_send_does_not_leave_a_stale_nonce() {
    // One settlement goes through (nonce 5); the next one's client goes away while
    // `eth_sendRawTransaction` is in flight (the node took nonce 6). The third settlement must not reuse 6:
    // a pending transaction holds it ("replacement transaction underpriced").
    let (url, node, hung) = node(Node {
        pending: 5,
        receipts: true,
        hang_second_send: true,
        ..Node::default()
    })
    .await;
    let s = settler(&url);
    settles(&s, 1).await;
    let second = {
        let s = s.clone();
        tokio::spawn(async move { s.settle(&request(2)).await })
    };
    hung.notified().await;
    second.abort();
    assert!(second.await.unwrap_err().is_cancelled());
    settles(&s, 3).await;
    assert_eq!(node.lock().unwrap().sent_nonces, vec![5, 6, 7]);
}

#[tokio::test]
async fn simulation_reverts_map_to_spec_strings_and_nothing_is_sent() {
    for (revert, reason, still_usable) in [
        (
            "FiatTokenV2: authorization is used or canceled",
            "invalid_exact_evm_nonce_already_used",
            false,
        ),
        (
            "ERC20: transfer amount exceeds balance",
            "insufficient_funds",
            true,
        ),
        (
            "FiatTokenV2: invalid signature",
            "invalid_exact_evm_payload_signature",
            true,
        ),
        ("Pausable: paused", "invalid_transaction_state", true),
    ] {
        // The nonce-used revert: the payer cancelled the authorization (the token's log says so).
        let use_log = (!still_usable).then(|| {
            let canceled = AuthorizationCanceled::SIGNATURE_HASH;
            (canceled, B256::repeat_byte(0xcc), 0)
        });
        let (url, node, _) = node(Node {
            revert: Some(revert),
            use_log,
            ..Node::default()
        })
        .await;
        let s = settler(&url);
        let verdict = s.verify(&request(1)).await.unwrap();
        // The refusal of a cancelled authorization names the cancellation.
        let message = match use_log {
            Some((_, tx, _)) => format!("{revert}; the payer cancelled the authorization in {tx}"),
            None => revert.to_owned(),
        };
        assert_eq!(
            verdict,
            VerifyOutcome::Invalid {
                reason: reason.to_owned(),
                message: Some(message),
            }
        );
        match s.settle(&request(1)).await {
            SettleOutcome::Failed {
                reason: r,
                authorization_still_usable,
                ..
            } => {
                assert_eq!(r, reason);
                assert_eq!(authorization_still_usable, still_usable, "{revert}");
            }
            other => panic!("{other:?}"),
        }
        assert!(node.lock().unwrap().sent_nonces.is_empty());
    }
}

/// Somebody else broadcast the payer's authorization before this settler: the simulation says the nonce is
/// used, and the token's log names the transaction that paid exactly this offer. Verify finds it valid and
/// settling reports that transaction, sending nothing; used with no log in reach stays unknown.
#[tokio::test]
async fn an_authorization_another_transaction_paid_with_is_settled_by_that_transaction() {
    let paid = B256::repeat_byte(0xdd);
    let (url, node, _) = node(Node {
        revert: Some("FiatTokenV2: authorization is used or canceled"),
        use_log: Some((AuthorizationUsed::SIGNATURE_HASH, paid, 10_000)),
        ..Node::default()
    })
    .await;
    let s = settler(&url);
    assert_eq!(s.verify(&request(1)).await.unwrap(), VerifyOutcome::Valid);
    assert_eq!(
        s.settle(&request(1)).await,
        SettleOutcome::Settled {
            transaction: format!("{paid}"),
            payer: FROM,
            network: "eip155:31337".into()
        }
    );
    // The node cannot read the token's logs: verification is an error (retryable), never a refusal, since
    // the money may have moved; settling stays unknown.
    node.lock().unwrap().logs_fail = true;
    let verdict = s.verify(&request(1)).await;
    assert!(
        matches!(verdict, Err(SettleError::Transport(_))),
        "{verdict:?}"
    );
    assert!(matches!(
        s.settle(&request(1)).await,
        SettleOutcome::Unknown {
            transaction: None,
            ..
        }
    ));
    // No use logged within the lookback, and used within the last 64 blocks: its log may not be indexed
    // yet, so verification is an error (retryable) and settling unknown.
    {
        let mut n = node.lock().unwrap();
        n.logs_fail = false;
        n.use_log = None;
        n.used_in_block = Some(LATEST_BLOCK - 63);
    }
    let verdict = s.verify(&request(1)).await;
    assert!(
        matches!(&verdict, Err(SettleError::Transport(m)) if m.contains("may not be indexed yet")),
        "{verdict:?}"
    );
    assert!(matches!(
        s.settle(&request(1)).await,
        SettleOutcome::Unknown {
            transaction: None,
            ..
        }
    ));
    // Used 64 blocks ago already, and no log in the lookback: older than any payment made within its
    // window, and this settler sent nothing: refused at verification, failed for good when settling.
    node.lock().unwrap().used_in_block = Some(LATEST_BLOCK - 64);
    match s.verify(&request(1)).await.unwrap() {
        VerifyOutcome::Invalid { reason, message } => {
            assert_eq!(reason, "invalid_exact_evm_nonce_already_used");
            let message = message.unwrap_or_default();
            assert!(
                message.contains("not a payment made within its window"),
                "{message}"
            );
        }
        other @ VerifyOutcome::Valid => panic!("{other:?}"),
    }
    match s.settle(&request(1)).await {
        SettleOutcome::Failed {
            reason,
            authorization_still_usable: false,
            ..
        } => assert_eq!(reason, "invalid_exact_evm_nonce_already_used"),
        other => panic!("{other:?}"),
    }
    assert!(node.lock().unwrap().sent_nonces.is_empty(), "nothing sent");
}

#[tokio::test]
async fn no_receipt_in_time_is_unknown_and_a_revert_asks_the_authorization_state() {
    let (url, _node, _) = node(Node::default()).await;
    let outcome = settler(&url).settle(&request(1)).await;
    assert!(
        matches!(outcome, SettleOutcome::Unknown { .. }),
        "{outcome:?}"
    );

    // Reverted with the nonce unused: failed, and the authorization is still usable.
    let (url, _node, _) = node(Node {
        receipts: true,
        receipt_status: "0x0",
        ..Node::default()
    })
    .await;
    match settler(&url).settle(&request(1)).await {
        SettleOutcome::Failed {
            reason,
            authorization_still_usable: true,
            ..
        } => assert_eq!(reason, "invalid_transaction_state"),
        other => panic!("{other:?}"),
    }
}

/// Our transaction reverted because the nonce was used first: the token's log of the use decides.
#[tokio::test]
async fn a_revert_after_the_nonce_was_used_is_judged_by_the_transaction_that_used_it() {
    let other = B256::repeat_byte(0xee);
    let used = AuthorizationUsed::SIGNATURE_HASH;
    let canceled = AuthorizationCanceled::SIGNATURE_HASH;
    let spent = |reason: &str| reason == "invalid_exact_evm_nonce_already_used";
    for (use_log, expect) in [
        // Another transaction carried the payer's authorization and moved the price: the payment is made.
        (Some((used, other, 10_000)), "settled"),
        // Another authorization under the same nonce (another amount), or the payer cancelled: spent.
        (Some((used, other, 9_999)), "spent"),
        (Some((canceled, other, 0)), "spent"),
        // Used, and no log of the use in reach: unknown (pending), never refused.
        (None, "unknown"),
    ] {
        let (url, node, _) = node(Node {
            receipts: true,
            receipt_status: "0x0",
            authorization_used: true,
            use_log,
            ..Node::default()
        })
        .await;
        let outcome = settler(&url).settle(&request(1)).await;
        match (&outcome, expect) {
            (SettleOutcome::Settled { transaction, .. }, "settled") => {
                assert_eq!(*transaction, format!("{other}"));
            }
            (
                SettleOutcome::Failed {
                    reason,
                    authorization_still_usable: false,
                    ..
                },
                "spent",
            ) if spent(reason) => {}
            (
                SettleOutcome::Unknown {
                    transaction: Some(_),
                    ..
                },
                "unknown",
            ) => {}
            _ => panic!("{use_log:?}: expected {expect}, got {outcome:?}"),
        }
        let n = node.lock().unwrap();
        assert_eq!(n.sent_nonces.len(), 1, "one transaction, never a second");
        assert_eq!(
            n.log_ranges,
            [format!("{:#x}", LATEST_BLOCK - 10_000)],
            "the default lookback"
        );
    }
}

#[tokio::test]
async fn reconciliation_reads_the_chain_and_never_broadcasts() {
    let (url, node, _) = node(Node {
        in_mempool: true,
        ..Node::default()
    })
    .await;
    let s = settler(&url);
    let req = request(9);
    // Broadcast, no receipt in time: unknown, with the hash.
    let SettleOutcome::Unknown {
        transaction: Some(tx),
        ..
    } = s.settle(&req).await
    else {
        panic!("expected an unknown outcome with the transaction")
    };
    // Still in the mempool: still unknown.
    assert!(matches!(
        s.reconcile(&req, Some(&tx)).await,
        SettleOutcome::Unknown { transaction: Some(ref t), .. } if *t == tx
    ));
    // Mined with the Transfer log: settled with that transaction.
    node.lock().unwrap().receipts = true;
    assert_eq!(
        s.reconcile(&req, Some(&tx)).await,
        SettleOutcome::Settled {
            transaction: tx.clone(),
            payer: FROM,
            network: "eip155:31337".into()
        }
    );
    // Reverted, nonce unused: failed and still usable (the engine settles anew).
    node.lock().unwrap().receipt_status = "0x0";
    assert!(matches!(
        s.reconcile(&req, Some(&tx)).await,
        SettleOutcome::Failed {
            authorization_still_usable: true,
            ..
        }
    ));
    // Dropped from the mempool (or never sent), nonce unused: usable; nonce used by someone else: spent.
    {
        let mut n = node.lock().unwrap();
        n.receipts = false;
        n.in_mempool = false;
    }
    assert!(matches!(
        s.reconcile(&req, Some(&tx)).await,
        SettleOutcome::Failed {
            authorization_still_usable: true,
            ..
        }
    ));
    assert!(matches!(
        s.reconcile(&req, None).await,
        SettleOutcome::Failed {
            authorization_still_usable: true,
            ..
        }
    ));
    // Used, and no transaction recorded (the process died awaiting its receipt): the token's log of the
    // use names the transaction. Not in reach: unknown, never refused.
    node.lock().unwrap().authorization_used = true;
    assert!(matches!(
        s.reconcile(&req, None).await,
        SettleOutcome::Unknown {
            transaction: None,
            ..
        }
    ));
    let mined = B256::repeat_byte(0xab);
    node.lock().unwrap().use_log = Some((AuthorizationUsed::SIGNATURE_HASH, mined, 10_000));
    assert_eq!(
        s.reconcile(&req, None).await,
        SettleOutcome::Settled {
            transaction: format!("{mined}"),
            payer: FROM,
            network: "eip155:31337".into()
        }
    );
    node.lock().unwrap().use_log = Some((AuthorizationCanceled::SIGNATURE_HASH, mined, 0));
    match s.reconcile(&req, None).await {
        SettleOutcome::Failed {
            reason,
            authorization_still_usable: false,
            ..
        } => assert_eq!(reason, "invalid_exact_evm_nonce_already_used"),
        other => panic!("expected spent: {other:?}"),
    }
    assert_eq!(
        node.lock().unwrap().sent_nonces.len(),
        1,
        "reconciling never sends a transaction"
    );
}
