//! Settlement after/before the handler and its failures (the remote facilitator: `facilitator.rs`).

use http::StatusCode;
use tower::Layer;
use x402_tower::settle::SettleOutcome;
use x402_tower::settle::SettleTiming;

use crate::support::*;

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
        .engine(engine_with(s.clone()))
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
        .engine(engine_with(s.clone()))
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
    let layer = config().engine(engine_with(s.clone())).build().unwrap();
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
        .engine(engine_with(s.clone()))
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
async fn unknown_outcome_is_settlement_pending_and_a_resend_reconciles_without_a_new_payment() {
    let s = Scripted::new(SettleOutcome::Unknown {
        message: "timeout after broadcast".into(),
        transaction: None,
    });
    let inner = Inner::new();
    let svc = config()
        .engine(engine_with(s.clone()))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let h = v2_header(5);
    let first = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(first.error(), "settlement_pending");
    assert_eq!(
        first.receipt("payment-response").error_reason.as_deref(),
        Some("settlement_pending")
    );
    // The identical payment again: reconciled (the scripted settler still does not know), never a new
    // reservation, so the answer is pending again rather than "nonce already used".
    let again = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
    assert_eq!(again.error(), "settlement_pending");
    // The same authorization for another resource is refused.
    assert_eq!(
        send(svc, req("/other", &[("payment-signature", &h)]))
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
        .settle_timing(SettleTiming::BeforeHandler)
        .engine(engine_with(s.clone()))
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
        .settle_timing(SettleTiming::BeforeHandler)
        .engine(engine_with(s.clone()))
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    let a = send(svc, req("/r", &[("payment-signature", &v2_header(7))])).await;
    assert_eq!(a.error(), "insufficient_funds");
    assert!(!a.receipt("payment-response").success);
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn settle_without_verify_skips_the_settlers_verify_only_when_settling_first() {
    for (timing, verifies) in [
        (SettleTiming::BeforeHandler, 0),
        (SettleTiming::AfterResponse, 1),
    ] {
        let s = Scripted::new(settled());
        let svc = config()
            .settle_timing(timing)
            .settle_without_verify(true)
            .engine(engine_with(s.clone()))
            .build()
            .unwrap()
            .layer(Inner::new().service(StatusCode::OK));
        let a = send(svc, req("/r", &[("payment-signature", &v2_header(0x21))])).await;
        assert_eq!(a.status, StatusCode::OK, "{timing:?}");
        assert_eq!((s.verifies(), s.settles()), (verifies, 1), "{timing:?}");
    }
}

#[test]
fn a_layer_without_a_settler_warns_when_built_and_on_its_first_payment_only() {
    let pay_twice = |config: x402_tower::X402Config| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let svc = config
            .build()
            .unwrap()
            .layer(Inner::new().service(StatusCode::OK));
        rt.block_on(async {
            for nonce in [0x71, 0x72] {
                let a = send(
                    svc.clone(),
                    req("/r", &[("payment-signature", &v2_header(nonce))]),
                )
                .await;
                assert_eq!(a.status, StatusCode::OK);
            }
        });
    };
    let defaulted = logs_of(|| pay_twice(config()));
    assert_eq!(
        defaulted.matches("built without a settler").count(),
        1,
        "{defaulted}"
    );
    assert_eq!(defaulted.matches("VERIFY-ONLY").count(), 1, "{defaulted}");
    // Chosen explicitly: no warning.
    let chosen = logs_of(|| {
        pay_twice(config().engine(engine_with(std::sync::Arc::new(
            x402_tower::settle::VerifyOnlySettler,
        ))))
    });
    assert!(
        !chosen.contains("without a settler") && !chosen.contains("VERIFY-ONLY"),
        "{chosen}"
    );
}
