//! `exact` and `upto` over Permit2 through the layer and the facilitator door: the official wire format, the
//! official checks and codes, and the money rules (one settlement per Permit2 nonce, a resend redelivered,
//! `upto` settling what the service reports, never above the maximum, nothing for zero).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, U256, address};
use alloy_signer::SignerSync;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};
use tower::Layer;
use x402_tower::PaymentOffer;
use x402_tower::pricing::BoxFuture;
use x402_tower::proto::SupportedResponse;
use x402_tower::scheme::{
    Charge, FACILITATOR_ADDRESS, Permit2Payment, SETTLEMENT_OVERRIDES, UPTO_PERMIT2_PROXY,
};
use x402_tower::settle::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};

use crate::support::*;

const FACILITATOR: Address = address!("0x90F79bf6EB2c4f870365E785982E1f101E93b906");
const CHAIN: u64 = 84532;

/// A settler that settles everything (or, `unknown`, answers that the outcome is not known) and remembers
/// the amounts it was asked to settle and to reconcile.
#[derive(Default)]
struct Recording {
    settled: Mutex<Vec<U256>>,
    unknown: bool,
    reconciled: Mutex<Vec<U256>>,
}

impl Recording {
    fn amounts(&self) -> Vec<U256> {
        self.settled.lock().unwrap().clone()
    }
}

impl Settler for Recording {
    fn verify<'a>(
        &'a self,
        _: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        Box::pin(async { Ok(VerifyOutcome::Valid) })
    }
    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        self.settled
            .lock()
            .unwrap()
            .push(request.amount_to_settle());
        // What a facilitator receives: the requirements carry the amount to settle.
        let requirements = serde_json::to_value(&request.requirements).unwrap();
        assert_eq!(
            requirements["amount"],
            request.amount_to_settle().to_string()
        );
        let outcome = if self.unknown {
            SettleOutcome::Unknown {
                message: "no answer".into(),
                transaction: None,
            }
        } else {
            settled_outcome()
        };
        Box::pin(async move { outcome })
    }
    fn reconcile<'a>(
        &'a self,
        request: &'a SettleRequest,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, SettleOutcome> {
        self.reconciled
            .lock()
            .unwrap()
            .push(request.amount_to_settle());
        Box::pin(async { settled_outcome() })
    }
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(async { Ok(SupportedResponse::default()) })
    }
}

fn permit2_offer() -> PaymentOffer {
    offer().extra("assetTransferMethod", "permit2")
}

fn upto_offer() -> PaymentOffer {
    offer()
        .scheme("upto")
        .extra(FACILITATOR_ADDRESS, FACILITATOR.to_string())
}

/// An inner service that reports the charge the request's query names: `?use=<charge>` in the response's
/// extensions, `?header=<charge>` in `Settlement-Overrides`.
fn metering(
    calls: Arc<Mutex<usize>>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future: Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |req: Request<Full<Bytes>>| {
        *calls.lock().unwrap() += 1;
        let query = req.uri().query().unwrap_or_default().to_owned();
        async move {
            let mut res = Response::new(Full::new(Bytes::from_static(b"records")));
            if let Some(c) = query.strip_prefix("use=") {
                res.extensions_mut().insert(Charge::parse(c).unwrap());
            }
            if let Some(c) = query.strip_prefix("header=") {
                let c = if c == "half" { "50%" } else { c };
                let value = json!({ "amount": c }).to_string();
                res.headers_mut()
                    .insert(SETTLEMENT_OVERRIDES, value.parse().unwrap());
            }
            Ok::<_, Infallible>(res)
        }
    })
}

/// A Permit2 payment for the 402 entry `accepted`, signed by `signer()` after `tweak` changed its fields,
/// written by the crate's client as the official client writes it.
fn permit2_payment(accepted: &Value, nonce: u64, tweak: impl FnOnce(&mut Permit2Payment)) -> Value {
    use x402_tower::client::sign::{self, Requirements, SignOptions, TransferMethod};
    let requirements =
        Requirements::from_document(&json!({"x402Version": 2, "accepts": [accepted]})).unwrap();
    let offer = &requirements.offers[0];
    let TransferMethod::Permit2 { facilitator } = offer.method else {
        panic!("a Permit2 offer: {accepted}");
    };
    let options = SignOptions {
        nonce: Some(U256::from(nonce).into()),
        valid_before: Some(U256::from(now() + 60)),
        ..Default::default()
    };
    let mut permit = sign::permit2(ACCOUNT0, offer, facilitator, &options);
    tweak(&mut permit);
    let signature = signer()
        .sign_hash_sync(&permit.signing_hash(CHAIN))
        .unwrap();
    sign::wrap_permit2(
        &requirements,
        offer,
        permit,
        signature.as_bytes().to_vec(),
        &options,
    )
    .payload
}

fn engine(settler: Arc<Recording>) -> Arc<x402_tower::PaymentEngine> {
    engine_with(settler)
}

#[tokio::test]
async fn exact_over_permit2_sells_beside_eip3009_under_the_money_rules() {
    let settler = Arc::new(Recording::default());
    let inner = Inner::new();
    let svc = config()
        .offer(permit2_offer())
        .engine(engine(settler.clone()))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let accepts = send(svc.clone(), req("/r", &[])).await.payment_required()["accepts"].clone();
    assert_eq!(
        accepts[1]["extra"]["assetTransferMethod"], "permit2",
        "{accepts}"
    );
    assert!(accepts[0]["extra"].get("assetTransferMethod").is_none());
    let accepted = accepts[1].clone();

    let paid = permit2_payment(&accepted, 1, |_| {});
    let first = send(
        svc.clone(),
        req("/r", &[("payment-signature", &b64(&paid))]),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.error());
    // The identical payment, its nonce written in hex as the spec's example does: delivered again.
    let mut hex = paid.clone();
    hex["payload"]["permit2Authorization"]["nonce"] = json!("0x1");
    let again = send(svc.clone(), req("/r", &[("payment-signature", &b64(&hex))])).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.error());
    assert_eq!(
        again.receipt("payment-response"),
        first.receipt("payment-response")
    );
    // The same Permit2 nonce for another resource, or in another payment: used.
    let other = send(
        svc.clone(),
        req("/other", &[("payment-signature", &b64(&paid))]),
    )
    .await;
    assert_eq!(other.error(), "invalid_exact_evm_nonce_already_used");
    let resigned = permit2_payment(&accepted, 1, |p| p.deadline += U256::from(1u64));
    let replay = send(
        svc.clone(),
        req("/r", &[("payment-signature", &b64(&resigned))]),
    )
    .await;
    assert_eq!(replay.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!(settler.amounts(), vec![U256::from(10_000u64)]);
    assert_eq!(inner.calls(), 2);

    // The official checks, in their order, with their codes; nothing settled.
    let stranger_signed = {
        let mut p = permit2_payment(&accepted, 9, |_| {});
        let other = permit2_payment(&accepted, 9, |p| p.from = Address::repeat_byte(3));
        p["payload"]["signature"] = other["payload"]["signature"].clone();
        p["payload"]["permit2Authorization"]["from"] = json!(Address::repeat_byte(3));
        p
    };
    let cases: Vec<(Value, &str)> = vec![
        (
            permit2_payment(&accepted, 2, |p| p.spender = UPTO_PERMIT2_PROXY),
            "invalid_permit2_spender",
        ),
        (
            permit2_payment(&accepted, 3, |p| p.to = Address::repeat_byte(1)),
            "invalid_permit2_recipient_mismatch",
        ),
        (
            permit2_payment(&accepted, 4, |p| p.deadline = U256::from(now() - 1)),
            "permit2_deadline_expired",
        ),
        (
            permit2_payment(&accepted, 5, |p| p.deadline = U256::from(now() + 3600)),
            "permit2_deadline_too_far",
        ),
        (
            permit2_payment(&accepted, 6, |p| p.valid_after = U256::from(now() + 60)),
            "permit2_not_yet_valid",
        ),
        (
            permit2_payment(&accepted, 7, |p| p.amount = U256::from(9_999u64)),
            "permit2_amount_mismatch",
        ),
        (
            permit2_payment(&accepted, 8, |p| p.token = Address::repeat_byte(2)),
            "permit2_token_mismatch",
        ),
        (stranger_signed, "invalid_permit2_signature"),
    ];
    for (payment, code) in cases {
        let refused = send(
            svc.clone(),
            req("/r", &[("payment-signature", &b64(&payment))]),
        )
        .await;
        assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(refused.error(), code);
    }
    let mut garbage = paid.clone();
    garbage["payload"]["permit2Authorization"]["nonce"] = json!("12abc");
    let refused = send(
        svc.clone(),
        req("/r", &[("payment-signature", &b64(&garbage))]),
    )
    .await;
    assert!(
        refused.error().starts_with("invalid_payload: "),
        "{}",
        refused.error()
    );
    assert_eq!((settler.amounts().len(), inner.calls()), (1, 2));
}

/// An `upto` route over the metering service, with a recording settler.
#[expect(
    clippy::type_complexity,
    reason = "the inner service's type can only be named as `impl Service`"
)]
fn upto_route() -> (
    Arc<Recording>,
    Arc<Mutex<usize>>,
    x402_tower::layer::X402<
        impl tower::Service<
            Request<Full<Bytes>>,
            Response = Response<Full<Bytes>>,
            Error = Infallible,
            Future: Send,
        > + Clone
        + Send
        + 'static,
    >,
) {
    let settler = Arc::new(Recording::default());
    let calls = Arc::new(Mutex::new(0));
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(upto_offer())
        .engine(engine(settler.clone()))
        .build()
        .unwrap()
        .layer(metering(calls.clone()));
    (settler, calls, svc)
}

#[tokio::test]
async fn upto_settles_what_the_service_reports_and_never_more() {
    let (settler, calls, svc) = upto_route();
    let accepted = send(svc.clone(), req("/r", &[])).await.payment_required()["accepts"][0].clone();
    assert_eq!(accepted["scheme"], "upto");
    assert_eq!(accepted["extra"]["assetTransferMethod"], "permit2");
    assert_eq!(
        accepted["extra"][FACILITATOR_ADDRESS],
        FACILITATOR.to_string()
    );
    let pay = |path: &'static str, nonce| {
        let svc = svc.clone();
        let payment = b64(&permit2_payment(&accepted, nonce, |_| {}));
        async move { send(svc, req(path, &[("payment-signature", &payment)])).await }
    };

    // Charged what the service reported, in its extensions or in the official header (never sent on).
    let used = pay("/r?use=3000", 1).await;
    assert_eq!(used.status, StatusCode::OK);
    assert_eq!(
        used.receipt("payment-response").amount.as_deref(),
        Some("3000")
    );
    let header = pay("/r?header=half", 2).await;
    assert_eq!(header.status, StatusCode::OK);
    assert_eq!(
        header.receipt("payment-response").amount.as_deref(),
        Some("5000")
    );
    assert!(
        header.header(SETTLEMENT_OVERRIDES).is_none(),
        "the override never leaves"
    );
    // Nothing reported: the maximum, as the official servers settle.
    let max = pay("/r", 3).await;
    assert_eq!(
        max.receipt("payment-response").amount.as_deref(),
        Some("10000")
    );
    assert_eq!(
        settler.amounts(),
        [3000u64, 5000, 10_000].map(U256::from).to_vec()
    );

    // Zero: nothing settled, and the receipt says so.
    let zero = pay("/r?use=0", 4).await;
    assert_eq!(zero.status, StatusCode::OK);
    let receipt = zero.receipt("payment-response");
    assert!(receipt.success);
    assert_eq!(
        (receipt.transaction.as_str(), receipt.amount.as_deref()),
        ("", Some("0"))
    );
    assert_eq!(settler.amounts().len(), 3, "zero asks the settler nothing");
    // Resent: the same answer, nothing more settled.
    let again = pay("/r?use=3000", 1).await;
    assert_eq!(
        again.receipt("payment-response"),
        used.receipt("payment-response")
    );
    assert_eq!(settler.amounts().len(), 3);

    // Above the maximum: refused before anything is settled, the payment released.
    let above = pay("/big?use=10001", 5).await;
    assert_eq!(above.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(above.header("payment-response").is_none());
    let unreadable = pay("/big?header=lots", 5).await;
    assert_eq!(unreadable.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        settler.amounts().len(),
        3,
        "nothing settled above the maximum"
    );
    let fixed = pay("/big?use=10000", 5).await;
    assert_eq!(
        fixed.status,
        StatusCode::OK,
        "released: the payment is good for a served answer"
    );
    assert_eq!(settler.amounts().len(), 4);
    assert_eq!(*calls.lock().unwrap(), 8);

    // The facilitator this offer names is the only one a payment may name.
    let wrong = permit2_payment(&accepted, 6, |p| {
        p.facilitator = Some(Address::repeat_byte(4))
    });
    let refused = send(
        svc.clone(),
        req("/r", &[("payment-signature", &b64(&wrong))]),
    )
    .await;
    assert_eq!(refused.error(), "upto_facilitator_mismatch");
}

#[tokio::test]
async fn a_pending_upto_settlement_is_reconciled_at_its_charge_not_the_maximum() {
    let settler = Arc::new(Recording {
        unknown: true,
        ..Recording::default()
    });
    let engine = engine(settler.clone());
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(upto_offer())
        .engine(engine.clone())
        .build()
        .unwrap()
        .layer(metering(Arc::default()));
    let accepted = send(svc.clone(), req("/r", &[])).await.payment_required()["accepts"][0].clone();
    let payment = b64(&permit2_payment(&accepted, 1, |_| {}));
    // The outcome unknown, the engine reconciles (at once, or from the background pass).
    let first = send(
        svc.clone(),
        req("/r?use=700", &[("payment-signature", &payment)]),
    )
    .await;
    if first.status != StatusCode::OK {
        assert_eq!(first.error(), "settlement_pending");
        let report = engine.reconcile_unresolved(10).await.unwrap();
        assert_eq!(report.settled, 1, "{report:?}");
    }
    assert_eq!(
        settler.reconciled.lock().unwrap().clone(),
        vec![U256::from(700u64)]
    );
    let delivered = send(svc, req("/r?use=700", &[("payment-signature", &payment)])).await;
    assert_eq!(delivered.status, StatusCode::OK);
    assert_eq!(
        delivered.receipt("payment-response").amount.as_deref(),
        Some("700")
    );
    assert_eq!(settler.amounts(), vec![U256::from(700u64)], "settled once");
}

#[test]
fn upto_cannot_be_sold_where_the_payment_settles_before_the_handler() {
    let err = x402_tower::X402Layer::builder(BASE_URL)
        .offer(upto_offer())
        .settle_timing(x402_tower::settle::SettleTiming::BeforeHandler)
        .build()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot be sold on a route that settles before its handler"),
        "{err}"
    );
    let err = x402_tower::X402Layer::builder(BASE_URL)
        .offer(offer().scheme("upto"))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("facilitatorAddress"), "{err}");
}

#[cfg(feature = "facilitator")]
#[tokio::test]
async fn the_facilitator_door_settles_an_upto_charge_sent_as_the_requirements_amount() {
    use x402_tower::engine::facilitator::FacilitatorPolicy;
    let (settler, _, svc) = upto_route();
    let accepted = send(svc, req("/r", &[])).await.payment_required()["accepts"][0].clone();
    let engine = engine(settler.clone());
    let payment = permit2_payment(&accepted, 1, |_| {});
    let mut charged = accepted.clone();
    charged["amount"] = json!("1234");
    let body = json!({"x402Version": 2, "paymentPayload": payment, "paymentRequirements": charged});
    let policy = FacilitatorPolicy::default();
    let settled = engine
        .facilitator_settle(&policy, body.to_string().as_bytes())
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount.as_deref(), Some("1234"));
    let again = engine
        .facilitator_settle(&policy, body.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(again, settled);
    assert_eq!(settler.amounts(), vec![U256::from(1234u64)]);
    // More than the maximum, or another change than the amount: not the payment's requirements.
    for (member, value) in [
        ("amount", json!("10001")),
        ("payTo", json!(Address::repeat_byte(1))),
    ] {
        let mut other = accepted.clone();
        other[member] = value;
        let body = json!({"x402Version": 2, "paymentPayload": permit2_payment(&accepted, 2, |_| {}), "paymentRequirements": other});
        let refused = engine
            .facilitator_settle(&policy, body.to_string().as_bytes())
            .await
            .unwrap();
        assert_eq!(
            refused.error_reason.as_deref(),
            Some("No matching payment requirements"),
            "{member}"
        );
    }
    // An exact payment cannot be charged less than its amount.
    let exact = permit2_offer().requirements_v2();
    let exact = serde_json::to_value(&exact).unwrap();
    let mut less = exact.clone();
    less["amount"] = json!("1");
    let body = json!({"x402Version": 2, "paymentPayload": permit2_payment(&exact, 3, |_| {}), "paymentRequirements": less});
    let refused = engine
        .facilitator_settle(&policy, body.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(
        refused.error_reason.as_deref(),
        Some("No matching payment requirements")
    );
    assert_eq!(settler.amounts().len(), 1);
}

/// A settler that says the payer has not approved Permit2 gets the official servers' answer: 412 with the
/// offers and the code, nothing reserved (the same payment goes through once approved).
#[tokio::test]
async fn a_payer_without_a_permit2_allowance_is_answered_412() {
    struct NoAllowance;
    impl Settler for NoAllowance {
        fn verify<'a>(
            &'a self,
            _: &'a SettleRequest,
        ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
            Box::pin(async {
                Ok(VerifyOutcome::Invalid {
                    reason: x402_tower::scheme::PERMIT2_ALLOWANCE_REQUIRED.into(),
                    message: Some("approve Permit2 for the token".into()),
                })
            })
        }
        fn settle<'a>(&'a self, _: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
            Box::pin(async { settled_outcome() })
        }
        fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
            Box::pin(async { Ok(SupportedResponse::default()) })
        }
    }
    let store = Arc::new(x402_tower::store::InMemoryPaymentStore::default());
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(permit2_offer())
        .engine(Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Arc::new(NoAllowance))
                .store(store.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let accepted = send(svc.clone(), req("/r", &[])).await.payment_required()["accepts"][0].clone();
    let paid = b64(&permit2_payment(&accepted, 1, |_| {}));
    let refused = send(svc, req("/r", &[("payment-signature", &paid)])).await;
    assert_eq!(refused.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(refused.json()["error"], "permit2_allowance_required");
    assert!(
        refused.header("payment-required").is_some(),
        "the offers come with it"
    );
    assert!(store.is_empty(), "nothing kept: the payment is released");
}
