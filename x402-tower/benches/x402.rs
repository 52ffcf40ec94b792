//! Criterion benchmarks of the X402 layer. Every future here completes without waiting (service_fn,
//! verify-only settler, in-memory store), so a no-op-waker poll loop drives them: no runtime in the figures.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use alloy_primitives::{Address, B256, U256, address};
use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};
use x402_tower::client::sign::{self, Requirements, SignOptions};
use x402_tower::extensions::offer_receipt::OfferReceipt;
use x402_tower::extensions::siwx::{PaidCheck, SignInWithX};
use x402_tower::pricing::BoxFuture;
use x402_tower::store::{IdBinding, IdClaim, PaymentRecord, Reservation, StoreError};
use x402_tower::{PaymentOffer, PaymentStore, Price, PriceDecision, X402Layer, store::PaymentKey};

const VECTOR_A: &str = "0xdc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c3157b4b4030f1bebc53d55ace15c2377dff501a60e1e56c291f1000d6e78f082f1b";
const PAY_TO: Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn inner()
-> impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone
{
    tower::service_fn(|_req: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
            b"{\"ok\":true}",
        ))))
    })
}

fn offer() -> PaymentOffer {
    PaymentOffer::usdc(
        "base-sepolia".parse().unwrap(),
        PAY_TO,
        Price::from_usdc_decimal("0.01").unwrap(),
    )
    .unwrap()
    .description("A report")
    .mime_type("application/json")
}

/// A store that always reserves and accepts every update: isolates verification from the replay guard for
/// the paid benchmark (the engine's store calls are still made).
struct AlwaysFree;
impl PaymentStore for AlwaysFree {
    fn reserve<'a>(
        &'a self,
        _: &'a PaymentKey,
        _: &'a PaymentRecord,
        _: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        Box::pin(std::future::ready(Ok(Reservation::Reserved {
            revision: 1,
        })))
    }
    fn get<'a>(
        &'a self,
        _: &'a PaymentKey,
        _: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    fn update<'a>(
        &'a self,
        _: &'a PaymentKey,
        _: u64,
        _: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
    fn release<'a>(&'a self, _: &'a PaymentKey, _: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
    fn unresolved<'a>(
        &'a self,
        _: u64,
        _: u64,
        _: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
    fn bind_id<'a>(
        &'a self,
        _: &'a str,
        _: &'a IdBinding,
        _: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>> {
        Box::pin(std::future::ready(Ok(IdClaim::New)))
    }
    fn use_nonce<'a>(
        &'a self,
        _: &'a B256,
        _: u64,
        _: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
}

/// Every address paid for everything (the application's receipts lookup, here free).
struct AlwaysPaid;
impl PaidCheck for AlwaysPaid {
    fn has_paid<'a>(&'a self, _: Address, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
}

fn payer() -> PrivateKeySigner {
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
        .parse()
        .unwrap()
}

/// The requirements of `svc`'s 402 as the client reads them.
fn requirements<S>(svc: &S) -> Requirements
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<x402_tower::layer::ResponseBody<Full<Bytes>>>,
            Error = Infallible,
        > + Clone,
{
    let res = block_on(svc.clone().oneshot(request(None))).unwrap();
    Requirements::from_header(res.headers()["payment-required"].as_bytes()).unwrap()
}

/// A payment signed by the crate's client, as `@x402/fetch` makes it (fixed nonce).
fn signed_header(requirements: &Requirements) -> String {
    let offer = &requirements.offers[0];
    let token = x402_tower::network::Token::usdc(&offer.network).unwrap();
    let options = SignOptions {
        nonce: Some(B256::repeat_byte(7)),
        ..Default::default()
    };
    sign::sign_sync(&payer(), requirements, offer, &token, &options)
        .unwrap()
        .header_value
}

/// A Permit2 payment (`exact` or `upto`, as `svc`'s 402 offers) for its first offer, signed by the crate's
/// client as the official `@x402/evm` client signs it (fixed nonce).
fn permit2_header<S>(svc: &S) -> String
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<x402_tower::layer::ResponseBody<Full<Bytes>>>,
            Error = Infallible,
        > + Clone,
{
    let requirements = requirements(svc);
    let offer = &requirements.offers[0];
    let options = SignOptions {
        nonce: Some(B256::repeat_byte(7)),
        ..Default::default()
    };
    let token = x402_tower::network::Token::usdc(&offer.network).unwrap();
    sign::sign_sync(&payer(), &requirements, offer, &token, &options)
        .unwrap()
        .header_value
}

fn request(header: Option<&str>) -> Request<Full<Bytes>> {
    let mut b = Request::get("/report?id=1");
    if let Some(h) = header {
        b = b.header("payment-signature", h);
    }
    b.body(Full::new(Bytes::new())).unwrap()
}

fn run<S>(svc: &S, req: Request<Full<Bytes>>) -> StatusCode
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<x402_tower::layer::ResponseBody<Full<Bytes>>>,
            Error = Infallible,
        > + Clone,
{
    block_on(svc.clone().oneshot(req))
        .map(|r| r.status())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("x402");

    let bare = inner();
    g.bench_function("bare_service", |b| {
        b.iter(|| block_on(bare.clone().oneshot(request(None))).map(|r| r.status()))
    });

    let free = X402Layer::builder("https://shop.example")
        .price_source(|_: &http::request::Parts| std::future::ready(PriceDecision::Free))
        .build()
        .unwrap()
        .layer(inner());
    assert_eq!(run(&free, request(None)), StatusCode::OK);
    g.bench_function("free_route_through_layer", |b| {
        b.iter(|| run(&free, request(None)))
    });

    let paid = X402Layer::builder("https://shop.example")
        .offer(offer())
        .build()
        .unwrap()
        .layer(inner());
    assert_eq!(run(&paid, request(None)), StatusCode::PAYMENT_REQUIRED);
    g.bench_function("402_answer", |b| b.iter(|| run(&paid, request(None))));

    let reqs = requirements(&paid);
    let header = signed_header(&reqs);
    // The client's side of a purchase: choose nothing, sign and encode the payment header.
    g.bench_function("client_sign_and_encode", |b| {
        b.iter(|| signed_header(&reqs))
    });
    let verify_only = X402Layer::builder("https://shop.example")
        .offer(offer())
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .store(Arc::new(AlwaysFree))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner());
    assert_eq!(run(&verify_only, request(Some(&header))), StatusCode::OK);
    g.bench_function("paid_request_local_verification", |b| {
        b.iter(|| run(&verify_only, request(Some(&header))))
    });

    // The same purchase over Permit2: `exact`, and `upto` (settling the maximum: the inner service reports
    // no charge), each through its own verify-only layer.
    for (name, offer) in [
        (
            "paid_request_permit2_local_verification",
            offer().extra("assetTransferMethod", "permit2"),
        ),
        (
            "paid_request_upto_local_verification",
            offer().scheme("upto").extra(
                x402_tower::scheme::FACILITATOR_ADDRESS,
                "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
            ),
        ),
    ] {
        let layer = X402Layer::builder("https://shop.example")
            .offer(offer)
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                    .store(Arc::new(AlwaysFree))
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap()
            .layer(inner());
        let header = permit2_header(&layer);
        assert_eq!(
            run(&layer, request(Some(&header))),
            StatusCode::OK,
            "{name}"
        );
        g.bench_function(name, |b| b.iter(|| run(&layer, request(Some(&header)))));
    }

    // The same purchase driven inside a Tokio runtime: the settlement and its writes then run in a task of
    // their own (`PaymentEngine::run_to_end`: spawned, awaited through a oneshot), as in every server. The
    // difference with the row above is what that costs per purchase.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let in_runtime = |req| {
        runtime
            .block_on(verify_only.clone().oneshot(req))
            .map(|r| r.status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    };
    assert_eq!(in_runtime(request(Some(&header))), StatusCode::OK);
    g.bench_function("paid_request_local_verification_in_tokio", |b| {
        b.iter(|| in_runtime(request(Some(&header))))
    });
    // The floor of that: the bare service through the same runtime's `block_on`.
    g.bench_function("bare_service_in_tokio", |b| {
        b.iter(|| {
            runtime
                .block_on(bare.clone().oneshot(request(None)))
                .map(|r| r.status())
        })
    });

    // Decoding a payment that echoes ~3.6 KB of a 402's extensions (as every purchase of the reference
    // server's articles does: bazaar, signed offers, sign-in-with-x, terms).
    let echoing = {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut v: serde_json::Value =
            serde_json::from_slice(&b64.decode(&header).unwrap()).unwrap();
        let filler = "x".repeat(300);
        v["extensions"] = (0..12)
            .map(|i| {
                (
                    format!("ext{i}"),
                    serde_json::json!({"info": {"text": filler}, "n": i}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        v.to_string()
    };
    assert!(echoing.len() > 4_000);
    g.bench_function("decode_payment_echoing_extensions", |b| {
        b.iter(|| x402_tower::verify::payload_from_str(&echoing).map(|p| p.x402_version()))
    });

    // A purchase whose payment echoes the 402's declarations as an official client does (bazaar, signed
    // offers, sign-in-with-x, terms: ~3.4 KB) with a payment-identifier: the record keeps the payment less
    // the echoes (replay::StoredPayment).
    let echoing_header = {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut v: serde_json::Value =
            serde_json::from_slice(&b64.decode(&header).unwrap()).unwrap();
        let declaration = |n: usize| serde_json::json!({"info": {"text": "d".repeat(n)}, "schema": {"type": "object"}});
        v["extensions"] = serde_json::json!({
            "bazaar": declaration(1000),
            "offer-receipt": declaration(1100),
            "sign-in-with-x": declaration(950),
            "terms": declaration(120),
            "payment-identifier": {"info": {"id": "pay_0123456789abcdef"}},
        });
        b64.encode(v.to_string())
    };
    assert_eq!(
        run(&verify_only, request(Some(&echoing_header))),
        StatusCode::OK
    );
    g.bench_function("paid_request_echoing_extensions", |b| {
        b.iter(|| run(&verify_only, request(Some(&echoing_header))))
    });

    // The header was used once on `paid` (in-memory store): every further identical request is a resend,
    // served again from the payment record (no settlement).
    assert_eq!(run(&paid, request(Some(&header))), StatusCode::OK);
    assert_eq!(run(&paid, request(Some(&header))), StatusCode::OK);
    g.bench_function("resent_request_redelivered", |b| {
        b.iter(|| run(&paid, request(Some(&header))))
    });
    // The same payment for another resource: a replay, refused.
    let other = || {
        Request::get("/other")
            .header("payment-signature", header.as_str())
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(run(&paid, other()), StatusCode::PAYMENT_REQUIRED);
    g.bench_function("replayed_request", |b| b.iter(|| run(&paid, other())));

    // offer-receipt: a 402 with a signed offer (cached while half valid), a purchase with a signed receipt.
    let issuer = Arc::new(OfferReceipt::from_secret(B256::repeat_byte(0x42)).unwrap());
    let signed_402 = X402Layer::builder("https://shop.example")
        .offer(offer())
        .offer_receipt(issuer.clone())
        .build()
        .unwrap()
        .layer(inner());
    assert_eq!(
        run(&signed_402, request(None)),
        StatusCode::PAYMENT_REQUIRED
    );
    g.bench_function("402_answer_with_signed_offer", |b| {
        b.iter(|| run(&signed_402, request(None)))
    });
    let receipted = X402Layer::builder("https://shop.example")
        .offer(offer())
        .offer_receipt(issuer.clone())
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .store(Arc::new(AlwaysFree))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner());
    let res = block_on(receipted.clone().oneshot(request(Some(&header)))).unwrap();
    assert!(
        x402_tower::client::settlement(res.headers())
            .and_then(|s| x402_tower::extensions::offer_receipt::SignedReceipt::from_settlement(&s))
            .is_some()
    );
    g.bench_function("paid_request_with_signed_receipt", |b| {
        b.iter(|| run(&receipted, request(Some(&header))))
    });
    let with_k256 = OfferReceipt::new(PrivateKeySigner::random());
    g.bench_function("receipt_sign_only_alloy_k256", |b| {
        b.iter(|| {
            with_k256.sign_receipt(
                "https://shop.example/report?id=1",
                "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                "eip155:84532",
                "",
                1_800_000_000,
            )
        })
    });
    g.bench_function("receipt_sign_only", |b| {
        b.iter(|| {
            issuer.sign_receipt(
                "https://shop.example/report?id=1",
                "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                "eip155:84532",
                "",
                1_800_000_000,
            )
        })
    });

    // sign-in-with-x: a buyer reads again what it paid for (proof checked, nonce claimed, "paid?" asked).
    let siwx = X402Layer::builder("https://shop.example")
        .offer(offer())
        .sign_in_with_x(SignInWithX::new(
            b"a bench key of at least 16 bytes",
            Arc::new(AlwaysPaid),
        ))
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .store(Arc::new(AlwaysFree))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner());
    g.bench_function("402_answer_with_sign_in_nonce", |b| {
        b.iter(|| run(&siwx, request(None)))
    });
    let reqs = requirements(&siwx);
    let buyer = x402_tower::client::Payer::new(
        payer(),
        x402_tower::client::PaymentPolicy::new(Price::from_usdc_decimal("1").unwrap()),
    );
    let proof = block_on(buyer.sign_in(&reqs)).expect("a sign-in proof");
    let reread = || {
        Request::get("/report?id=1")
            .header("sign-in-with-x", proof.as_str())
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(run(&siwx, reread()), StatusCode::OK);
    g.bench_function("siwx_reread", |b| b.iter(|| run(&siwx, reread())));

    // For the breakdown: the EIP-712 digest + the checks + libsecp256k1 recovery alone (eip3009.md vector A).
    let auth = x402_tower::proto::Authorization {
        from: address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
        to: PAY_TO,
        value: U256::from(10_000u64),
        valid_after: U256::from(1_740_672_089u64),
        valid_before: U256::from(1_740_672_154u64),
        nonce: "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
            .parse()
            .unwrap(),
    };
    let sig: Vec<u8> = (0..65)
        .map(|i| u8::from_str_radix(&VECTOR_A[2 + 2 * i..4 + 2 * i], 16).unwrap())
        .collect();
    let domain = x402_tower::verify::domain_separator(
        84532,
        &x402_tower::network::Token::usdc(&"base-sepolia".parse().unwrap()).unwrap(),
    );
    assert!(x402_tower::verify::check_signature(&auth, &sig, &domain).is_ok());
    g.bench_function("signature_check_only", |b| {
        b.iter(|| x402_tower::verify::check_signature(&auth, &sig, &domain))
    });

    // An address's EIP-55 text: computed (a Keccak-256), and remembered (the second time on a thread).
    let payer = std::hint::black_box(auth.from);
    g.bench_function("address_checksum_computed", |b| {
        b.iter(|| payer.to_checksum(None))
    });
    g.bench_function("address_checksum_remembered", |b| {
        b.iter(|| x402_tower::proto::checksum(&payer))
    });
    g.finish();
}

criterion_group!(x402, benches);
criterion_main!(x402);
