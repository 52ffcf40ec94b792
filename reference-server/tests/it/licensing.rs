//! Interface A tests: the real server over HTTP.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::common::{Payer, TempDir, TestServer, banner_url, binary, decode_header};

pub(crate) const ARTICLE: &str = "provenance-newsroom-2025"; // 0.05 USDC in the demo catalog
const ARTICLE_PRICE: &str = "50000";

pub(crate) async fn json(resp: reqwest::Response) -> Value {
    resp.json().await.expect("JSON body")
}

/// Ask for the article unpaid; return (decoded PAYMENT-REQUIRED, v1 body).
pub(crate) async fn offer(server: &TestServer, id: &str) -> (Value, Value) {
    let resp = server.get(&format!("/x402Article?articleId={id}")).await;
    assert_eq!(resp.status(), 402);
    let v2 = decode_header(&resp, "payment-required");
    let body = json(resp).await;
    (v2, body)
}

#[tokio::test]
async fn catalog_lists_published_articles_with_typed_fields() {
    let server = TestServer::start().await;
    let resp = server.get("/x402Article/list").await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let list = json(resp).await;
    let items = list.as_array().expect("array");
    assert_eq!(items.len(), 12);
    for item in items {
        let obj = item.as_object().unwrap();
        assert_eq!(obj.len(), 5, "{item}");
        for k in ["id", "title", "excerpt", "published_date"] {
            assert!(obj[k].is_string(), "{k} in {item}");
        }
        assert!(obj["price_amount"].is_number(), "{item}");
        let date = obj["published_date"].as_str().unwrap();
        assert_eq!(date.len(), 10);
        assert_eq!(&date[4..5], "-");
    }
    assert!(
        items
            .iter()
            .all(|i| i["id"] != reference_server::licensing::catalog::UNPUBLISHED_DEMO_ID)
    );
    let a = items.iter().find(|i| i["id"] == ARTICLE).unwrap();
    assert_eq!(a["price_amount"].as_f64(), Some(0.05));
}

#[tokio::test]
async fn article_without_id_is_400_and_unknown_is_404() {
    let server = TestServer::start().await;
    for q in [
        "/x402Article",
        "/x402Article?articleId=",
        "/x402Article?other=1",
    ] {
        let resp = server.get(q).await;
        assert_eq!(resp.status(), 400, "{q}");
        let body = json(resp).await;
        assert_eq!(body["code"], "missing_article_id", "{q}");
        assert!(body["detail"].as_str().unwrap().contains("articleId"));
    }
    let long = "x".repeat(500);
    assert_eq!(
        server
            .get(&format!("/x402Article?articleId={long}"))
            .await
            .status(),
        400
    );
    for id in [
        "no-such-article",
        reference_server::licensing::catalog::UNPUBLISHED_DEMO_ID,
    ] {
        let resp = server.get(&format!("/x402Article?articleId={id}")).await;
        assert_eq!(resp.status(), 404, "{id}");
        assert!(resp.headers().get("payment-required").is_none());
        assert!(resp.headers().get("x-payment-required").is_none());
        assert_eq!(json(resp).await["code"], "not_found");
    }
}

#[tokio::test]
async fn unpaid_article_is_402_with_the_articles_own_price() {
    let server = TestServer::start().await;
    let resp = server
        .get(&format!("/x402Article?articleId={ARTICLE}"))
        .await;
    assert_eq!(resp.status(), 402);
    assert!(
        resp.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("no-store")
    );
    let v2 = decode_header(&resp, "payment-required");
    // X-Payment-Required: the same document without the extensions (v2 clients read them from
    // PAYMENT-REQUIRED).
    let mut legacy = decode_header(&resp, "x-payment-required");
    assert!(legacy.get("extensions").is_none());
    legacy["extensions"] = v2["extensions"].clone();
    assert_eq!(v2, legacy);
    assert_eq!(v2["x402Version"], 2);
    let accepted = &v2["accepts"][0];
    assert_eq!(accepted["scheme"], "exact");
    assert_eq!(accepted["network"], "eip155:84532");
    assert_eq!(accepted["amount"], ARTICLE_PRICE);
    assert_eq!(
        accepted["asset"],
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
    );
    assert_eq!(accepted["payTo"], reference_server::config::DEMO_PAY_TO);
    assert_eq!(accepted["extra"]["name"], "USDC");
    assert_eq!(accepted["extra"]["version"], "2");
    assert_eq!(
        v2["resource"]["url"],
        server.url(&format!("/x402Article?articleId={ARTICLE}"))
    );
    let body = json(resp).await;
    assert_eq!(body["x402Version"], 1);
    assert_eq!(body["accepts"][0]["network"], "base-sepolia");
    assert_eq!(body["accepts"][0]["maxAmountRequired"], ARTICLE_PRICE);
    assert!(body["accepts"][0]["mimeType"].is_string());

    // Another article: another price.
    let (other, _) = offer(&server, "c2pa-explained").await;
    assert_eq!(other["accepts"][0]["amount"], "10000");
}

#[tokio::test]
async fn v2_purchase_returns_article_and_a_durable_verifiable_receipt() {
    let server = TestServer::start().await;
    let payer = Payer::new();
    let (required, _) = offer(&server, ARTICLE).await;
    let header = payer.pay_v2(&required);

    let resp = server
        .get_with(
            server.url(&format!("/x402Article?articleId={ARTICLE}")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let settle = decode_header(&resp, "payment-response");
    assert_eq!(settle["success"], true);
    let body = json(resp).await;
    assert_eq!(
        body["article"]["title"],
        "How Newsrooms Prove a Photo Is Real"
    );
    assert_eq!(body["article"]["author_name"], "Amara Okafor");
    assert!(body["article"]["content"].as_str().unwrap().len() > 200);
    let token = body["receipt"]["nft"]["tokenId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.bytes().all(|b| b.is_ascii_digit()));
    let verify_url = body["receipt"]["nft"]["verifyUrl"].as_str().unwrap();
    assert_eq!(verify_url, server.url(&format!("/receipts/{token}")));

    let receipt = json(server.client.get(verify_url).send().await.unwrap()).await;
    assert_eq!(receipt["tokenId"], token);
    assert_eq!(receipt["articleId"], ARTICLE);
    assert_eq!(receipt["payer"], payer.address().to_checksum(None));
    assert_eq!(receipt["payTo"], reference_server::config::DEMO_PAY_TO);
    assert_eq!(receipt["amount"], ARTICLE_PRICE);
    assert_eq!(receipt["network"], "eip155:84532");
    assert_eq!(
        receipt["asset"],
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
    );
    assert_eq!(receipt["x402Version"], 2);
    assert_eq!(receipt["settlement"], "verify-only");
    let sent: Value = serde_json::from_slice(&B64.decode(&header).unwrap()).unwrap();
    assert_eq!(receipt["nonce"], sent["payload"]["authorization"]["nonce"]);
    // The token id is the payment's, leading with its validBefore (ids sort by time).
    let auth = &sent["payload"]["authorization"];
    let valid_before: u64 = auth["validBefore"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        token,
        reference_server::domain::token::token_id(
            "eip155:84532",
            receipt["asset"].as_str().unwrap(),
            auth["from"].as_str().unwrap(),
            auth["nonce"].as_str().unwrap(),
            valid_before,
        )
    );
    assert!(token.starts_with(&valid_before.to_string()) && token.len() == 77);

    let cert = server
        .client
        .get(body["receipt"]["certificate"]["url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(cert.status(), 200);
    assert!(
        cert.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = cert.text().await.unwrap();
    assert!(html.contains(&token) && html.contains("How Newsrooms Prove a Photo Is Real"));
    assert!(html.contains(&payer.address().to_checksum(None)));

    // Unknown receipts are 404.
    assert_eq!(server.get("/receipts/123").await.status(), 404);
    assert_eq!(
        server
            .get("/receipts/not-a-number/certificate")
            .await
            .status(),
        404
    );
}

/// What `/llms.txt` tells agents about a resend is what the server does.
#[tokio::test]
async fn a_resend_gets_the_same_article_and_receipt_and_another_resource_is_refused() {
    let server = TestServer::start().await;
    let llms = server.get("/llms.txt").await.text().await.unwrap();
    for promise in [
        "resending the identical payment for the same article (a lost answer, a retry) gets the same \
         article and receipt without a second charge",
        "the same payment for another article is refused",
    ] {
        assert!(llms.contains(promise), "{promise}: {llms}");
    }
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let first = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(first.status(), 200);
    let first_receipt = decode_header(&first, "payment-response");
    let first_body = json(first).await;
    // The buyer lost the answer and resends the identical header.
    let again = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(again.status(), 200);
    assert_eq!(decode_header(&again, "payment-response"), first_receipt);
    assert_eq!(json(again).await, first_body);
    // The same payment for another resource: refused before anything is settled.
    let other = server
        .get_with(format!("{url}&copy=2"), "PAYMENT-SIGNATURE", &header)
        .await;
    assert_eq!(other.status(), 402);
    assert_eq!(
        json(other).await["error"],
        "invalid_exact_evm_nonce_already_used"
    );
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
    assert_eq!(settlement_rows(&server, "settled", None).await.len(), 1);
}

/// A buyer whose answer was lost near the end of the payment's window resends it after its `validBefore`:
/// the article and the same receipt again, from the payment's record in the server's store (kept 15 minutes
/// past `validBefore`), and nothing settled twice. A payment never presented and already expired, or the paid
/// one for another resource, is refused and nothing is recorded for it.
#[tokio::test]
async fn a_purchase_resent_after_its_valid_before_is_delivered_again_from_its_record() {
    let server = TestServer::start().await;
    let (required, _) = offer(&server, ARTICLE).await;
    let payer = Payer::new();
    // The server wants 6 s of validity left: this leaves 10 s to buy, more than a loaded machine needs.
    let valid_before = crate::common::now() + 16;
    let header = payer.pay_v2_valid_before(&required, valid_before);
    let unseen = payer.pay_v2_valid_before(&required, valid_before);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let first = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(first.status(), 200);
    let first_receipt = decode_header(&first, "payment-response");
    let first_body = json(first).await;
    while crate::common::now() <= valid_before {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let again = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(again.status(), 200);
    assert_eq!(decode_header(&again, "payment-response"), first_receipt);
    assert_eq!(json(again).await, first_body);
    for (url, header, error) in [
        (
            url.clone(),
            &unseen,
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        (
            format!("{url}&copy=2"),
            &header,
            "invalid_exact_evm_nonce_already_used",
        ),
    ] {
        let refused = server.get_with(&url, "PAYMENT-SIGNATURE", header).await;
        assert_eq!(refused.status(), 402);
        assert_eq!(json(refused).await["error"], error);
    }
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
    assert_eq!(settlement_rows(&server, "settled", None).await.len(), 1);
}

/// `--payment-keep-after-expiry-secs` reaches the paid route's engine (raised to the stale time plus a
/// minute), and a value out of its range is refused with the flag's name.
#[tokio::test]
async fn how_long_records_outlive_their_valid_before_is_the_operators_choice() {
    let keep = |server: &TestServer| server.state.payments.engine().keep_after_expiry().as_secs();
    assert_eq!(keep(&TestServer::start().await), 900);
    let longer = TestServer::start_with(|c| c.payment.payment_keep_after_expiry_secs = 7_200).await;
    assert_eq!(keep(&longer), 7_200);
    let raised = TestServer::start_with(|c| {
        c.payment.payment_keep_after_expiry_secs = 60;
        c.payment.payment_stale_after_secs = 600;
    })
    .await;
    assert_eq!(keep(&raised), 660);
    for refused in [59, 86_401] {
        let mut config = reference_server::Config::for_tests();
        config.payment.payment_keep_after_expiry_secs = refused;
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("payment-keep-after-expiry-secs"),
            "{refused}: {err}"
        );
    }
}

#[tokio::test]
async fn v1_purchase_with_x_payment() {
    let server = TestServer::start().await;
    let payer = Payer::random();
    let (_, body_v1) = offer(&server, "c2pa-explained").await;
    let header = payer.pay_v1(&body_v1);
    let resp = server
        .get_with(
            server.url("/x402Article?articleId=c2pa-explained"),
            "X-PAYMENT",
            header,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let settle = decode_header(&resp, "x-payment-response");
    assert_eq!(settle["success"], true);
    let body = json(resp).await;
    let receipt = json(
        server
            .get(&format!(
                "/receipts/{}",
                body["receipt"]["nft"]["tokenId"].as_str().unwrap()
            ))
            .await,
    )
    .await;
    assert_eq!(receipt["x402Version"], 1);
    assert_eq!(receipt["payer"], payer.address().to_checksum(None));
    assert_eq!(receipt["amount"], "10000");
}

#[tokio::test]
async fn invalid_payments_get_402_not_the_article() {
    let server = TestServer::start().await;
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let (required, _) = offer(&server, ARTICLE).await;

    // Paid for a cheaper article: the offer does not match this one.
    let (cheap, _) = offer(&server, "c2pa-explained").await;
    let wrong = Payer::new().pay_v2(&cheap);
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", wrong).await;
    assert_eq!(resp.status(), 402);

    // Garbage header.
    let resp = server
        .get_with(&url, "PAYMENT-SIGNATURE", "%%%not base64")
        .await;
    assert_eq!(resp.status(), 402);

    // Tampered signature.
    let good: Value =
        serde_json::from_slice(&B64.decode(Payer::new().pay_v2(&required)).unwrap()).unwrap();
    let mut bad = good.clone();
    bad["payload"]["authorization"]["value"] = "50001".into();
    let resp = server
        .get_with(&url, "PAYMENT-SIGNATURE", B64.encode(bad.to_string()))
        .await;
    assert_eq!(resp.status(), 402);
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 0);
}

#[tokio::test]
async fn receipts_survive_a_restart_and_a_replay_after_restart_is_refused() {
    let dir = std::sync::Arc::new(TempDir::new());
    let mut config = reference_server::Config::for_tests();
    config.registry.database = Some(super::common::fresh_database(dir.path(), "db.sqlite3").await);
    config.registry.media_dir = Some(dir.path().join("media"));
    config.registry.seed_assets = 5;

    let server = TestServer::start_config(config.clone(), Some(dir.clone())).await;
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let path = format!("/x402Article?articleId={ARTICLE}");
    let resp = server
        .get_with(server.url(&path), "PAYMENT-SIGNATURE", &header)
        .await;
    assert_eq!(resp.status(), 200);
    let token = json(resp).await["receipt"]["nft"]["tokenId"]
        .as_str()
        .unwrap()
        .to_owned();
    server.stop().await;

    // Same database, new process state (the layer's in-memory replay cache is gone).
    let server = TestServer::start_config(config, Some(dir)).await;
    assert_eq!(
        server.get(&format!("/receipts/{token}")).await.status(),
        200
    );
    // The payment is still within its validity window, but the resource URL changed with the new port, so
    // re-sign the same nonce for the new offer: the durable receipt table must still refuse it.
    let (required, required_v1) = offer(&server, ARTICLE).await;
    let replay = Payer::new().pay_v2_with_nonce_of(&required, &header);
    let resp = server
        .get_with(server.url(&path), "PAYMENT-SIGNATURE", &replay)
        .await;
    assert_eq!(resp.status(), 402);
    // The same requirements headers as the layer's 402s, for the same offer and resource.
    let mut lean = decode_header(&resp, "payment-required");
    lean.as_object_mut().unwrap().remove("extensions");
    assert_eq!(decode_header(&resp, "x-payment-required"), lean);
    assert!(
        resp.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("no-store")
    );
    let v2 = decode_header(&resp, "payment-required");
    assert_eq!(v2["x402Version"], 2);
    assert_eq!(v2["error"], "invalid_exact_evm_nonce_already_used");
    assert_eq!(v2["resource"], required["resource"]);
    assert_eq!(v2["accepts"], required["accepts"]);
    let body = json(resp).await;
    assert_eq!(body["x402Version"], 1);
    assert_eq!(body["accepts"], required_v1["accepts"]);
    assert_eq!(body["error"], "invalid_exact_evm_nonce_already_used");
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
}

#[tokio::test]
async fn llms_txt_is_plain_text_and_every_call_is_recorded() {
    let server = TestServer::start().await;
    // `/llms.txt` is the same text and counts the same way.
    for (ua, path) in [
        ("GPTBot/1.1", "/serveLlmsTxt"),
        ("GPTBot/1.1", "/llms.txt"),
        ("ClaudeBot/1.0", "/serveLlmsTxt"),
    ] {
        let resp = server.get_with(server.url(path), "user-agent", ua).await;
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );
        let text = resp.text().await.unwrap();
        assert!(text.contains(&server.url("/x402Article/list")));
        assert!(text.contains(&format!("articleId={ARTICLE}")));
        assert!(text.contains("0.05 USDC"));
        assert!(text.contains("PAYMENT-SIGNATURE") && text.contains("x402"));
        assert!(!text.contains(reference_server::licensing::catalog::UNPUBLISHED_DEMO_ID));
    }
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("llms_txt_requests_total 3"), "{metrics}");
    // Counted in memory, written in the next per-second batch.
    let stats = wait_for_llms_txt_total(&server, 3).await;
    assert_eq!(stats["by_user_agent"][0]["user_agent"], "GPTBot/1.1");
    assert_eq!(stats["by_user_agent"][0]["count"], 2);
    assert_eq!(stats["distinct_clients"], 1);
    let row = &stats["recent"][0];
    assert_eq!(row["client_addr"], "127.0.0.1", "{stats}");
    assert!(row["bucket"].as_str().unwrap().ends_with(":00Z"), "{stats}");
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("llms_txt_requests_flushed_total 3"),
        "{metrics}"
    );
}

/// Polls `/operator/llms-txt` (for at most 10 s) until its total is `total`; returns the stats.
pub(crate) async fn wait_for_llms_txt_total(server: &TestServer, total: u64) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let stats = json(server.operator_get("/operator/llms-txt").await).await;
        if stats["total"] == total || std::time::Instant::now() > deadline {
            assert_eq!(stats["total"], total, "{stats}");
            return stats;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_flood_of_llms_txt_requests_is_a_few_batched_writes_and_none_is_lost_on_shutdown() {
    let dir = std::sync::Arc::new(TempDir::new());
    let mut config = reference_server::Config::for_tests();
    config.registry.database = Some(super::common::fresh_database(dir.path(), "db.sqlite3").await);
    config.registry.media_dir = Some(dir.path().join("media"));
    config.registry.seed_assets = 1;
    let server = TestServer::start_config(config.clone(), Some(dir.clone())).await;
    let hits: Vec<_> = (0..500)
        .map(|i| {
            let client = server.client.clone();
            let url = server.url("/serveLlmsTxt");
            tokio::spawn(async move {
                let ua = format!("bot-{}", i % 5);
                client
                    .get(url)
                    .header("user-agent", ua)
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    for h in hits {
        assert_eq!(h.await.unwrap(), 200);
    }
    // Stopped at once (gracefully): what was counted and not yet flushed is written on the way out.
    server.stop().await;
    let server = TestServer::start_config(config, Some(dir)).await;
    let stats = wait_for_llms_txt_total(&server, 500).await;
    // One row per minute, agent and client: at most 5 agents x 2 minutes, not 500 rows.
    let by_agent = stats["by_user_agent"].as_array().unwrap();
    assert_eq!(by_agent.len(), 5, "{stats}");
    assert!(by_agent.iter().all(|a| a["count"] == 100), "{stats}");
    assert!(stats["recent"].as_array().unwrap().len() <= 10, "{stats}");
}

#[tokio::test]
async fn operator_endpoints_require_a_token_even_when_none_was_configured() {
    // The default configuration: no --api-token. A token is generated and the endpoints require it.
    let server = TestServer::start().await;
    assert!(server.config.registry.api_token.is_none());
    for path in ["/operator/llms-txt", "/operator/settlements"] {
        assert_eq!(server.get(path).await.status(), 401, "{path}");
        let wrong = server
            .get_with(server.url(path), "authorization", "token guess")
            .await;
        assert_eq!(wrong.status(), 401, "{path}");
        assert_eq!(server.operator_get(path).await.status(), 200, "{path}");
    }
    let token = server.state.settings.operator_token.as_str();
    assert!(token.len() >= 32, "a generated token is long");
    assert!(
        TestServer::start()
            .await
            .state
            .settings
            .operator_token
            .as_str()
            != token,
        "every start generates its own"
    );
}

#[tokio::test]
async fn operator_endpoint_requires_the_api_token_when_one_is_set() {
    let server =
        TestServer::start_with(|c| c.registry.api_token = Some("s3cret-token".into())).await;
    assert_eq!(server.get("/operator/llms-txt").await.status(), 401);
    let ok = server
        .get_with(
            server.url("/operator/llms-txt"),
            "authorization",
            "token s3cret-token",
        )
        .await;
    assert_eq!(ok.status(), 200);
}

#[tokio::test]
async fn openapi_describes_both_interfaces_with_the_402() {
    let server = TestServer::start().await;
    let doc = json(server.get("/openapi.json").await).await;
    // The document's validity and the real answers' fit are checked by independent validators in
    // workspace-tests (e2e/openapi.rs); here, what this server puts in it.
    assert_eq!(doc["openapi"], "3.1.0");
    // The interface's version (interfaces.md §9), not the crate's; the registry's is in its paths.
    assert_eq!(doc["info"]["version"], "2.0");
    let registry = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "registry")
        .unwrap();
    assert!(
        registry["description"]
            .as_str()
            .unwrap()
            .contains("version 3 (its paths start with `/api/v3/`)"),
        "{registry}"
    );
    assert_eq!(doc["servers"][0]["url"], server.base);
    assert!(doc["paths"]["/api/v3/assets/"]["post"].is_object());
    assert_eq!(
        doc["components"]["schemas"]["PaymentRequirementsV2"]["properties"]["amount"]["type"],
        "string"
    );
    let get = &doc["paths"]["/x402Article"]["get"];
    assert!(get["responses"]["402"]["headers"]["X-Payment-Required"].is_object());
    assert!(get["responses"]["402"]["headers"]["PAYMENT-REQUIRED"].is_object());
    for code in ["200", "400", "404"] {
        assert!(get["responses"][code].is_object(), "{code}");
    }
    assert_eq!(get["parameters"][0]["name"], "articleId");
    assert!(doc["paths"]["/x402Article/list"]["get"].is_object());
    assert!(
        doc["paths"]["/serveLlmsTxt"]["get"]["responses"]["200"]["content"]["text/plain"]
            .is_object()
    );
    let entry = &doc["components"]["schemas"]["CatalogEntry"]["properties"];
    assert_eq!(entry["price_amount"]["type"], "number");
}

#[tokio::test]
async fn healthz_metrics_and_unknown_paths() {
    let server = TestServer::start().await;
    let h = server.get("/healthz").await;
    assert_eq!(h.status(), 200);
    assert_eq!(json(h).await["status"], "ok");
    let _ = offer(&server, ARTICLE).await;
    assert_eq!(server.get("/nope").await.status(), 404);
    let m = server.get("/metrics").await;
    assert!(
        m.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = m.text().await.unwrap();
    assert!(text.contains("http_payment_required_total 1"), "{text}");
    assert!(
        text.contains("http_requests_total{route=\"/x402Article\",status=\"4xx\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("http_requests_total{route=\"other\",status=\"4xx\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn bad_configuration_exits_with_code_2_before_listening() {
    let bin = env!("CARGO_BIN_EXE_reference-server");
    for (args, needle) in [
        (&["--pay-to", "0x1234"][..], "--pay-to"),
        (&["--network", "mars"][..], "--network"),
        (&["--network", "eip155:31337"][..], "--asset"),
        (&["--facilitator-url", "not a url"][..], "--facilitator-url"),
        (&["--listen", "nowhere"][..], "--listen"),
        (
            &["--database", "/nonexistent-dir/x/db.sqlite3"][..],
            "--database",
        ),
        (&["--database", "mysql://u@h/db"][..], "--database"),
        // Nothing listens on port 1: the database is unreachable, and the password is not printed.
        (
            &["--database", "postgres://u:hunter2@127.0.0.1:1/db"][..],
            "postgres://u:***@127.0.0.1:1/db",
        ),
    ] {
        let out = std::process::Command::new(bin)
            .args(args)
            .args(
                ["--listen", "127.0.0.1:0"]
                    .iter()
                    .filter(|_| args[0] != "--listen"),
            )
            .env_remove("REFERENCE_SERVER_LISTEN")
            .output()
            .expect("run binary");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening"),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn the_command_line_helps_with_addresses_ports_and_misspelt_flags() {
    let bin = env!("CARGO_BIN_EXE_reference-server");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .env_remove("REFERENCE_SERVER_LISTEN")
            .env_remove("REFERENCE_SERVER_DATABASE")
            .env_remove("DATABASE_URL")
            .output()
            .expect("run binary")
    };
    // A host name is accepted, and the server listens on its address.
    let dir = tempfile_dir();
    let db = dir.join("by-name.sqlite3");
    let mut child = std::process::Command::new(bin)
        .args([
            "--listen",
            "localhost:0",
            "--seed-assets",
            "1",
            "--database",
        ])
        .arg(&db)
        .env_remove("REFERENCE_SERVER_LISTEN")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run binary");
    let mut banner = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut banner,
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        banner.contains("listening on http://127.0.0.1:")
            || banner.contains("listening on http://[::1]:"),
        "{banner}"
    );
    // What cannot be an address says which form it wants.
    let out = run(&["--listen", "localhost"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--listen") && stderr.contains("localhost:8080"),
        "{stderr}"
    );
    // --port is pointed at --listen.
    let out = run(&["--port", "9000"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("use --listen 127.0.0.1:9000"), "{stderr}");
    // A misspelt flag gets a "did you mean".
    let out = run(&["--pay-too", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--pay-to"), "{stderr}");
    // A port already in use fails before any database is created: nothing is left behind.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let db = dir.join("never.sqlite3");
    let out = std::process::Command::new(bin)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--database"])
        .arg(&db)
        .env_remove("REFERENCE_SERVER_LISTEN")
        .output()
        .expect("run binary");
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot listen"),
        "{out:?}"
    );
    assert!(!db.exists(), "a failed start left {}", db.display());
    let mut media = db.clone().into_os_string();
    media.push(".media");
    assert!(!std::path::Path::new(&media).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A new empty directory under the system's temporary directory.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "reference-server-cli-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn database_url_is_read_from_the_environment_when_no_flag_names_one() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reference-server"))
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("REFERENCE_SERVER_DATABASE")
        .env("DATABASE_URL", "postgresql://app:pw@127.0.0.1:1/registry")
        .output()
        .expect("run binary");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("postgresql://app:***@127.0.0.1:1/registry"),
        "{stderr}"
    );
}

#[tokio::test]
async fn unspecified_listen_address_without_public_url_exits_with_code_2() {
    let bin = env!("CARGO_BIN_EXE_reference-server");
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = std::process::Command::new(bin)
            .args(["--listen", listen, "--database", ":memory:"])
            .env_remove("REFERENCE_SERVER_LISTEN")
            .env_remove("REFERENCE_SERVER_PUBLIC_URL")
            .output()
            .expect("run binary");
        assert_eq!(out.status.code(), Some(2), "{listen}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--listen") && stderr.contains("--public-url"),
            "{listen}: {stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening"),
            "{listen}"
        );
    }
}

#[tokio::test]
async fn configuration_from_the_environment_and_a_busy_port_also_exit_2() {
    let bin = env!("CARGO_BIN_EXE_reference-server");
    let out = std::process::Command::new(bin)
        .env("REFERENCE_SERVER_NETWORK", "mars")
        .env("REFERENCE_SERVER_LISTEN", "127.0.0.1:0")
        .output()
        .expect("run binary");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--network"));

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = TempDir::new();
    let out = std::process::Command::new(bin)
        .arg("--listen")
        .arg(busy.local_addr().unwrap().to_string())
        .args(["--seed-assets", "1", "--database"])
        .arg(dir.path().join("db.sqlite3"))
        .output()
        .expect("run binary");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
}

#[tokio::test]
async fn binary_prints_banner_serves_and_stops_cleanly_on_sigterm() {
    use std::io::BufRead as _;
    let dir = TempDir::new();
    let mut child = binary(&dir, "5")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn binary");
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines.next().expect("a banner line").expect("utf-8");
    let base = banner_url(&first);
    let mut banner = Vec::new();
    for line in lines.by_ref().map_while(Result::ok) {
        let last = line.contains("Settlement:");
        banner.push(line);
        if last {
            break;
        }
    }
    assert!(
        banner.iter().any(|l| l.contains("How to pay")),
        "{banner:?}"
    );
    // No --api-token: the operator token generated for this run is printed.
    assert!(
        banner
            .iter()
            .any(|l| l.contains("operator endpoints: `Authorization: token ")
                && l.contains("generated for this run")),
        "{banner:?}"
    );
    assert!(
        banner.iter().any(|l| l.contains("verify-only")),
        "{banner:?}"
    );

    let client = crate::common::test_client();
    let list = client
        .get(format!("{base}/x402Article/list"))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::task::spawn_blocking(move || child.wait()),
    )
    .await
    .expect("the server exits within a minute of SIGTERM")
    .unwrap()
    .unwrap();
    assert_eq!(exit.code(), Some(0), "graceful exit after SIGTERM");
}

/// A stub x402 facilitator on a free loopback port: `/verify` accepts, `/settle` answers `settle` (a JSON
/// document) and counts its calls.
async fn stub_facilitator(
    settle: Value,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    stub_facilitator_hanging(settle, 0).await
}

/// [`stub_facilitator`] whose `/settle` never answers its first `hang` calls (an outcome nobody knows).
pub(crate) async fn stub_facilitator_hanging(
    settle: Value,
    hang: usize,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use axum::routing::{get, post};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let app = axum::Router::new()
        .route(
            "/verify",
            post(|axum::Json(body): axum::Json<Value>| async move {
                let payer = body["paymentPayload"]["payload"]["authorization"]["from"].clone();
                axum::Json(serde_json::json!({"isValid": true, "payer": payer}))
            }),
        )
        .route(
            "/settle",
            post(move || {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let answer = settle.clone();
                async move {
                    if n < hang {
                        std::future::pending::<()>().await;
                    }
                    axum::Json(answer)
                }
            }),
        )
        .route(
            "/supported",
            get(|| async {
                axum::Json(serde_json::json!({"kinds": [], "extensions": [], "signers": {}}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), calls)
}

#[tokio::test]
async fn facilitator_settlement_is_recorded_in_the_receipt() {
    let tx = "0x1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988";
    let (facilitator, calls) = stub_facilitator(
        serde_json::json!({"success": true, "transaction": tx, "network": "eip155:84532"}),
    )
    .await;
    let server = TestServer::start_with(|c| c.payment.facilitator_url = Some(facilitator)).await;
    let (required, _) = offer(&server, ARTICLE).await;
    let resp = server
        .get_with(
            server.url(&format!("/x402Article?articleId={ARTICLE}")),
            "PAYMENT-SIGNATURE",
            Payer::new().pay_v2(&required),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(decode_header(&resp, "payment-response")["transaction"], tx);
    let body = json(resp).await;
    let receipt = json(
        server
            .client
            .get(body["receipt"]["nft"]["verifyUrl"].as_str().unwrap())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(receipt["settlement"], tx);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn failed_settlement_is_402_and_leaves_no_receipt() {
    let (facilitator, calls) = stub_facilitator(serde_json::json!({
        "success": false, "errorReason": "insufficient_funds", "transaction": "", "network": "eip155:84532"
    }))
    .await;
    let server = TestServer::start_with(|c| c.payment.facilitator_url = Some(facilitator)).await;
    let (required, _) = offer(&server, ARTICLE).await;
    let resp = server
        .get_with(
            server.url(&format!("/x402Article?articleId={ARTICLE}")),
            "PAYMENT-SIGNATURE",
            Payer::new().pay_v2(&required),
        )
        .await;
    assert_eq!(resp.status(), 402);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 0);
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("x402_payments_total{outcome=\"settlement_failed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn plain_options_reach_the_registry_and_preflights_get_cors() {
    let server = TestServer::start().await;
    let url = server.url("/api/v3/assets/");
    let plain = server
        .client
        .request(reqwest::Method::OPTIONS, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert_eq!(plain.headers()["allow"], "GET, POST, HEAD, OPTIONS");
    let meta: Value = plain.json().await.unwrap();
    assert!(meta["actions"]["POST"].is_object(), "{meta}");

    let preflight = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            server.url("/x402Article?articleId=c2pa-explained"),
        )
        .header("origin", "https://reader.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "payment-signature")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 200);
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");

    let cross = server
        .get_with(
            server.url("/x402Article?articleId=c2pa-explained"),
            "origin",
            "https://reader.example",
        )
        .await;
    assert_eq!(cross.status(), 402);
    let exposed = cross.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        exposed.contains("payment-required") && exposed.contains("x-payment-required"),
        "{exposed}"
    );
}

#[tokio::test]
async fn through_the_whole_app_head_equals_get_minus_the_body() {
    let server = TestServer::start().await;
    for path in [
        "/api/v3/assets/?limit=5",
        "/x402Article/list",
        "/openapi.json",
    ] {
        let get = server.get(path).await;
        let head = server.client.head(server.url(path)).send().await.unwrap();
        assert_eq!(get.status(), head.status(), "{path}");
        let len = get.headers().get("content-length").cloned();
        assert_eq!(len, head.headers().get("content-length").cloned(), "{path}");
        let body = get.bytes().await.unwrap();
        if let Some(len) = len {
            assert_eq!(len.to_str().unwrap(), body.len().to_string(), "{path}");
        }
        assert!(head.bytes().await.unwrap().is_empty(), "{path}");
    }
}

#[tokio::test]
async fn a_client_that_hangs_up_during_settlement_still_gets_its_receipt_written() {
    use axum::routing::post;
    use std::sync::Arc;
    use tokio::sync::Notify;
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (e, r) = (entered.clone(), release.clone());
    let tx = "0x00000000000000000000000000000000000000000000000000000000000000aa";
    let app = axum::Router::new()
        .route(
            "/verify",
            post(|axum::Json(body): axum::Json<Value>| async move {
                let payer = body["paymentPayload"]["payload"]["authorization"]["from"].clone();
                axum::Json(serde_json::json!({"isValid": true, "payer": payer}))
            }),
        )
        .route(
            "/settle",
            post(move || {
                let (e, r) = (e.clone(), r.clone());
                async move {
                    e.notify_one();
                    r.notified().await;
                    axum::Json(serde_json::json!({"success": true, "transaction": tx, "network": "eip155:84532"}))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let server = TestServer::start_with(|c| c.payment.facilitator_url = Some(facilitator)).await;
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let client = crate::common::test_client();
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let request = tokio::spawn(async move {
        client
            .get(url)
            .header("PAYMENT-SIGNATURE", header)
            .send()
            .await
    });
    entered.notified().await; // the settlement is in flight
    request.abort(); // the client hangs up
    let _ = request.await;
    release.notify_one(); // the chain answers
    let mut receipts = 0;
    for _ in 0..200 {
        receipts = server.state.licensing.count_receipts().await.unwrap();
        if receipts == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(receipts, 1, "the settled payment's receipt was written");
}

#[tokio::test]
async fn paths_that_are_not_utf8_get_the_json_404() {
    let server = TestServer::start().await;
    for path in [
        "/receipts/%FF",
        "/receipts/%FF%FE/certificate",
        "/verify/%FF%FE",
    ] {
        let resp = server.client.get(server.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body: serde_json::Value = resp.json().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(body["detail"].is_string(), "{path}: {body}");
    }
}

#[tokio::test]
async fn through_the_whole_app_the_collection_has_one_vary_header() {
    let server = TestServer::start().await;
    let url = server.url("/api/v3/assets/?limit=2");
    let answers = [
        server.client.get(&url).send().await.unwrap(),
        server
            .get_with(&url, "origin", "http://elsewhere.example")
            .await,
        server.get_with(&url, "accept", "image/png").await,
        server.client.delete(&url).send().await.unwrap(),
        server
            .client
            .request(reqwest::Method::OPTIONS, &url)
            .send()
            .await
            .unwrap(),
    ];
    for (i, r) in answers.iter().enumerate() {
        let vary: Vec<_> = r.headers().get_all("vary").iter().collect();
        // One Vary line; pages (the two GETs answered 200) may be compressed, so they also vary on
        // Accept-Encoding.
        let expected = if i < 2 {
            "Accept, Accept-Encoding"
        } else {
            "Accept"
        };
        assert_eq!(vary, [expected], "answer {i} ({})", r.status());
        assert_eq!(
            r.headers()["allow"],
            "GET, POST, HEAD, OPTIONS",
            "answer {i}"
        );
    }
    assert_eq!(answers[1].headers()["access-control-allow-origin"], "*");
}

/// `GET /operator/settlements?outcome=<outcome>` with the API token `token` (default: the server's operator
/// token): the rows, newest first.
pub(crate) async fn settlement_rows(
    server: &TestServer,
    outcome: &str,
    token: Option<&str>,
) -> Vec<Value> {
    let mut request = server
        .client
        .get(server.url(&format!("/operator/settlements?outcome={outcome}")));
    let token = token.unwrap_or(server.state.settings.operator_token.as_str());
    request = request.header("authorization", format!("token {token}"));
    let resp = request.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    json(resp).await["settlements"]
        .as_array()
        .expect("settlements array")
        .clone()
}

/// The authorization nonce of a `PAYMENT-SIGNATURE` value.
fn nonce_of(header: &str) -> Value {
    let sent: Value = serde_json::from_slice(&B64.decode(header).unwrap()).unwrap();
    sent["payload"]["authorization"]["nonce"].clone()
}

/// The fields every settlement row of a purchase of [`ARTICLE`] by `payer` with `header` carries.
fn check_row(row: &Value, server: &TestServer, payer: &Payer, header: &str) {
    assert_eq!(row["payer"], payer.address().to_checksum(None));
    assert_eq!(row["pay_to"], reference_server::config::DEMO_PAY_TO);
    assert_eq!(row["article_id"], ARTICLE);
    assert_eq!(
        row["resource"],
        server.url(&format!("/x402Article?articleId={ARTICLE}"))
    );
    assert_eq!(row["amount_atomic"], ARTICLE_PRICE);
    assert_eq!(row["network"], "eip155:84532");
    assert_eq!(row["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    assert_eq!(row["nonce"], nonce_of(header));
    assert_eq!(row["x402_version"], 2);
    assert!(row["at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn a_facilitator_that_times_out_on_settle_is_settlement_pending_and_an_unknown_settlement_row()
 {
    use axum::routing::post;
    let app = axum::Router::new()
        .route(
            "/verify",
            post(|axum::Json(body): axum::Json<Value>| async move {
                let payer = body["paymentPayload"]["payload"]["authorization"]["from"].clone();
                axum::Json(serde_json::json!({"isValid": true, "payer": payer}))
            }),
        )
        // Never answers: the settlement may or may not have been broadcast.
        .route("/settle", post(std::future::pending::<axum::Json<Value>>));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let server = TestServer::start_with(|c| {
        c.payment.facilitator_url = Some(facilitator);
        c.payment.facilitator_settle_timeout_secs = 1;
        c.registry.api_token = Some("op-token".into());
    })
    .await;
    let payer = Payer::new();
    let (required, _) = offer(&server, ARTICLE).await;
    let header = payer.pay_v2(&required);
    let resp = server
        .get_with(
            server.url(&format!("/x402Article?articleId={ARTICLE}")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(resp.status(), 402);
    let pending = decode_header(&resp, "payment-response");
    assert_eq!(pending["success"], false);
    assert_eq!(pending["errorReason"], "settlement_pending");
    assert_eq!(json(resp).await["error"], "settlement_pending");
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 0);

    // The operator endpoint has the same auth as /operator/llms-txt.
    assert_eq!(server.get("/operator/settlements").await.status(), 401);
    let rows = settlement_rows(&server, "unknown", Some("op-token")).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    check_row(&rows[0], &server, &payer, &header);
    assert_eq!(rows[0]["outcome"], "unknown");
    assert_eq!(rows[0]["transaction"], Value::Null);
    assert!(
        rows[0]["message"].as_str().unwrap().contains("timed out"),
        "{rows:?}"
    );
    assert!(
        settlement_rows(&server, "settled", Some("op-token"))
            .await
            .is_empty()
    );
    let all = json(
        server
            .get_with(
                server.url("/operator/settlements"),
                "authorization",
                "token op-token",
            )
            .await,
    )
    .await;
    assert_eq!(all["totals"]["unknown"], 1);
    assert_eq!(all["totals"]["settled"], 0);
    let bad = server
        .get_with(
            server.url("/operator/settlements?outcome=maybe"),
            "authorization",
            "token op-token",
        )
        .await;
    assert_eq!(bad.status(), 400);

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("x402_settlements_recorded_total{outcome=\"unknown\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("x402_payments_total{outcome=\"settlement_unknown\"} 1"));
}

#[tokio::test]
async fn a_failed_settlement_is_a_failed_settlement_row() {
    let (facilitator, _) = stub_facilitator(serde_json::json!({
        "success": false, "errorReason": "insufficient_funds", "errorMessage": "balance 0",
        "transaction": "", "network": "eip155:84532"
    }))
    .await;
    let server = TestServer::start_with(|c| c.payment.facilitator_url = Some(facilitator)).await;
    let payer = Payer::new();
    let (required, _) = offer(&server, ARTICLE).await;
    let header = payer.pay_v2(&required);
    let resp = server
        .get_with(
            server.url(&format!("/x402Article?articleId={ARTICLE}")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(resp.status(), 402);
    let rows = settlement_rows(&server, "failed", None).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    check_row(&rows[0], &server, &payer, &header);
    assert_eq!(rows[0]["outcome"], "failed");
    assert_eq!(rows[0]["reason"], "insufficient_funds");
    assert_eq!(rows[0]["message"], "balance 0");
    assert!(settlement_rows(&server, "unknown", None).await.is_empty());
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("x402_settlements_recorded_total{outcome=\"failed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_successful_purchase_is_a_settled_settlement_row() {
    let tx = "0x2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a";
    let (facilitator, _) = stub_facilitator(
        serde_json::json!({"success": true, "transaction": tx, "network": "eip155:84532"}),
    )
    .await;
    let server = TestServer::start_with(|c| c.payment.facilitator_url = Some(facilitator)).await;
    let payer = Payer::new();
    let (required, _) = offer(&server, ARTICLE).await;
    let header = payer.pay_v2(&required);
    let resp = server
        .get_with(
            server.url(&format!("/x402Article?articleId={ARTICLE}")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let rows = settlement_rows(&server, "settled", None).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    check_row(&rows[0], &server, &payer, &header);
    assert_eq!(rows[0]["outcome"], "settled");
    assert_eq!(rows[0]["transaction"], tx);
    assert_eq!(rows[0]["reason"], Value::Null);
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("x402_settlements_recorded_total{outcome=\"settled\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("x402_settlements_recorded_total{outcome=\"unknown\"} 0"));
}

/// The workspace's reqwest client paying up to 1 USDC with the test payer's key.
fn paying_client(server: &TestServer) -> reqwest_middleware::ClientWithMiddleware {
    use x402_tower::client::{PaymentPolicy, reqwest::X402Middleware};
    let signer: alloy_signer_local::PrivateKeySigner = crate::common::PAYER_KEY.parse().unwrap();
    let policy = PaymentPolicy::new(x402_tower::Price::from_usdc_decimal("1").unwrap());
    reqwest_middleware::ClientBuilder::new(server.client.clone())
        .with(X402Middleware::new(signer, policy))
        .build()
}

/// A buyer that paid for an article reads it again by signing in with x: the same article and receipt, no
/// payment, no new receipt, the read recorded; another article still costs money. On both backends.
#[tokio::test]
async fn a_buyer_reads_a_bought_article_again_by_signing_in_with_x() {
    use x402_tower::client::{Paid, SignedInAs};
    let server = TestServer::start().await;
    let client = paying_client(&server);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));

    // The 402 declares the extension, bound to the configured public URL.
    let required = decode_header(
        &server
            .get(&format!("/x402Article?articleId={ARTICLE}"))
            .await,
        "payment-required",
    );
    let info = &required["extensions"]["sign-in-with-x"]["info"];
    assert_eq!(info["uri"], url.as_str());
    assert_eq!(
        format!("http://{}", info["domain"].as_str().unwrap()),
        server.base
    );

    let first = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.extensions().get::<Paid>().is_some());
    let bought: Value = first.json().await.unwrap();
    let receipts = server.state.licensing.count_receipts().await.unwrap();

    let again = client.get(&url).send().await.unwrap();
    assert_eq!(again.status(), 200);
    assert!(
        again.extensions().get::<Paid>().is_none(),
        "nothing paid the second time"
    );
    assert!(again.extensions().get::<SignedInAs>().is_some());
    let read: Value = again.json().await.unwrap();
    assert_eq!(read, bought, "the same article and the same receipt");
    assert_eq!(
        server.state.licensing.count_receipts().await.unwrap(),
        receipts
    );
    assert_eq!(server.state.licensing.count_reads().await.unwrap(), 1);
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("license_rereads_total 1"), "{metrics}");

    // Another article was not bought: the sign-in is refused and the client pays.
    let other = server
        .state
        .articles
        .list()
        .iter()
        .find(|a| a.id != ARTICLE)
        .unwrap()
        .id
        .clone();
    let res = client
        .get(server.url(&format!("/x402Article?articleId={other}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.extensions().get::<Paid>().is_some());
}

#[tokio::test]
async fn the_landing_page_links_everything_and_every_link_answers() {
    let server = TestServer::start().await;
    let resp = server.get("/").await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = resp.text().await.unwrap();
    assert!(html.contains(r#"<link rel="stylesheet" href="/assets/site.css">"#));
    assert!(html.contains("How Newsrooms Prove a Photo Is Real"));
    let hrefs: Vec<String> = html
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|h| h.replace("&#38;", "&"))
        .filter(|h| h.starts_with('/'))
        .collect();
    for h in [
        "/x402Article/list",
        "/api/v3/assets/?format=api",
        "/docs/",
        "/llms.txt",
        "/openapi.json",
    ] {
        assert!(hrefs.iter().any(|x| x == h), "{h} linked");
    }
    for href in &hrefs {
        let status = server.get(href).await.status();
        // Articles answer 402 until paid; everything else 200.
        let expected = if href.starts_with("/x402Article?") {
            402
        } else {
            200
        };
        assert_eq!(status, expected, "{href}");
    }
}

/// A request whose body is a stream cannot be sent twice, so the reqwest adapter cannot pay for it: it
/// passes the 402 through as the server sent it (readable, no payment, no error), never a half-paid request.
#[tokio::test]
async fn the_reqwest_adapter_passes_a_402_through_for_a_request_it_cannot_resend() {
    use x402_tower::client::Paid;
    let server = TestServer::start().await;
    let client = paying_client(&server);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let chunks =
        futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x"))]);
    let resp = client
        .get(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .expect("the 402, not an error");
    assert_eq!(resp.status(), 402);
    assert!(resp.extensions().get::<Paid>().is_none());
    assert!(resp.headers().contains_key("payment-required"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["x402Version"], 1);
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 0);
    // The same request with a plain body is paid.
    let paid = client.get(&url).send().await.unwrap();
    assert_eq!(paid.status(), 200);
    assert!(paid.extensions().get::<Paid>().is_some());
}
