//! offer-receipt through the layer: every offer of a 402 is signed by the operator's key, every successful
//! settlement's answer carries a signed receipt naming the resource and the payer, and nothing is signed
//! for a payment that did not settle.

use std::sync::{Arc, Mutex};

use alloy_signer_local::PrivateKeySigner;
use http::StatusCode;
use serde_json::Value;
use tower::Layer;
use x402_tower::extensions::offer_receipt::{
    OfferReceipt, ProofError, ReceiptCheck, SignedOffer, SignedReceipt,
};
use x402_tower::settle::{SettleOutcome, SettleTiming};

use crate::support::*;

const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

fn issuer() -> Arc<OfferReceipt> {
    Arc::new(OfferReceipt::new(KEY.parse::<PrivateKeySigner>().unwrap()))
}

fn offers_of(answer: &Answer) -> Vec<SignedOffer> {
    let pr = answer.payment_required();
    serde_json::from_value(pr["extensions"]["offer-receipt"]["info"]["offers"].clone()).unwrap()
}

#[tokio::test]
async fn each_offer_of_the_402_is_signed_and_matches_its_accepts_entry() {
    let issuer = issuer();
    let layer = config()
        .offer(
            x402_tower::PaymentOffer::usdc(
                "base".parse().unwrap(),
                PAY_TO,
                x402_tower::Price::from(20_000u64),
            )
            .unwrap(),
        )
        .offer_receipt(issuer.clone())
        .build()
        .unwrap();
    let inner = Inner::new();
    let a = send(
        layer.layer(inner.service(StatusCode::OK)),
        req("/report?id=7", &[]),
    )
    .await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    let pr = a.payment_required();
    let ext = &pr["extensions"]["offer-receipt"];
    assert!(ext.get("schema").is_none(), "{ext}");
    let offers = offers_of(&a);
    assert_eq!(offers.len(), 2);
    for (i, o) in offers.iter().enumerate() {
        assert_eq!(o.signer().unwrap(), issuer.address());
        assert_eq!(o.accept_index, Some(i));
        let accept = &pr["accepts"][i];
        assert_eq!(o.payload.resource_url, "https://shop.example/report?id=7");
        for (field, wire) in [
            (&o.payload.network, "network"),
            (&o.payload.asset, "asset"),
            (&o.payload.pay_to, "payTo"),
            (&o.payload.amount, "amount"),
            (&o.payload.scheme, "scheme"),
        ] {
            assert_eq!(Value::String(field.clone()), accept[wire], "{wire}");
        }
        let until = o.payload.valid_until.unwrap();
        assert!(until >= now() + 299 && until <= now() + 301, "{until}");
    }
    // A tampered payload no longer recovers to the server's key.
    let mut forged = offers[0].clone();
    forged.payload.amount = "1".into();
    assert_ne!(forged.signer().unwrap(), issuer.address());
}

#[tokio::test]
async fn a_signed_offer_is_reused_while_half_its_validity_is_left_then_signed_anew() {
    let clock = Arc::new(Mutex::new(1_800_000_000u64));
    let c = clock.clone();
    let layer = config()
        .offer_receipt(Arc::new(
            OfferReceipt::new(KEY.parse::<PrivateKeySigner>().unwrap()).offer_validity_seconds(60),
        ))
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .clock(move || *c.lock().unwrap())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    let inner = Inner::new();
    let get402 = || async {
        offers_of(&send(layer.layer(inner.service(StatusCode::OK)), req("/r", &[])).await).remove(0)
    };
    let first = get402().await;
    assert_eq!(first.payload.valid_until, Some(1_800_000_060));
    *clock.lock().unwrap() += 29;
    assert_eq!(get402().await, first, "reused within half the validity");
    *clock.lock().unwrap() += 1;
    let second = get402().await;
    assert_eq!(second.payload.valid_until, Some(1_800_000_090));
    assert_ne!(second.signature, first.signature);
}

async fn paid(timing: SettleTiming, header: String, v1: bool) -> (Answer, Arc<OfferReceipt>) {
    let issuer = issuer();
    let settler = Scripted::new(settled_outcome());
    let layer = config()
        .settle_timing(timing)
        .offer_receipt(issuer.clone())
        .engine(engine_with(settler))
        .build()
        .unwrap();
    let name = if v1 { "x-payment" } else { "payment-signature" };
    let a = send(
        layer.layer(Inner::new().service(StatusCode::OK)),
        req("/report", &[(name, &header)]),
    )
    .await;
    (a, issuer)
}

#[tokio::test]
async fn a_settled_payment_is_answered_with_a_receipt_signed_by_the_server() {
    for timing in [SettleTiming::BeforeHandler, SettleTiming::AfterResponse] {
        for v1 in [false, true] {
            let header = if v1 { v1_header(31) } else { v2_header(31) };
            let (a, issuer) = paid(timing, header, v1).await;
            assert_eq!(a.status, StatusCode::OK, "{timing:?} v1={v1}");
            let sr = a.receipt(if v1 {
                "x-payment-response"
            } else {
                "payment-response"
            });
            let receipt = SignedReceipt::from_settlement(&sr).expect("a signed receipt");
            receipt
                .verify(&ReceiptCheck {
                    signer: issuer.address(),
                    resource_url: Some("https://shop.example/report"),
                    payer: Some(ACCOUNT0),
                })
                .unwrap();
            // CAIP-2 even for a v1 client; no transaction unless asked (privacy).
            assert_eq!(receipt.payload.network, "eip155:84532");
            assert_eq!(receipt.payload.transaction, "");
            assert!(receipt.payload.issued_at.abs_diff(now()) <= 2);
            // The handler saw the same receipt when settling before it.
            if timing == SettleTiming::BeforeHandler {
                assert_eq!(sr.transaction, a.json()["settled"]);
            }
            let wrong = ReceiptCheck {
                signer: ACCOUNT0,
                resource_url: None,
                payer: None,
            };
            assert!(matches!(
                receipt.verify(&wrong),
                Err(ProofError::WrongSigner { .. })
            ));
            let other_url = ReceiptCheck {
                signer: issuer.address(),
                resource_url: Some("https://shop.example/other"),
                payer: None,
            };
            assert!(matches!(
                receipt.verify(&other_url),
                Err(ProofError::WrongResource(_))
            ));
            let other_payer = ReceiptCheck {
                signer: issuer.address(),
                resource_url: None,
                payer: Some(PAY_TO),
            };
            assert!(matches!(
                receipt.verify(&other_payer),
                Err(ProofError::WrongPayer(_))
            ));
        }
    }
}

#[tokio::test]
async fn the_transaction_is_in_the_receipt_only_when_configured() {
    let issuer = Arc::new(
        OfferReceipt::new(KEY.parse::<PrivateKeySigner>().unwrap()).include_transaction(true),
    );
    let layer = config()
        .settle_timing(SettleTiming::BeforeHandler)
        .offer_receipt(issuer)
        .engine(engine_with(Scripted::new(settled_outcome())))
        .build()
        .unwrap();
    let a = send(
        layer.layer(Inner::new().service(StatusCode::OK)),
        req("/report", &[("payment-signature", &v2_header(32))]),
    )
    .await;
    let receipt = SignedReceipt::from_settlement(&a.receipt("payment-response")).unwrap();
    assert_eq!(
        receipt.payload.transaction,
        format!("0x{}", "ab".repeat(32))
    );
}

#[tokio::test]
async fn nothing_is_signed_for_a_payment_that_did_not_settle() {
    let layer = config()
        .settle_timing(SettleTiming::BeforeHandler)
        .offer_receipt(issuer())
        .engine(engine_with(Scripted::new(SettleOutcome::Failed {
            reason: "insufficient_funds".into(),
            message: None,
            authorization_still_usable: false,
        })))
        .build()
        .unwrap();
    let a = send(
        layer.layer(Inner::new().service(StatusCode::OK)),
        req("/report", &[("payment-signature", &v2_header(33))]),
    )
    .await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    let sr = a.receipt("payment-response");
    assert!(!sr.success);
    assert_eq!(SignedReceipt::from_settlement(&sr), None);
    // The 402 still carries signed offers.
    assert_eq!(offers_of(&a).len(), 1);
}

#[test]
fn the_libsecp256k1_issuer_signs_exactly_as_alloys_signer() {
    let alloy = OfferReceipt::new(KEY.parse::<PrivateKeySigner>().unwrap());
    let fast = OfferReceipt::from_secret(KEY.parse().unwrap()).unwrap();
    assert_eq!(fast.address(), alloy.address());
    let sign = |o: &OfferReceipt| {
        o.sign_receipt(
            "https://shop.example/report",
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "eip155:84532",
            "",
            1_800_000_000,
        )
        .unwrap()
    };
    // RFC 6979 on both sides: the very same signature.
    assert_eq!(sign(&fast), sign(&alloy));
    assert_eq!(sign(&fast).signer().unwrap(), alloy.address());
    assert!(OfferReceipt::from_secret(alloy_primitives::B256::ZERO).is_err());
}

/// A payment whose settlement was not known at first (`settlement_pending`) and is settled when the buyer
/// resends it: every later resend answers the receipt the first delivery carried, not one signed anew
/// (`issuedAt` would move with the clock).
#[tokio::test]
async fn a_payment_reconciled_on_a_resend_answers_the_same_receipt_every_time() {
    use std::sync::atomic::{AtomicU64, Ordering};
    for timing in [SettleTiming::BeforeHandler, SettleTiming::AfterResponse] {
        let clock = Arc::new(AtomicU64::new(now()));
        let c = clock.clone();
        let settler = pending_settler();
        let issuer = issuer();
        let layer = config()
            .settle_timing(timing)
            .offer_receipt(issuer.clone())
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(settler.clone())
                    .clock(move || c.load(Ordering::SeqCst))
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap();
        let inner = Inner::new();
        let header = v2_header(41);
        let resend = || resend_to(&layer, &inner, &header);
        let pending = resend().await;
        assert_eq!(pending.status, StatusCode::PAYMENT_REQUIRED, "{timing:?}");
        settler.reconcile_to(settled_outcome());
        clock.fetch_add(3, Ordering::SeqCst);
        let first = resend().await;
        assert_eq!(first.status, StatusCode::OK, "{timing:?}");
        let first = first.receipt("payment-response");
        let signed = SignedReceipt::from_settlement(&first).expect("a signed receipt");
        assert_eq!(signed.payload.issued_at, now_of(&clock));
        clock.fetch_add(5, Ordering::SeqCst);
        let again = resend().await;
        assert_eq!(again.status, StatusCode::OK, "{timing:?}");
        assert_eq!(again.receipt("payment-response"), first, "{timing:?}");
        assert_eq!(settler.settles(), 1, "settled once");
    }
}

/// A settler whose settlement's outcome is unknown (broadcast, no receipt yet) until `reconcile_to` says.
fn pending_settler() -> Arc<Scripted> {
    Scripted::new(SettleOutcome::Unknown {
        message: "no receipt yet".into(),
        transaction: Some(format!("0x{}", "ab".repeat(32))),
    })
}

/// The payment `header` sent (again) to `/report` behind `layer`.
async fn resend_to(layer: &x402_tower::X402Layer, inner: &Inner, header: &str) -> Answer {
    send(
        layer.layer(inner.service(StatusCode::OK)),
        req("/report", &[("payment-signature", header)]),
    )
    .await
}

fn now_of(clock: &std::sync::atomic::AtomicU64) -> u64 {
    clock.load(std::sync::atomic::Ordering::SeqCst)
}

/// A settlement recorded without a receipt (the background reconciler has no route, so no signer) is signed
/// when it is delivered, as of the time it was recorded: the same receipt on every resend and from every
/// instance that shares the store and the key.
#[tokio::test]
async fn a_settlement_recorded_without_a_receipt_is_answered_the_same_receipt_by_every_instance() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let clock = Arc::new(AtomicU64::new(now()));
    let store: Arc<dyn x402_tower::PaymentStore> =
        Arc::new(x402_tower::store::InMemoryPaymentStore::default());
    let settler = pending_settler();
    let instance = || {
        let c = clock.clone();
        config()
            .offer_receipt(issuer())
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(settler.clone())
                    .store(store.clone())
                    .clock(move || c.load(Ordering::SeqCst))
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap()
    };
    let (a, b) = (instance(), instance());
    let inner = Inner::new();
    let header = v2_header(43);
    let resend = |layer| resend_to(layer, &inner, &header);
    assert_eq!(resend(&a).await.status, StatusCode::PAYMENT_REQUIRED);
    // The chain mined it; the background reconciler records the settlement (no receipt: no route).
    settler.reconcile_to(settled_outcome());
    let recorded_at = now_of(&clock);
    let report = a.engine().reconcile_unresolved(10).await.unwrap();
    assert_eq!(report.settled, 1);

    clock.fetch_add(7, Ordering::SeqCst);
    let first = resend(&a).await;
    assert_eq!(first.status, StatusCode::OK);
    let first = first.receipt("payment-response");
    let signed = SignedReceipt::from_settlement(&first).expect("a signed receipt");
    assert_eq!(signed.payload.issued_at, recorded_at, "as of the record");
    signed
        .verify(&ReceiptCheck {
            signer: issuer().address(),
            resource_url: Some("https://shop.example/report"),
            payer: Some(ACCOUNT0),
        })
        .unwrap();
    clock.fetch_add(5, Ordering::SeqCst);
    for layer in [&a, &b] {
        let again = resend(layer).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(again.receipt("payment-response"), first);
    }
    assert_eq!(settler.settles(), 1, "settled once");
}

/// Concurrent copies of a pending payment, resent once the chain mined it: one reconciles and records the
/// signed receipt, the others wait for that record; every copy is served with the same receipt, and the
/// payment is settled once.
#[tokio::test]
async fn concurrent_resends_of_a_reconciled_payment_answer_one_receipt() {
    let settler = pending_settler();
    let layer = config()
        .offer_receipt(issuer())
        .engine(engine_with(settler.clone()))
        .build()
        .unwrap();
    let inner = Inner::new();
    let header = v2_header(47);
    let resend = || resend_to(&layer, &inner, &header);
    assert_eq!(resend().await.status, StatusCode::PAYMENT_REQUIRED);
    settler.reconcile_to(settled_outcome());
    let (a, b, c) = tokio::join!(resend(), resend(), resend());
    for r in [&a, &b, &c] {
        assert_eq!(r.status, StatusCode::OK);
    }
    let first = a.receipt("payment-response");
    assert!(SignedReceipt::from_settlement(&first).is_some());
    assert_eq!(b.receipt("payment-response"), first);
    assert_eq!(c.receipt("payment-response"), first);
    assert_eq!(settler.settles(), 1, "settled once");
    assert_eq!(settler.reconciles(), 1, "reconciled once");
}
