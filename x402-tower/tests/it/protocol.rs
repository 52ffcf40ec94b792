//! The 402 answer, both versions, both headers, HTML, receipts.

use http::StatusCode;
use tower::Layer;
use x402_tower::settle::SettleTiming;

use crate::support::*;

#[tokio::test]
async fn no_payment_gets_the_spec_402() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/report?id=7", &[("host", "evil.example")])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(a.header("cache-control"), Some("no-store"));
    assert_eq!(a.header("content-type"), Some("application/json"));
    // The v2 document names the v2 header, the v1 body the v1 header (`error()` checks both).
    assert_eq!(a.error(), "PAYMENT-SIGNATURE header is required");
    assert_eq!(a.json()["error"], "X-PAYMENT header is required");
    // The v2 document in PAYMENT-REQUIRED; no X-Payment-Required unless asked for.
    assert_eq!(a.header("x-payment-required"), None);
    let pr = a.payment_required();
    assert_eq!(pr["x402Version"], 2);
    assert_eq!(pr["resource"]["url"], "https://shop.example/report?id=7");
    assert_eq!(pr["resource"]["description"], "A report");
    assert_eq!(pr["resource"]["mimeType"], "application/json");
    assert_eq!(pr["accepts"][0], accepted_v2());
    // v1 body as the legacy client's schema wants it: no nulls, absolute resource, strings.
    let body = a.json();
    assert_eq!(body["x402Version"], 1);
    let acc = &body["accepts"][0];
    assert_eq!(acc["scheme"], "exact");
    assert_eq!(acc["network"], "base-sepolia");
    assert_eq!(acc["maxAmountRequired"], "10000");
    assert_eq!(acc["resource"], "https://shop.example/report?id=7");
    assert_eq!(acc["description"], "A report");
    assert_eq!(acc["mimeType"], "application/json");
    assert_eq!(acc["payTo"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
    assert_eq!(acc["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    assert_eq!(acc["maxTimeoutSeconds"], 300);
    assert_eq!(
        acc["extra"],
        serde_json::json!({"name": "USDC", "version": "2"})
    );
    assert!(
        !a.body.windows(4).any(|w| w == b"null"),
        "no nulls in the v1 body"
    );
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn empty_description_is_an_empty_string_not_null() {
    let inner = Inner::new();
    let o = offer().description("").mime_type("");
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(o)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[])).await;
    assert_eq!(a.json()["accepts"][0]["mimeType"], "");
    assert_eq!(a.json()["accepts"][0]["description"], "");
}

#[tokio::test]
async fn v2_only_networks_are_not_offered_to_v1_clients() {
    let inner = Inner::new();
    let arb =
        x402_tower::PaymentOffer::usdc(network("arbitrum"), PAY_TO, x402_tower::Price::from(5u64))
            .unwrap();
    let svc = config()
        .offer(arb)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[])).await;
    assert_eq!(a.json()["accepts"].as_array().unwrap().len(), 1);
    let pr = a.payment_required();
    assert_eq!(pr["accepts"].as_array().unwrap().len(), 2);
    assert_eq!(pr["accepts"][1]["network"], "eip155:42161");
    assert_eq!(pr["accepts"][1]["extra"]["name"], "USD Coin");
}

#[tokio::test]
async fn browser_gets_html_with_the_same_headers() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let a = send(svc, req("/report", &[("accept", accept)])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(a.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(a.header("cache-control"), Some("no-store"));
    assert_eq!(a.payment_required()["x402Version"], 2);
    let html = std::str::from_utf8(&a.body).unwrap();
    assert!(html.contains("0.01 USDC"), "{html}");
    assert!(html.contains("base-sepolia"));
    assert!(html.contains("x402"));
}

#[tokio::test]
async fn v2_payment_accepted_with_v2_receipt() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/report", &[("payment-signature", &v2_header(1))])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(a.header("cache-control"), Some("private"));
    assert!(a.header("x-payment-response").is_none());
    let r = a.receipt("payment-response");
    assert!(r.success);
    assert_eq!(r.transaction, "verify-only");
    assert_eq!(r.network, "eip155:84532");
    assert_eq!(
        r.payer.as_deref(),
        Some("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266")
    );
    assert_eq!(
        a.json()["payer"],
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    );
    assert_eq!(inner.calls(), 1);
}

#[tokio::test]
async fn v1_payment_accepted_with_v1_receipt() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/report", &[("x-payment", &v1_header(2))])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert!(a.header("payment-response").is_none());
    let r = a.receipt("x-payment-response");
    assert!(r.success);
    assert_eq!(r.network, "base-sepolia");
}

#[tokio::test]
async fn version_is_taken_from_the_payload_not_the_header_name() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    // A v1 payload in the v2 header is a v1 payment.
    let a = send(
        svc.clone(),
        req("/report", &[("payment-signature", &v1_header(3))]),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.header("x-payment-response").is_some());
    // A v2 payload in the v1 header is a v2 payment.
    let a = send(svc, req("/report", &[("x-payment", &v2_header(4))])).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.header("payment-response").is_some());
}

#[tokio::test]
async fn whitespace_around_the_header_is_tolerated_and_cache_control_merged() {
    let inner = Inner::new();
    let calls = inner.calls.clone();
    let svc = tower::service_fn(
        move |_req: http::Request<http_body_util::Full<bytes::Bytes>>| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("cache-control", "public, max-age=60")
                        .body(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
                        .unwrap(),
                )
            }
        },
    );
    let svc = config().build().unwrap().layer(svc);
    let h = format!("  {}  ", v2_header(5));
    let a = send(svc, req("/report", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(a.header("cache-control"), Some("private, max-age=60"));
}

#[tokio::test]
async fn expose_headers_option() {
    let inner = Inner::new();
    let svc = config()
        .expose_headers(true)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc.clone(), req("/report", &[])).await;
    let expose = a.header("access-control-expose-headers").unwrap();
    for h in [
        "PAYMENT-REQUIRED",
        "PAYMENT-RESPONSE",
        "X-PAYMENT-RESPONSE",
        "X-Payment-Required",
    ] {
        assert!(expose.contains(h));
    }
    let a = send(svc, req("/report", &[("payment-signature", &v2_header(6))])).await;
    assert!(a.header("access-control-expose-headers").is_some());
    let plain = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(plain, req("/report", &[])).await;
    assert!(a.header("access-control-expose-headers").is_none());
}

#[tokio::test]
async fn metrics_count() {
    let inner = Inner::new();
    let layer = config().build().unwrap();
    let svc = layer.layer(inner.service(StatusCode::OK));
    send(svc.clone(), req("/r", &[])).await;
    send(svc.clone(), req("/r", &[("x-payment", "garbage")])).await;
    send(
        svc.clone(),
        req("/r", &[("payment-signature", &v2_header(7))]),
    )
    .await;
    let m = layer.metrics().snapshot();
    assert_eq!(m.payment_required_sent, 2);
    assert_eq!(m.payments_accepted, 1);
    assert_eq!(m.rejected_for("invalid_payload"), 1);
    assert_eq!(m.settlements_failed, 0);
}

/// `X-Payment-Required`, when asked for, is the v2 document without the extensions (which only v2 clients
/// read, in PAYMENT-REQUIRED); a 402 carries each once, and stays small.
#[tokio::test]
async fn x_payment_required_is_the_document_without_extensions() {
    let inner = Inner::new();
    let plain = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(plain, req("/report", &[])).await;
    // One offer, no extensions: at most 1.5 KB on the wire (status line, headers, body), with the `Date`
    // and `Content-Length` a server adds.
    let wire = "HTTP/1.1 402 Payment Required\r\n".len()
        + a.headers_len()
        + "date: Fri, 04 Dec 2026 18:19:10 GMT\r\ncontent-length: 9999\r\n\r\n".len()
        + a.body.len();
    assert!(wire <= 1536, "{wire} bytes");

    let with = config()
        .x_payment_required(true)
        .discovery(x402_tower::extensions::bazaar::Discovery::query(
            http::Method::GET,
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(with, req("/report", &[])).await;
    let v2 = a.payment_required();
    assert!(v2["extensions"]["bazaar"].is_object());
    let legacy = unb64(a.header("x-payment-required").unwrap());
    assert!(legacy.get("extensions").is_none());
    assert_eq!(legacy["accepts"], v2["accepts"]);
    assert_eq!(legacy["resource"], v2["resource"]);
    assert_eq!(legacy["error"], "PAYMENT-SIGNATURE header is required");
}

#[tokio::test]
async fn a_rejected_browser_payment_still_gets_html_with_the_reason() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(
        svc,
        req("/report", &[("accept", "text/html"), ("x-payment", "%%%")]),
    )
    .await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    let error = a.payment_required()["error"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with("invalid_payload: the payment header is not Base64"),
        "{error}"
    );
    assert!(
        std::str::from_utf8(&a.body)
            .unwrap()
            .contains("the payment header is not Base64")
    );
}

/// A payment that cannot be read is logged (`payment refused`, at info) with the same words as its 402, and
/// the resource.
#[test]
fn an_unreadable_payment_is_logged_with_why() {
    let logged = logs_of(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let svc = config()
            .build()
            .unwrap()
            .layer(Inner::new().service(StatusCode::OK));
        let a = rt.block_on(send(
            svc,
            req("/report", &[("payment-signature", "garbage!")]),
        ));
        assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    });
    assert!(
        logged.contains("payment refused")
            && logged.contains("reason=\"invalid_payload\"")
            && logged.contains("the payment header is not Base64")
            && logged.contains("resource=\"https://shop.example/report\""),
        "{logged}"
    );
}

/// A payment that cannot be read gets a 402 whose `error` is the spec's code, then what failed: the Base64,
/// the JSON (where), the payload's shape (which field), or the length cap.
#[tokio::test]
async fn an_unreadable_payment_is_told_why() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let b64s = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let mut missing = payload_v2(
        &Auth::v2(1),
        &Auth::v2(1).sign(&signer(), &domain_base_sepolia()),
    );
    missing["payload"]
        .as_object_mut()
        .unwrap()
        .remove("authorization");
    let cases = [
        ("garbage!", "the payment header is not Base64"),
        (
            &*b64s("{\"x402Version\": 2,"),
            "the decoded payment header is not JSON: EOF while parsing",
        ),
        (&*b64s("[2]"), "not a JSON object"),
        (
            &*b64(&missing),
            "not an exact/EVM payload: missing field `authorization`",
        ),
        (
            &*b64s(r#"{"x402Version":1,"scheme":"exact"}"#),
            "not a v1 PaymentPayload: missing field",
        ),
    ];
    for (header, why) in cases {
        let a = send(
            svc.clone(),
            req("/report", &[("payment-signature", header)]),
        )
        .await;
        let error = a.error();
        assert!(error.starts_with("invalid_payload: "), "{error}");
        assert!(error.contains(why), "{header}: {error}");
        assert!(error.len() < 260, "{error}");
    }
    // The parser's words are capped: a long unknown value is not echoed whole.
    let long = b64s(&format!(
        r#"{{"x402Version":2,"accepted":"{}"}}"#,
        "x".repeat(4000)
    ));
    let error = send(svc, req("/report", &[("payment-signature", &long)]))
        .await
        .error();
    assert!(error.len() < 260, "{error}");
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn client_host_header_does_not_leak_into_resource_urls() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let r = http::Request::get("http://evil.example/report?a=1")
        .header("host", "evil.example")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let a = send(svc, r).await;
    assert_eq!(
        a.payment_required()["resource"]["url"],
        "https://shop.example/report?a=1"
    );
    assert_eq!(
        a.json()["accepts"][0]["resource"],
        "https://shop.example/report?a=1"
    );
}

#[tokio::test]
async fn base64_padding_is_optional() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    // Pad the JSON until its Base64 needs `=` padding, then send it without.
    let a = Auth::v2(40);
    let sig = a.sign(&signer(), &domain_base_sepolia());
    let h = (0..3)
        .map(|k| {
            let mut p = payload_v2(&a, &sig);
            p["extensions"] = serde_json::json!({"p": "x".repeat(k)});
            b64(&p)
        })
        .find(|h| h.ends_with('='))
        .expect("some length needs padding");
    let a = send(
        svc,
        req("/report", &[("payment-signature", h.trim_end_matches('='))]),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
}

#[tokio::test]
async fn header_length_cap_applies_before_decoding() {
    // A valid, signed payment made long by an `extensions` object: accepted under the default cap, an
    // `invalid_payload` 402 under a cap it exceeds (nothing decoded, the handler never runs).
    let a = Auth::v2(7);
    let mut p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    p["extensions"] = serde_json::json!({"pad": "x".repeat(1500)});
    let h = b64(&p);
    assert!(h.len() > 2048 && h.len() < 16 * 1024);

    let inner = Inner::new();
    let svc = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .max_header_len(2048)
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let res = send(svc, req("/report", &[("payment-signature", &h)])).await;
    assert!(
        res.error()
            .starts_with("invalid_payload: the payment header is ")
            && res
                .error()
                .ends_with("bytes, more than this server reads (2048)"),
        "{res:?}"
    );
    assert_eq!(inner.calls(), 0);

    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let res = send(svc, req("/report", &[("payment-signature", &h)])).await;
    assert_eq!(res.status, StatusCode::OK, "{res:?}");
    assert_eq!(inner.calls(), 1);
}

/// A v2 payment header (nonce byte `nonce`) carrying a payment-identifier `id`.
fn v2_header_with_id(nonce: u8, id: &str) -> String {
    let a = Auth::v2(nonce);
    let mut p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    p["extensions"] =
        serde_json::json!({"payment-identifier": {"info": {"required": false, "id": id}}});
    b64(&p)
}

#[tokio::test]
async fn no_method_but_the_sold_ones_is_charged_in_either_timing() {
    for timing in [SettleTiming::AfterResponse, SettleTiming::BeforeHandler] {
        let inner = Inner::new();
        let settler = Scripted::new(settled_outcome());
        let svc = config()
            .settle_timing(timing)
            .engine(engine_with(settler.clone()))
            .build()
            .unwrap()
            .layer(inner.service(StatusCode::OK));
        let h = v2_header(0x40);
        for method in [
            "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
        ] {
            let mut r = req("/r", &[("payment-signature", &h)]);
            *r.method_mut() = method.parse().unwrap();
            let a = send(svc.clone(), r).await;
            assert_eq!(
                a.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {timing:?}"
            );
            assert_eq!(a.header("allow"), Some("GET, HEAD"));
            assert!(a.header("payment-required").is_none());
        }
        // HEAD learns the price and never spends the payment.
        let mut r = req("/r", &[("payment-signature", &h)]);
        *r.method_mut() = http::Method::HEAD;
        let a = send(svc.clone(), r).await;
        assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
        assert!(a.header("payment-required").is_some());
        assert_eq!((settler.settles(), inner.calls()), (0, 0), "{timing:?}");
        // The untouched payment still buys the resource with GET.
        let a = send(svc, req("/r", &[("payment-signature", &h)])).await;
        assert_eq!(a.status, StatusCode::OK, "{timing:?}");
        assert_eq!((settler.settles(), inner.calls()), (1, 1));
    }
}

#[tokio::test]
async fn post_can_be_sold_explicitly() {
    let inner = Inner::new();
    let svc = config()
        .methods([http::Method::POST])
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let mut r = req("/r", &[("payment-signature", &v2_header(0x41))]);
    *r.method_mut() = http::Method::POST;
    assert_eq!(send(svc.clone(), r).await.status, StatusCode::OK);
    let a = send(svc, req("/r", &[])).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.header("allow"), Some("POST"));
}

#[tokio::test]
async fn payment_identifier_declared_cached_conflicting_and_required() {
    let inner = Inner::new();
    let settler = Scripted::new(settled_outcome());
    let svc = config()
        .payment_identifier(false)
        .engine(engine_with(settler.clone()))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc.clone(), req("/r", &[])).await;
    assert_eq!(
        a.payment_required()["extensions"]["payment-identifier"]["info"]["required"],
        false
    );
    let id = "pay_7d5d747be160e280504c099d984bcfe0";
    let h = v2_header_with_id(0x50, id);
    let first = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(first.status, StatusCode::OK);
    let again = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.receipt("payment-response"),
        first.receipt("payment-response")
    );
    // The same id with another payment, or the same payment for another resource: 409.
    let other = v2_header_with_id(0x51, id);
    let a = send(svc.clone(), req("/r", &[("payment-signature", &other)])).await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    let a = send(svc.clone(), req("/elsewhere", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    // A malformed id: 400; no id on an optional route: fine.
    let a = send(
        svc.clone(),
        req(
            "/r",
            &[("payment-signature", &v2_header_with_id(0x52, "short"))],
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["code"], "invalid_payment_identifier");
    assert_eq!(a.header("content-type"), Some("application/problem+json"));
    assert_eq!(
        send(svc, req("/r", &[("payment-signature", &v2_header(0x53))]))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(settler.settles(), 2);

    let required = config()
        .payment_identifier(true)
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let a = send(required.clone(), req("/r", &[])).await;
    assert_eq!(
        a.payment_required()["extensions"]["payment-identifier"]["info"]["required"],
        true
    );
    for h in [v2_header(0x54), v1_header(0x55)] {
        let a = send(required.clone(), req("/r", &[("payment-signature", &h)])).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert_eq!(a.json()["code"], "payment_identifier_required");
    }
}

#[tokio::test]
async fn payment_identifiers_expire_with_their_payments_record() {
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(now()));
    let c = clock.clone();
    let svc = config()
        .payment_identifier(false)
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .clock(move || c.load(std::sync::atomic::Ordering::SeqCst))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let id = "pay_00000000000000000000000000000001";
    let h = v2_header_with_id(0x56, id);
    assert_eq!(
        send(svc.clone(), req("/r", &[("payment-signature", &h)]))
            .await
            .status,
        StatusCode::OK
    );
    // The id is bound as long as the payment's record is kept: 15 minutes (the default keep_after_expiry)
    // past its validBefore (now + 300). Before that another payment under it is a conflict; after, the id
    // is free for a new purchase.
    let mut a = Auth::v2(0x57);
    let later = now() + 300 + 15 * 60;
    a.valid_before = later + 300;
    let mut p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    p["extensions"] =
        serde_json::json!({"payment-identifier": {"info": {"required": false, "id": id}}});
    clock.store(later - 2, std::sync::atomic::Ordering::SeqCst);
    let r = send(svc.clone(), req("/r", &[("payment-signature", &b64(&p))])).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    clock.store(later + 1, std::sync::atomic::Ordering::SeqCst);
    let r = send(svc, req("/r", &[("payment-signature", &b64(&p))])).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_payment_identifier_with_concurrent_different_payments_lets_one_through() {
    let settler = Scripted::new(settled_outcome());
    let svc = config()
        .payment_identifier(true)
        .engine(engine_with(settler.clone()))
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let id = "pay_00000000000000000000000000000099";
    let tasks: Vec<_> = (0..8u8)
        .map(|i| {
            let svc = svc.clone();
            let h = v2_header_with_id(0x60 + i, id);
            tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &h)])).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap().status);
    }
    statuses.sort();
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::CONFLICT)
            .count(),
        7
    );
    assert_eq!(settler.settles(), 1);
}
