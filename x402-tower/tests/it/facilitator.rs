//! A remote facilitator (fake, on 127.0.0.1): verify/settle bodies, timeouts, garbage, failures.
//! Needs the `facilitator` feature (default).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::Address;
use http::StatusCode;
use serde_json::{Value, json};
use tower::Layer;
use x402_tower::settle::Settler;

use crate::support::*;

#[derive(Clone, Copy)]
enum Mode {
    Good,
    Invalid400,
    Hang,
    Garbage,
    SettleFails,
    /// `/settle` refuses every payment as expired.
    SettleExpired,
}

/// (endpoint, body, authorization header, body as sent) of each call.
type Seen = (String, Value, Option<String>, String);

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
        raw: String,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let body: Value = serde_json::from_str(&raw).unwrap();
        let auth = headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned());
        fake.seen
            .lock()
            .unwrap()
            .push((path.to_owned(), body, auth, raw));
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
            (Mode::SettleExpired, "settle") => axum::Json(json!({
                "success": false, "errorReason": "invalid_exact_evm_payload_authorization_valid_before",
                "transaction": "", "network": "eip155:84532"
            }))
            .into_response(),
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
            post(move |h: http::HeaderMap, b: String| handle(f1.clone(), "verify", h, b)),
        )
        .route(
            "/fac/settle",
            post(move |h: http::HeaderMap, b: String| handle(f2.clone(), "settle", h, b)),
        )
        .route(
            "/fac/supported",
            get(move |h: http::HeaderMap| handle(f3.clone(), "supported", h, "null".into())),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/fac"), fake)
}

/// A facilitator client with timeouts no answer of the fake facilitator comes near, however loaded the
/// machine (the test of a hanging facilitator uses [`facilitator_within`] a short bound).
fn facilitator(url: &str) -> Arc<dyn Settler> {
    facilitator_within(url, Duration::from_secs(30))
}

fn facilitator_within(url: &str, timeout: Duration) -> Arc<dyn Settler> {
    Arc::new(
        x402_tower::settle::FacilitatorSettler::builder(url)
            .verify_timeout(timeout)
            .settle_timeout(timeout)
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

/// A paid route settled through the facilitator at `url`, and the service behind it.
fn paid_route(
    url: String,
) -> (
    impl tower::Service<
        http::Request<http_body_util::Full<bytes::Bytes>>,
        Response = http::Response<impl http_body::Body<Error: std::fmt::Debug>>,
        Error: std::fmt::Debug,
    > + Clone,
    Inner,
) {
    paid_route_within(url, Duration::from_secs(30))
}

/// [`paid_route`] whose facilitator calls time out after `timeout`.
fn paid_route_within(
    url: String,
    timeout: Duration,
) -> (
    impl tower::Service<
        http::Request<http_body_util::Full<bytes::Bytes>>,
        Response = http::Response<impl http_body::Body<Error: std::fmt::Debug>>,
        Error: std::fmt::Debug,
    > + Clone,
    Inner,
) {
    let inner = Inner::new();
    let svc = config()
        .engine(engine_with(facilitator_within(&url, timeout)))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    (svc, inner)
}

/// A purchase on `svc` (a clone of it) with a v2 payment of `nonce`.
async fn pay<S, B>(svc: &S, nonce: u8) -> Answer
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<B>,
        > + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    send(
        svc.clone(),
        req("/r", &[("payment-signature", &v2_header(nonce))]),
    )
    .await
}

#[tokio::test]
async fn facilitator_verify_and_settle() {
    let (url, fake) = fake_facilitator(Mode::Good).await;
    let (svc, _inner) = paid_route(url.clone());
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
async fn the_facilitator_gets_the_payment_byte_for_byte_as_the_client_sent_it() {
    let (url, fake) = fake_facilitator(Mode::Good).await;
    let (svc, _inner) = paid_route(url.clone());
    let a = Auth::v2(7);
    let p = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    // Extensions as a client may write them: its own key order, spacing, escapes and number forms, which a
    // server that re-serialised a parsed tree would change.
    let text = p.to_string().replacen(
        '{',
        r#"{ "extensions" : {"zeta": {"n": 1.50, "s": "caf\u00e9"}, "alpha": [ 1e3 ]},"#,
        1,
    );
    let header = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&text)
    };
    let r = send(svc, req("/report", &[("payment-signature", &header)])).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for (_, _, _, raw) in &seen {
        assert!(
            raw.contains(&format!(r#""paymentPayload":{text}"#)),
            "{raw}"
        );
    }
}

#[tokio::test]
async fn a_payment_text_that_is_not_json_is_never_sent_and_leaves_the_authorization_usable() {
    let (url, fake) = fake_facilitator(Mode::Good).await;
    let payload = unb64(&v2_header(9));
    let mut request = x402_tower::engine::facilitator::settle_request(
        payload.to_string().into(),
        &payload["accepted"].to_string(),
    )
    .unwrap();
    // A settler's caller may build a request by hand: its text must be JSON to be forwarded as sent.
    request.payload_text = "{not json".into();
    let settler = facilitator(&url);
    assert!(matches!(
        settler.verify(&request).await,
        Err(x402_tower::settle::SettleError::InvalidRequest(_))
    ));
    match settler.settle(&request).await {
        x402_tower::settle::SettleOutcome::Failed {
            reason,
            authorization_still_usable,
            ..
        } => {
            assert_eq!(reason, "invalid_payload");
            assert!(authorization_still_usable, "nothing was sent");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        fake.seen.lock().unwrap().is_empty(),
        "nothing reached the facilitator"
    );
}

#[tokio::test]
async fn facilitator_v1_gets_v1_requirements() {
    let (url, fake) = fake_facilitator(Mode::Good).await;
    let (svc, _inner) = paid_route(url.clone());
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
    let (url, fake) = fake_facilitator(Mode::Hang).await;
    let (svc, inner) = paid_route_within(url.clone(), Duration::from_millis(300));
    let h = v2_header(3);
    let a = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert_eq!(inner.calls(), 0);
    // Verify failed before anything was broadcast: the key was released, the client may retry.
    let a = send(svc, req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    // A /verify that timed out is not sent again: one per request.
    assert_eq!(fake.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn garbage_facilitator_is_502() {
    let (url, _fake) = fake_facilitator(Mode::Garbage).await;
    let (svc, inner) = paid_route(url.clone());
    let a = pay(&svc, 4).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn facilitator_settle_failure_is_402_with_its_reason() {
    let (url, _fake) = fake_facilitator(Mode::SettleFails).await;
    let (svc, inner) = paid_route(url.clone());
    let a = pay(&svc, 5).await;
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
    let (svc, inner) = paid_route(url.clone());
    let a = pay(&svc, 8).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert_eq!(inner.calls(), 0);
}

/// What a [`tcp_facilitator`] does with the `n`th request it reads (counted from 1 over all connections).
#[derive(Clone, Copy)]
enum Cut {
    /// Answers every request.
    Never,
    /// Reads request `n` whole, then closes its connection without answering: a kept-alive connection the
    /// facilitator (or a proxy in front of it) closed just as the request crossed it.
    Request(usize),
    /// The same, with a reset (`SO_LINGER` 0) instead of an orderly close.
    Reset(usize),
}

/// A facilitator on 127.0.0.1 written on raw TCP, to control its connections: it counts the connections it
/// accepts and the requests it reads, answers HTTP/1.1 with keep-alive, closes a connection left idle for
/// `idle_close` and cuts off request `cut`. Every `/verify` is valid and every `/settle` succeeds.
async fn tcp_facilitator(
    idle_close: Duration,
    cut: Cut,
) -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<Mutex<Vec<String>>>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    let (c, r) = (connections.clone(), requests.clone());
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            c.fetch_add(1, Ordering::SeqCst);
            let requests = r.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // One request: the head, then Content-Length bytes of body.
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        let n =
                            match tokio::time::timeout(idle_close, socket.read(&mut chunk)).await {
                                Ok(Ok(n)) if n > 0 => n,
                                _ => return, // idle too long, or the client closed: close
                            };
                        buf.extend_from_slice(&chunk[..n]);
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        let n = socket.read(&mut chunk).await.unwrap();
                        assert!(n > 0, "the client closed mid-request");
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let path = head.split_whitespace().nth(1).unwrap().to_owned();
                    buf.drain(..head_end + length);
                    let n = {
                        let mut seen = requests.lock().unwrap();
                        seen.push(path.clone());
                        seen.len()
                    };
                    match cut {
                        Cut::Request(c) if c == n => return, // read whole, never answered: closed
                        Cut::Reset(c) if c == n => {
                            socket.set_zero_linger().unwrap();
                            return; // dropped with SO_LINGER 0: reset
                        }
                        _ => {}
                    }
                    let body = if path.ends_with("/verify") {
                        json!({"isValid": true, "payer": ACCOUNT0.to_checksum(None)})
                    } else {
                        json!({"success": true, "transaction": format!("0x{n:02x}"), "network": "eip155:84532", "payer": ACCOUNT0.to_checksum(None)})
                    }
                    .to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/fac"), connections, requests)
}

#[tokio::test]
async fn purchases_through_a_facilitator_share_one_kept_alive_connection() {
    let (url, connections, requests) = tcp_facilitator(Duration::from_secs(60), Cut::Never).await;
    let (svc, _inner) = paid_route(url);
    for nonce in 20..24 {
        let a = pay(&svc, nonce).await;
        assert_eq!(a.status, StatusCode::OK, "{a:?}");
    }
    assert_eq!(
        requests.lock().unwrap().len(),
        8,
        "a verify and a settle per purchase"
    );
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "every call went over the first connection"
    );
}

#[tokio::test]
async fn a_connection_the_facilitator_closed_while_idle_is_not_used_again() {
    let (url, connections, _) = tcp_facilitator(Duration::from_millis(100), Cut::Never).await;
    let (svc, _inner) = paid_route(url);
    let a = pay(&svc, 30).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let a = pay(&svc, 31).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_verify_cut_off_on_a_kept_alive_connection_is_sent_again_on_a_new_one() {
    // Request 3 is the second purchase's /verify, on the connection the first purchase left open; it is
    // closed under it, or reset.
    for cut in [Cut::Request(3), Cut::Reset(3)] {
        verify_cut_off(cut).await;
    }
}

async fn verify_cut_off(cut: Cut) {
    let (url, connections, requests) = tcp_facilitator(Duration::from_secs(60), cut).await;
    let (svc, inner) = paid_route(url);
    let a = pay(&svc, 40).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    let a = pay(&svc, 41).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(a.receipt("payment-response").transaction, "0x05");
    assert_eq!(
        *requests.lock().unwrap(),
        [
            "/fac/verify",
            "/fac/settle",
            "/fac/verify",
            "/fac/verify",
            "/fac/settle"
        ]
    );
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn a_settle_cut_off_is_never_sent_twice_at_once_and_the_buyers_resend_is_delivered() {
    // Request 2 is the purchase's /settle: read whole, never answered. The facilitator may have settled,
    // so the settler must not send it again on its own (a second /settle of a spent authorization fails
    // with "nonce already used", which would wrongly refuse a payment that moved money).
    let (url, _connections, requests) =
        tcp_facilitator(Duration::from_secs(60), Cut::Request(2)).await;
    let (svc, inner) = paid_route(url);
    let h = v2_header(50);
    let a = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED, "{a:?}");
    assert_eq!(
        a.receipt("payment-response").error_reason.as_deref(),
        Some("settlement_pending")
    );
    assert_eq!(*requests.lock().unwrap(), ["/fac/verify", "/fac/settle"]);
    // The buyer sends the identical payment again: the pending record is reconciled through /settle
    // (answered this time) and the content delivered, once.
    let a = send(svc, req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(
        requests
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.ends_with("/settle"))
            .count(),
        2,
        "the original /settle and the reconciliation's, never two at once"
    );
    // Settled after the response (the default), so the service answered both requests; the buyer paid once.
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn a_forged_payment_is_refused_here_and_never_reaches_the_facilitator() {
    // Signed by a key that is not the payer's: anyone can make one, without a key or funds.
    let (url, connections, requests) = tcp_facilitator(Duration::from_secs(60), Cut::Never).await;
    let (svc, inner) = paid_route(url);
    let a = Auth::v2(60);
    let forged = b64(&payload_v2(
        &a,
        &a.sign(&stranger(), &domain_base_sepolia()),
    ));
    let r = send(svc, req("/r", &[("payment-signature", &forged)])).await;
    assert_eq!(r.error(), "invalid_exact_evm_payload_signature");
    assert!(requests.lock().unwrap().is_empty());
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(inner.calls(), 0);
}

/// After a payment's `validBefore` a facilitator that keeps no record can only refuse it as expired, which
/// says nothing of whether the first attempt moved the money: reconciling, that stays unknown (the record is
/// kept, never released as unpaid). A first settlement refused so is a plain failure.
#[tokio::test]
async fn an_expired_refusal_while_reconciling_proves_nothing_and_stays_unknown() {
    use x402_tower::settle::SettleOutcome;
    let (url, _fake) = fake_facilitator(Mode::SettleExpired).await;
    let settler = facilitator(&url);
    let payload = unb64(&v2_header(0x70));
    let request = x402_tower::engine::facilitator::settle_request(
        payload.to_string().into(),
        &payload["accepted"].to_string(),
    )
    .unwrap();
    let first = settler.settle(&request).await;
    assert!(
        matches!(
            first,
            SettleOutcome::Failed {
                authorization_still_usable: true,
                ..
            }
        ),
        "{first:?}"
    );
    let tx = "0xfeed";
    let reconciled = settler.reconcile(&request, Some(tx)).await;
    match reconciled {
        SettleOutcome::Unknown {
            transaction,
            message,
        } => {
            assert_eq!(transaction.as_deref(), Some(tx));
            assert!(message.contains("valid_before"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
