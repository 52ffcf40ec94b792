//! The settlement observer: every outcome (settled, failed, unknown), both timings, reported before the
//! client is answered; an observer that fails changes nothing for the client.

use std::sync::{Arc, Mutex};

use alloy_primitives::{B256, U256};
use http::StatusCode;
use tokio::sync::Notify;
use tower::Layer;
use x402_tower::pricing::BoxFuture;
use x402_tower::proto::SupportedResponse;
use x402_tower::settle::{
    ObservedOutcome, ObserverError, SettleError, SettleOutcome, SettleRequest, SettlementEvent,
    SettlementObserver, Settler, VerifyOutcome,
};
use x402_tower::{PaymentStore, VerifiedPayment, settle::SettleTiming};

use crate::support::*;

const TX: &str = "0x1111111111111111111111111111111111111111111111111111111111111111";

/// A settler answering one scripted outcome.
struct Fixed(SettleOutcome);

impl Settler for Fixed {
    fn verify<'a>(
        &'a self,
        _: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        Box::pin(async { Ok(VerifyOutcome::Valid) })
    }
    fn settle<'a>(&'a self, _: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        let o = self.0.clone();
        Box::pin(async move { o })
    }
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(async { Ok(SupportedResponse::default()) })
    }
}

/// What an observer saw, owned.
#[derive(Debug, Clone)]
struct Seen {
    payment: VerifiedPayment,
    resource: String,
    outcome: ObservedOutcome,
    timing: Option<SettleTiming>,
}

/// Records every event; fails when told to.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Seen>>,
    fail: bool,
}

impl Recorder {
    fn failing() -> Arc<Self> {
        Arc::new(Recorder {
            fail: true,
            ..Default::default()
        })
    }
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl SettlementObserver for Recorder {
    fn on_settlement<'a>(
        &'a self,
        event: SettlementEvent<'a>,
    ) -> BoxFuture<'a, Result<(), ObserverError>> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(Seen {
                payment: event.payment.clone(),
                resource: event.resource.to_owned(),
                outcome: event.outcome.clone(),
                timing: event.timing,
            });
            if self.fail {
                Err(ObserverError::new("database is down"))
            } else {
                Ok(())
            }
        })
    }
}

fn settled() -> SettleOutcome {
    SettleOutcome::Settled {
        transaction: TX.into(),
        payer: ACCOUNT0,
        network: "eip155:84532".into(),
    }
}

fn failed() -> SettleOutcome {
    SettleOutcome::Failed {
        reason: "insufficient_funds".into(),
        message: Some("balance too low".into()),
        authorization_still_usable: true,
    }
}

fn unknown() -> SettleOutcome {
    SettleOutcome::Unknown {
        message: "receipt not seen within 30 s after broadcast".into(),
        transaction: Some(TX.into()),
    }
}

const TIMINGS: [SettleTiming; 2] = [SettleTiming::AfterResponse, SettleTiming::BeforeHandler];

/// One paid v2 request (nonce byte `nonce`) through a layer with `outcome`, `timing` and `observer`.
async fn pay(
    outcome: SettleOutcome,
    timing: SettleTiming,
    observer: Arc<Recorder>,
    nonce: u8,
) -> (Answer, x402_tower::engine::MetricsSnapshot) {
    let layer = config()
        .settle_timing(timing)
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Arc::new(Fixed(outcome)))
                .settlement_observer(observer)
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    let svc = layer.layer(Inner::new().service(StatusCode::OK));
    let a = send(
        svc,
        req("/report?id=7", &[("payment-signature", &v2_header(nonce))]),
    )
    .await;
    (a, layer.metrics().snapshot())
}

fn check_payment(seen: &Seen, nonce: u8, timing: SettleTiming) {
    assert_eq!(seen.payment.payer, ACCOUNT0);
    assert_eq!(seen.payment.amount, U256::from(10_000u64));
    assert_eq!(seen.payment.network.caip2(), "eip155:84532");
    assert_eq!(seen.payment.asset, USDC_BASE_SEPOLIA);
    assert_eq!(seen.payment.pay_to, PAY_TO);
    assert_eq!(seen.payment.nonce, B256::repeat_byte(nonce));
    assert_eq!(seen.payment.x402_version, 2);
    assert_eq!(seen.resource, format!("{BASE_URL}/report?id=7"));
    assert_eq!(seen.timing, Some(timing));
}

#[tokio::test]
async fn observer_sees_a_settled_payment_in_both_timings() {
    for (i, timing) in TIMINGS.into_iter().enumerate() {
        let rec = Arc::new(Recorder::default());
        let nonce = 0x40 + i as u8;
        let (a, m) = pay(settled(), timing, rec.clone(), nonce).await;
        assert_eq!(a.status, StatusCode::OK, "{timing:?}");
        let seen = rec.seen();
        assert_eq!(seen.len(), 1, "{timing:?}");
        check_payment(&seen[0], nonce, timing);
        assert_eq!(
            seen[0].outcome,
            ObservedOutcome::Settled {
                transaction: TX.into()
            }
        );
        assert_eq!(seen[0].outcome.as_str(), "settled");
        assert_eq!(m.settlement_observer_errors, 0);
    }
}

#[tokio::test]
async fn observer_sees_a_failed_settlement_in_both_timings() {
    for (i, timing) in TIMINGS.into_iter().enumerate() {
        let rec = Arc::new(Recorder::default());
        let nonce = 0x50 + i as u8;
        let (a, _) = pay(failed(), timing, rec.clone(), nonce).await;
        assert_eq!(a.error(), "insufficient_funds", "{timing:?}");
        let seen = rec.seen();
        assert_eq!(seen.len(), 1, "{timing:?}");
        check_payment(&seen[0], nonce, timing);
        assert_eq!(
            seen[0].outcome,
            ObservedOutcome::Failed {
                reason: "insufficient_funds".into(),
                message: Some("balance too low".into()),
            }
        );
        assert_eq!(seen[0].outcome.as_str(), "failed");
    }
}

#[tokio::test]
async fn observer_sees_an_unknown_outcome_in_both_timings() {
    for (i, timing) in TIMINGS.into_iter().enumerate() {
        let rec = Arc::new(Recorder::default());
        let nonce = 0x60 + i as u8;
        let (a, m) = pay(unknown(), timing, rec.clone(), nonce).await;
        // The client hears `settlement_pending` with the transaction (x402-extensions.md part 7).
        assert_eq!(a.error(), "settlement_pending", "{timing:?}");
        let receipt = a.receipt("payment-response");
        assert!(!receipt.success);
        assert_eq!(receipt.error_reason.as_deref(), Some("settlement_pending"));
        assert_eq!(receipt.transaction, TX);
        let seen = rec.seen();
        assert_eq!(seen.len(), 1, "{timing:?}");
        check_payment(&seen[0], nonce, timing);
        assert_eq!(
            seen[0].outcome,
            ObservedOutcome::Unknown {
                message: "receipt not seen within 30 s after broadcast".into(),
                transaction: Some(TX.into()),
            }
        );
        assert_eq!(seen[0].outcome.as_str(), "unknown");
        assert_eq!(m.settlements_unknown, 1);
    }
}

#[tokio::test]
async fn a_failing_observer_is_logged_and_counted_and_the_answer_is_unchanged() {
    for (i, timing) in TIMINGS.into_iter().enumerate() {
        let rec = Recorder::failing();
        let (a, m) = pay(settled(), timing, rec.clone(), 0x70 + i as u8).await;
        assert_eq!(a.status, StatusCode::OK, "{timing:?}");
        assert!(a.receipt("payment-response").success);
        assert_eq!(m.settlement_observer_errors, 1);

        let rec = Recorder::failing();
        let (a, m) = pay(unknown(), timing, rec.clone(), 0x78 + i as u8).await;
        assert_eq!(a.error(), "settlement_pending", "{timing:?}");
        assert_eq!(rec.seen().len(), 1);
        assert_eq!(m.settlement_observer_errors, 1);
    }
}

#[tokio::test]
async fn nothing_is_reported_when_no_settlement_is_attempted() {
    let rec = Arc::new(Recorder::default());
    let layer = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Arc::new(Fixed(settled())))
                .settlement_observer(rec.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    // Settle-after with an inner service answering 404: nothing is settled.
    let svc = layer.layer(Inner::new().service(StatusCode::NOT_FOUND));
    let a = send(
        svc.clone(),
        req("/r", &[("payment-signature", &v2_header(0x80))]),
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    // No payment, and a rejected payment: nothing either.
    assert_eq!(
        send(svc.clone(), req("/r", &[])).await.status,
        StatusCode::PAYMENT_REQUIRED
    );
    assert_eq!(
        send(svc, req("/r", &[("payment-signature", "garbage")]))
            .await
            .error()
            .split(':')
            .next(),
        Some("invalid_payload")
    );
    assert!(rec.seen().is_empty());
}

/// Blocks until released, so the test can look at the client's side while the observer runs.
struct Gate {
    entered: Notify,
    release: Notify,
}

impl SettlementObserver for Gate {
    fn on_settlement<'a>(
        &'a self,
        _: SettlementEvent<'a>,
    ) -> BoxFuture<'a, Result<(), ObserverError>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            Ok(())
        })
    }
}

#[tokio::test]
async fn the_client_is_answered_only_after_the_observer_finished() {
    for (i, (timing, outcome)) in [
        (SettleTiming::AfterResponse, unknown()),
        (SettleTiming::BeforeHandler, settled()),
    ]
    .into_iter()
    .enumerate()
    {
        let gate = Arc::new(Gate {
            entered: Notify::new(),
            release: Notify::new(),
        });
        let svc = config()
            .settle_timing(timing)
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(Arc::new(Fixed(outcome)))
                    .settlement_observer(gate.clone())
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap()
            .layer(Inner::new().service(StatusCode::OK));
        let header = v2_header(0x90 + i as u8);
        let client =
            tokio::spawn(
                async move { send(svc, req("/r", &[("payment-signature", &header)])).await },
            );
        gate.entered.notified().await;
        assert!(
            !client.is_finished(),
            "{timing:?}: answered while the observer was still recording"
        );
        gate.release.notify_one();
        let a = client.await.unwrap();
        assert!(a.status == StatusCode::OK || a.status == StatusCode::PAYMENT_REQUIRED);
    }
}

/// An observer whose report is written only when the test opens the gate.
#[derive(Default)]
struct Gated {
    reports: std::sync::atomic::AtomicUsize,
    started: std::sync::atomic::AtomicBool,
    finished: std::sync::atomic::AtomicBool,
    gate: Notify,
}

impl SettlementObserver for Gated {
    fn on_settlement<'a>(
        &'a self,
        _: SettlementEvent<'a>,
    ) -> BoxFuture<'a, Result<(), ObserverError>> {
        Box::pin(async move {
            self.reports.fetch_add(1, SeqCst);
            self.started.store(true, SeqCst);
            self.gate.notified().await;
            self.finished.store(true, SeqCst);
            Ok(())
        })
    }
}

use std::sync::atomic::Ordering::SeqCst;

#[tokio::test]
async fn a_settlement_before_the_handler_is_written_while_it_runs_and_answered_after() {
    let observer = Arc::new(Gated::default());
    let store = Arc::new(x402_tower::store::InMemoryPaymentStore::default());
    let layer = config()
        .settle_timing(SettleTiming::BeforeHandler)
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Arc::new(Fixed(settled())))
                .settlement_observer(observer.clone())
                .store(store.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    // The handler notes whether the settlement's report had been issued when it ran.
    let issued_before_handler = Arc::new(Mutex::new(None));
    let seen = issued_before_handler.clone();
    let obs = observer.clone();
    let svc = layer.layer(tower::service_fn(move |_req: http::Request<_>| {
        let (seen, obs) = (seen.clone(), obs.clone());
        async move {
            *seen.lock().unwrap() = Some(obs.started.load(SeqCst));
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"content"),
            )))
        }
    }));
    let answer = tokio::spawn(send(
        svc,
        req("/report", &[("payment-signature", &v2_header(0x90))]),
    ));
    // The handler runs while the report is still being written (bounded wait).
    for _ in 0..500 {
        if issued_before_handler.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(*issued_before_handler.lock().unwrap(), Some(true));
    // Nobody is answered before the settlement is written.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        !answer.is_finished(),
        "answered before the settlement was recorded"
    );
    assert!(!observer.finished.load(SeqCst));
    observer.gate.notify_one();
    let a = answer.await.unwrap();
    assert!(observer.finished.load(SeqCst));
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(&a.body[..], b"content");
    assert!(a.receipt("payment-response").success);
    // The payment record was written as settled before the answer too.
    let key = payment_key(0x90);
    let record = store.get(&key, now()).await.unwrap().unwrap();
    assert_eq!(record.state, x402_tower::store::PaymentState::Settled);
    assert_eq!(record.settlement.unwrap().transaction, TX);
}

/// The identical payment sent again while the first request's settlement is still being written is not
/// settled again: it is delivered from the record (and reported once).
#[tokio::test]
async fn a_copy_sent_while_the_settlement_is_being_written_is_not_settled_again() {
    let observer = Arc::new(Gated::default());
    let layer = config()
        .settle_timing(SettleTiming::BeforeHandler)
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Arc::new(Fixed(settled())))
                .settlement_observer(observer.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    let inner = Inner::new();
    let svc = layer.layer(inner.service(StatusCode::OK));
    let header = v2_header(0x91);
    let first = tokio::spawn(send(
        svc.clone(),
        req("/report", &[("payment-signature", &header)]),
    ));
    for _ in 0..500 {
        if observer.started.load(SeqCst) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(observer.started.load(SeqCst));
    let copy = tokio::spawn(send(svc, req("/report", &[("payment-signature", &header)])));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    observer.gate.notify_one();
    // A second settlement would wait at the gate for ever: bounded, it fails instead.
    let within = |t| tokio::time::timeout(std::time::Duration::from_secs(10), t);
    let (a, b) = (
        within(first).await.expect("first answered").unwrap(),
        within(copy).await.expect("copy answered").unwrap(),
    );
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        b.status,
        StatusCode::OK,
        "the copy is delivered, not refused"
    );
    assert_eq!(
        a.receipt("payment-response").transaction,
        b.receipt("payment-response").transaction
    );
    assert_eq!(
        observer.reports.load(SeqCst),
        1,
        "settled and reported once"
    );
    assert_eq!(layer.metrics().snapshot().settlements_unknown, 0);
}

/// An extension that sees the paid request carries what it takes from it to the observer, in both timings
/// (the settlement runs in a task of its own either way).
#[tokio::test]
async fn an_extension_carries_what_it_saw_of_the_request_to_the_observer() {
    #[derive(Debug, Clone, PartialEq)]
    struct Caller(String);
    struct WhoCalls;
    impl x402_tower::extensions::Extension for WhoCalls {
        fn key(&self) -> &str {
            "who-calls"
        }
        fn declare(
            &self,
            _: &x402_tower::extensions::Offered<'_>,
        ) -> Option<x402_tower::extensions::Declaration> {
            None
        }
        fn on_request(
            &self,
            request: &x402_tower::extensions::RequestView<'_>,
            context: &mut http::Extensions,
        ) {
            if let Some(caller) = request.headers.get("x-caller") {
                context.insert(Caller(caller.to_str().unwrap().to_owned()));
            }
        }
    }
    for (nonce, timing) in TIMINGS.into_iter().enumerate() {
        let observer = Arc::new(Recorder::default());
        let svc = config()
            .settle_timing(timing)
            .extension(Arc::new(WhoCalls))
            .engine(std::sync::Arc::new(
                x402_tower::PaymentEngine::builder()
                    .settler(Arc::new(Fixed(settled())))
                    .settlement_observer(observer.clone())
                    .build()
                    .unwrap(),
            ))
            .build()
            .unwrap()
            .layer(Inner::new().service(StatusCode::OK));
        let header = v2_header(40 + nonce as u8);
        let a = send(
            svc,
            req(
                "/report",
                &[("payment-signature", &header), ("x-caller", "crawler-7")],
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        let seen = observer.seen();
        assert_eq!(
            seen[0].payment.context.get::<Caller>(),
            Some(&Caller("crawler-7".into())),
            "{timing:?}"
        );
    }
}
