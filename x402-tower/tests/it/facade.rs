//! Feature `metrics`: the layer's counts also go through the `metrics` facade, to the recorder the
//! application installed (here a Prometheus recorder made current for the test).

use http::StatusCode;
use tower::Layer;

use crate::support::*;

#[test]
fn the_layer_records_402s_payments_and_rejections_through_the_facade() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        x402_tower::engine::metrics::describe();
        rt.block_on(async {
            let inner = Inner::new();
            let svc = config()
                .engine(engine_with(Scripted::new(settled_outcome())))
                .build()
                .unwrap()
                .layer(inner.service(StatusCode::OK));
            let unpaid = send(svc.clone(), req("/r", &[])).await;
            assert_eq!(unpaid.status, StatusCode::PAYMENT_REQUIRED);
            let h = v2_header(7);
            let paid = send(svc.clone(), req("/r", &[("payment-signature", &h)])).await;
            assert_eq!(paid.status, StatusCode::OK);
            let replay = send(svc, req("/other", &[("payment-signature", &h)])).await;
            assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED);
        });
    });
    let text = handle.render();
    assert!(text.contains("# HELP x402_payments_total"), "{text}");
    assert!(
        text.contains("x402_payments_total{outcome=\"accepted\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "x402_payments_total{outcome=\"rejected\",reason=\"invalid_exact_evm_nonce_already_used\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("x402_payment_required_total 2"), "{text}");
}
