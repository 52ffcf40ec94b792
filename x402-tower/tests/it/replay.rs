//! The replay guard: sequential and concurrent, with the inner service's call count as proof.

use http::StatusCode;
use tower::Layer;
use x402_tower::settle::SettleOutcome;

use crate::support::*;

/// A layer over an inner service answering 200, with a settler that settles every payment: the inner
/// service's calls, the settler's, the layered service.
#[expect(
    clippy::type_complexity,
    reason = "the inner service's type can only be named as `impl Service`"
)]
fn settling() -> (
    Inner,
    std::sync::Arc<Scripted>,
    x402_tower::layer::X402<
        impl tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<http_body_util::Full<bytes::Bytes>>,
            Error = std::convert::Infallible,
            Future: Send,
        > + Clone
        + Send
        + 'static,
    >,
) {
    let inner = Inner::new();
    let settler = Scripted::new(settled_outcome());
    let svc = config()
        .engine(engine_with(settler.clone()))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    (inner, settler, svc)
}

#[tokio::test]
async fn a_resend_is_delivered_again_and_never_settled_twice() {
    // A client that lost the answer resends the identical payment: it gets the resource again with the same
    // receipt, and the settler is not called a second time. The same payment for another resource is a
    // replay.
    let (inner, settler, svc) = settling();
    let h = v2_header(1);
    let first = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(first.status, StatusCode::OK);
    for name in ["payment-signature", "x-payment"] {
        let again = send(svc.clone(), req("/r", &[(name, &h)])).await;
        assert_eq!(again.status, StatusCode::OK, "{name}");
        assert_eq!(
            again.receipt("payment-response"),
            first.receipt("payment-response"),
            "{name}"
        );
    }
    let other = send(svc, req("/other", &[("payment-signature", &h)])).await;
    assert_eq!(other.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!(settler.settles(), 1);
    assert_eq!(inner.calls(), 3, "delivered three times, paid once");
}

#[tokio::test]
async fn same_nonce_other_version_is_the_same_key() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    assert_eq!(
        send(svc.clone(), req("/r", &[("x-payment", &v1_header(2))]))
            .await
            .status,
        StatusCode::OK
    );
    // A different authorization (other validAfter) with the same (chain, asset, from, nonce).
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(2))])).await;
    assert_eq!(a.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!(inner.calls(), 1);
}

/// `n` copies of the payment `header` sent at once, in turn to each of `services`: the receipts of those
/// answered 200 (every other answer must be the retryable `settlement_pending`).
async fn concurrent_copies<S, B>(
    services: &[S],
    header: &str,
    n: usize,
) -> Vec<x402_tower::proto::SettleResponse>
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<B>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Debug,
{
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let svc = services[i % services.len()].clone();
            let h = header.to_owned();
            tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &h)])).await })
        })
        .collect();
    let mut receipts = Vec::new();
    for t in tasks {
        let a = t.await.unwrap();
        match a.status {
            StatusCode::OK => receipts.push(a.receipt("payment-response")),
            _ => assert_eq!(a.error(), "settlement_pending"),
        }
    }
    receipts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_settle_once() {
    let (_, settler, svc) = settling();
    let receipts = concurrent_copies(&[svc], &v2_header(3), 16).await;
    assert_eq!(
        settler.settles(),
        1,
        "one settlement, whatever the concurrency"
    );
    assert!(!receipts.is_empty());
    assert!(receipts.iter().all(|r| *r == receipts[0]), "one receipt");
}

#[tokio::test]
async fn a_resend_while_the_first_is_in_flight_waits_then_gets_a_retryable_answer() {
    // The handler of the first request hangs; the resend waits (bounded), then hears `settlement_pending`
    // (retry), never a second settlement.
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let slow = tower::service_fn(
        move |_req: http::Request<http_body_util::Full<bytes::Bytes>>| {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut rx = release_rx.clone();
            async move {
                while !*rx.borrow() {
                    let _ = rx.changed().await;
                }
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(b"ok"),
                )))
            }
        },
    );
    let settler = Scripted::new(settled_outcome());
    let svc = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(settler.clone())
                .in_flight_wait(std::time::Duration::from_millis(200))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(slow);
    let h = v2_header(31);
    let first = {
        let svc = svc.clone();
        let h = h.clone();
        tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &h)])).await })
    };
    while calls.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let resend = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(resend.error(), "settlement_pending");
    release_tx.send(true).unwrap();
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    // Once the first finished, the resend is delivered.
    let later = send(svc, req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(later.status, StatusCode::OK);
    assert_eq!(settler.settles(), 1);
}

#[tokio::test]
async fn failing_handler_releases_the_reservation() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::INTERNAL_SERVER_ERROR));
    let h = v2_header(4);
    for _ in 0..2 {
        let a = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            a.header("payment-response").is_none(),
            "no receipt: nothing was settled"
        );
    }
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn full_store_answers_503_not_500() {
    let inner = Inner::new();
    let store = std::sync::Arc::new(x402_tower::store::InMemoryPaymentStore::with_capacity(1));
    let svc = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .store(store)
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    assert_eq!(
        send(
            svc.clone(),
            req("/r", &[("payment-signature", &v2_header(5))])
        )
        .await
        .status,
        StatusCode::OK
    );
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(6))])).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(inner.calls(), 1);
}

#[tokio::test]
async fn a_request_dropped_mid_flight_releases_its_reservation() {
    // The client goes away while the handler runs (settle-after: nothing was charged yet): the response
    // future is dropped, and the reservation is released at once rather than left to turn stale, so the
    // same payment is served when it comes again.
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let hanging = tower::service_fn(
        move |_req: http::Request<http_body_util::Full<bytes::Bytes>>| {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = entered_tx.send(());
            std::future::pending::<
                Result<
                    http::Response<http_body_util::Full<bytes::Bytes>>,
                    std::convert::Infallible,
                >,
            >()
        },
    );
    let engine = std::sync::Arc::new(
        x402_tower::PaymentEngine::builder()
            .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
            .in_flight_wait(std::time::Duration::from_millis(50))
            .build()
            .unwrap(),
    );
    let svc = config()
        .engine(engine.clone())
        .build()
        .unwrap()
        .layer(hanging);
    let h = v2_header(30);
    let start = |svc: x402_tower::layer::X402<_>| {
        let h = h.clone();
        tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &h)])).await })
    };
    let first = start(svc.clone());
    entered_rx.recv().await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while engine
        .store()
        .get(&payment_key(30), now())
        .await
        .unwrap()
        .is_some()
    {
        assert!(std::time::Instant::now() < deadline, "not released");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The same payment reaches the handler again.
    let second = start(svc);
    entered_rx.recv().await.unwrap();
    second.abort();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A payment record keeps the payment less the extensions the client echoed from the 402 (discovery,
/// signed offers, sign-in-with-x, terms: nothing after the payment reads them), and everything else —
/// what settling reads, the `payment-identifier` id, an extension this crate does not know — as sent. (Until
/// the record is final: a settled one keeps none, `StoredPayment::forgotten`. Here the outcome is unknown, so
/// the record stays pending, for the reconciler, which reads the payment.)
#[tokio::test]
async fn a_record_keeps_the_payment_without_what_the_client_echoed_from_the_402() {
    let store = std::sync::Arc::new(x402_tower::store::InMemoryPaymentStore::default());
    let inner = Inner::new();
    // The route declares what the client echoes (a declaration's echo is left out: `keeps_echo`), and the
    // payment identifier, whose echo is kept.
    let declared = x402_tower::extensions::SERVER_DECLARATIONS
        .iter()
        .fold(config(), |c, k| {
            c.extension(std::sync::Arc::new(x402_tower::extensions::Fixed::new(
                *k, "{}",
            )))
        });
    let svc = declared
        .payment_identifier(false)
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Scripted::new(SettleOutcome::Unknown {
                    message: "no receipt".into(),
                    transaction: None,
                }))
                .store(store.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let payload = payload_v2_echoing(0x31);
    let a = send(svc, req("/r", &[("payment-signature", &b64(&payload))])).await;
    assert_eq!(a.error(), "settlement_pending");
    let key = payment_key(0x31);
    let record = x402_tower::PaymentStore::get(&*store, &key, now())
        .await
        .unwrap()
        .unwrap();
    let kept: serde_json::Value = serde_json::from_str(&record.payment.payload).unwrap();
    assert_eq!(kept, without_echoed(&payload));
    assert!(kept["extensions"]["payment-identifier"].is_object());
    assert_eq!(kept["extensions"]["later-extension"]["info"][2]["three"], 3);
    for k in x402_tower::extensions::SERVER_DECLARATIONS {
        assert!(!record.payment.payload.contains(k), "{k} kept");
    }
}

/// What a route does not declare itself is kept, whatever its name: only the route's own declarations are
/// known to be read by nothing after the payment.
#[tokio::test]
async fn a_record_keeps_the_echoes_of_extensions_the_route_did_not_declare() {
    let store = std::sync::Arc::new(x402_tower::store::InMemoryPaymentStore::default());
    let svc = config()
        .engine(std::sync::Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(Scripted::new(SettleOutcome::Unknown {
                    message: "no receipt".into(),
                    transaction: None,
                }))
                .store(store.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let payload = payload_v2_echoing(0x32);
    let a = send(svc, req("/r", &[("payment-signature", &b64(&payload))])).await;
    assert_eq!(a.error(), "settlement_pending");
    let record = x402_tower::PaymentStore::get(&*store, &payment_key(0x32), now())
        .await
        .unwrap()
        .unwrap();
    let kept: serde_json::Value = serde_json::from_str(&record.payment.payload).unwrap();
    assert_eq!(kept["extensions"], payload["extensions"]);
}

/// A payment recorded without its echoes is still the same payment everywhere: concurrent copies through
/// two instances sharing one store, then resends to each, settle once and are all answered with the one
/// settlement (a resend is recognised by the authorization's digest, never by the stored text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoing_payment_copied_resent_and_sent_to_another_instance_settles_once() {
    // With other extensions kept, and with nothing but echoes (recorded as `"extensions":{}`).
    for payload in [payload_v2_echoing(0x33), payload_v2_echoing_only(0x35)] {
        let store = std::sync::Arc::new(x402_tower::store::InMemoryPaymentStore::default());
        let settler = Scripted::new(settled_outcome());
        let instance = || {
            config()
                .engine(std::sync::Arc::new(
                    x402_tower::PaymentEngine::builder()
                        .settler(settler.clone())
                        .store(store.clone())
                        .build()
                        .unwrap(),
                ))
                .build()
                .unwrap()
                .layer(Inner::new().service(StatusCode::OK))
        };
        let (a, b) = (instance(), instance());
        let header = b64(&payload);
        let mut receipts = concurrent_copies(&[a.clone(), b.clone()], &header, 8).await;
        for svc in [a, b] {
            let again = send(svc, req("/r", &[("payment-signature", &header)])).await;
            assert_eq!(again.status, StatusCode::OK);
            receipts.push(again.receipt("payment-response"));
        }
        assert_eq!(
            settler.settles(),
            1,
            "one settlement across copies, resends and instances"
        );
        assert!(receipts.iter().all(|r| *r == receipts[0]), "one receipt");
    }
}

/// The engine's own default store, full of settled records whose `validBefore` has passed (kept only for a
/// late resend), gives them up for a new payment instead of refusing it (503); a plain in-memory store
/// given by the user, without `evicting_settled_after`, refuses.
#[tokio::test]
async fn the_engines_default_store_when_full_makes_room_from_settled_records_past_valid_before() {
    use alloy_primitives::{Address, B256, U256};
    use std::sync::Arc;
    use x402_tower::PaymentEngine;
    use x402_tower::settle::VerifyOnlySettler;
    use x402_tower::store::{
        InMemoryPaymentStore, PaymentKey, PaymentRecord, PaymentState, PaymentStore, Reservation,
        StoreError, StoredPayment,
    };

    const CAPACITY: u64 = 100_000; // InMemoryPaymentStore::default()
    let now = 1_700_000_000;
    let key = |n: u64| PaymentKey {
        chain_id: 84532,
        nonce_space: Address::ZERO,
        from: Address::ZERO,
        nonce: B256::from(U256::from(n)),
    };
    let record = |state, expires_at| PaymentRecord {
        state,
        resource: "https://shop.example/r".into(),
        fingerprint: B256::ZERO,
        settlement: None,
        payment: StoredPayment::forgotten(),
        expires_at,
        updated_at: now,
        revision: 0,
    };
    let default = PaymentEngine::builder()
        .settler(Arc::new(VerifyOnlySettler))
        .build()
        .unwrap();
    let keep = default.keep_after_expiry().as_secs();
    let plain = PaymentEngine::builder()
        .settler(Arc::new(VerifyOnlySettler))
        .store(Arc::new(InMemoryPaymentStore::default()))
        .build()
        .unwrap();
    for (engine, room) in [(&default, true), (&plain, false)] {
        let store = engine.store();
        // Settled, their `validBefore` a second ago: kept `keep` longer for a late resend only.
        let past = record(PaymentState::Settled, now - 1 + keep);
        for n in 0..CAPACITY {
            let r = store.reserve(&key(n), &past, now).await.unwrap();
            assert!(matches!(r, Reservation::Reserved { .. }));
        }
        let fresh = record(PaymentState::InFlight, now + 300 + keep);
        let next = store.reserve(&key(CAPACITY), &fresh, now).await;
        match (room, next) {
            (true, Ok(Reservation::Reserved { .. })) => {}
            (false, Err(StoreError::Full(_))) => {}
            (room, other) => panic!("room: {room}, got {other:?}"),
        }
    }
}
