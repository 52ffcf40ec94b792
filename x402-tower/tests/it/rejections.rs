//! Every rejection reason is a 402 with the spec's error string, and the inner service never runs.

use alloy_primitives::{U256, address};
use http::StatusCode;
use serde_json::json;
use tower::Layer;

use crate::support::*;

async fn rejected_with(header_name: &str, header: &str) -> String {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/report", &[(header_name, header)])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED, "{a:?}");
    assert_eq!(a.header("cache-control"), Some("no-store"));
    assert_eq!(
        a.payment_required()["accepts"][0],
        accepted_v2(),
        "a rejection carries the requirements"
    );
    assert_eq!(inner.calls(), 0);
    // The spec's code; an unreadable payment's reason follows a colon.
    let error = a.error();
    match error.split_once(": ") {
        Some((code, why)) if code == "invalid_payload" && !why.is_empty() => code.to_owned(),
        _ => error,
    }
}

fn signed_v2(auth: &Auth) -> String {
    b64(&payload_v2(
        auth,
        &auth.sign(&signer(), &domain_base_sepolia()),
    ))
}

fn signed_v1(auth: &Auth) -> String {
    b64(&payload_v1(
        auth,
        &auth.sign(&signer(), &domain_base_sepolia()),
    ))
}

#[tokio::test]
async fn undecodable_headers_are_invalid_payload() {
    let long = "A".repeat(20_000);
    let cases = [
        "not base64 !!!".to_owned(),
        b64_raw(b"not json"),
        b64_raw(b"[1,2,3]"),
        b64(&json!({"x402Version": 2})),
        b64(&json!({"x402Version": 1, "scheme": "exact"})),
        b64(&json!({"x402Version": 2, "accepted": accepted_v2(), "payload": {"signature": 5}})),
        // A whole v2 payment labelled v1 is not a v1 payment.
        b64(&{
            let a = Auth::v2(1);
            let mut p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
            p["x402Version"] = json!(1);
            p
        }),
        // Two versions: which one counts is not guessed.
        b64_raw(
            {
                let a = Auth::v2(1);
                let p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia())).to_string();
                format!(r#"{{"x402Version":1,{}"#, &p[1..])
            }
            .as_bytes(),
        ),
        long,
        String::new(),
    ];
    for h in cases {
        assert_eq!(
            rejected_with("payment-signature", &h).await,
            "invalid_payload",
            "{h:.40}"
        );
    }
}

fn b64_raw(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[tokio::test]
async fn unknown_version() {
    for v in [json!(3), json!(0), json!("2"), json!(null), json!(2.5)] {
        let mut p = payload_v2(&Auth::v2(1), "0x00");
        p["x402Version"] = v;
        assert_eq!(
            rejected_with("x-payment", &b64(&p)).await,
            "invalid_x402_version"
        );
    }
}

#[tokio::test]
async fn wrong_scheme() {
    let a = Auth::v2(1);
    let mut p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    p["accepted"]["scheme"] = json!("upto");
    assert_eq!(
        rejected_with("payment-signature", &b64(&p)).await,
        "invalid_scheme"
    );
    let mut p = payload_v1(&a, "0x00");
    p["scheme"] = json!("upto");
    assert_eq!(rejected_with("x-payment", &b64(&p)).await, "invalid_scheme");
}

#[tokio::test]
async fn unknown_network() {
    let a = Auth::v2(1);
    let mut p = payload_v2(&a, "0x00");
    p["accepted"]["network"] = json!("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
    assert_eq!(
        rejected_with("payment-signature", &b64(&p)).await,
        "invalid_network"
    );
    let mut p = payload_v1(&a, "0x00");
    p["network"] = json!("solana");
    assert_eq!(
        rejected_with("x-payment", &b64(&p)).await,
        "invalid_network"
    );
}

#[tokio::test]
async fn no_matching_offer() {
    let a = Auth::v2(1);
    let sig = a.sign(&signer(), &domain_base_sepolia());
    for (k, v) in [
        ("amount", json!("5000")),
        ("network", json!("eip155:8453")),
        ("payTo", json!("0x0000000000000000000000000000000000000001")),
        ("maxTimeoutSeconds", json!(60)),
        ("extra", json!({"name": "USD Coin", "version": "2"})),
    ] {
        let mut p = payload_v2(&a, &sig);
        p["accepted"][k] = v;
        assert_eq!(
            rejected_with("payment-signature", &b64(&p)).await,
            "No matching payment requirements",
            "{k}"
        );
    }
    let mut p = payload_v1(&a, &sig);
    p["network"] = json!("base");
    assert_eq!(
        rejected_with("x-payment", &b64(&p)).await,
        "No matching payment requirements"
    );
}

#[tokio::test]
async fn accepted_matches_semantically() {
    // Lowercase addresses, padded amount, reordered keys: still the same offer.
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = Auth::v2(9);
    let mut p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    p["accepted"] = json!({
        "extra": {"version": "2", "name": "USDC"},
        "payTo": PAY_TO.to_string().to_lowercase(),
        "asset": USDC_BASE_SEPOLIA.to_string().to_lowercase(),
        "amount": "00010000",
        "maxTimeoutSeconds": 300,
        "network": "eip155:84532",
        "scheme": "exact",
    });
    let res = send(svc, req("/report", &[("payment-signature", &b64(&p))])).await;
    assert_eq!(res.status, StatusCode::OK, "{res:?}");
}

#[tokio::test]
async fn recipient_mismatch() {
    let a = Auth {
        to: address!("0x0000000000000000000000000000000000000bad"),
        ..Auth::v2(1)
    };
    assert_eq!(
        rejected_with("payment-signature", &signed_v2(&a)).await,
        "invalid_exact_evm_payload_recipient_mismatch"
    );
    let a = Auth {
        to: address!("0x0000000000000000000000000000000000000bad"),
        ..Auth::v1(1)
    };
    assert_eq!(
        rejected_with("x-payment", &signed_v1(&a)).await,
        "invalid_exact_evm_payload_recipient_mismatch"
    );
}

#[tokio::test]
async fn amounts() {
    let low = Auth {
        value: U256::from(9_999u64),
        ..Auth::v1(1)
    };
    assert_eq!(
        rejected_with("x-payment", &signed_v1(&low)).await,
        "invalid_exact_evm_payload_authorization_value"
    );
    let high = Auth {
        value: U256::from(10_001u64),
        ..Auth::v2(1)
    };
    assert_eq!(
        rejected_with("payment-signature", &signed_v2(&high)).await,
        "invalid_exact_evm_payload_authorization_value_mismatch"
    );
    // v1 may pay more than asked.
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let more = Auth {
        value: U256::from(20_000u64),
        ..Auth::v1(2)
    };
    let res = send(svc, req("/report", &[("x-payment", &signed_v1(&more))])).await;
    assert_eq!(res.status, StatusCode::OK);
}

#[tokio::test]
async fn time_window() {
    let early = Auth {
        valid_after: now() + 120,
        ..Auth::v2(1)
    };
    assert_eq!(
        rejected_with("payment-signature", &signed_v2(&early)).await,
        "invalid_exact_evm_payload_authorization_valid_after"
    );
    let late = Auth {
        valid_before: now() + 3,
        ..Auth::v2(1)
    };
    assert_eq!(
        rejected_with("payment-signature", &signed_v2(&late)).await,
        "invalid_exact_evm_payload_authorization_valid_before"
    );
    let past = Auth {
        valid_before: now() - 1,
        ..Auth::v1(1)
    };
    assert_eq!(
        rejected_with("x-payment", &signed_v1(&past)).await,
        "invalid_exact_evm_payload_authorization_valid_before"
    );
}

#[tokio::test]
async fn bad_signatures() {
    let a = Auth::v2(1);
    let good = a.sign(&signer(), &domain_base_sepolia());
    let cases = [
        a.sign(&stranger(), &domain_base_sepolia()),
        good[..good.len() - 2].to_owned(),
        format!("{good}00"),
        "0xzz".to_owned(),
        "nothex".to_owned(),
        format!("{}00", &good[..good.len() - 2]),
    ];
    for sig in cases {
        assert_eq!(
            rejected_with("payment-signature", &b64(&payload_v2(&a, &sig))).await,
            "invalid_exact_evm_payload_signature",
            "{sig}"
        );
    }
}

#[tokio::test]
async fn settler_reason_passes_through() {
    use std::sync::Arc;
    use x402_tower::settle::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};
    struct Poor;
    impl Settler for Poor {
        fn verify<'a>(
            &'a self,
            _: &'a SettleRequest,
        ) -> x402_tower::pricing::BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
            Box::pin(async {
                Ok(VerifyOutcome::Invalid {
                    reason: "insufficient_funds".into(),
                    message: Some("balance 0".into()),
                })
            })
        }
        fn settle<'a>(
            &'a self,
            _: &'a SettleRequest,
        ) -> x402_tower::pricing::BoxFuture<'a, SettleOutcome> {
            unreachable!("never settled")
        }
        fn supported(
            &self,
        ) -> x402_tower::pricing::BoxFuture<
            '_,
            Result<x402_tower::proto::SupportedResponse, SettleError>,
        > {
            Box::pin(async { Ok(Default::default()) })
        }
    }
    let inner = Inner::new();
    let layer = config()
        .engine(engine_with(Arc::new(Poor)))
        .build()
        .unwrap();
    let svc = layer.layer(inner.service(StatusCode::OK));
    let h = v2_header(1);
    let a = send(svc.clone(), req("/report", &[("payment-signature", &h)])).await;
    assert_eq!(a.error(), "insufficient_funds");
    // The reservation was released: the same authorization is judged again, not called a replay.
    let a = send(svc, req("/report", &[("payment-signature", &h)])).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert_eq!(inner.calls(), 0);
    assert_eq!(
        layer.metrics().snapshot().rejected_for("settler_rejected"),
        2
    );
}

#[tokio::test]
async fn garbage_never_makes_a_5xx() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let nested = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let values = [
        b64_raw(nested.as_bytes()),
        b64_raw(&[0xff, 0xfe, 0x00]),
        b64(
            &json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia", "payload": {"signature": "0x", "authorization": {"from": "0x1", "to": "x", "value": "-1", "validAfter": "1e9", "validBefore": "0x10", "nonce": "0x"}}}),
        ),
        b64(
            &json!({"x402Version": 2, "accepted": {"scheme": "exact", "network": "eip155:99999999999999999999999", "amount": "1", "asset": "0x", "payTo": "0x", "maxTimeoutSeconds": -1}, "payload": {}}),
        ),
        b64(&json!({"x402Version": 18446744073709551615u64})),
        "====".to_owned(),
        "\u{7f}".to_owned(),
    ];
    for v in values {
        let Ok(hv) = http::HeaderValue::from_str(&v) else {
            continue;
        };
        let r = http::Request::get("/report")
            .header("payment-signature", hv)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let a = send(svc.clone(), r).await;
        assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED, "{v:.60}");
    }
    // Non-UTF-8 header bytes.
    let r = http::Request::get("/report")
        .header(
            "x-payment",
            http::HeaderValue::from_bytes(&[0xC3, 0x28, b'A']).unwrap(),
        )
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(send(svc, r).await.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn v1_payment_cannot_buy_an_offer_advertised_in_v2_only() {
    // Arbitrum has a v1 name in the table but legacy clients do not know it: the offer is advertised in v2
    // only, so a v1 payment for it (validly signed) matches nothing.
    let arb_usdc = address!("0xaf88d065e77c8cC2239327C5EDb3A432268e5831");
    let arb = x402_tower::PaymentOffer::usdc(
        network("arbitrum"),
        PAY_TO,
        x402_tower::Price::from(10_000u64),
    )
    .unwrap();
    let inner = Inner::new();
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(arb)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let domain = alloy_sol_types::eip712_domain! {
        name: "USD Coin",
        version: "2",
        chain_id: 42161,
        verifying_contract: arb_usdc,
    };
    let a = Auth::v1(1);
    let mut p = payload_v1(&a, &a.sign(&signer(), &domain));
    p["network"] = json!("arbitrum");
    let res = send(svc, req("/report", &[("x-payment", &b64(&p))])).await;
    assert_eq!(res.error(), "No matching payment requirements");
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn signature_hex_with_a_sign_is_not_hex() {
    // `u8::from_str_radix("+f", 16)` is Ok(15): the signature text must be hex digits only, so what the
    // layer verified is exactly what a facilitator or the chain would parse. Fixed clock and times: the
    // signatures are deterministic; take the first nonce whose signature has a byte below 0x10.
    const T: u64 = 1_800_000_000;
    let (a, good, i) = (1..=255u8)
        .find_map(|n| {
            let a = Auth {
                valid_after: 0,
                valid_before: T + 300,
                ..Auth::v2(n)
            };
            let sig = a.sign(&signer(), &domain_base_sepolia());
            let i = (2..sig.len())
                .step_by(2)
                .find(|&i| sig.as_bytes()[i] == b'0')?;
            Some((a, sig, i))
        })
        .expect("a signature with a byte below 0x10");
    let mut signed = good.clone();
    signed.replace_range(i..i + 1, "+");
    for (sig, ok) in [(good, true), (signed, false)] {
        let inner = Inner::new();
        let svc = config()
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                    .clock(|| T)
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap()
            .layer(inner.service(StatusCode::OK));
        let h = b64(&payload_v2(&a, &sig));
        let res = send(svc, req("/report", &[("payment-signature", &h)])).await;
        if ok {
            assert_eq!(res.status, StatusCode::OK, "{res:?}");
        } else {
            assert_eq!(res.error(), "invalid_exact_evm_payload_signature");
            assert_eq!(inner.calls(), 0);
        }
    }
}

#[tokio::test]
async fn time_window_boundaries_with_a_fixed_clock() {
    // validAfter <= now and validBefore >= now + 6, exactly at the edges.
    const T: u64 = 1_800_000_000;
    let cases = [
        (T, T + 6, None),
        (
            T + 1,
            T + 300,
            Some("invalid_exact_evm_payload_authorization_valid_after"),
        ),
        (
            0,
            T + 5,
            Some("invalid_exact_evm_payload_authorization_valid_before"),
        ),
        (
            0,
            T,
            Some("invalid_exact_evm_payload_authorization_valid_before"),
        ),
        // At most maxTimeoutSeconds (300 here) + 120 s of clock skew ahead: the payment store keeps a
        // key until validBefore, so a far-future authorization must not hold a slot for ever.
        (0, T + 300 + 120, None),
        (
            0,
            T + 300 + 121,
            Some("invalid_exact_evm_payload_authorization_valid_before"),
        ),
        (
            0,
            u64::MAX,
            Some("invalid_exact_evm_payload_authorization_valid_before"),
        ),
    ];
    for (n, (valid_after, valid_before, expect)) in cases.into_iter().enumerate() {
        let inner = Inner::new();
        let svc = config()
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                    .clock(|| T)
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap()
            .layer(inner.service(StatusCode::OK));
        let a = Auth {
            valid_after,
            valid_before,
            ..Auth::v2(u8::try_from(n).unwrap() + 1)
        };
        let res = send(
            svc,
            req("/report", &[("payment-signature", &signed_v2(&a))]),
        )
        .await;
        match expect {
            None => assert_eq!(res.status, StatusCode::OK, "{res:?}"),
            Some(e) => {
                assert_eq!(res.error(), e);
                assert_eq!(inner.calls(), 0);
            }
        }
    }
}

/// A payment past its `validBefore` is never settled, only redelivered from the record of its first
/// presentation: the identical payment gets the content and the same receipt again (a buyer whose response
/// was lost near the end of the window) until the record is let go (`validBefore` + `keep_after_expiry`). A
/// payment never presented, the paid authorization under a forged signature, the paid one for another
/// resource, or a resend after the record is gone: refused, and the service never runs.
#[tokio::test]
async fn a_payment_past_its_valid_before_is_only_redelivered_from_its_record() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    const T: u64 = 1_800_000_000;
    const EXPIRED: &str = "invalid_exact_evm_payload_authorization_valid_before";
    let clock = Arc::new(AtomicU64::new(T));
    let c = clock.clone();
    let inner = Inner::new();
    let svc = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .clock(move || c.load(Ordering::SeqCst))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let pay =
        |header: &str, path: &str| send(svc.clone(), req(path, &[("payment-signature", header)]));
    let paid = Auth {
        valid_after: 0,
        valid_before: T + 300,
        ..Auth::v2(0x51)
    };
    let header = signed_v2(&paid);
    let first = pay(&header, "/report").await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let receipt = first.header("payment-response").unwrap().to_owned();

    clock.store(T + 301, Ordering::SeqCst);
    let again = pay(&header, "/report").await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(again.header("payment-response"), Some(receipt.as_str()));
    assert_eq!(inner.calls(), 2);

    let unseen = signed_v2(&Auth {
        valid_after: 0,
        valid_before: T + 300,
        ..Auth::v2(0x52)
    });
    let forged = b64(&payload_v2(
        &paid,
        &paid.sign(&stranger(), &domain_base_sepolia()),
    ));
    for refused in [unseen, forged] {
        assert_eq!(pay(&refused, "/report").await.error(), EXPIRED);
    }
    assert_eq!(
        pay(&header, "/other").await.error(),
        "invalid_exact_evm_nonce_already_used"
    );
    assert_eq!(inner.calls(), 2);

    // The record is let go 15 minutes (the default) after validBefore.
    clock.store(T + 300 + 15 * 60 - 1, Ordering::SeqCst);
    assert_eq!(pay(&header, "/report").await.status, StatusCode::OK);
    clock.store(T + 300 + 15 * 60 + 1, Ordering::SeqCst);
    assert_eq!(pay(&header, "/report").await.error(), EXPIRED);
    assert_eq!(inner.calls(), 3);
}
