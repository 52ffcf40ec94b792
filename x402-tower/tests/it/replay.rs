//! The replay guard: sequential and concurrent, with the inner service's call count as proof.

use http::StatusCode;
use tower::Layer;

use crate::support::*;

#[tokio::test]
async fn sequential_replay_is_refused_and_the_handler_runs_once() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let h = v2_header(1);
    assert_eq!(
        send(svc.clone(), req("/r", &[("payment-signature", &h)]))
            .await
            .status,
        StatusCode::OK
    );
    for name in ["payment-signature", "x-payment"] {
        let a = send(svc.clone(), req("/r", &[(name, &h)])).await;
        assert_eq!(a.error(), "invalid_exact_evm_nonce_already_used");
    }
    assert_eq!(inner.calls(), 1);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replay_runs_the_handler_once() {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let h = v2_header(3);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let svc = svc.clone();
            let h = h.clone();
            tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &h)])).await })
        })
        .collect();
    let mut ok = 0;
    let mut replays = 0;
    for t in tasks {
        let a = t.await.unwrap();
        match a.status {
            StatusCode::OK => ok += 1,
            _ => {
                assert_eq!(a.error(), "invalid_exact_evm_nonce_already_used");
                replays += 1;
            }
        }
    }
    assert_eq!((ok, replays), (1, 15));
    assert_eq!(inner.calls(), 1);
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
    let store = std::sync::Arc::new(x402_tower::InMemoryReplayStore::with_capacity(1));
    let svc = config()
        .replay_store(store)
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
async fn a_request_dropped_mid_flight_keeps_its_reservation() {
    // The client goes away while the handler runs: the response future is dropped. The reservation stays
    // (documented rule: never two uses), so the same header is a replay, and the handler ran once.
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
    let svc = config().build().unwrap().layer(hanging);
    let h = v2_header(30);
    let first = {
        let svc = svc.clone();
        let h = h.clone();
        tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &h)])).await })
    };
    entered_rx.recv().await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let a = send(svc, req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}
