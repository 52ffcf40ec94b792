//! A paid route's payment header, as any client may send it (v2 `PAYMENT-SIGNATURE` or v1 `X-PAYMENT`),
//! through the whole layer (offering every built-in scheme): decoding, verification, the engine. Never a panic; always an answer.
#![no_main]

use std::sync::LazyLock;

use bytes::Bytes;
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;
use tower_layer::Layer;
use x402_tower::{PaymentOffer, Price, X402Layer};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

static LAYER: LazyLock<X402Layer> = LazyLock::new(|| {
    let offer = PaymentOffer::usdc(
        "base-sepolia".parse().expect("network"),
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
            .parse()
            .expect("address"),
        Price::from_usdc_decimal("0.01").expect("price"),
    )
    .expect("offer");
    // Every built-in scheme: `exact` over EIP-3009 and Permit2, `upto`.
    X402Layer::builder("https://shop.example")
        .offer(offer.clone())
        .offer(offer.clone().extra("assetTransferMethod", "permit2"))
        .offer(
            offer
                .scheme("upto")
                .extra("facilitatorAddress", "0x90F79bf6EB2c4f870365E785982E1f101E93b906"),
        )
        .build()
        .expect("layer")
});

fuzz_target!(|data: &[u8]| {
    let Ok(value) = http::HeaderValue::from_bytes(data) else {
        return;
    };
    for name in ["payment-signature", "x-payment"] {
        let svc = LAYER.layer(tower::service_fn(
            |_req: http::Request<Full<Bytes>>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::new())))
            },
        ));
        let req = http::Request::get("/report")
            .header(name, value.clone())
            .body(Full::new(Bytes::new()))
            .expect("request");
        let res = RUNTIME.block_on(svc.oneshot(req)).expect("infallible");
        assert!(
            res.status().as_u16() < 500 || res.status().as_u16() == 503,
            "{:?}",
            res.status()
        );
    }
});
