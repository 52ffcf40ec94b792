//! License tokens on anvil: each purchase settled on chain mints the receipt's ERC-721 token to the payer
//! (`contracts/LicenseToken.sol`, deployed as `reference-server deploy-license-token` does), `tokenURI`
//! resolves to the receipt JSON, and a mint that fails (contract paused) is retried while the buyer had the
//! article and its receipt all along.

use std::time::{Duration, Instant};

use alloy_primitives::{Address, Bytes, U256};
use alloy_sol_types::{SolCall, sol};
use serde_json::{Value, json};
use workspace_tests::chain::{Chain, DEV_KEYS, address_of};
use workspace_tests::clients::run_js_json;
use workspace_tests::pay::{Knobs, pay_v2};

use crate::common::{RefServer, get_json, http, offer, payer, settler};

sol! {
    function ownerOf(uint256 tokenId) external view returns (address);
    function tokenURI(uint256 tokenId) external view returns (string);
    function balanceOf(address owner) external view returns (uint256);
    function pause() external;
    function unpause() external;
    function setBaseUri(string baseUri_) external;
    function mintBatch(address[] to, uint256[] tokenIds) external;
}

async fn eth_call(chain: &Chain, to: Address, data: Vec<u8>) -> Result<Bytes, Value> {
    chain
        .rpc
        .try_call(
            "eth_call",
            json!([{"to": to, "data": Bytes::from(data)}, "latest"]),
        )
        .await
        .map(|v| v.as_str().expect("hex").parse().expect("bytes"))
}

/// Sends `data` to `to` from the relayer (anvil account #1, the contract's owner) and waits for it.
async fn as_owner(chain: &Chain, to: Address, data: Vec<u8>) {
    let hash = chain
        .rpc
        .call(
            "eth_sendTransaction",
            json!([{"from": address_of(DEV_KEYS[1]), "to": to, "data": Bytes::from(data)}]),
        )
        .await;
    let hash = hash.as_str().expect("hash").parse().expect("hash");
    for _ in 0..200 {
        if let Some(r) = chain.receipt(hash).await {
            assert_eq!(r["status"], "0x1", "{r}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no receipt for {hash}");
}

async fn owner_of(chain: &Chain, contract: Address, token: U256) -> Option<Address> {
    let out = eth_call(chain, contract, ownerOfCall { tokenId: token }.abi_encode())
        .await
        .ok()?;
    ownerOfCall::abi_decode_returns(&out).ok()
}

/// Buys `article` with dev account `n`; returns the receipt's token id and the receipt JSON of the answer.
async fn buy(chain: &Chain, server: &RefServer, article: &str, n: usize) -> (String, Address) {
    let (key, from) = payer(n);
    chain.mint(from, 1_000_000).await;
    let url = format!("{}/x402Article?articleId={article}", server.url);
    let header = pay_v2(key, &offer(&url).await, &Knobs::default());
    let resp = server.pay_at(&url, &header).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("JSON");
    assert!(body["article"]["content"].as_str().is_some());
    let token = body["receipt"]["nft"]["tokenId"]
        .as_str()
        .expect("token id");
    (token.to_owned(), from)
}

async fn receipt_json(server: &RefServer, token: &str) -> Value {
    get_json(&format!("{}/receipts/{token}", server.url)).await
}

/// Waits (30 s at most) until the receipt's token is minted; returns its receipt JSON.
async fn minted(server: &RefServer, token: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = receipt_json(server, token).await;
        if r["licenseToken"]["status"] == "minted" {
            return r;
        }
        assert!(Instant::now() < deadline, "not minted in time: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_committed_contract_bytecode_is_what_the_source_compiles_to() {
    let compiled = run_js_json("license-token.mjs", &[]).await;
    let committed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts/LicenseToken.bin"),
    )
    .expect("contracts/LicenseToken.bin");
    assert_eq!(
        compiled["bytecode"].as_str().expect("bytecode"),
        committed.trim(),
        "contracts/LicenseToken.bin is stale: run `node tests/js/license-token.mjs --write`"
    );
}

#[tokio::test]
async fn a_purchase_mints_one_license_token_to_the_payer_and_a_failed_mint_is_retried() {
    let chain = Chain::start().await;
    // Deployed as `deploy-license-token` does: owned by the relayer, token URIs under the public URL (known
    // once the server listens: set then, by the owner).
    let contract =
        reference_server::licensing::minter::deploy(&settler(&chain), "http://placeholder")
            .await
            .expect("deploy");
    let server = RefServer::settling_on(&chain, |c| {
        c.payment.license_token = Some(contract.to_string())
    })
    .await;
    as_owner(
        &chain,
        contract,
        setBaseUriCall {
            baseUri_: format!("{}/receipts/", server.url),
        }
        .abi_encode(),
    )
    .await;

    let (token, from) = buy(&chain, &server, "c2pa-explained", 2).await;
    let receipt = minted(&server, &token).await;
    let id: U256 = token.parse().expect("decimal token id");
    assert_eq!(owner_of(&chain, contract, id).await, Some(from));
    assert_eq!(
        receipt["licenseToken"]["owner"],
        from.to_checksum(None),
        "the verify URL shows the on-chain owner"
    );
    assert_eq!(
        receipt["licenseToken"]["contract"],
        contract.to_checksum(None)
    );
    // Exactly one token for the payer; its URI is the receipt.
    let balance = eth_call(&chain, contract, balanceOfCall { owner: from }.abi_encode())
        .await
        .expect("balanceOf");
    assert_eq!(U256::from_be_slice(&balance), U256::from(1));
    let uri = eth_call(&chain, contract, tokenURICall { tokenId: id }.abi_encode())
        .await
        .expect("tokenURI");
    let uri = tokenURICall::abi_decode_returns(&uri).expect("string");
    assert_eq!(uri, format!("{}/receipts/{token}", server.url));
    let at_uri = get_json(&uri).await;
    assert_eq!(at_uri["tokenId"], token.as_str());
    assert_eq!(at_uri["payer"], from.to_checksum(None));

    // The same batch sent again (another instance's minter, or a retry after a crash between sending and
    // recording): the contract skips the minted token; the owner and the count do not change.
    let (_, someone_else) = payer(5);
    as_owner(
        &chain,
        contract,
        mintBatchCall {
            to: vec![someone_else],
            tokenIds: vec![id],
        }
        .abi_encode(),
    )
    .await;
    assert_eq!(owner_of(&chain, contract, id).await, Some(from));
    let balance = eth_call(&chain, contract, balanceOfCall { owner: from }.abi_encode())
        .await
        .expect("balanceOf");
    assert_eq!(U256::from_be_slice(&balance), U256::from(1));

    // Paused contract: the buyer still gets the article and the receipt at once; the mint fails, stays
    // pending, and is minted after the contract is unpaused.
    as_owner(&chain, contract, pauseCall {}.abi_encode()).await;
    let (token2, from2) = buy(&chain, &server, "provenance-newsroom-2025", 3).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = receipt_json(&server, &token2).await;
        assert_eq!(
            r["tokenId"],
            token2.as_str(),
            "the receipt is there all along"
        );
        assert_eq!(r["licenseToken"]["status"], "pending", "{r}");
        if r["licenseToken"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("failed"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no failed attempt recorded: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let id2: U256 = token2.parse().expect("token id");
    assert_eq!(owner_of(&chain, contract, id2).await, None);
    as_owner(&chain, contract, unpauseCall {}.abi_encode()).await;
    minted(&server, &token2).await;
    assert_eq!(owner_of(&chain, contract, id2).await, Some(from2));
    assert_eq!(
        owner_of(&chain, contract, id).await,
        Some(from),
        "minted once"
    );
    let metrics = crate::common::metrics_text(&server.url).await;
    assert!(
        metrics.contains("license_tokens_minted_total 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn without_a_contract_the_receipt_says_no_token_is_minted() {
    let chain = Chain::start().await;
    let server = RefServer::settling_on(&chain, |_| {}).await;
    let (token, _) = buy(&chain, &server, "c2pa-explained", 4).await;
    let r = receipt_json(&server, &token).await;
    assert_eq!(r["licenseToken"]["status"], "not_minted");
    assert!(
        r["licenseToken"]["note"]
            .as_str()
            .unwrap()
            .contains("no --license-token")
    );
}

/// Validates `xml` against the RSL 1.0 schema of `tests/schemas` (XSD 1.1, with Python's `xmlschema`).
async fn validate_rsl(xml: &str, name: &str) -> Value {
    let dir = std::env::temp_dir().join(format!("rsl-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("license.xml");
    std::fs::write(&file, xml).expect("write");
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/rsl-1.0.xsd");
    let out = workspace_tests::clients::run(
        &workspace_tests::tools::python(),
        &[
            "validate_xml.py",
            schema.to_str().expect("path"),
            file.to_str().expect("path"),
        ],
        &workspace_tests::tools::py_dir(),
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(out.lines().last().expect("a line")).expect("JSON")
}

#[tokio::test]
async fn the_rsl_document_validates_against_the_rsl_schema_and_a_wrong_one_does_not() {
    let server = RefServer::start(|_| {}).await;
    let xml = http()
        .get(format!("{}/license.xml", server.url))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    let ok = validate_rsl(&xml, "ok").await;
    assert_eq!(ok["valid"], true, "{ok}");
    // The schema can fail: an unknown usage token, a payment type RSL does not have.
    for (name, broken) in [
        ("token", xml.replacen("ai-train", "ai-training", 1)),
        ("payment", xml.replacen("type=\"use\"", "type=\"rent\"", 1)),
    ] {
        let bad = validate_rsl(&broken, name).await;
        assert_eq!(bad["valid"], false, "{name}: {bad}");
    }
}
