//! The paying side (`x402_tower::client`) against this crate's own layer, in process: it buys in v2 and v1,
//! refuses what its policy forbids without signing anything, keeps a shared budget exact under concurrency,
//! never pays twice for one request, resends a pending payment identical, and sends a payment-identifier
//! when the server declares one.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use alloy_primitives::U256;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower::{Layer, ServiceExt};
use x402_tower::Price;
use x402_tower::client::{
    Budget, ClientError, Paid, PaymentPolicy, Refusal, RequirementsError, X402ClientLayer,
};

use crate::support::*;

type Server = tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

/// This crate's layer (verify-only, 0.01 USDC on Base Sepolia) over a counting inner service, with bodies
/// collected so the client sees plain `Full` responses; `sends` records the payment headers it receives.
fn server(config: x402_tower::X402Config, inner: &Inner, sends: Arc<Mutex<Vec<String>>>) -> Server {
    let svc = config.build().unwrap().layer(inner.service(StatusCode::OK));
    tower::util::BoxCloneService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
        let svc = svc.clone();
        if let Some(v) = req
            .headers()
            .get("payment-signature")
            .or_else(|| req.headers().get("x-payment"))
        {
            sends.lock().unwrap().push(v.to_str().unwrap().to_owned());
        }
        async move {
            let res = svc.oneshot(req).await?;
            let (parts, body) = res.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            Ok::<_, Infallible>(Response::from_parts(parts, Full::new(bytes)))
        }
    }))
}

fn policy(max: &str) -> PaymentPolicy {
    PaymentPolicy::new(Price::from_usdc_decimal(max).unwrap())
}

fn get() -> Request<Full<Bytes>> {
    Request::get(format!("{BASE_URL}/report"))
        .body(Full::default())
        .unwrap()
}

#[tokio::test]
async fn buys_in_v2_with_the_receipt_in_the_extensions() {
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let client = X402ClientLayer::new(signer(), policy("0.05")).layer(server(
        config(),
        &inner,
        sends.clone(),
    ));
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let paid = res.extensions().get::<Paid>().expect("Paid").clone();
    assert_eq!(paid.payment.x402_version, 2);
    assert_eq!(paid.payer, ACCOUNT0);
    assert_eq!(paid.amount(), U256::from(10_000u64));
    let receipt = paid.settlement.expect("PAYMENT-RESPONSE decoded");
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(inner.calls(), 1, "the resource was served once");
    assert_eq!(sends.lock().unwrap().len(), 1, "one payment sent");
    // Signed as @x402/fetch signs: validAfter 0, the offer echoed verbatim.
    assert_eq!(paid.payment.authorization.valid_after, U256::ZERO);
    assert_eq!(paid.payment.payload["accepted"], paid.offer.raw);
}

#[tokio::test]
async fn buys_in_v1_from_a_server_that_only_sends_the_json_body() {
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let v1_only =
        server(config(), &inner, sends.clone()).map_response(|mut r: Response<Full<Bytes>>| {
            r.headers_mut().remove("payment-required");
            r.headers_mut().remove("x-payment-required");
            r
        });
    let client = X402ClientLayer::new(signer(), policy("0.05")).layer(v1_only);
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let paid = res.extensions().get::<Paid>().unwrap();
    assert_eq!(paid.payment.header_name, "X-PAYMENT");
    assert_eq!(paid.payment.payload["network"], "base-sepolia");
    let now = x402_tower::client::sign::unix_now();
    let after: u64 = paid.payment.authorization.valid_after.to();
    assert!(
        (now - 610..=now - 590).contains(&after),
        "v1 validAfter = now - 600"
    );
    assert!(paid.settlement.as_ref().unwrap().success);
}

#[tokio::test]
async fn refusals_are_typed_errors_and_nothing_is_signed() {
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    // Over the maximum per request.
    let client = X402ClientLayer::new(signer(), policy("0.005")).layer(server(
        config(),
        &inner,
        sends.clone(),
    ));
    match client.oneshot(get()).await {
        Err(ClientError::Refused(Refusal::OverMaximum { amount, max })) => {
            assert_eq!((amount, max), (U256::from(10_000u64), U256::from(5_000u64)));
        }
        other => panic!("{other:?}"),
    }
    // A network the policy does not allow.
    let only_base = policy("1").networks([network("base")]);
    let client =
        X402ClientLayer::new(signer(), only_base).layer(server(config(), &inner, sends.clone()));
    match client.oneshot(get()).await {
        Err(ClientError::Refused(Refusal::NoAcceptableOffer { offered, reasons })) => {
            assert_eq!(offered, 1);
            assert!(reasons[0].contains("eip155:84532"), "{reasons:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(sends.lock().unwrap().is_empty(), "no payment was sent");
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn malformed_requirements_are_a_typed_error() {
    for header in ["%%% not base64", "bm90IGpzb24="] {
        let calls = Arc::new(Mutex::new(0));
        let c = calls.clone();
        let broken = tower::service_fn(move |_: Request<Full<Bytes>>| {
            *c.lock().unwrap() += 1;
            let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
            *r.status_mut() = StatusCode::PAYMENT_REQUIRED;
            r.headers_mut()
                .insert("payment-required", HeaderValue::from_static(header));
            async move { Ok::<_, Infallible>(r) }
        });
        let res = X402ClientLayer::new(signer(), policy("1"))
            .layer(broken)
            .oneshot(get())
            .await;
        assert!(
            matches!(
                res,
                Err(ClientError::Requirements(
                    RequirementsError::Base64(_) | RequirementsError::Json(_)
                ))
            ),
            "{res:?}"
        );
        assert_eq!(*calls.lock().unwrap(), 1, "nothing was sent again");
    }
    // A JSON body without requirements.
    let no_reqs = tower::service_fn(|_: Request<Full<Bytes>>| async {
        let mut r = Response::new(Full::new(Bytes::from_static(b"{\"error\":\"pay\"}")));
        *r.status_mut() = StatusCode::PAYMENT_REQUIRED;
        Ok::<_, Infallible>(r)
    });
    let res = X402ClientLayer::new(signer(), policy("1"))
        .layer(no_reqs)
        .oneshot(get())
        .await;
    assert!(
        matches!(
            res,
            Err(ClientError::Requirements(RequirementsError::Missing))
        ),
        "{res:?}"
    );
}

#[tokio::test]
async fn a_budget_shared_by_clones_admits_exactly_what_it_covers_under_concurrency() {
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let budget = Budget::new(Price::from_usdc_decimal("0.03").unwrap());
    let client = X402ClientLayer::new(signer(), policy("1").budget(budget.clone())).layer(server(
        config(),
        &inner,
        sends.clone(),
    ));
    let tasks: Vec<_> = (0..8)
        .map(|_| tokio::spawn(client.clone().oneshot(get())))
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) if r.status() == StatusCode::OK => ok += 1,
            Err(ClientError::Refused(Refusal::BudgetExhausted { .. })) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((ok, refused), (3, 5));
    assert_eq!(budget.remaining(), U256::ZERO);
    assert_eq!(sends.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_server_that_answers_402_after_payment_gets_one_payment_per_request() {
    let sends = Arc::new(Mutex::new(Vec::new()));
    let inner = Inner::new();
    // The real 402 to start from, then 402 whatever is sent.
    let required = server(config(), &inner, Arc::new(Mutex::new(Vec::new())))
        .oneshot(get())
        .await
        .unwrap();
    let header = required.headers()["payment-required"].clone();
    let s = sends.clone();
    let greedy = tower::service_fn(move |req: Request<Full<Bytes>>| {
        if let Some(v) = req.headers().get("payment-signature") {
            s.lock().unwrap().push(v.to_str().unwrap().to_owned());
        }
        let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
        *r.status_mut() = StatusCode::PAYMENT_REQUIRED;
        r.headers_mut().insert("payment-required", header.clone());
        async move { Ok::<_, Infallible>(r) }
    });
    let res = X402ClientLayer::new(signer(), policy("1"))
        .layer(greedy)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(
        res.extensions().get::<Paid>().is_some(),
        "the caller learns what was sent"
    );
    assert_eq!(sends.lock().unwrap().len(), 1, "one payment, no loop");
}

#[tokio::test]
async fn a_pending_settlement_is_resent_identical_a_bounded_number_of_times() {
    let inner = Inner::new();
    let required = server(config(), &inner, Arc::new(Mutex::new(Vec::new())))
        .oneshot(get())
        .await
        .unwrap();
    let header = required.headers()["payment-required"].clone();
    let pending = b64(
        &json!({"success": false, "errorReason": "settlement_pending",
        "transaction": format!("0x{}", "ab".repeat(32)), "network": "eip155:84532"}),
    );
    let done = b64(
        &json!({"success": true, "transaction": format!("0x{}", "ab".repeat(32)),
        "network": "eip155:84532"}),
    );
    for (pending_answers, expect_status, expect_resends) in [
        (2, StatusCode::OK, 2),
        (10, StatusCode::PAYMENT_REQUIRED, 3),
    ] {
        let sends = Arc::new(Mutex::new(Vec::<String>::new()));
        let (s, header, pending, done) =
            (sends.clone(), header.clone(), pending.clone(), done.clone());
        let scripted = tower::service_fn(move |req: Request<Full<Bytes>>| {
            let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
            if let Some(v) = req.headers().get("payment-signature") {
                let mut sent = s.lock().unwrap();
                sent.push(v.to_str().unwrap().to_owned());
                if sent.len() > pending_answers {
                    r.headers_mut()
                        .insert("payment-response", done.parse().unwrap());
                    return std::future::ready(Ok::<_, Infallible>(r));
                }
                r.headers_mut()
                    .insert("payment-response", pending.parse().unwrap());
            } else {
                r.headers_mut().insert("payment-required", header.clone());
            }
            *r.status_mut() = StatusCode::PAYMENT_REQUIRED;
            std::future::ready(Ok::<_, Infallible>(r))
        });
        let p = policy("1").pending_resends(3, std::time::Duration::from_millis(1));
        let res = X402ClientLayer::new(signer(), p)
            .layer(scripted)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(res.status(), expect_status);
        let paid = res.extensions().get::<Paid>().unwrap();
        assert_eq!(paid.resends, expect_resends);
        let sent = sends.lock().unwrap();
        assert_eq!(sent.len() as u32, expect_resends + 1);
        assert!(sent.iter().all(|h| h == &sent[0]), "never re-signed");
    }
}

#[tokio::test]
async fn a_declared_payment_identifier_is_sent_and_echoed_declarations_are_kept() {
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let client = X402ClientLayer::new(signer(), policy("1")).layer(server(
        config().payment_identifier(true),
        &inner,
        sends.clone(),
    ));
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(
        res.status(),
        StatusCode::OK,
        "required: the server refuses a payment without an id"
    );
    let paid = res.extensions().get::<Paid>().unwrap();
    let info = &paid.payment.payload["extensions"]["payment-identifier"]["info"];
    assert_eq!(info["required"], true);
    let id = info["id"].as_str().unwrap();
    assert!(id.starts_with("pay_") && id.len() == 36, "{id}");
}

/// A wallet that refuses to sign (a hardware key unplugged, a user who said no).
struct Refusing(alloy_primitives::Address);

#[async_trait::async_trait]
impl alloy_signer::Signer for Refusing {
    async fn sign_hash(
        &self,
        _: &alloy_primitives::B256,
    ) -> alloy_signer::Result<alloy_primitives::Signature> {
        Err(alloy_signer::Error::other("the wallet refused"))
    }
    fn address(&self) -> alloy_primitives::Address {
        self.0
    }
    fn chain_id(&self) -> Option<u64> {
        None
    }
    fn set_chain_id(&mut self, _: Option<u64>) {}
}

#[tokio::test]
async fn a_signature_that_fails_gives_its_reservation_back_to_the_budget() {
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let budget = Budget::new(Price::from_usdc_decimal("0.03").unwrap());
    let before = budget.remaining();
    let client = X402ClientLayer::new(Refusing(ACCOUNT0), policy("1").budget(budget.clone()))
        .layer(server(config(), &inner, sends.clone()));
    for _ in 0..5 {
        match client.clone().oneshot(get()).await {
            Err(ClientError::Signing(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    // Nothing was signed, nothing sent, and the budget is whole: five failures did not spend 0.03.
    assert_eq!(budget.remaining(), before);
    assert!(sends.lock().unwrap().is_empty());
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn pays_exact_over_permit2_and_upto_and_counts_the_charge_not_the_maximum() {
    use x402_tower::scheme::{Charge, FACILITATOR_ADDRESS};
    // exact over Permit2: the permit, signed as the official client signs it, accepted by the layer.
    let inner = Inner::new();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let permit2 = X402ClientLayer::new(signer(), policy("0.05")).layer(server(
        x402_tower::X402Layer::builder(BASE_URL)
            .offer(offer().extra("assetTransferMethod", "permit2")),
        &inner,
        sends.clone(),
    ));
    let res = permit2.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let paid = res.extensions().get::<Paid>().expect("Paid").clone();
    let permit = paid.payment.permit2.expect("a Permit2 payment");
    assert_eq!(permit.spender, x402_tower::scheme::EXACT_PERMIT2_PROXY);
    assert!(paid.payment.payload["payload"]["permit2Authorization"]["nonce"].is_string());

    // upto: the budget takes the maximum (0.01), the receipt says 0.003 was charged, 0.007 comes back.
    let budget = Budget::new(Price::from_usdc_decimal("0.05").unwrap());
    let upto = x402_tower::X402Layer::builder(BASE_URL)
        .offer(offer().scheme("upto").extra(
            FACILITATOR_ADDRESS,
            "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
        ))
        .build()
        .unwrap()
        .layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
            let mut res = Response::new(Full::new(Bytes::from_static(b"three records")));
            res.extensions_mut().insert(Charge::atomic(3_000));
            Ok::<_, Infallible>(res)
        }));
    let upto = tower::service_fn(move |req| {
        let upto = upto.clone();
        async move {
            let res = upto.oneshot(req).await?;
            let (parts, body) = res.into_parts();
            Ok::<_, Infallible>(Response::from_parts(
                parts,
                Full::new(body.collect().await.unwrap().to_bytes()),
            ))
        }
    });
    let client = X402ClientLayer::new(signer(), policy("0.05").budget(budget.clone())).layer(upto);
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let paid = res.extensions().get::<Paid>().expect("Paid").clone();
    assert_eq!(paid.settlement.unwrap().amount.as_deref(), Some("3000"));
    assert_eq!(budget.remaining(), U256::from(50_000u64 - 3_000));
}
