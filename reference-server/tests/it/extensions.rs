//! The x402 extensions of the reference server: signed offers and receipts (offer-receipt) that anyone can
//! check offline against the published key, and discovery (bazaar) through the facilitator.

use alloy_primitives::Address;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use x402_tower::extensions::offer_receipt::{ReceiptCheck, SignedOffer, SignedReceipt};

use crate::common::{Payer, TestServer, decode_header};
use crate::licensing::{ARTICLE, json as json_body, offer};
use crate::payments::signed_receipt;

async fn signer_of(server: &TestServer) -> Address {
    let published = json_body(server.get("/receipts/signer").await).await;
    assert_eq!(published["extension"], "offer-receipt");
    assert_eq!(published["domains"][1]["name"], "x402 receipt");
    published["address"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn offers_and_receipts_are_signed_by_the_published_key_and_the_receipt_is_kept() {
    let server = TestServer::start().await;
    let signer = signer_of(&server).await;
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));

    // The 402's offer is signed and matches its accepts entry.
    let (required, _) = offer(&server, ARTICLE).await;
    let offers: Vec<SignedOffer> =
        serde_json::from_value(required["extensions"]["offer-receipt"]["info"]["offers"].clone())
            .unwrap();
    assert_eq!(offers.len(), 1);
    assert_eq!(offers[0].signer().unwrap(), signer);
    assert_eq!(offers[0].payload.resource_url, url);
    assert_eq!(offers[0].payload.amount, required["accepts"][0]["amount"]);
    assert_eq!(offers[0].payload.pay_to, required["accepts"][0]["payTo"]);

    // A purchase: the receipt in PAYMENT-RESPONSE is the one in the body, signed by that key.
    let payer = Payer::new();
    let header = payer.pay_v2(&required);
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 200);
    let settle = decode_header(&resp, "payment-response");
    let in_header = signed_receipt(&settle);
    let body = json_body(resp).await;
    assert_eq!(body["receipt"]["signed"], in_header);
    let receipt: SignedReceipt = serde_json::from_value(in_header).unwrap();
    receipt
        .verify(&ReceiptCheck {
            signer,
            resource_url: Some(&url),
            payer: Some(payer.address()),
        })
        .unwrap();
    assert_eq!(receipt.payload.network, "eip155:84532");
    assert_eq!(receipt.payload.transaction, "verify-only");

    // The verify URL and the certificate show the same signed receipt, for anyone to check offline.
    let token = body["receipt"]["nft"]["tokenId"].as_str().unwrap();
    let view = json_body(server.get(&format!("/receipts/{token}")).await).await;
    assert_eq!(view["signedReceipt"], body["receipt"]["signed"]);
    assert_eq!(view["receiptSigner"], signer.to_checksum(None));
    let cert = server
        .get(&format!("/receipts/{token}/certificate"))
        .await
        .text()
        .await
        .unwrap();
    assert!(cert.contains(&signer.to_checksum(None)), "{cert}");
    assert!(
        cert.contains("this server&#39;s receipt key")
            || cert.contains("this server's receipt key")
    );
    assert!(cert.contains(&receipt.signature));

    // The buyer lost the answer and resends, a second later: the same stored receipt comes back, in the
    // body and in PAYMENT-RESPONSE (the engine recorded the signed receipt with the settlement; nothing is
    // signed anew with a later issuedAt).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(again.status(), 200);
    let again_header = decode_header(&again, "payment-response");
    assert_eq!(again_header, settle, "the same PAYMENT-RESPONSE");
    assert_eq!(
        json_body(again).await["receipt"]["signed"],
        body["receipt"]["signed"]
    );
}

#[tokio::test]
async fn the_receipt_key_is_given_derived_from_the_url_signing_key_or_generated() {
    const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let given = TestServer::start_with(|c| c.payment.receipt_signing_key = Some(KEY.into())).await;
    assert_eq!(
        signer_of(&given).await,
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
            .parse::<Address>()
            .unwrap()
    );
    // Two instances sharing the URL signing key sign with one key.
    let shared = "a shared url signing key, 32 b..";
    let a = TestServer::start_with(|c| c.registry.url_signing_key = Some(shared.into())).await;
    let b = TestServer::start_with(|c| c.registry.url_signing_key = Some(shared.into())).await;
    assert_eq!(signer_of(&a).await, signer_of(&b).await);
    let other = TestServer::start().await;
    assert_ne!(signer_of(&other).await, signer_of(&a).await);
    // A malformed key is a configuration error.
    let mut config = reference_server::Config::for_tests();
    config.payment.receipt_signing_key = Some("0x1234".into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("receipt-signing-key"), "{err}");
}

#[tokio::test]
async fn the_articles_declare_bazaar_and_the_discovery_listing_pages_them() {
    let server = TestServer::start().await;
    let (required, _) = offer(&server, ARTICLE).await;
    let bazaar = &required["extensions"]["bazaar"];
    assert_eq!(bazaar["info"]["input"]["method"], "GET");
    // Each article's 402 describes that article: its id, and its title and author in the example answer.
    assert_eq!(bazaar["info"]["input"]["queryParams"]["articleId"], ARTICLE);
    let (other, _) = offer(&server, "c2pa-explained").await;
    let other = &other["extensions"]["bazaar"]["info"];
    assert_eq!(other["input"]["queryParams"]["articleId"], "c2pa-explained");
    assert_eq!(
        other["output"]["example"]["article"]["title"],
        "C2PA Explained for Working Photographers"
    );
    assert_ne!(
        other["output"]["example"]["article"]["title"],
        bazaar["info"]["output"]["example"]["article"]["title"]
    );
    assert_eq!(bazaar["schema"]["required"][0], "input");
    reference_server::facilitator::discovery::validate_info(bazaar).unwrap();

    let catalog = json_body(server.get("/x402Article/list").await).await;
    let published = catalog
        .as_array()
        .map_or_else(|| catalog["articles"].as_array().unwrap().len(), Vec::len)
        as u64;
    let all = json_body(server.get("/facilitator/discovery/resources").await).await;
    assert_eq!(all["x402Version"], 2);
    assert_eq!(
        all["pagination"],
        json!({"limit": 20, "offset": 0, "total": published})
    );
    let first = &all["items"][0];
    assert_eq!(first["type"], "http");
    assert_eq!(first["x402Version"], 2);
    assert!(
        first["resource"]
            .as_str()
            .unwrap()
            .starts_with(&server.url("/x402Article?articleId="))
    );
    assert_eq!(first["accepts"][0]["scheme"], "exact");
    assert!(first["lastUpdated"].is_u64());
    let mine = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["resource"] == server.url(&format!("/x402Article?articleId={ARTICLE}")))
        .expect("the article is listed");
    assert_eq!(mine["accepts"][0], required["accepts"][0]);

    // DRF's limit/offset rules, within the extension's 1-100.
    let page = json_body(
        server
            .get("/facilitator/discovery/resources?limit=2&offset=1")
            .await,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["items"][0], all["items"][1]);
    for (q, limit) in [
        ("limit=0", 20),
        ("limit=-3", 20),
        ("limit=abc", 20),
        ("limit=1000", 100),
    ] {
        let p = json_body(
            server
                .get(&format!("/facilitator/discovery/resources?{q}"))
                .await,
        )
        .await;
        assert_eq!(p["pagination"]["limit"], limit, "{q}");
    }
    let past = json_body(
        server
            .get("/facilitator/discovery/resources?offset=9999")
            .await,
    )
    .await;
    assert_eq!(past["items"], json!([]));
    let mcp = json_body(
        server
            .get("/facilitator/discovery/resources?type=mcp")
            .await,
    )
    .await;
    assert_eq!(mcp["pagination"]["total"], 0);
}

/// A facilitator request for a third-party resource at `url` whose payload echoes `bazaar`.
fn third_party_settle(payer: &Payer, server_402: &Value, url: &str, bazaar: Value) -> Value {
    let header = payer.pay_v2(server_402);
    let mut payload: Value = serde_json::from_slice(&B64.decode(header).unwrap()).unwrap();
    payload["resource"] =
        json!({"url": url, "description": "Weather by city", "mimeType": "application/json"});
    payload["extensions"] = json!({"bazaar": bazaar});
    json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload})
}

#[tokio::test]
async fn the_facilitator_catalogues_what_it_settled_when_the_declaration_validates() {
    let server =
        TestServer::start_with(|c| c.facilitator.facilitator_token = Some("fac-token".into()))
            .await;
    let supported = server
        .client
        .get(server.url("/facilitator/supported"))
        .header("authorization", "Bearer fac-token")
        .send()
        .await
        .unwrap();
    assert!(
        json_body(supported).await["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!("bazaar"))
    );
    let before = json_body(server.get("/facilitator/discovery/resources").await).await;
    let own = before["pagination"]["total"].as_u64().unwrap();
    let (required, _) = offer(&server, ARTICLE).await;
    let declaration = x402_tower::extensions::bazaar::Discovery::query(http::Method::GET)
        .query_param("city", "Lisbon", "City name")
        .output_example(json!({"temperature": 21}))
        .declaration();
    let settle = |body: Value| {
        let server = &server;
        async move {
            let resp = server
                .client
                .post(server.url("/facilitator/settle"))
                .header("authorization", "Bearer fac-token")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let r = json_body(resp).await;
            assert_eq!(r["success"], true, "{r}");
        }
    };
    settle(third_party_settle(
        &Payer::random(),
        &required,
        "https://weather.example/forecast?city=Lisbon",
        declaration.clone(),
    ))
    .await;
    // info that breaks its own schema (an extra input field) is settled but not catalogued.
    let mut broken = declaration.clone();
    broken["info"]["input"]["cookie"] = json!("x");
    settle(third_party_settle(
        &Payer::random(),
        &required,
        "https://broken.example/x",
        broken,
    ))
    .await;
    // No declaration: settled, not catalogued.
    let mut plain = third_party_settle(
        &Payer::random(),
        &required,
        "https://plain.example/x",
        json!({}),
    );
    plain["paymentPayload"]
        .as_object_mut()
        .unwrap()
        .remove("extensions");
    settle(plain).await;

    let after = json_body(
        server
            .get(&format!("/facilitator/discovery/resources?offset={own}"))
            .await,
    )
    .await;
    assert_eq!(after["pagination"]["total"], own + 1, "{after}");
    let item = &after["items"][0];
    assert_eq!(item["resource"], "https://weather.example/forecast");
    assert_eq!(item["metadata"]["bazaar"], declaration["info"]);
    assert_eq!(item["metadata"]["description"], "Weather by city");
    assert_eq!(item["accepts"][0], required["accepts"][0]);

    // The same declaration settled again within a minute is not validated and written again (its
    // lastUpdated stays); a changed declaration of the same resource is, at once.
    let listed = || async {
        json_body(
            server
                .get(&format!("/facilitator/discovery/resources?offset={own}"))
                .await,
        )
        .await["items"][0]
            .clone()
    };
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let lisbon = "https://weather.example/forecast?city=Lisbon";
    settle(third_party_settle(
        &Payer::random(),
        &required,
        lisbon,
        declaration.clone(),
    ))
    .await;
    assert_eq!(listed().await["lastUpdated"], item["lastUpdated"]);
    let changed = x402_tower::extensions::bazaar::Discovery::query(http::Method::GET)
        .query_param("city", "Porto", "City name")
        .output_example(json!({"temperature": 19}))
        .declaration();
    settle(third_party_settle(
        &Payer::random(),
        &required,
        lisbon,
        changed.clone(),
    ))
    .await;
    let again = listed().await;
    assert_eq!(again["metadata"]["bazaar"], changed["info"]);
    assert_ne!(again["lastUpdated"], item["lastUpdated"]);
}
