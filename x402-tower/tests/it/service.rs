//! Driving the inner service: readiness, dynamic pricing, axum.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use x402_tower::{PaymentOffer, Price, PriceDecision, VerifiedPayment, X402Layer};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inner_service_that_is_not_always_ready() {
    let inner = Inner::new();
    let layer = config().build().unwrap();
    // ConcurrencyLimit panics when called without a permit: a clone that was never polled ready would trip it.
    let svc = ServiceBuilder::new()
        .layer(layer)
        .concurrency_limit(1)
        .service(inner.service(StatusCode::OK));
    let tasks: Vec<_> = (0..8u8)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                send(
                    svc,
                    req("/r", &[("payment-signature", &v2_header(100 + i))]),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(inner.calls(), 8);
    // Buffer, too: the X402 service sits outside a Buffer.
    let buffered = ServiceBuilder::new()
        .layer(config().build().unwrap())
        .buffer(4)
        .concurrency_limit(1)
        .service(inner.service(StatusCode::OK));
    let mut svc = buffered;
    for i in 0..3u8 {
        let r = svc
            .ready()
            .await
            .unwrap()
            .call(req("/r", &[("payment-signature", &v2_header(120 + i))]))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}

fn dynamic_layer() -> X402Layer {
    X402Layer::builder(BASE_URL)
        .price_source(|parts: &http::request::Parts| {
            let path = parts.uri.path().to_owned();
            let query = parts.uri.query().unwrap_or("").to_owned();
            async move {
                // The price comes from a "database".
                tokio::time::sleep(Duration::from_millis(1)).await;
                match (path.as_str(), query.strip_prefix("articleId=")) {
                    ("/free", _) => PriceDecision::Free,
                    ("/x402Article", None) => PriceDecision::Respond(
                        Response::builder()
                            .status(400)
                            .body(Full::new(Bytes::from_static(b"articleId missing")))
                            .unwrap(),
                    ),
                    ("/x402Article", Some("a1")) => PriceDecision::Charge(
                        vec![
                            PaymentOffer::usdc(
                                network("base-sepolia"),
                                PAY_TO,
                                Price::from_usdc_decimal("0.01").unwrap(),
                            )
                            .unwrap(),
                            PaymentOffer::usdc(
                                network("polygon-amoy"),
                                PAY_TO,
                                Price::from_usdc_decimal("0.02").unwrap(),
                            )
                            .unwrap(),
                        ]
                        .into(),
                    ),
                    ("/x402Article", Some(_)) => PriceDecision::Respond(
                        Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"no such article")))
                            .unwrap(),
                    ),
                    _ => PriceDecision::Charge(vec![].into()),
                }
            }
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn dynamic_pricing_decides_free_respond_and_charge() {
    let inner = Inner::new();
    let svc = dynamic_layer().layer(inner.service(StatusCode::OK));
    assert_eq!(
        send(svc.clone(), req("/free", &[])).await.status,
        StatusCode::OK
    );
    assert_eq!(inner.calls(), 1);
    let a = send(svc.clone(), req("/x402Article", &[])).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.header("payment-required").is_none());
    let a = send(svc.clone(), req("/x402Article?articleId=zz", &[])).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = send(svc.clone(), req("/x402Article?articleId=a1", &[])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    let pr = a.payment_required();
    assert_eq!(pr["accepts"].as_array().unwrap().len(), 2);
    assert_eq!(pr["accepts"][1]["amount"], "20000");
    assert_eq!(
        pr["resource"]["url"],
        "https://shop.example/x402Article?articleId=a1"
    );
    let a = send(
        svc.clone(),
        req(
            "/x402Article?articleId=a1",
            &[("payment-signature", &v2_header(1))],
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    // A price source that returns no offer is a server bug: 500, never a free pass.
    assert_eq!(
        send(svc, req("/other", &[])).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn local_chain_with_explicit_token() {
    let token = x402_tower::network::Token::new(
        alloy_primitives::address!("0x5FbDB2315678afecb367f032d93F642f64180aa3"),
        "USD Coin",
        "2",
        6,
    );
    let offer = PaymentOffer::new(
        network("eip155:31337"),
        token,
        PAY_TO,
        Price::from(10_000u64),
    );
    assert!(PaymentOffer::usdc(network("eip155:31337"), PAY_TO, Price::from(1u64)).is_err());
    let inner = Inner::new();
    let svc = X402Layer::builder(BASE_URL)
        .offer(offer)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc.clone(), req("/r", &[])).await;
    assert_eq!(
        a.payment_required()["accepts"][0]["network"],
        "eip155:31337"
    );
    assert_eq!(
        a.json()["accepts"].as_array().unwrap().len(),
        0,
        "no v1 name for a local chain"
    );
    let auth = Auth::v2(1);
    let domain = alloy_sol_types::eip712_domain! {
        name: "USD Coin", version: "2", chain_id: 31337,
        verifying_contract: alloy_primitives::address!("0x5FbDB2315678afecb367f032d93F642f64180aa3"),
    };
    let mut p = payload_v2(&auth, &auth.sign(&signer(), &domain));
    p["accepted"] = a.payment_required()["accepts"][0].clone();
    let a = send(svc, req("/r", &[("payment-signature", &b64(&p))])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
}

#[tokio::test]
async fn config_errors_at_build() {
    use x402_tower::ConfigError;
    assert!(matches!(
        X402Layer::builder(BASE_URL).build(),
        Err(ConfigError::NoPricing)
    ));
    assert!(matches!(
        X402Layer::builder("example.com").offer(offer()).build(),
        Err(ConfigError::BadBaseUrl(_))
    ));
    let zero = PaymentOffer {
        amount: Price::from(0u64),
        ..offer()
    };
    assert!(matches!(
        X402Layer::builder(BASE_URL).offer(zero).build(),
        Err(ConfigError::BadOffer { .. })
    ));
    assert!(matches!(
        x402_tower::PaymentEngine::builder()
            .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
            .max_header_len(10)
            .build(),
        Err(x402_tower::engine::EngineConfigError::HeaderLimitTooSmall(
            10
        ))
    ));
    assert!(matches!(
        config()
            .price_source(|_: &http::request::Parts| async { PriceDecision::Free })
            .build(),
        Err(ConfigError::BothPricings)
    ));
}

#[tokio::test]
async fn axum_route_layer_and_extension() {
    use axum::routing::get;
    async fn handler(axum::Extension(paid): axum::Extension<VerifiedPayment>) -> String {
        format!("licensed to {} for {}", paid.payer, paid.amount)
    }
    let layer = config().build().unwrap();
    let app = axum::Router::new()
        .route("/report", get(handler).route_layer(layer.clone()))
        .route("/health", get(|| async { "ok" }));
    let a = send(app.clone(), req("/health", &[])).await;
    assert_eq!(a.status, StatusCode::OK);
    let a = send(app.clone(), req("/report", &[])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    let a = send(app, req("/report", &[("payment-signature", &v2_header(1))])).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        std::str::from_utf8(&a.body).unwrap(),
        format!("licensed to {ACCOUNT0} for 10000")
    );
    let _ = Arc::new(());
}

#[tokio::test]
async fn a_ready_402_never_outlives_its_price() {
    // The no-payment 402 is kept ready per (offers, resource, page kind): when the price source changes the
    // price of a URL, the next 402 says the new price; HTML and JSON answers are kept apart.
    let price = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(10_000));
    let p = price.clone();
    let layer = x402_tower::X402Layer::builder(BASE_URL)
        .price_source(move |_: &http::request::Parts| {
            let mut o = offer();
            o.amount = x402_tower::Price::from(p.load(std::sync::atomic::Ordering::SeqCst));
            std::future::ready(x402_tower::PriceDecision::Charge(vec![o].into()))
        })
        .build()
        .unwrap();
    let svc = layer.layer(Inner::new().service(StatusCode::OK));
    for expected in ["10000", "10000", "25000", "25000", "10000"] {
        if expected == "25000" {
            price.store(25_000, std::sync::atomic::Ordering::SeqCst);
        } else if price.load(std::sync::atomic::Ordering::SeqCst) == 25_000 {
            price.store(10_000, std::sync::atomic::Ordering::SeqCst);
        }
        let a = send(svc.clone(), req("/r", &[])).await;
        assert_eq!(a.payment_required()["accepts"][0]["amount"], expected);
        assert_eq!(a.json()["accepts"][0]["maxAmountRequired"], expected);
    }
    let html = send(svc.clone(), req("/r", &[("accept", "text/html")])).await;
    assert!(
        html.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    let json = send(svc, req("/r", &[])).await;
    assert_eq!(json.header("content-type"), Some("application/json"));
    assert_eq!(layer.metrics().snapshot().payment_required_sent, 7);
}
