//! The official clients buy an article from the reference server (verify-only settlement).

use workspace_tests::clients::{Client, buy};

use crate::common::{RefServer, check_purchase, payer};

async fn buys(client: Client) {
    let server = RefServer::start(|_| {}).await;
    let (key, address) = payer(2);
    let purchase = buy(client, &server.article_url(), key).await;
    let settlement = check_purchase(&purchase, address).await;
    assert_eq!(settlement, "verify-only");
    // The receipt comes back in the header of the client's version.
    let version = if client == Client::JsV1 { 1 } else { 2 };
    let sent = workspace_tests::pay::decode_b64_json(
        purchase.payment_header.as_str().expect("payment header"),
    );
    assert_eq!(sent["x402Version"], version, "{sent}");
}

#[tokio::test]
async fn legacy_v1_client_buys_an_article() {
    buys(Client::JsV1).await;
}

#[tokio::test]
async fn v2_client_buys_an_article() {
    buys(Client::JsV2).await;
}

#[tokio::test]
async fn python_client_buys_an_article() {
    buys(Client::Python).await;
}
