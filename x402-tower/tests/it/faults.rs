//! Faults after the money moved (or while it moves), injected with `x402_tower::layer::faults`, for each
//! settle timing: the protected service answers an error, returns `Err`, panics or breaks its body; the store
//! fails, loses an answer or hangs; the settler loses its answer after the broadcast; the client goes away
//! mid-settlement. In each case the buyer's identical resend gets the content (or the payment is released
//! and never settled), and the money moves once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use tower::{Layer, ServiceExt};
use x402_tower::PaymentEngine;
use x402_tower::layer::faults::{
    Behavior, Fault, FaultyService, FaultyStore, LedgerSettler, SettleFault, StoreOp,
};
use x402_tower::settle::SettleTiming;
use x402_tower::store::{InMemoryPaymentStore, PaymentState, PaymentStore};

use crate::support::*;

const CONTENT: &str = "the whole of the paid content, every byte of it";
const BOTH: [SettleTiming; 2] = [SettleTiming::AfterResponse, SettleTiming::BeforeHandler];
/// The longest any background write in these tests may take (they take milliseconds).
const BOUND: Duration = Duration::from_secs(20);

/// An engine over a faulty store and a ledger, a clock that can be moved on, and a faulty service behind
/// the layer.
struct Rig {
    store: Arc<FaultyStore>,
    ledger: Arc<LedgerSettler>,
    engine: Arc<PaymentEngine>,
    service: FaultyService,
    skew: Arc<AtomicU64>,
    timing: SettleTiming,
}

/// What a request came to: an answer with its whole body, or where it broke.
#[derive(Debug)]
enum Outcome {
    Answered(Answer),
    /// The status and headers came, the body broke after these bytes.
    BodyBroke(StatusCode, http::HeaderMap, Bytes),
    /// The service returned its error.
    Failed,
    /// The task handling the request panicked.
    Panicked,
}

impl Outcome {
    fn answer(self) -> Answer {
        match self {
            Outcome::Answered(a) => a,
            other => panic!("expected an answer, got {other:?}"),
        }
    }
}

impl Rig {
    fn new(timing: SettleTiming) -> Rig {
        Rig::with(timing, |b| b)
    }

    fn with(
        timing: SettleTiming,
        adjust: impl FnOnce(
            x402_tower::engine::PaymentEngineBuilder,
        ) -> x402_tower::engine::PaymentEngineBuilder,
    ) -> Rig {
        Rig::over(timing, LedgerSettler::new(), adjust)
    }

    fn over(
        timing: SettleTiming,
        ledger: Arc<LedgerSettler>,
        adjust: impl FnOnce(
            x402_tower::engine::PaymentEngineBuilder,
        ) -> x402_tower::engine::PaymentEngineBuilder,
    ) -> Rig {
        let store = FaultyStore::new(Arc::new(InMemoryPaymentStore::default()));
        let skew = Arc::new(AtomicU64::new(0));
        let clock = skew.clone();
        let builder = PaymentEngine::builder()
            .settler(ledger.clone())
            .store(store.clone())
            .in_flight_wait(Duration::from_millis(300))
            .clock(move || now() + clock.load(Ordering::SeqCst));
        let engine = Arc::new(adjust(builder).build().unwrap());
        Rig {
            store,
            ledger,
            engine,
            service: FaultyService::new(CONTENT),
            skew,
            timing,
        }
    }

    /// Sends a request paying with `header` through a new layer over the service, in a task of its own.
    async fn send(&self, header: &str) -> Outcome {
        let svc = config()
            .settle_timing(self.timing)
            .engine(self.engine.clone())
            .build()
            .unwrap()
            .layer(self.service.clone());
        let req = req("/report", &[("payment-signature", header)]);
        let task = tokio::spawn(async move {
            let res = match svc.oneshot(req).await {
                Ok(res) => res,
                Err(_) => return Outcome::Failed,
            };
            let (parts, body) = res.into_parts();
            let mut got = Vec::new();
            let mut body = std::pin::pin!(body);
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => got.extend_from_slice(f.data_ref().map_or(&[][..], |d| &d[..])),
                    Err(_) => {
                        return Outcome::BodyBroke(parts.status, parts.headers, Bytes::from(got));
                    }
                }
            }
            Outcome::Answered(Answer {
                status: parts.status,
                headers: parts.headers,
                body: Bytes::from(got),
            })
        });
        match tokio::time::timeout(BOUND, task).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) if e.is_panic() => Outcome::Panicked,
            Ok(Err(e)) => panic!("request task failed: {e}"),
            Err(_) => panic!("no answer within {BOUND:?}"),
        }
    }

    /// The record of the payment with nonce byte `nonce`, as the engine's clock sees it.
    async fn state(&self, nonce: u8) -> Option<PaymentState> {
        let now = now() + self.skew.load(Ordering::SeqCst);
        self.store
            .get(&payment_key(nonce), now)
            .await
            .unwrap()
            .map(|r| r.state)
    }

    /// Waits (bounded) until the record is in `want` (`None`: released).
    async fn until_state(&self, nonce: u8, want: Option<PaymentState>) {
        let deadline = tokio::time::Instant::now() + BOUND;
        while self.state(nonce).await != want {
            assert!(
                tokio::time::Instant::now() < deadline,
                "record of nonce {nonce} is {:?}, not {want:?}, after {BOUND:?}",
                self.state(nonce).await
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The layer (settle-after) over a service that never answers, and a future that ends once a request
    /// reached that service (it fails the test after [`BOUND`]).
    fn layer_over_a_service_that_never_answers(
        &self,
    ) -> (
        impl tower::Service<
            http::Request<Full<Bytes>>,
            Response = http::Response<x402_tower::layer::ResponseBody<Full<Bytes>>>,
            Error = std::convert::Infallible,
            Future: Send,
        > + Send
        + 'static,
        impl std::future::Future<Output = ()>,
    ) {
        let (entered, mut running) = tokio::sync::mpsc::unbounded_channel::<()>();
        let stuck = tower::service_fn(move |_req: http::Request<Full<Bytes>>| {
            let _ = entered.send(());
            std::future::pending::<Result<http::Response<Full<Bytes>>, std::convert::Infallible>>()
        });
        let svc = config()
            .engine(self.engine.clone())
            .build()
            .unwrap()
            .layer(stuck);
        let reached = async move {
            tokio::time::timeout(BOUND, running.recv())
                .await
                .expect("the service was reached")
                .expect("the service was reached");
        };
        (svc, reached)
    }

    /// Moves the engine's clock past the time an in-flight record counts as abandoned.
    fn after_stale(&self) {
        let stale = self.engine.stale_after().as_secs() + 1;
        self.skew.fetch_add(stale, Ordering::SeqCst);
    }

    /// The content, delivered with a successful receipt naming the ledger's transaction for this payment.
    fn delivered(a: &Answer) -> String {
        assert_eq!(a.status, StatusCode::OK, "{a:?}");
        assert_eq!(a.body, CONTENT.as_bytes(), "the whole content");
        let r = a.receipt("payment-response");
        assert!(r.success, "{r:?}");
        r.transaction
    }
}

fn paid_header(nonce: u8) -> String {
    v2_header(nonce)
}

#[tokio::test]
async fn a_service_error_after_the_payment_is_answered_with_what_happened_to_the_money() {
    for (i, timing) in BOTH.into_iter().enumerate() {
        let rig = Rig::new(timing);
        let nonce = 0x10 + i as u8;
        let h = paid_header(nonce);
        rig.service
            .on_call(1, Behavior::Status(StatusCode::INTERNAL_SERVER_ERROR));
        let a = rig.send(&h).await.answer();
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
        match timing {
            SettleTiming::AfterResponse => {
                // Nothing was charged, and the authorization is free again.
                assert!(a.header("payment-response").is_none());
                assert_eq!(rig.ledger.moved(), 0);
                assert_eq!(rig.state(nonce).await, None);
            }
            SettleTiming::BeforeHandler => {
                // The money moved before the service failed: the answer says so.
                assert!(a.receipt("payment-response").success, "{timing:?}");
                assert_eq!(rig.ledger.moved(), 1);
                assert_eq!(rig.state(nonce).await, Some(PaymentState::Settled));
            }
        }
        let tx = Rig::delivered(&rig.send(&h).await.answer());
        assert_eq!(rig.ledger.moved(), 1, "{timing:?}: one settlement");
        assert_eq!(rig.service.calls(), 2);
        // And again: the same receipt, nothing more moves.
        assert_eq!(Rig::delivered(&rig.send(&h).await.answer()), tx);
        assert_eq!(rig.ledger.moved(), 1);
    }
}

#[tokio::test]
async fn a_service_that_fails_or_panics_never_costs_the_buyer_its_content() {
    for behavior in [Behavior::Error, Behavior::Panic] {
        for (i, timing) in BOTH.into_iter().enumerate() {
            let rig = Rig::new(timing);
            let nonce = 0x20 + i as u8 + if behavior == Behavior::Panic { 8 } else { 0 };
            let h = paid_header(nonce);
            rig.service.on_call(1, behavior);
            // The settled record's write (settle-first; update 1 marks the record as settling) is still
            // under way when the service fails: it must not be cut short with the request.
            rig.store
                .inject(StoreOp::Update, 2, Fault::Delay(Duration::from_millis(200)));
            let first = rig.send(&h).await;
            let expected = if behavior == Behavior::Panic {
                matches!(first, Outcome::Panicked)
            } else {
                matches!(first, Outcome::Failed)
            };
            assert!(expected, "{behavior:?} {timing:?}: {first:?}");
            match timing {
                SettleTiming::AfterResponse => {
                    // Nothing settled; the record is released (by the engine, or on the dropped request).
                    rig.until_state(nonce, None).await;
                    assert_eq!(rig.ledger.moved(), 0, "{behavior:?}");
                }
                SettleTiming::BeforeHandler => {
                    // Settled before the service ran: the record says so, written whatever the service did.
                    rig.until_state(nonce, Some(PaymentState::Settled)).await;
                    assert_eq!(rig.ledger.moved(), 1);
                }
            }
            Rig::delivered(&rig.send(&h).await.answer());
            assert_eq!(
                rig.ledger.moved(),
                1,
                "{behavior:?} {timing:?}: one settlement"
            );
        }
    }
}

#[tokio::test]
async fn a_body_that_breaks_after_the_settlement_is_sent_whole_on_the_resend() {
    for (i, timing) in BOTH.into_iter().enumerate() {
        let rig = Rig::new(timing);
        let nonce = 0x30 + i as u8;
        let h = paid_header(nonce);
        rig.service.on_call(1, Behavior::BreakBodyAfter(8));
        let Outcome::BodyBroke(status, headers, got) = rig.send(&h).await else {
            panic!("the body did not break")
        };
        assert_eq!(status, StatusCode::OK);
        assert_eq!(got, CONTENT.as_bytes()[..8]);
        let receipt: x402_tower::proto::SettleResponse =
            serde_json::from_value(unb64(headers["payment-response"].to_str().unwrap())).unwrap();
        assert!(receipt.success);
        assert_eq!(rig.ledger.moved(), 1);
        let tx = Rig::delivered(&rig.send(&h).await.answer());
        assert_eq!(tx, receipt.transaction, "{timing:?}: the same settlement");
        assert_eq!(rig.ledger.moved(), 1);
    }
}

#[tokio::test]
async fn a_record_write_that_fails_or_loses_its_answer_is_tried_again() {
    for fault in [Fault::Fail, Fault::LoseAnswer] {
        for (i, timing) in BOTH.into_iter().enumerate() {
            let rig = Rig::new(timing);
            let nonce = 0x40 + i as u8 + if fault == Fault::LoseAnswer { 8 } else { 0 };
            let h = paid_header(nonce);
            // Update 1 marks the record as settling, update 2 writes it settled, in either timing.
            rig.store.inject(StoreOp::Update, 1, fault);
            rig.store.inject(StoreOp::Update, 3, fault);
            let tx = Rig::delivered(&rig.send(&h).await.answer());
            rig.until_state(nonce, Some(PaymentState::Settled)).await;
            assert_eq!(rig.store.calls(StoreOp::Update), 4, "each tried again");
            assert_eq!(Rig::delivered(&rig.send(&h).await.answer()), tx);
            assert_eq!(rig.ledger.moved(), 1, "{fault:?} {timing:?}");
        }
    }
}

#[tokio::test]
async fn a_store_down_after_the_settlement_is_reconciled_to_a_delivery() {
    for (i, timing) in BOTH.into_iter().enumerate() {
        let rig = Rig::with(timing, |b| b.store_timeout(Duration::from_millis(200)));
        let nonce = 0x50 + i as u8;
        let h = paid_header(nonce);
        // Every write after the settling mark hangs (its three tries): the settled record is never written.
        for nth in 2..=4 {
            rig.store.inject(StoreOp::Update, nth, Fault::Hang);
        }
        let tx = Rig::delivered(&rig.send(&h).await.answer());
        assert_eq!(rig.ledger.moved(), 1);
        assert_eq!(rig.state(nonce).await, Some(PaymentState::InFlight));
        rig.store.heal();
        // A resend while the record may still belong to a live request: told to come back.
        let a = rig.send(&h).await.answer();
        assert_eq!(a.error(), "settlement_pending", "{timing:?}");
        assert_eq!(rig.ledger.moved(), 1);
        // Once abandoned, the resend reconciles it from the ledger: delivered, nothing moves again.
        rig.after_stale();
        assert_eq!(Rig::delivered(&rig.send(&h).await.answer()), tx);
        assert_eq!(rig.state(nonce).await, Some(PaymentState::Settled));
        assert_eq!(rig.ledger.moved(), 1, "{timing:?}");
    }
}

#[tokio::test]
async fn a_release_that_fails_leaves_the_payment_to_the_reconciler_which_frees_it() {
    let rig = Rig::new(SettleTiming::AfterResponse);
    let h = paid_header(0x60);
    rig.service
        .on_call(1, Behavior::Status(StatusCode::SERVICE_UNAVAILABLE));
    rig.store.always(StoreOp::Release, Fault::Fail);
    let a = rig.send(&h).await.answer();
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(rig.state(0x60).await, Some(PaymentState::InFlight));
    rig.store.heal();
    rig.after_stale();
    let report = rig.engine.reconcile_unresolved(10).await.unwrap();
    assert_eq!((report.examined, report.released), (1, 1), "{report:?}");
    assert_eq!(rig.state(0x60).await, None);
    assert_eq!(rig.ledger.moved(), 0);
    Rig::delivered(&rig.send(&h).await.answer());
    assert_eq!(rig.ledger.moved(), 1);
}

#[tokio::test]
async fn a_settlement_whose_answer_is_lost_after_the_broadcast_is_delivered_on_the_resend() {
    for (i, timing) in BOTH.into_iter().enumerate() {
        let rig = Rig::new(timing);
        let nonce = 0x70 + i as u8;
        let h = paid_header(nonce);
        rig.ledger.inject(1, SettleFault::LoseAnswer);
        let a = rig.send(&h).await.answer();
        assert_eq!(a.error(), "settlement_pending");
        let pending = a.receipt("payment-response");
        assert!(!pending.success);
        assert!(!pending.transaction.is_empty(), "the broadcast transaction");
        assert_eq!(rig.ledger.moved(), 1);
        assert_eq!(rig.state(nonce).await, Some(PaymentState::Pending));
        assert_eq!(
            Rig::delivered(&rig.send(&h).await.answer()),
            pending.transaction
        );
        assert_eq!(rig.ledger.moved(), 1, "{timing:?}");
        assert_eq!(
            rig.ledger.settle_calls(),
            1,
            "reconciled, not settled again"
        );
    }
}

#[tokio::test]
async fn a_store_that_hangs_refuses_the_payment_instead_of_holding_the_request() {
    let rig = Rig::with(SettleTiming::AfterResponse, |b| {
        b.store_timeout(Duration::from_millis(200))
    });
    let h = paid_header(0x80);
    rig.store.always(StoreOp::Reserve, Fault::Hang);
    let a = rig.send(&h).await.answer();
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!((rig.ledger.moved(), rig.service.calls()), (0, 0));
    rig.store.heal();
    Rig::delivered(&rig.send(&h).await.answer());
    assert_eq!(rig.ledger.moved(), 1);
}

#[tokio::test]
async fn a_client_gone_mid_settlement_does_not_stop_it() {
    for (i, timing) in BOTH.into_iter().enumerate() {
        let rig = Rig::new(timing);
        let nonce = 0x90 + i as u8;
        let h = paid_header(nonce);
        // The settlement's answer takes 5 s; the client gives up once it has begun (not after a fixed time,
        // which a loaded machine could spend before the settlement even starts).
        rig.ledger
            .inject(1, SettleFault::Slow(Duration::from_secs(5)));
        let svc = config()
            .settle_timing(timing)
            .engine(rig.engine.clone())
            .build()
            .unwrap()
            .layer(rig.service.clone());
        let request = req("/report", &[("payment-signature", h.as_str())]);
        let client = tokio::spawn(svc.oneshot(request));
        let deadline = tokio::time::Instant::now() + BOUND;
        while rig.ledger.settle_calls() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no settlement began"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        client.abort();
        let gone = client.await;
        assert!(
            gone.is_err_and(|e| e.is_cancelled()),
            "{timing:?}: answered before the settlement was done"
        );
        assert_eq!(rig.ledger.moved(), 1);
        rig.until_state(nonce, Some(PaymentState::Settled)).await;
        Rig::delivered(&rig.send(&h).await.answer());
        assert_eq!(rig.ledger.moved(), 1, "{timing:?}");
    }
}

#[tokio::test]
async fn a_client_gone_while_the_service_runs_frees_an_unsettled_payment_at_once() {
    let rig = Rig::new(SettleTiming::AfterResponse);
    let h = paid_header(0xa0);
    // The client gives up once the service runs (not after a fixed time, which a loaded machine could spend
    // before the service is reached).
    let (svc, reached) = rig.layer_over_a_service_that_never_answers();
    let request = req("/report", &[("payment-signature", h.as_str())]);
    let client = tokio::spawn(svc.oneshot(request));
    reached.await;
    client.abort();
    assert!(client.await.is_err_and(|e| e.is_cancelled()));
    // Released without waiting for the record to turn stale; nothing was charged.
    rig.until_state(0xa0, None).await;
    assert_eq!(rig.ledger.moved(), 0);
    Rig::delivered(&rig.send(&h).await.answer());
    assert_eq!(rig.ledger.moved(), 1);
}

#[tokio::test]
async fn a_settling_mark_that_cannot_be_written_moves_no_money() {
    for (i, timing) in BOTH.into_iter().enumerate() {
        let rig = Rig::new(timing);
        let nonce = 0xb0 + i as u8;
        let h = paid_header(nonce);
        rig.store.always(StoreOp::Update, Fault::Fail);
        let a = rig.send(&h).await.answer();
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{timing:?}");
        assert!(a.header("payment-response").is_none());
        assert_eq!((rig.ledger.settle_calls(), rig.ledger.moved()), (0, 0));
        // Released: the authorization is free again.
        assert_eq!(rig.state(nonce).await, None);
        rig.store.heal();
        Rig::delivered(&rig.send(&h).await.answer());
        assert_eq!(rig.ledger.moved(), 1, "{timing:?}");
    }
}

/// A settle-after request whose process died inside the protected service (its future never finished nor
/// dropped: the record stays `InFlight` as a crash leaves it). The settler reconciles as a facilitator does,
/// by settling. Nobody saw an answer, so nothing may be charged: the background reconciler releases the
/// payment without asking the settler, and the buyer's resend is served and settled once; a resend that
/// finds the record abandoned first runs the service before it settles.
#[tokio::test]
async fn a_request_that_died_in_its_handler_is_never_charged_for_by_the_reconciler() {
    for background in [true, false] {
        let rig = Rig::over(
            SettleTiming::AfterResponse,
            LedgerSettler::like_a_facilitator(),
            |b| b,
        );
        let nonce = 0xc0 + u8::from(background);
        let h = paid_header(nonce);
        let (svc, reached) = rig.layer_over_a_service_that_never_answers();
        let request = req("/report", &[("payment-signature", h.as_str())]);
        let mut dying = Box::pin(svc.oneshot(request));
        tokio::select! {
            _ = &mut dying => panic!("the stuck service answered"),
            () = reached => {}
        }
        // The process dies: nothing of the request runs again, not even its drop.
        #[allow(clippy::mem_forget)] // what a crash does to the request's state, on purpose
        std::mem::forget(dying);
        assert_eq!(rig.state(nonce).await, Some(PaymentState::InFlight));
        rig.after_stale();
        if background {
            let report = rig.engine.reconcile_unresolved(10).await.unwrap();
            assert_eq!((report.examined, report.released), (1, 1), "{report:?}");
            assert_eq!(rig.state(nonce).await, None);
        }
        assert_eq!(rig.ledger.settle_calls(), 0, "the settler was never asked");
        assert_eq!(
            rig.ledger.moved(),
            0,
            "nothing charged for an unserved request"
        );
        // The resend: served by the service, then settled, once.
        Rig::delivered(&rig.send(&h).await.answer());
        assert_eq!(rig.service.calls(), 1);
        assert_eq!(rig.ledger.moved(), 1, "background: {background}");
        assert_eq!(rig.state(nonce).await, Some(PaymentState::Settled));
    }
}
