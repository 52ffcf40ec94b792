//! Licensing that machines can read: RSL terms (`/license.xml`, robots.txt, `Link`), the x402 `terms` of
//! each article, two licenses of one article bought at two prices, and crawler identity (Web Bot Auth)
//! recorded with purchases, settlements and llms.txt interest.

use std::time::Duration;

use axum::routing::get;
use indexmap::IndexMap;
use serde_json::Value;
use web_bot_auth::components::{
    CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParametersSet,
};
use web_bot_auth::keyring::Algorithm;
use web_bot_auth::message_signatures::{MessageSigner, UnsignedMessage};

use crate::common::{Payer, TestServer, decode_header};
use crate::licensing::{json, offer};

/// Sold under `inference` (0.04) and `training` (0.1) in the demo catalog.
const TWO: &str = "ai-crawlers-and-licensing";

#[tokio::test]
async fn the_terms_are_published_as_rsl_pointed_at_by_robots_txt_and_link_headers() {
    let server = TestServer::start().await;
    let rsl_link = format!(
        "<{}/license.xml>; rel=\"license\"; type=\"application/rsl+xml\"",
        server.base
    );
    let resp = server.get("/license.xml").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/rsl+xml");
    let xml = resp.text().await.unwrap();
    assert!(xml.contains(r#"<rsl xmlns="https://rslstandard.org/rsl">"#));
    // Every published article, each license with its own price and terms.
    let catalog = json(server.get("/x402Article/list").await).await;
    for a in catalog.as_array().unwrap() {
        let url = format!(
            "{}/x402Article?articleId={}",
            server.base,
            a["id"].as_str().unwrap()
        );
        assert!(xml.contains(&format!("<content url=\"{url}\">")), "{url}");
    }
    assert_eq!(
        xml.matches("<content ").count(),
        catalog.as_array().unwrap().len()
    );
    let one = server
        .get(&format!("/license.xml?articleId={TWO}"))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(one.matches("<license>").count(), 2);
    assert!(one.contains("<permits type=\"usage\">search ai-input ai-index ai-train</permits>"));
    assert!(one.contains("<prohibits type=\"usage\">ai-train</prohibits>"));
    assert!(one.contains("<amount currency=\"USD\">0.04</amount>"));
    assert!(one.contains("<amount currency=\"USD\">0.1</amount>"));
    assert_eq!(
        server.get("/license.xml?articleId=nope").await.status(),
        404
    );

    let robots = server.get("/robots.txt").await.text().await.unwrap();
    assert!(
        robots
            .lines()
            .any(|l| l == format!("License: {}/license.xml", server.base)),
        "{robots}"
    );
    // Link on the catalog, on the 402 and on the paid article.
    let catalog = server.get("/x402Article/list").await;
    assert_eq!(catalog.headers()["link"], rsl_link.as_str());
    let unpaid = server.get(&format!("/x402Article?articleId={TWO}")).await;
    assert_eq!(unpaid.status(), 402);
    assert_eq!(unpaid.headers()["link"], rsl_link.as_str());
    let required = decode_header(&unpaid, "payment-required");
    let paid = server
        .get_with(
            server.url(&format!("/x402Article?articleId={TWO}")),
            "PAYMENT-SIGNATURE",
            Payer::random().pay_v2(&required),
        )
        .await;
    assert_eq!(paid.status(), 200);
    assert_eq!(paid.headers()["link"], rsl_link.as_str());
    // And the license summary in llms.txt.
    let llms = server.get("/llms.txt").await.text().await.unwrap();
    assert!(llms.contains(&format!("{}/license.xml", server.base)));
    assert!(
        llms.contains("license `training`: 0.1 USDC, permits search, ai-input, ai-index, ai-train")
    );
}

#[tokio::test]
async fn two_licenses_are_two_offers_with_their_terms_and_each_purchase_records_its_own() {
    let server = TestServer::start().await;
    let (required, body_v1) = offer(&server, TWO).await;
    let accepts = required["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 2);
    assert_eq!(
        (accepts[0]["amount"].as_str(), accepts[1]["amount"].as_str()),
        (Some("40000"), Some("100000"))
    );
    assert_eq!(body_v1["accepts"].as_array().unwrap().len(), 2);
    // Each offer says which license it sells (`extra.license`), beside the token's EIP-712 domain.
    for (offer, license) in accepts.iter().zip(["inference", "training"]) {
        assert_eq!(offer["extra"]["license"], license, "{offer}");
        assert_eq!(offer["extra"]["version"], "2", "{offer}");
    }
    for (offer, license) in body_v1["accepts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(["inference", "training"])
    {
        assert_eq!(offer["extra"]["license"], license, "{offer}");
    }
    let terms = &required["extensions"]["terms"]["info"];
    assert_eq!(terms["format"], "uri");
    assert_eq!(
        terms["terms"],
        server.url(&format!("/license.xml?articleId={TWO}"))
    );
    let version = terms["version"].as_str().unwrap().to_owned();
    assert_eq!(version.len(), 16);
    // Articles with other terms have another version.
    let (plain, _) = offer(&server, "c2pa-explained").await;
    assert_ne!(
        plain["extensions"]["terms"]["info"]["version"],
        version.as_str()
    );
    assert_eq!(plain["accepts"].as_array().unwrap().len(), 1);

    // `&license=training` offers that one license only; an unknown license is a 404, never a 402.
    let url_training = server.url(&format!("/x402Article?articleId={TWO}&license=training"));
    let one = server
        .get(&format!("/x402Article?articleId={TWO}&license=training"))
        .await;
    assert_eq!(one.status(), 402);
    let one = decode_header(&one, "payment-required");
    assert_eq!(one["accepts"].as_array().unwrap().len(), 1);
    assert_eq!(one["accepts"][0]["amount"], "100000");
    let missing = server
        .get(&format!("/x402Article?articleId={TWO}&license=resale"))
        .await;
    assert_eq!(missing.status(), 404);
    assert!(
        json(missing).await["detail"]
            .as_str()
            .unwrap()
            .contains("inference, training")
    );

    // Inference at the plain URL (the first offer), training at its own URL, and training again by paying
    // the second offer of the plain URL (v2 `accepted` names it) and by a v1 payment of its price.
    let payer = Payer::random();
    let plain_url = server.url(&format!("/x402Article?articleId={TWO}"));
    let mut second = required.clone();
    second["accepts"] = Value::Array(vec![accepts[1].clone()]);
    let mut second_v1 = body_v1.clone();
    second_v1["accepts"] = Value::Array(vec![body_v1["accepts"][1].clone()]);
    let bought = [
        (
            plain_url.clone(),
            "PAYMENT-SIGNATURE",
            payer.pay_v2(&required),
            "inference",
            "40000",
        ),
        (
            url_training.clone(),
            "PAYMENT-SIGNATURE",
            payer.pay_v2(&one),
            "training",
            "100000",
        ),
        (
            plain_url.clone(),
            "PAYMENT-SIGNATURE",
            payer.pay_v2(&second),
            "training",
            "100000",
        ),
        (
            plain_url.clone(),
            "X-PAYMENT",
            payer.pay_v1(&second_v1),
            "training",
            "100000",
        ),
    ];
    for (url, header, value, license, amount) in bought {
        let resp = server.get_with(&url, header, &value).await;
        assert_eq!(resp.status(), 200, "{license} via {header}");
        let body = json(resp).await;
        assert_eq!(body["receipt"]["license"]["id"], license);
        assert_eq!(body["receipt"]["license"]["version"], version.as_str());
        let token = body["receipt"]["nft"]["tokenId"].as_str().unwrap();
        let view = json(server.get(&format!("/receipts/{token}")).await).await;
        assert_eq!(view["license"]["id"], license);
        assert_eq!(view["license"]["version"], version.as_str());
        assert_eq!(
            view["license"]["terms"],
            server.url(&format!("/license.xml?articleId={TWO}"))
        );
        assert_eq!(
            view["amount"], amount,
            "{license}: the price of its own offer"
        );
        // The terms bought, as they were (the article's terms have not changed since).
        let grants = &view["license"]["grants"];
        assert_eq!(grants["id"], license);
        let trains = grants["permits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u == "ai-train");
        assert_eq!(trains, license == "training", "{grants}");
        assert_eq!(body["receipt"]["license"]["grants"], *grants);
    }
    // A v1 payment below the training price but above inference buys inference (what it covers), never
    // training.
    let mut between = body_v1.clone();
    between["accepts"][0]["maxAmountRequired"] = "50000".into();
    let resp = server
        .get_with(&plain_url, "X-PAYMENT", payer.pay_v1(&between))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(json(resp).await["receipt"]["license"]["id"], "inference");
}

/// The Web Bot Auth draft's test key (RFC 9421 B.1.4 `test-key-ed25519`).
const KEYID: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
const PRIVATE: [u8; 32] = [
    0x9f, 0x83, 0x62, 0xf8, 0x7a, 0x48, 0x4a, 0x95, 0x4e, 0x6e, 0x74, 0x0c, 0x5b, 0x4c, 0x0e, 0x84,
    0x22, 0x91, 0x39, 0xa2, 0x0a, 0xa8, 0xab, 0x56, 0xff, 0x66, 0x58, 0x6f, 0x6a, 0x7d, 0x29, 0xc5,
];
const DIRECTORY: &str =
    r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;

/// A crawler's key directory on a loopback port; returns its origin.
async fn directory() -> String {
    let app = axum::Router::new().route(
        "/.well-known/http-message-signatures-directory",
        get(|| async {
            (
                [(
                    "content-type",
                    "application/http-message-signatures-directory+json",
                )],
                DIRECTORY,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    origin
}

/// Headers of a request to `authority` signed by the crawler at `agent`, with `nonce`.
struct Signed {
    authority: String,
    agent: String,
    input: String,
    signature: String,
}

impl UnsignedMessage for Signed {
    fn fetch_components_to_cover(&self) -> IndexMap<CoveredComponent, String> {
        IndexMap::from_iter([
            (
                CoveredComponent::Derived(DerivedComponent::Authority { req: false }),
                self.authority.clone(),
            ),
            (
                CoveredComponent::HTTP(HTTPField {
                    name: "signature-agent".into(),
                    parameters: HTTPFieldParametersSet(vec![]),
                }),
                format!("\"{}\"", self.agent),
            ),
        ])
    }

    fn register_header_contents(&mut self, input: String, signature: String) {
        self.input = format!("sig1={input}");
        self.signature = format!("sig1={signature}");
    }
}

fn sign(server: &TestServer, agent: &str, nonce: &str) -> [(&'static str, String); 3] {
    let mut m = Signed {
        authority: server.base.trim_start_matches("http://").to_owned(),
        agent: agent.to_owned(),
        input: String::new(),
        signature: String::new(),
    };
    MessageSigner {
        keyid: KEYID.into(),
        nonce: nonce.into(),
        tag: "web-bot-auth".into(),
    }
    .generate_signature_headers_content(
        &mut m,
        Duration::from_secs(60),
        Algorithm::Ed25519,
        &PRIVATE,
    )
    .unwrap();
    [
        ("signature-agent", format!("\"{agent}\"")),
        ("signature-input", m.input),
        ("signature", m.signature),
    ]
}

async fn send(
    server: &TestServer,
    path: &str,
    headers: &[(&'static str, String)],
) -> reqwest::Response {
    let mut req = server.client.get(server.url(path));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn a_verified_crawler_is_recorded_with_its_purchase_settlement_and_interest() {
    let agent = directory().await;
    let server = TestServer::start_with(|c| c.bot_auth.bot_agents = vec![agent.clone()]).await;
    let path = format!("/x402Article?articleId={TWO}&license=training");

    // llms.txt read by the signed crawler, and by an unsigned client.
    assert_eq!(
        send(&server, "/llms.txt", &sign(&server, &agent, "n-1"))
            .await
            .status(),
        200
    );
    assert_eq!(server.get("/llms.txt").await.status(), 200);

    // A signed purchase.
    let (required, _) = {
        let resp = send(&server, &path, &sign(&server, &agent, "n-2")).await;
        assert_eq!(resp.status(), 402);
        (decode_header(&resp, "payment-required"), ())
    };
    let mut headers = sign(&server, &agent, "n-3").to_vec();
    headers.push(("payment-signature", Payer::random().pay_v2(&required)));
    let resp = send(&server, &path, &headers).await;
    assert_eq!(resp.status(), 200);
    let token = json(resp).await["receipt"]["nft"]["tokenId"]
        .as_str()
        .unwrap()
        .to_owned();
    let view = json(server.get(&format!("/receipts/{token}")).await).await;
    assert_eq!(view["agent"], agent.as_str());
    let settlements = json(server.operator_get("/operator/settlements").await).await;
    assert_eq!(settlements["settlements"][0]["agent"], agent.as_str());

    // A replayed signature (same nonce) and a tampered one are served as unsigned: no agent recorded.
    for tampered in [false, true] {
        let (required, _) = offer(&server, TWO).await;
        let mut headers = sign(&server, &agent, "n-3").to_vec();
        if tampered {
            // Signed for one nonce, sent with another in its parameters: the signature no longer verifies.
            headers = sign(&server, &agent, "n-4").to_vec();
            headers[1].1 = headers[1].1.replace("\"n-4\"", "\"n-9\"");
        }
        headers.push(("payment-signature", Payer::random().pay_v2(&required)));
        let resp = send(&server, &format!("/x402Article?articleId={TWO}"), &headers).await;
        assert_eq!(
            resp.status(),
            200,
            "served as unsigned, never refused for that"
        );
        let token = json(resp).await["receipt"]["nft"]["tokenId"]
            .as_str()
            .unwrap()
            .to_owned();
        let view = json(server.get(&format!("/receipts/{token}")).await).await;
        assert!(view.get("agent").is_none(), "{view}");
    }
    // An agent the operator did not allow is never trusted (nor fetched).
    let stranger = directory().await;
    let resp = send(&server, "/llms.txt", &sign(&server, &stranger, "n-5")).await;
    assert_eq!(resp.status(), 200);

    // The operator's view: per agent and per license.
    server
        .state
        .interest
        .flush(&*server.state.licensing)
        .await
        .unwrap();
    let view = json(server.operator_get("/operator/licensing").await).await;
    let by_agent = view["by_agent"].as_array().unwrap();
    let crawler = by_agent
        .iter()
        .find(|a| a["agent"] == agent.as_str())
        .unwrap();
    assert_eq!(crawler["purchases"], 1);
    assert_eq!(crawler["llms_txt_requests"], 1);
    assert_eq!(crawler["licenses"]["training"], 1);
    assert_eq!(crawler["amount_atomic"], 100_000);
    let unsigned = by_agent.iter().find(|a| a["agent"] == "").unwrap();
    assert_eq!(unsigned["purchases"], 2);
    assert_eq!(
        unsigned["llms_txt_requests"], 2,
        "the unsigned and the stranger's"
    );
    let training = view["by_license"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["article_id"] == TWO && l["license_id"] == "training")
        .unwrap();
    assert_eq!(training["agents"], serde_json::json!([agent]));
    assert_eq!(server.get("/operator/licensing").await.status(), 401);
    assert_eq!(
        server
            .operator_get("/operator/licensing?days=0")
            .await
            .status(),
        400
    );

    // Metrics count each outcome.
    let metrics = server.get("/metrics").await.text().await.unwrap();
    for outcome in [
        "verified",
        "replayed_nonce",
        "bad_signature",
        "agent_not_allowed",
    ] {
        assert!(
            metrics.contains(&format!(
                "web_bot_auth_requests_total{{outcome=\"{outcome}\"}}"
            )),
            "{outcome}"
        );
    }
}

#[tokio::test]
async fn a_path_can_require_a_verified_signature() {
    let agent = directory().await;
    let server = TestServer::start_with(|c| {
        c.bot_auth.bot_agents = vec![agent.clone()];
        c.bot_auth.bot_require = vec!["/x402Article".into()];
    })
    .await;
    let path = format!("/x402Article?articleId={TWO}");
    let unsigned = server.get(&path).await;
    assert_eq!(unsigned.status(), 401);
    assert_eq!(unsigned.headers()["www-authenticate"], "Signature");
    assert_eq!(json(unsigned).await["code"], "signature_required");
    assert_eq!(
        send(&server, &path, &sign(&server, &agent, "r-1"))
            .await
            .status(),
        402
    );
    // Other paths are unaffected.
    assert_eq!(server.get("/llms.txt").await.status(), 200);
}

/// A two-license article's 402 with every extension this server declares (bazaar, offer-receipt, terms,
/// sign-in-with-x) is at most 8 KB on the wire: each document once (`X-Payment-Required` without the
/// extensions), the v1 body for v1 clients.
#[tokio::test]
async fn a_two_license_402_with_every_extension_is_at_most_8_kb() {
    let server = TestServer::start().await;
    let resp = server.get(&format!("/x402Article?articleId={TWO}")).await;
    assert_eq!(resp.status(), 402);
    let v2 = decode_header(&resp, "payment-required");
    assert_eq!(v2["accepts"].as_array().unwrap().len(), 2);
    let declared: Vec<&str> = v2["extensions"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in ["bazaar", "offer-receipt", "terms", "sign-in-with-x"] {
        assert!(declared.contains(&key), "{key} in {declared:?}");
    }
    let head = "HTTP/1.1 402 Payment Required\r\n".len()
        + resp
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
            .sum::<usize>()
        + 2;
    let body = resp.bytes().await.unwrap().len();
    assert!(head + body <= 8000, "{head} + {body} bytes");
}

/// With `--transfer-methods eip3009,permit2`, each license is offered over EIP-3009 and then over Permit2;
/// a Permit2 payment buys the license its offer sells, and its nonce settles once.
#[tokio::test]
async fn a_license_bought_over_permit2_is_the_license_its_offer_sells() {
    let server = TestServer::start_with(|c| {
        c.payment.transfer_methods = vec!["eip3009".into(), "permit2".into()];
    })
    .await;
    let (required, _) = offer(&server, TWO).await;
    let accepts = required["accepts"].as_array().unwrap().clone();
    let licenses = accepts.len() / 2;
    assert!(licenses >= 2, "{required}");
    for (i, offer) in accepts.iter().enumerate() {
        let over_permit2 = offer["extra"]["assetTransferMethod"] == "permit2";
        assert_eq!(over_permit2, i >= licenses, "EIP-3009 first: {offer}");
        assert_eq!(
            offer["extra"]["license"],
            accepts[i % licenses]["extra"]["license"]
        );
    }
    // The second license, over Permit2.
    let chosen = accepts[licenses + 1].clone();
    let mut one = required.clone();
    one["accepts"] = serde_json::json!([chosen]);
    let header = Payer::new().pay_v2(&one);
    let url = server.url(&format!("/x402Article?articleId={TWO}"));
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 200);
    let body = json(resp).await;
    assert_eq!(body["receipt"]["license"]["id"], chosen["extra"]["license"]);
    let sent: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &header).unwrap(),
    )
    .unwrap();
    assert!(
        sent["payload"]["permit2Authorization"].is_object(),
        "{sent}"
    );
    // The same Permit2 nonce for another article: already used.
    let other = server.url("/x402Article?articleId=provenance-newsroom-2025");
    let resp = server.get_with(&other, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 402);
}
