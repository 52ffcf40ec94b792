//! The payment engine without Tower: one test per row of the keep/release table (`replay.rs`), through the
//! engine's own doors (the facilitator's verify/settle and the background reconciler).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use x402_tower::engine::PaymentEngine;
use x402_tower::engine::facilitator::FacilitatorPolicy;
use x402_tower::pricing::BoxFuture;
use x402_tower::proto::{SettleResponse, SupportedResponse};
use x402_tower::settle::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use x402_tower::{
    PaymentStore,
    store::{InMemoryPaymentStore, PaymentState},
};

use crate::support::*;

fn engine(settler: Arc<dyn Settler>, store: Arc<InMemoryPaymentStore>) -> PaymentEngine {
    PaymentEngine::builder()
        .settler(settler)
        .store(store)
        .build()
        .unwrap()
}

/// A settler whose every settlement has an unknown outcome (no transaction seen).
fn unknown_outcome() -> Arc<Scripted> {
    Scripted::new(SettleOutcome::Unknown {
        message: "no receipt".into(),
        transaction: None,
    })
}

/// The facilitator request for the v2 payment with nonce byte `nonce`.
/// The facilitator request of the payment with `nonce`, built once: each test owns its nonces, and a second
/// call is the same payment sent again (built anew, a later second would land in `validBefore` and make it
/// another authorization under the same nonce, refused as a replay: that flaked under CI load).
fn body(nonce: u8) -> Value {
    static BUILT: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<u8, Value>>> =
        std::sync::LazyLock::new(Default::default);
    BUILT
        .lock()
        .unwrap()
        .entry(nonce)
        .or_insert_with(|| {
            let payload = unb64(&v2_header(nonce));
            json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload})
        })
        .clone()
}

fn state(store: &InMemoryPaymentStore) -> Option<PaymentState> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let now = now();
    let list = match std::pin::pin!(store.unresolved(now, u64::MAX, 10)).poll(&mut cx) {
        std::task::Poll::Ready(r) => r.unwrap(),
        std::task::Poll::Pending => unreachable!(),
    };
    if let Some((_, r)) = list.first() {
        return Some(r.state);
    }
    (!store.is_empty()).then_some(PaymentState::Settled)
}

use std::future::Future as _;

fn failed(reason: &str, usable: bool) -> SettleOutcome {
    SettleOutcome::Failed {
        reason: reason.into(),
        message: None,
        authorization_still_usable: usable,
    }
}

#[tokio::test]
async fn settled_is_kept_and_the_identical_request_is_answered_from_the_record() {
    let s = Scripted::new(settled_outcome());
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine(s.clone(), store.clone());
    let p = FacilitatorPolicy::default();
    let first = e
        .facilitator_settle(&p, body(1).to_string().as_bytes())
        .await
        .unwrap();
    assert!(first.success);
    let again = e
        .facilitator_settle(&p, body(1).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(again, first);
    assert!(
        e.facilitator_verify(&p, body(1).to_string().as_bytes())
            .await
            .unwrap()
            .is_valid
    );
    assert_eq!(s.settles(), 1);
    assert_eq!(state(&store), Some(PaymentState::Settled));
}

#[tokio::test]
async fn failed_and_still_usable_is_released() {
    let s = Scripted::new(failed("insufficient_funds", true));
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine(s.clone(), store.clone());
    let p = FacilitatorPolicy::default();
    for _ in 0..2 {
        let r = e
            .facilitator_settle(&p, body(2).to_string().as_bytes())
            .await
            .unwrap();
        assert_eq!(r.error_reason.as_deref(), Some("insufficient_funds"));
    }
    assert_eq!(s.settles(), 2, "released: tried again");
    assert!(store.is_empty());
}

#[tokio::test]
async fn failed_for_good_is_spent() {
    let s = Scripted::new(failed("invalid_transaction_state", false));
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine(s.clone(), store.clone());
    let p = FacilitatorPolicy::default();
    let r = e
        .facilitator_settle(&p, body(3).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(r.error_reason.as_deref(), Some("invalid_transaction_state"));
    // Spent is final: the record keeps no payment, and what follows is answered from its state alone.
    let record = store.get(&payment_key(3), now()).await.unwrap().unwrap();
    assert_eq!(record.state, PaymentState::Spent);
    assert!(record.payment.is_forgotten(), "{:?}", record.payment);
    let r = e
        .facilitator_settle(&p, body(3).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(
        r.error_reason.as_deref(),
        Some("invalid_exact_evm_nonce_already_used")
    );
    let v = e
        .facilitator_verify(&p, body(3).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(
        v.invalid_reason.as_deref(),
        Some("invalid_exact_evm_nonce_already_used")
    );
    assert_eq!(s.settles(), 1);
}

/// A settler whose verify says `reason` (or fails) and counts settle calls.
struct Refusing {
    reason: Option<&'static str>,
    settles: AtomicUsize,
    verifies: AtomicUsize,
}

impl Settler for Refusing {
    fn verify<'a>(
        &'a self,
        _: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        self.verifies.fetch_add(1, Ordering::SeqCst);
        let r = match self.reason {
            Some(reason) => Ok(VerifyOutcome::Invalid {
                reason: reason.into(),
                message: Some(format!("the settler's words on {reason}")),
            }),
            None => Err(SettleError::Timeout),
        };
        Box::pin(async move { r })
    }
    fn settle<'a>(&'a self, _: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { settled_outcome() })
    }
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(async { Ok(SupportedResponse::default()) })
    }
}

#[tokio::test]
async fn settler_verify_invalid_or_unreachable_releases_and_nonce_used_is_spent() {
    let p = FacilitatorPolicy::default();
    for (reason, released) in [
        (Some("insufficient_funds"), true),
        (None, true),
        (Some("invalid_exact_evm_nonce_already_used"), false),
    ] {
        let s = Arc::new(Refusing {
            reason,
            settles: AtomicUsize::new(0),
            verifies: AtomicUsize::new(0),
        });
        let store = Arc::new(InMemoryPaymentStore::default());
        let e = engine(s.clone(), store.clone());
        let first = e
            .facilitator_settle(&p, body(4).to_string().as_bytes())
            .await;
        match reason {
            Some(r) => {
                // The reason and the settler's own message.
                let first = first.unwrap();
                assert_eq!(first.error_reason.as_deref(), Some(r));
                let words = format!("the settler's words on {r}");
                assert_eq!(first.error_message.as_deref(), Some(words.as_str()));
            }
            None => {
                assert!(first.is_err(), "no answer from the settler: 502");
                // `/verify` says the same: retryable, never a refusal.
                let verdict = e
                    .facilitator_verify(&p, body(4).to_string().as_bytes())
                    .await;
                assert!(
                    matches!(
                        verdict,
                        Err(x402_tower::engine::facilitator::FacilitatorError::Upstream(
                            "payment verification unavailable"
                        ))
                    ),
                    "{verdict:?}"
                );
            }
        }
        assert_eq!(store.is_empty(), released, "{reason:?}");
        assert_eq!(s.settles.load(Ordering::SeqCst), 0, "nothing broadcast");
    }
}

#[tokio::test]
async fn unknown_is_pending_and_a_resend_reconciles_to_settled_without_settling_again() {
    let s = Scripted::new(SettleOutcome::Unknown {
        message: "no receipt".into(),
        transaction: Some(format!("0x{}", "cd".repeat(32))),
    });
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine(s.clone(), store.clone());
    let p = FacilitatorPolicy::default();
    let pending = e
        .facilitator_settle(&p, body(5).to_string().as_bytes())
        .await
        .unwrap();
    assert!(!pending.success);
    assert_eq!(pending.error_reason.as_deref(), Some("settlement_pending"));
    assert_eq!(pending.transaction, format!("0x{}", "cd".repeat(32)));
    assert_eq!(state(&store), Some(PaymentState::Pending));
    // Still unknown: pending again, reconciled, not re-settled.
    let again = e
        .facilitator_settle(&p, body(5).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(again.error_reason.as_deref(), Some("settlement_pending"));
    // The chain mined it.
    s.reconcile_to(settled_outcome());
    let done = e
        .facilitator_settle(&p, body(5).to_string().as_bytes())
        .await
        .unwrap();
    assert!(done.success);
    assert_eq!(s.settles(), 1);
    assert_eq!(s.reconciles(), 2);
    assert_eq!(state(&store), Some(PaymentState::Settled));
}

#[tokio::test]
async fn a_pending_payment_found_unsettled_and_usable_is_settled_anew() {
    let s = Scripted::new(SettleOutcome::Unknown {
        message: "lost".into(),
        transaction: None,
    });
    let e = engine(s.clone(), Arc::new(InMemoryPaymentStore::default()));
    let p = FacilitatorPolicy::default();
    e.facilitator_settle(&p, body(6).to_string().as_bytes())
        .await
        .unwrap();
    s.reconcile_to(failed("unexpected_settle_error", true));
    // The resend settles anew (the scripted settle still says unknown: pending again) — one more settle
    // call, never two at once.
    let r = e
        .facilitator_settle(&p, body(6).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(r.error_reason.as_deref(), Some("settlement_pending"));
    assert_eq!((s.settles(), s.reconciles()), (2, 1));
}

/// A payment that echoed the 402's declarations is recorded without them, and the background reconciler
/// still settles it from the record alone (what it keeps is what a settlement reads).
#[tokio::test]
async fn a_payment_recorded_without_its_echoes_is_reconciled_from_the_record() {
    // With other extensions kept, and with nothing but echoes (recorded as `"extensions":{}`).
    for (nonce, payload) in [
        (0x32, payload_v2_echoing(0x32)),
        (0x34, payload_v2_echoing_only(0x34)),
    ] {
        let s = unknown_outcome();
        let store = Arc::new(InMemoryPaymentStore::default());
        let e = engine(s.clone(), store.clone());
        let body = json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload});
        let r = e
            .facilitator_settle(&FacilitatorPolicy::default(), body.to_string().as_bytes())
            .await
            .unwrap();
        assert_eq!(r.error_reason.as_deref(), Some("settlement_pending"));
        let key = payment_key(nonce);
        let record = store.get(&key, now()).await.unwrap().unwrap();
        let kept: Value = serde_json::from_str(&record.payment.payload).unwrap();
        assert_eq!(kept, without_echoed(&payload));
        s.reconcile_to(settled_outcome());
        let report = e.reconcile_unresolved(100).await.unwrap();
        assert_eq!((report.examined, report.settled, report.skipped), (1, 1, 0));
        assert_eq!(state(&store), Some(PaymentState::Settled));
        // Settled, the record no longer keeps the payment; a resend is still answered from it.
        let record = store.get(&key, now()).await.unwrap().unwrap();
        assert!(record.payment.is_forgotten(), "{:?}", record.payment);
        let again = e
            .facilitator_settle(&FacilitatorPolicy::default(), body.to_string().as_bytes())
            .await
            .unwrap();
        assert!(again.success, "{again:?}");
        assert_eq!(
            s.settles(),
            1,
            "answered from the record, not settled again"
        );
    }
    assert_eq!(
        without_echoed(&payload_v2_echoing_only(0x34))["extensions"],
        json!({})
    );
}

/// An engine over `settler` and an in-memory store, `stale_after` 60 s, on a clock the test moves.
fn clocked_engine(
    settler: Arc<Scripted>,
) -> (
    PaymentEngine,
    Arc<InMemoryPaymentStore>,
    Arc<std::sync::atomic::AtomicU64>,
) {
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(now()));
    let c = clock.clone();
    let store = Arc::new(InMemoryPaymentStore::default());
    let engine = PaymentEngine::builder()
        .settler(settler)
        .store(store.clone())
        .stale_after(std::time::Duration::from_secs(60))
        .clock(move || c.load(Ordering::SeqCst))
        .build()
        .unwrap();
    (engine, store, clock)
}

#[tokio::test]
async fn the_background_reconciler_resolves_pending_and_stale_in_flight_records() {
    let s = unknown_outcome();
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine(s.clone(), store.clone());
    e.facilitator_settle(
        &FacilitatorPolicy::default(),
        body(7).to_string().as_bytes(),
    )
    .await
    .unwrap();
    s.reconcile_to(settled_outcome());
    let report = e.reconcile_unresolved(100).await.unwrap();
    assert_eq!((report.examined, report.settled), (1, 1));
    assert_eq!(state(&store), Some(PaymentState::Settled));
    assert_eq!(s.settles(), 1);
    // Nothing left to do.
    assert_eq!(e.reconcile_unresolved(100).await.unwrap().examined, 0);

    // A request that died mid-flight (InFlight, never touched again) is stale after `stale_after`. Marked as
    // settling, it may have moved money: reconciled. Unmarked, it moved nothing: released, the settler never
    // asked (a facilitator's reconciliation settles, and would charge for a request never served).
    for marked in [true, false] {
        let s = Scripted::new(settled_outcome());
        let (e, store, clock) = clocked_engine(s.clone());
        let payload = unb64(&v2_header(8));
        let request = x402_tower::engine::facilitator::settle_request(
            payload.to_string().into(),
            &payload["accepted"].to_string(),
        )
        .unwrap();
        let key = x402_tower::store::PaymentKey {
            chain_id: 84532,
            nonce_space: USDC_BASE_SEPOLIA,
            from: ACCOUNT0,
            nonce: request.authorized.key.nonce,
        };
        let mark = SettleResponse {
            success: false,
            error_reason: Some("settlement_pending".into()),
            error_message: None,
            transaction: String::new(),
            network: "eip155:84532".into(),
            payer: None,
            extensions: None,
            amount: None,
        };
        let record = x402_tower::store::PaymentRecord {
            state: PaymentState::InFlight,
            resource: "https://shop.example/r".into(),
            fingerprint: alloy_primitives::B256::ZERO,
            settlement: marked.then_some(mark),
            payment: Arc::new(x402_tower::store::StoredPayment {
                payload: payload.to_string().into(),
                requirements: payload["accepted"].to_string().into(),
            }),
            expires_at: now() + 300,
            updated_at: now(),
            revision: 0,
        };
        store.reserve(&key, &record, now()).await.unwrap();
        assert_eq!(
            e.reconcile_unresolved(10).await.unwrap().examined,
            0,
            "not stale yet"
        );
        clock.store(now() + 61, Ordering::SeqCst);
        let report = e.reconcile_unresolved(10).await.unwrap();
        assert_eq!(s.settles(), 0, "never settled by the reconciler");
        if marked {
            assert_eq!((report.examined, report.settled), (1, 1));
            assert_eq!(s.reconciles(), 1);
            assert_eq!(state(&store), Some(PaymentState::Settled));
        } else {
            assert_eq!((report.examined, report.released), (1, 1));
            assert_eq!(s.reconciles(), 0, "nothing to ask the settler");
            assert_eq!(state(&store), None);
        }
    }
}

#[tokio::test]
async fn the_facilitator_caps_valid_before_with_its_own_limit_and_checks_pay_to() {
    let s = Scripted::new(settled_outcome());
    let e = engine(s.clone(), Arc::new(InMemoryPaymentStore::default()));
    // The caller claims a huge maxTimeoutSeconds for an authorization valid for a year.
    let mut a = Auth::v2(9);
    a.valid_before = now() + 365 * 24 * 3600;
    let payload = unb64(&b64(&payload_v2(
        &a,
        &a.sign(&signer(), &domain_base_sepolia()),
    )));
    let mut requirements = payload["accepted"].clone();
    requirements["maxTimeoutSeconds"] = json!(u64::MAX / 2);
    let mut payload = payload;
    payload["accepted"] = requirements.clone();
    let b =
        json!({"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements});
    let r = e
        .facilitator_settle(&FacilitatorPolicy::default(), b.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(
        r.error_reason.as_deref(),
        Some("invalid_exact_evm_payload_authorization_valid_before")
    );
    let allow_other = FacilitatorPolicy {
        pay_to: Some(vec![alloy_primitives::Address::repeat_byte(1)]),
        ..Default::default()
    };
    let r = e
        .facilitator_settle(&allow_other, body(10).to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(
        r.error_reason.as_deref(),
        Some("invalid_payment_requirements")
    );
    assert_eq!(s.settles(), 0);
}

#[tokio::test]
async fn a_flood_of_caller_chosen_terms_stores_nothing_and_a_real_payment_still_settles() {
    // Facilitator requests whose caller sets maxTimeoutSeconds and validBefore as far out as it likes (the
    // attack that once filled the payment store with 250,000 entries): all refused by the facilitator's own
    // horizon before any record is written. The store holds only 100 entries, so 10,000 requests (100x its
    // capacity; the count that matters) would have filled it a hundred times over if any of them stored
    // anything; a real payment then still settles.
    let s = Scripted::new(settled_outcome());
    let store = Arc::new(InMemoryPaymentStore::with_capacity(100));
    let e = engine(s.clone(), store.clone());
    let p = FacilitatorPolicy::default();
    let template = body(11);
    for i in 0..10_000u32 {
        let mut b = template.clone();
        b["paymentRequirements"]["maxTimeoutSeconds"] = json!(u64::MAX / 2);
        b["paymentPayload"]["accepted"]["maxTimeoutSeconds"] = json!(u64::MAX / 2);
        let auth = &mut b["paymentPayload"]["payload"]["authorization"];
        auth["validBefore"] = json!((1u64 << 63).to_string());
        auth["nonce"] = json!(format!("0x{:064x}", i));
        let r = e
            .facilitator_settle(&p, b.to_string().as_bytes())
            .await
            .unwrap();
        assert_eq!(
            r.error_reason.as_deref(),
            Some("invalid_exact_evm_payload_authorization_valid_before")
        );
    }
    assert!(store.is_empty());
    assert!(
        e.facilitator_settle(&p, body(12).to_string().as_bytes())
            .await
            .unwrap()
            .success
    );
    assert_eq!(s.settles(), 1);
}

#[tokio::test]
async fn a_payment_still_being_settled_is_not_taken_for_abandoned_before_the_settlers_deadline() {
    // A settler whose settlements may take 10 minutes: an in-flight payment 5 minutes old is a slow
    // settlement, not a dead request, whatever `stale_after` says; past the deadline and a minute it is.
    let s = Scripted::new(settled_outcome());
    s.settles_within(std::time::Duration::from_secs(600));
    let (e, store, clock) = clocked_engine(s.clone());
    assert_eq!(e.stale_after(), std::time::Duration::from_secs(660));
    let payload = unb64(&v2_header(13));
    let record = x402_tower::store::PaymentRecord {
        state: PaymentState::InFlight,
        resource: "https://shop.example/r".into(),
        fingerprint: alloy_primitives::B256::ZERO,
        settlement: None,
        payment: Arc::new(x402_tower::store::StoredPayment {
            payload: payload.to_string().into(),
            requirements: payload["accepted"].to_string().into(),
        }),
        expires_at: now() + 3600,
        updated_at: now(),
        revision: 0,
    };
    let key = x402_tower::store::PaymentKey {
        chain_id: 84532,
        nonce_space: USDC_BASE_SEPOLIA,
        from: ACCOUNT0,
        nonce: alloy_primitives::B256::repeat_byte(13),
    };
    store.reserve(&key, &record, now()).await.unwrap();
    clock.store(now() + 300, Ordering::SeqCst);
    assert_eq!(e.reconcile_unresolved(10).await.unwrap().examined, 0);
    clock.store(now() + 661, Ordering::SeqCst);
    assert_eq!(e.reconcile_unresolved(10).await.unwrap().examined, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_through_the_facilitator_door_settle_once() {
    let s = Scripted::new(settled_outcome());
    let e = Arc::new(engine(s.clone(), Arc::new(InMemoryPaymentStore::default())));
    // Copies of one payment, signed once (see the next test).
    let payment = body(20);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let e = e.clone();
            let payment = payment.clone();
            tokio::spawn(async move {
                e.facilitator_settle(
                    &FacilitatorPolicy::default(),
                    payment.to_string().as_bytes(),
                )
                .await
                .unwrap()
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(s.settles(), 1, "one settlement for 16 copies");
    let settled: Vec<_> = answers.iter().filter(|a| a.success).collect();
    assert!(!settled.is_empty());
    assert!(settled.iter().all(|a| **a == *settled[0]), "one receipt");
    assert!(
        answers
            .iter()
            .all(|a| a.success || a.error_reason.as_deref() == Some("settlement_pending")),
        "the rest are told to retry: {answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_store_settle_an_authorization_once_whichever_door() {
    // Two instances (two engines, each with its own settler) sharing one store: the same payment presented
    // to both at once settles once; afterwards each instance answers the identical request from the record.
    let store = Arc::new(InMemoryPaymentStore::default());
    let (s1, s2) = (
        Scripted::new(settled_outcome()),
        Scripted::new(settled_outcome()),
    );
    let (e1, e2) = (
        Arc::new(engine(s1.clone(), store.clone())),
        Arc::new(engine(s2.clone(), store.clone())),
    );
    // One payment, signed once: `body` puts `now + 300` in validBefore, so building it again a second later
    // would be another authorization of the same nonce (a replay, not a resend).
    let payment = body(21);
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let e = if i % 2 == 0 { e1.clone() } else { e2.clone() };
            let payment = payment.clone();
            tokio::spawn(async move {
                e.facilitator_settle(
                    &FacilitatorPolicy::default(),
                    payment.to_string().as_bytes(),
                )
                .await
                .unwrap()
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s1.settles() + s2.settles(), 1);
    let p = FacilitatorPolicy::default();
    let (a, b) = (
        e1.facilitator_settle(&p, payment.to_string().as_bytes())
            .await
            .unwrap(),
        e2.facilitator_settle(&p, payment.to_string().as_bytes())
            .await
            .unwrap(),
    );
    assert!(a.success && a == b, "{a:?} {b:?}");
    assert_eq!(s1.settles() + s2.settles(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_reconciler_and_a_resend_never_both_act_on_one_pending_payment() {
    for round in 0..8u8 {
        let s = unknown_outcome();
        let e = Arc::new(engine(s.clone(), Arc::new(InMemoryPaymentStore::default())));
        let p = FacilitatorPolicy::default();
        let b = body(30 + round);
        let first = e
            .facilitator_settle(&p, b.to_string().as_bytes())
            .await
            .unwrap();
        assert_eq!(first.error_reason.as_deref(), Some("settlement_pending"));
        s.reconcile_to(settled_outcome());
        // The reconciler and the buyer's resend, at the same time.
        let (e2, b2) = (e.clone(), b.clone());
        let resend = tokio::spawn(async move {
            e2.facilitator_settle(&FacilitatorPolicy::default(), b2.to_string().as_bytes())
                .await
                .unwrap()
        });
        let report = e.reconcile_unresolved(10).await.unwrap();
        let resent = resend.await.unwrap();
        assert_eq!(s.reconciles(), 1, "round {round}: one of them reconciled");
        assert_eq!(s.settles(), 1, "round {round}: never settled again");
        assert!(
            resent.success || resent.error_reason.as_deref() == Some("settlement_pending"),
            "round {round}: {resent:?} {report:?}"
        );
        // Whatever the interleaving, the identical request now gets the settlement.
        assert!(
            e.facilitator_settle(&p, b.to_string().as_bytes())
                .await
                .unwrap()
                .success
        );
        assert_eq!((s.reconciles(), s.settles()), (1, 1));
    }
}

/// `/settle` of `body` through the facilitator door of `e`, with the default policy.
async fn settle(e: &PaymentEngine, body: &Value) -> x402_tower::proto::SettleResponse {
    e.facilitator_settle(&FacilitatorPolicy::default(), body.to_string().as_bytes())
        .await
        .unwrap()
}

/// Through the facilitator door and the reconciler: a payment whose outcome was still unknown at its
/// `validBefore` is reconciled after it (its record is kept `keep_after_expiry` longer), and the identical
/// `/settle` after `validBefore` is answered from its record, never settled; found unsettled then, it is
/// released and refused (the authorization can no longer be used), not settled anew.
#[tokio::test]
async fn past_valid_before_a_pending_payment_is_still_reconciled_and_never_settled_again() {
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(now()));
    let engine_on = |s: &Arc<Scripted>, store: &Arc<InMemoryPaymentStore>| {
        let c = clock.clone();
        PaymentEngine::builder()
            .settler(s.clone())
            .store(store.clone())
            .clock(move || c.load(Ordering::SeqCst))
            .build()
            .unwrap()
    };
    let p = FacilitatorPolicy::default();
    let expired = Some("invalid_exact_evm_payload_authorization_valid_before");
    let (settled, unsettled, unseen) = (body(0x60), body(0x61), body(0x62));

    let s = unknown_outcome();
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine_on(&s, &store);
    let first = settle(&e, &settled).await;
    assert_eq!(first.error_reason.as_deref(), Some("settlement_pending"));
    // validBefore (now + 300) passes with the outcome unknown; then the chain shows it settled.
    clock.store(now() + 400, Ordering::SeqCst);
    let still = settle(&e, &settled).await;
    assert_eq!(still.error_reason.as_deref(), Some("settlement_pending"));
    s.reconcile_to(settled_outcome());
    let report = e.reconcile_unresolved(10).await.unwrap();
    assert_eq!((report.examined, report.settled), (1, 1));
    let done = settle(&e, &settled).await;
    assert!(done.success, "{done:?}");
    assert!(
        e.facilitator_verify(&p, settled.to_string().as_bytes())
            .await
            .unwrap()
            .is_valid
    );
    assert_eq!((s.settles(), s.reconciles()), (1, 2));

    // Found unsettled and usable past validBefore: released and refused, not settled anew.
    clock.store(now(), Ordering::SeqCst);
    let s = unknown_outcome();
    let store = Arc::new(InMemoryPaymentStore::default());
    let e = engine_on(&s, &store);
    settle(&e, &unsettled).await;
    clock.store(now() + 400, Ordering::SeqCst);
    s.reconcile_to(failed("unexpected_settle_error", true));
    let refused = settle(&e, &unsettled).await;
    assert_eq!(refused.error_reason.as_deref(), expired);
    assert_eq!((s.settles(), s.reconciles()), (1, 1));
    assert!(store.is_empty(), "released");

    // Never presented: refused as expired by both calls, nothing asked of the settler.
    let verified = e
        .facilitator_verify(&p, unseen.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(verified.invalid_reason.as_deref(), expired);
    let refused = settle(&e, &unseen).await;
    assert_eq!(refused.error_reason.as_deref(), expired);
    assert_eq!((s.settles(), s.verifies()), (1, 1));
}

/// Past `validBefore`, a settled payment is answered from the shared store by another instance too, and
/// concurrent copies of the late resend all get the one settlement; nothing is settled again. The record is
/// kept at least the stale time plus a minute, whatever the builder is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_valid_before_every_instance_and_every_concurrent_copy_gets_the_one_settlement() {
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(now()));
    let s = Scripted::new(settled_outcome());
    let store = Arc::new(InMemoryPaymentStore::default());
    let instance = || {
        let c = clock.clone();
        PaymentEngine::builder()
            .settler(s.clone())
            .store(store.clone())
            .keep_after_expiry(std::time::Duration::ZERO)
            .clock(move || c.load(Ordering::SeqCst))
            .build()
            .unwrap()
    };
    let (a, b) = (instance(), instance());
    assert_eq!(
        a.keep_after_expiry(),
        a.stale_after() + std::time::Duration::from_secs(60),
        "raised to the stale time plus a minute"
    );
    let paid = body(0x63);
    let first = settle(&a, &paid).await;
    assert!(first.success, "{first:?}");

    // validBefore (now + 300) has passed; the record is kept (180 + 60 s past it).
    clock.store(now() + 400, Ordering::SeqCst);
    let (x, y, z) = tokio::join!(settle(&b, &paid), settle(&b, &paid), settle(&a, &paid));
    for again in [x, y, z] {
        assert_eq!(again, first);
    }
    assert_eq!(
        s.settles(),
        1,
        "answered from the record, never settled again"
    );
}
