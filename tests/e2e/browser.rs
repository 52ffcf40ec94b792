//! A reader pays from the paywall in headless Chromium (puppeteer-core), with an injected EIP-1193 wallet
//! backed by a viem account on anvil; the reference server settles on chain. Screenshots under
//! `target/browser-screenshots/`.

use alloy_primitives::U256;
use serde_json::Value;
use workspace_tests::chain::Chain;
use workspace_tests::clients::run_js_json;
use workspace_tests::tools;

use crate::common::{ARTICLE_PRICE, RefServer, pay_to, payer};

/// Sold under `inference` and `training` (the dearer) in the demo catalog.
const TWO_LICENSES: &str = reference_server::licensing::catalog::TWO_LICENSE_DEMO_ID;

/// Where the screenshots go (the workspace's `target/`).
fn screenshots() -> std::path::PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/browser-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

#[tokio::test]
async fn a_reader_pays_from_the_paywall_with_a_browser_wallet_and_the_chain_moves_exactly_the_price()
 {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |_| {}).await;
    let (key, from) = payer(8);
    chain.mint(from, 1_000_000).await;
    let before = (chain.balance(from).await, chain.balance(pay_to()).await);
    let shots = screenshots();
    let r = run_js_json(
        "browser-check.mjs",
        &[
            &server.article_url(),
            &chain.anvil.url,
            key,
            tools::chromium().to_str().expect("path"),
            shots.to_str().expect("path"),
            &format!("{}/x402Article?articleId={TWO_LICENSES}", server.url),
        ],
    )
    .await;

    assert_eq!(r["consoleErrors"], serde_json::json!([]), "{r}");
    for mode in [
        "none",
        "reject",
        "elsewhere",
        "poor",
        "badsig",
        "pay",
        "second",
        "phone",
    ] {
        assert_eq!(r[format!("{mode}Status")], 402, "{mode}: {r}");
    }
    assert!(
        r["noWallet"]
            .as_str()
            .unwrap()
            .starts_with("No wallet found"),
        "{r}"
    );
    assert_eq!(
        r["rejected"], "You rejected the signature. Nothing was charged.",
        "{r}"
    );
    assert_eq!(r["signed"], 2, "only the two purchases were signed: {r}");
    // The purchase's first answer was lost after the server settled it; the page said so, sent the very same
    // payment again and got the article: one signature, one transfer (balances below).
    assert_eq!(r["lostAnswerStatus"], 200, "{r}");
    assert!(
        r["lostAnswer"]
            .as_str()
            .unwrap()
            .starts_with("The server could not be reached"),
        "{r}"
    );
    assert_eq!(r["paymentsSent"], 2, "{r}");
    assert_eq!(r["sameHeaderResent"], true, "the same payment resent: {r}");
    assert!(
        r["wrongChain"]
            .as_str()
            .unwrap()
            .starts_with("Switch your wallet to"),
        "{r}"
    );
    assert!(
        r["lowBalance"]
            .as_str()
            .unwrap()
            .starts_with("Your balance is lower than the price"),
        "{r}"
    );
    assert_eq!(r["lowBalancePayDisabled"], true, "{r}");
    assert_eq!(
        r["refused"], "The payment was refused: The wallet's signature was not accepted.",
        "the server's reason in words: {r}"
    );
    assert_eq!(r["account"], from.to_checksum(None), "{r}");
    assert_eq!(r["balance"], "1 USDC", "{r}");
    assert_eq!(
        r["title"], "How Newsrooms Prove a Photo Is Real",
        "the paywall is headed by the article's title: {r}"
    );
    assert_eq!(r["byline"], "by Amara Okafor", "{r}");
    assert!(
        r["notice"]
            .as_str()
            .unwrap()
            .starts_with("eip155:31337 is a local development chain"),
        "{r}"
    );
    assert_eq!(r["back"], format!("{}/x402Article/list", server.url), "{r}");
    assert_eq!(r["choices"], serde_json::json!(["standard"]), "{r}");
    assert_eq!(r["titleShownOnce"], true, "{r}");
    assert_eq!(r["paidBack"], r["back"], "{r}");
    // The second license of a two-license article: both offered, the second chosen and paid.
    assert_eq!(
        r["secondChoices"],
        serde_json::json!(["inference", "training"]),
        "{r}"
    );
    assert_eq!(r["secondPrice"], "0.1", "{r}");
    // Its first attempt was lost on the way: the choice stayed locked on the signed payment, which was sent
    // again unchanged (one signature: `signed` above).
    assert_eq!(r["secondLocked"], true, "{r}");
    assert_eq!(r["secondResentSame"], true, "{r}");
    assert!(
        r["secondReceipt"]
            .as_str()
            .unwrap()
            .starts_with("Your license \u{201c}training\u{201d}"),
        "{r}"
    );
    assert_eq!(
        r["articleTitle"], "How Newsrooms Prove a Photo Is Real",
        "{r}"
    );
    assert!(r["paragraphs"].as_u64().unwrap() > 3, "{r}");
    let links: Vec<&str> = r["receiptLinks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(links.len(), 2, "{r}");
    assert!(links[0].ends_with("/certificate"), "{r}");
    assert!(links.iter().all(|l| l.starts_with(&server.url)), "{r}");
    assert_eq!(r["phoneOverflow"], false, "{r}");
    // The server's pages, opened in the browser: 200 and no console error (checked above for all of them).
    for name in [
        "landing",
        "certificate",
        "receipt",
        "verify",
        "browsable",
        "detail",
        "docs",
    ] {
        assert_eq!(r["pages"][name]["status"], 200, "{name}: {r}");
    }
    assert_eq!(r["pages"]["browsable"]["options"], true, "{r}");
    assert_eq!(r["pages"]["browsable"]["responseFirst"], true, "{r}");
    // An error, in a browser: the site's page, with the status, saying where to go.
    assert_eq!(r["pages"]["error"]["status"], 404, "{r}");
    assert_eq!(r["pages"]["error"]["heading"], "Nothing here", "{r}");
    assert!(
        r["pages"]["error"]["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "/x402Article/list"),
        "{r}"
    );
    assert_eq!(r["pages"]["docs"]["swagger"], true, "{r}");
    let page_links = r["pages"]["browsable"]["pageLinks"]
        .as_array()
        .expect("page links");
    assert!(
        page_links.iter().any(|l| l == "1") && page_links.iter().any(|l| l == "2"),
        "{r}"
    );
    let landing = r["landingLinks"].as_object().expect("landing links");
    assert!(landing.len() >= 10, "{r}");
    for (href, status) in landing {
        let expected = if href.contains("/x402Article?") {
            402
        } else {
            200
        };
        assert_eq!(status, expected, "{href}");
    }
    // Exactly the two prices moved, each once: the article's, and the second license's (not the first's).
    let price = U256::from(ARTICLE_PRICE)
        + U256::from(reference_server::licensing::catalog::TRAINING_PRICE);
    assert_eq!(chain.balance(from).await, before.0 - price);
    assert_eq!(chain.balance(pay_to()).await, before.1 + price);
    for shot in [
        "paywall.png",
        "paywall-connected.png",
        "paywall-paid.png",
        "paywall-no-wallet.png",
        "paywall-rejected.png",
        "paywall-phone.png",
        "paywall-two-licenses.png",
        "paywall-second-chosen.png",
        "paywall-second-paid.png",
        "page-error.png",
        "page-browsable.png",
    ] {
        assert!(
            shots
                .join(shot)
                .metadata()
                .map(|m| m.len() > 1000)
                .unwrap_or(false),
            "{shot}"
        );
    }
}

/// An article priced in a token without EIP-3009 is paid from the paywall over Permit2 by a wallet that never
/// allowed Permit2: where the server settles on chain it declares gas sponsoring, and the wallet signs an
/// EIP-2612 permit with the payment, sending no transaction (exactly the price moves); where it does not,
/// the wallet sends one approval transaction first.
#[tokio::test]
async fn a_reader_pays_over_permit2_from_the_paywall_with_a_permit_or_an_approval() {
    use workspace_tests::chain::{DEV_KEYS, PERMIT2_CHAIN_ID};
    let chain = Chain::start_as(PERMIT2_CHAIN_ID).await;
    let plain = chain.install_permit2().await;
    let plain_token = plain.to_checksum(None);
    let selling = |c: &mut reference_server::config::Config| {
        c.payment.network = format!("eip155:{PERMIT2_CHAIN_ID}");
        c.payment.asset = Some(plain_token.clone());
        c.payment.asset_name = Some("Plain Dollar".into());
        c.payment.asset_version = Some("1".into());
        c.payment.transfer_methods = vec!["permit2".into()];
    };
    let rpc_url = chain.anvil.url.clone();
    let sponsored = RefServer::start(|c| {
        selling(c);
        c.payment.rpc_url = Some(rpc_url);
        c.payment.settler_key = Some(DEV_KEYS[1].into());
    })
    .await;
    let approval = RefServer::start(selling).await;
    let (key, from) = payer(9);
    chain.mint_plain(plain, from, 1_000_000).await;
    let shots = screenshots();
    let r = run_js_json(
        "browser-permit2.mjs",
        &[
            &sponsored.article_url(),
            &approval.article_url(),
            &chain.anvil.url,
            key,
            tools::chromium().to_str().expect("path"),
            shots.to_str().expect("path"),
        ],
    )
    .await;

    assert_eq!(r["consoleErrors"], serde_json::json!([]), "{r}");
    assert!(
        r["sponsoredReady"]
            .as_str()
            .unwrap()
            .contains("signs a permit for Permit2"),
        "{r}"
    );
    assert_eq!(
        r["sponsoredSigned"],
        serde_json::json!(["Permit", "PermitWitnessTransferFrom"]),
        "{r}"
    );
    assert_eq!(r["sponsoredTransactions"], 0, "{r}");
    let price = U256::from(ARTICLE_PRICE);
    assert_eq!(
        chain.balance_of(plain, from).await,
        U256::from(1_000_000u64) - price
    );
    assert_eq!(chain.balance_of(plain, pay_to()).await, price);

    assert!(
        r["approvalReady"]
            .as_str()
            .unwrap()
            .contains("first sends one transaction"),
        "{r}"
    );
    assert_eq!(
        r["approvalSigned"],
        serde_json::json!(["PermitWitnessTransferFrom"]),
        "{r}"
    );
    assert_eq!(r["approvalTransactions"], 1, "{r}");
    assert!(
        r["approvalReceipt"]
            .as_str()
            .unwrap()
            .starts_with("Your license"),
        "{r}"
    );
}
