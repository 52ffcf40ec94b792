//! Settlement after/before the handler, failures, and a remote facilitator (fake, on 127.0.0.1).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::Address;
use http::StatusCode;
use serde_json::{Value, json};
use tower::Layer;
use x402_tower::SettleTiming;
use x402_tower::pricing::BoxFuture;
use x402_tower::proto::SupportedResponse;
use x402_tower::settle::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};

use crate::support::*;

/// A settler answering a scripted outcome and counting calls.
struct Scripted {
    outcome: SettleOutcome,
    settles: AtomicUsize,
}

impl Scripted {
    fn new(outcome: SettleOutcome) -> Arc<Self> {
        Arc::new(Scripted {
            outcome,
            settles: AtomicUsize::new(0),
        })
    }
    fn settles(&self) -> usize {
        self.settles.load(Ordering::SeqCst)
    }
}

impl Settler for Scripted {
    fn verify<'a>(
        &'a self,
        _: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        Box::pin(async { Ok(VerifyOutcome::Valid) })
    }
    fn settle<'a>(&'a self, _: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        let o = self.outcome.clone();
        Box::pin(async move { o })
    }
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(async { Ok(SupportedResponse::default()) })
    }
}

fn settled() -> SettleOutcome {
    SettleOutcome::Settled {
        transaction: format!("0x{}", "ab".repeat(32)),
        payer: ACCOUNT0,
        network: "eip155:84532".into(),
    }
}

fn failed(usable: bool) -> SettleOutcome {
    SettleOutcome::Failed {
        reason: "insufficient_funds".into(),
        message: Some("balance too low".into()),
        authorization_still_usable: usable,
    }
}

#[tokio::test]
async fn failing_handler_means_no_settlement() {
    let s = Scripted::new(settled());
    let inner = Inner::new();
    let svc = config()
        .settler(s.clone())
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::NOT_FOUND));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(1))])).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(s.settles(), 0);
    assert_eq!(inner.calls(), 1);
}

#[tokio::test]
async fn settled_after_the_handler_with_the_transaction_in_the_receipt() {
    let s = Scripted::new(settled());
    let inner = Inner::new();
    let svc = config()
        .settler(s.clone())
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(2))])).await;
    assert_eq!(a.status, StatusCode::OK);
    let r = a.receipt("payment-response");
    assert!(r.success);
    assert_eq!(r.transaction, format!("0x{}", "ab".repeat(32)));
    assert_eq!(s.settles(), 1);
}

#[tokio::test]
async fn settlement_failure_drops_the_held_response() {
    let s = Scripted::new(failed(true));
    let inner = Inner::new();
    let layer = config().settler(s.clone()).build().unwrap();
    let svc = layer.layer(inner.service(StatusCode::OK));
    let h = v1_header(3);
    let a = send(svc.clone(), req("/r", &[("x-payment", &h)])).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert!(
        !String::from_utf8_lossy(&a.body).contains("\"ok\""),
        "the handler's body is not sent"
    );
    let r = a.receipt("x-payment-response");
    assert!(!r.success);
    assert_eq!(r.error_reason.as_deref(), Some("insufficient_funds"));
    assert_eq!(r.transaction, "");
    assert_eq!(r.network, "base-sepolia");
    assert_eq!(inner.calls(), 1);
    // Still usable: released, so the same authorization may be tried again.
    let a = send(svc, req("/r", &[("x-payment", &h)])).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert_eq!(inner.calls(), 2);
    assert_eq!(layer.metrics().snapshot().settlements_failed, 2);
}

#[tokio::test]
async fn settlement_failure_that_spent_the_nonce_keeps_it() {
    let s = Scripted::new(failed(false));
    let inner = Inner::new();
    let svc = config()
        .settler(s.clone())
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let h = v2_header(4);
    assert_eq!(
        send(svc.clone(), req("/r", &[("payment-signature", &h)]))
            .await
            .error(),
        "insufficient_funds"
    );
    assert_eq!(
        send(svc, req("/r", &[("payment-signature", &h)]))
            .await
            .error(),
        "invalid_exact_evm_nonce_already_used"
    );
    assert_eq!(s.settles(), 1);
}

#[tokio::test]
async fn unknown_outcome_is_502_and_the_key_stays() {
    let s = Scripted::new(SettleOutcome::Unknown {
        message: "timeout after broadcast".into(),
    });
    let inner = Inner::new();
    let svc = config()
        .settler(s.clone())
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let h = v2_header(5);
    assert_eq!(
        send(svc.clone(), req("/r", &[("payment-signature", &h)]))
            .await
            .status,
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(
        send(svc, req("/r", &[("payment-signature", &h)]))
            .await
            .error(),
        "invalid_exact_evm_nonce_already_used"
    );
}

#[tokio::test]
async fn settle_before_the_handler() {
    let s = Scripted::new(settled());
    let inner = Inner::new();
    let svc = config()
        .settler(s.clone())
        .settle_timing(SettleTiming::BeforeHandler)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(6))])).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        a.json()["settled"],
        format!("0x{}", "ab".repeat(32)),
        "the handler saw the settlement"
    );
    assert!(a.receipt("payment-response").success);
    assert_eq!(a.header("cache-control"), Some("private"));
}

#[tokio::test]
async fn settle_before_failure_never_runs_the_handler() {
    let s = Scripted::new(failed(true));
    let inner = Inner::new();
    let svc = config()
        .settler(s.clone())
        .settle_timing(SettleTiming::BeforeHandler)
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(7))])).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert!(!a.receipt("payment-response").success);
    assert_eq!(inner.calls(), 0);
}

// ---- remote facilitator -------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Mode {
    Good,
    Invalid400,
    Hang,
    Garbage,
    SettleFails,
}

/// (endpoint, body, authorization header) of each call.
type Seen = (String, Value, Option<String>);

#[derive(Clone)]
struct Fake {
    mode: Mode,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn fake_facilitator(mode: Mode) -> (String, Fake) {
    use axum::routing::{get, post};
    let fake = Fake {
        mode,
        seen: Arc::default(),
    };
    async fn handle(
        fake: Fake,
        path: &str,
        headers: http::HeaderMap,
        body: Value,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let auth = headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned());
        fake.seen
            .lock()
            .unwrap()
            .push((path.to_owned(), body, auth));
        match (fake.mode, path) {
            (Mode::Hang, _) => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                unreachable!()
            }
            (Mode::Garbage, _) => "<html>not json</html>".into_response(),
            (Mode::Invalid400, _) => (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"isValid": false, "invalidReason": "insufficient_funds"})),
            )
                .into_response(),
            (_, "verify") => {
                axum::Json(json!({"isValid": true, "payer": ACCOUNT0.to_checksum(None)})).into_response()
            }
            (Mode::SettleFails, "settle") => axum::Json(json!({
                "success": false, "errorReason": "invalid_transaction_state", "transaction": "", "network": "eip155:84532"
            }))
            .into_response(),
            (_, "settle") => axum::Json(json!({
                "success": true, "transaction": "0xfeed", "network": "eip155:84532", "payer": ACCOUNT0.to_checksum(None)
            }))
            .into_response(),
            _ => axum::Json(json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:84532"}], "extensions": [], "signers": {}}))
                .into_response(),
        }
    }
    let f1 = fake.clone();
    let f2 = fake.clone();
    let f3 = fake.clone();
    let app = axum::Router::new()
        .route(
            "/fac/verify",
            post(
                move |h: http::HeaderMap, axum::Json(b): axum::Json<Value>| {
                    handle(f1.clone(), "verify", h, b)
                },
            ),
        )
        .route(
            "/fac/settle",
            post(
                move |h: http::HeaderMap, axum::Json(b): axum::Json<Value>| {
                    handle(f2.clone(), "settle", h, b)
                },
            ),
        )
        .route(
            "/fac/supported",
            get(move |h: http::HeaderMap| handle(f3.clone(), "supported", h, Value::Null)),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/fac"), fake)
}

fn facilitator(url: &str) -> Arc<dyn Settler> {
    Arc::new(
        x402_tower::settle::FacilitatorSettler::builder(url)
            .verify_timeout(Duration::from_millis(300))
            .settle_timeout(Duration::from_millis(300))
            .auth_headers(|_| {
                let mut h = http::HeaderMap::new();
                h.insert(
                    "authorization",
                    http::HeaderValue::from_static("Bearer t0ken"),
                );
                h
            })
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn facilitator_verify_and_settle() {
    let (url, fake) = fake_facilitator(Mode::Good).await;
    let inner = Inner::new();
    let svc = config()
        .settler(facilitator(&url))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/report", &[("payment-signature", &v2_header(1))])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(a.receipt("payment-response").transaction, "0xfeed");
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        ["verify", "settle"]
    );
    let body = &seen[0].1;
    assert_eq!(body["x402Version"], 2);
    assert_eq!(body["paymentPayload"]["accepted"], accepted_v2());
    assert_eq!(body["paymentRequirements"], accepted_v2());
    assert_eq!(seen[0].2.as_deref(), Some("Bearer t0ken"));
}

#[tokio::test]
async fn facilitator_v1_gets_v1_requirements() {
    let (url, fake) = fake_facilitator(Mode::Good).await;
    let inner = Inner::new();
    let svc = config()
        .settler(facilitator(&url))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/report?x=1", &[("x-payment", &v1_header(2))])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    let seen = fake.seen.lock().unwrap().clone();
    let reqs = &seen[0].1["paymentRequirements"];
    assert_eq!(reqs["network"], "base-sepolia");
    assert_eq!(reqs["maxAmountRequired"], "10000");
    assert_eq!(reqs["resource"], "https://shop.example/report?x=1");
}

#[tokio::test]
async fn hanging_facilitator_times_out_with_502() {
    let (url, _fake) = fake_facilitator(Mode::Hang).await;
    let inner = Inner::new();
    let svc = config()
        .settler(facilitator(&url))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let h = v2_header(3);
    let a = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert_eq!(inner.calls(), 0);
    // Verify failed before anything was broadcast: the key was released, the client may retry.
    let a = send(svc, req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn garbage_facilitator_is_502() {
    let (url, _fake) = fake_facilitator(Mode::Garbage).await;
    let inner = Inner::new();
    let svc = config()
        .settler(facilitator(&url))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(4))])).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn facilitator_settle_failure_is_402_with_its_reason() {
    let (url, _fake) = fake_facilitator(Mode::SettleFails).await;
    let inner = Inner::new();
    let svc = config()
        .settler(facilitator(&url))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(5))])).await;
    assert_eq!(a.error(), "invalid_transaction_state");
    assert_eq!(
        a.receipt("payment-response").error_reason.as_deref(),
        Some("invalid_transaction_state")
    );
    assert_eq!(inner.calls(), 1);
}

#[tokio::test]
async fn facilitator_supported() {
    let (url, _fake) = fake_facilitator(Mode::Good).await;
    let s = facilitator(&url);
    let kinds = s.supported().await.unwrap().kinds;
    assert_eq!(kinds[0].network, "eip155:84532");
    assert!(
        x402_tower::settle::FacilitatorSettler::builder("not a url")
            .build()
            .is_err()
    );
    let _ = Address::ZERO;
}

#[tokio::test]
async fn facilitator_4xx_with_a_protocol_body_is_its_verdict() {
    let (url, _fake) = fake_facilitator(Mode::Invalid400).await;
    let inner = Inner::new();
    let svc = config()
        .settler(facilitator(&url))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(8))])).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert_eq!(inner.calls(), 0);
}
