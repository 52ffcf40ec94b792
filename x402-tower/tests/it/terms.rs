//! The `terms` extension in the 402 (fixed and per request), and one resource sold under two offers: which
//! one a payment pays (`VerifiedPayment::offer_index`), for v2 (by `accepted`) and v1 (by its amount).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;
use tower::Layer;
use x402_tower::Price;
use x402_tower::extensions::terms::{Terms, TermsFormat};
use x402_tower::settle::VerifyOnlySettler;
use x402_tower::{VerifiedPayment, X402Layer, settle::SettleTiming};

use crate::support::*;

/// The cheap offer of `support::offer` (0.01) and a dearer one (0.05) for another use.
fn two_offers() -> X402Layer {
    X402Layer::builder(BASE_URL)
        .offer(offer())
        .offer(
            x402_tower::PaymentOffer::usdc(
                "base-sepolia".parse().unwrap(),
                PAY_TO,
                Price::from_usdc_decimal("0.05").unwrap(),
            )
            .unwrap()
            .description("A report, with the right to train on it"),
        )
        .settle_timing(SettleTiming::BeforeHandler)
        .engine(engine_with(Arc::new(VerifyOnlySettler)))
        .build()
        .unwrap()
}

/// An inner service that keeps the payment it saw.
fn recording(
    seen: Arc<Mutex<Option<VerifiedPayment>>>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future: Send,
> + Clone {
    tower::service_fn(move |req: Request<Full<Bytes>>| {
        *seen.lock().unwrap() = req.extensions().get::<VerifiedPayment>().cloned();
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}")))) }
    })
}

#[tokio::test]
async fn a_v2_payment_pays_the_offer_it_accepted_and_the_handler_sees_which() {
    let seen = Arc::new(Mutex::new(None));
    let layer = two_offers();
    let offers = send(layer.layer(recording(seen.clone())), req("/report", &[]))
        .await
        .payment_required()["accepts"]
        .clone();
    assert_eq!(offers.as_array().unwrap().len(), 2);
    for (n, (index, amount)) in [(0usize, 10_000u64), (1, 50_000)].into_iter().enumerate() {
        let mut auth = Auth::v2(40 + n as u8);
        auth.value = alloy_primitives::U256::from(amount);
        let mut payload = payload_v2(&auth, &auth.sign(&signer(), &domain_base_sepolia()));
        payload["accepted"] = offers[index].clone();
        let a = send(
            layer.layer(recording(seen.clone())),
            req("/report", &[("payment-signature", &b64(&payload))]),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{a:?}");
        let paid = seen.lock().unwrap().take().unwrap();
        assert_eq!((paid.offer_index, paid.amount.to::<u64>()), (index, amount));
    }
}

/// A v1 `X-PAYMENT` value authorizing `amount`.
fn v1_paying(nonce: u8, amount: u64) -> String {
    let mut auth = Auth::v1(nonce);
    auth.value = alloy_primitives::U256::from(amount);
    b64(&payload_v1(
        &auth,
        &auth.sign(&signer(), &domain_base_sepolia()),
    ))
}

#[tokio::test]
async fn a_v1_payment_of_the_dearer_price_buys_the_dearer_offer_not_an_overpaid_cheap_one() {
    let seen = Arc::new(Mutex::new(None));
    let layer = two_offers();
    for (nonce, amount, index) in [(50u8, 50_000u64, 1usize), (51, 10_000, 0), (52, 20_000, 0)] {
        let header = v1_paying(nonce, amount);
        let a = send(
            layer.layer(recording(seen.clone())),
            req("/report", &[("x-payment", &header)]),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{a:?}");
        let paid = seen.lock().unwrap().take().unwrap();
        assert_eq!(paid.offer_index, index, "v1 payment of {amount}");
    }
    // Below every price: refused, nothing reaches the handler.
    let header = v1_paying(53, 9_999);
    let a = send(
        layer.layer(recording(seen.clone())),
        req("/report", &[("x-payment", &header)]),
    )
    .await;
    assert_eq!(a.error(), "invalid_exact_evm_payload_authorization_value");
    assert!(seen.lock().unwrap().is_none());
}

#[tokio::test]
async fn fixed_terms_are_declared_in_every_402_beside_the_other_extensions() {
    let terms = Terms::uri("https://shop.example/license.xml").version("7");
    let layer = config()
        .terms(terms.clone())
        .engine(engine_with(Arc::new(VerifyOnlySettler)))
        .build()
        .unwrap();
    let inner = Inner::new();
    let pr = send(
        layer.layer(inner.service(StatusCode::OK)),
        req("/report", &[]),
    )
    .await
    .payment_required();
    assert_eq!(
        pr["extensions"]["terms"],
        json!({"info": {"format": "uri", "terms": "https://shop.example/license.xml", "version": "7"}})
    );
    let ext = pr["extensions"].as_object().unwrap();
    assert_eq!(Terms::declared_in(ext).unwrap(), terms.info().clone());
}

#[tokio::test]
async fn per_request_terms_come_from_the_request_and_are_not_mixed_up_by_the_prebuilt_402s() {
    let layer = config()
        .terms_per_request()
        .engine(engine_with(Arc::new(VerifyOnlySettler)))
        .build()
        .unwrap();
    let inner = Inner::new();
    let ask = |terms: Option<Terms>| {
        let mut r = req("/report", &[]);
        if let Some(t) = terms {
            r.extensions_mut().insert(Arc::new(t));
        }
        let svc = layer.layer(inner.service(StatusCode::OK));
        async move { send(svc, r).await.payment_required() }
    };
    let a = ask(Some(
        Terms::new(TermsFormat::Plaintext, "No training.").version("1"),
    ))
    .await;
    assert_eq!(a["extensions"]["terms"]["info"]["terms"], "No training.");
    // Same resource and offers, terms changed: the new terms, not the 402 built for the old ones.
    let b = ask(Some(
        Terms::new(TermsFormat::Plaintext, "Training allowed.").version("2"),
    ))
    .await;
    assert_eq!(b["extensions"]["terms"]["info"]["version"], "2");
    let none = ask(None).await;
    assert!(
        none.get("extensions")
            .is_none_or(|e| e.get("terms").is_none()),
        "{none}"
    );
}
