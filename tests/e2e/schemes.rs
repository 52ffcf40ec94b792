//! The official v2 client (`@x402/evm` 2.27) pays `exact` over Permit2 and `upto` to an `X402Layer` (a
//! verify-only engine: the signatures, the Permit2 witness and the charge are what is checked here; the
//! settlement on chain needs the x402 proxies on anvil).

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use workspace_tests::clients::{Client, buy};
use workspace_tests::pay::decode_b64_json;
use x402_tower::scheme::{
    Charge, EXACT_PERMIT2_PROXY, FACILITATOR_ADDRESS, SETTLEMENT_OVERRIDES, UPTO_PERMIT2_PROXY,
};
use x402_tower::settle::VerifyOnlySettler;
use x402_tower::{PaymentEngine, PaymentOffer, Price, X402Layer};

use crate::common::payer;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const FACILITATOR: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";

fn usdc() -> PaymentOffer {
    PaymentOffer::usdc(
        "base-sepolia".parse().unwrap(),
        PAY_TO.parse().unwrap(),
        Price::from_usdc_decimal("0.01").unwrap(),
    )
    .unwrap()
}

/// A server on loopback selling `/permit2` (exact over Permit2) and `/upto` (charging 1234 of a 10000
/// maximum in the response's extensions, `/upto-header` 25 % in the official header).
async fn serve() -> String {
    let engine = Arc::new(
        PaymentEngine::builder()
            .settler(Arc::new(VerifyOnlySettler))
            .build()
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let layer = |offer: PaymentOffer| {
        X402Layer::builder(&base)
            .offer(offer)
            .engine(engine.clone())
            .build()
            .unwrap()
    };
    let upto = usdc()
        .scheme("upto")
        .extra(FACILITATOR_ADDRESS, FACILITATOR);
    let app = Router::new()
        .route(
            "/permit2",
            get(|| async { "sold over Permit2" })
                .route_layer(layer(usdc().extra("assetTransferMethod", "permit2"))),
        )
        .route(
            "/upto",
            get(|| async {
                let mut res = axum::response::Response::new(axum::body::Body::from("3 records"));
                res.extensions_mut().insert(Charge::atomic(1234));
                res
            })
            .route_layer(layer(upto.clone())),
        )
        .route(
            "/upto-header",
            get(|| async { ([(SETTLEMENT_OVERRIDES, r#"{"amount":"25%"}"#)], "a quarter") })
                .route_layer(layer(upto)),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn the_official_client_pays_exact_over_permit2() {
    let base = serve().await;
    let (key, address) = payer(2);
    let purchase = buy(Client::JsV2, &format!("{base}/permit2"), key).await;
    assert_eq!(purchase.status, 200, "{purchase:?}");
    assert_eq!(purchase.body, "sold over Permit2");
    let sent = decode_b64_json(purchase.payment_header.as_str().expect("payment header"));
    let auth = &sent["payload"]["permit2Authorization"];
    assert_eq!(
        crate::common::address_in(&auth["spender"]),
        EXACT_PERMIT2_PROXY
    );
    assert_eq!(crate::common::address_in(&auth["from"]), address);
    assert_eq!(auth["permitted"]["amount"], "10000");
    let receipt = &purchase.receipt;
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["transaction"], "verify-only");
}

#[tokio::test]
async fn the_official_client_pays_upto_and_is_charged_what_was_used() {
    let base = serve().await;
    let (key, _) = payer(3);
    for (path, charged) in [("/upto", "1234"), ("/upto-header", "2500")] {
        let purchase = buy(Client::JsV2, &format!("{base}{path}"), key).await;
        assert_eq!(purchase.status, 200, "{path}: {purchase:?}");
        let sent = decode_b64_json(purchase.payment_header.as_str().expect("payment header"));
        let auth = &sent["payload"]["permit2Authorization"];
        assert_eq!(
            crate::common::address_in(&auth["spender"]),
            UPTO_PERMIT2_PROXY
        );
        assert_eq!(
            auth["permitted"]["amount"], "10000",
            "the maximum is signed"
        );
        assert_eq!(
            auth["witness"]["facilitator"]
                .as_str()
                .unwrap()
                .to_lowercase(),
            FACILITATOR.to_lowercase()
        );
        assert_eq!(
            purchase.receipt["amount"], charged,
            "{path}: {}",
            purchase.receipt
        );
    }
}
