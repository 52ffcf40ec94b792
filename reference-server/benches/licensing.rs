//! In-process cost of interface A's hot paths through the whole router (no socket): the 402 answer, a
//! paid purchase (local verification, verify-only settlement, receipt write to an in-memory database),
//! and the catalog. The loopback figures with wrk are in docs/bench/reference-server-licensing.md.

use alloy_signer_local::PrivateKeySigner;
use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use http::Request;
use http_body_util::BodyExt as _;
use reference_server::store::{Db, Stores};
use reference_server::{Config, build_app};
use serde_json::Value;
use tower::ServiceExt as _;
use x402_tower::client::sign::{Requirements, SignOptions, sign_sync};

const BASE: &str = "http://127.0.0.1:8080";
const PATH: &str = "/x402Article?articleId=c2pa-explained";

/// A payment for the first offer of `required`, signed by the workspace's client as `@x402/fetch` signs.
fn sign(signer: &PrivateKeySigner, required: &Value) -> String {
    let requirements = Requirements::from_document(required).unwrap();
    let offer = &requirements.offers[0];
    let token = offer.token().unwrap();
    sign_sync(
        signer,
        &requirements,
        offer,
        &token,
        &SignOptions::default(),
    )
    .unwrap()
    .header_value
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut config = Config::for_tests();
    config.seed_assets = 0;
    config.public_url = Some(BASE.into());
    let settings = config.validate().unwrap();
    let stores = Stores::sqlite(Db::open_in_memory().unwrap());
    rt.block_on(reference_server::licensing::seed(&*stores.licensing))
        .unwrap();
    let app = rt
        .block_on(build_app(settings, BASE.into(), stores))
        .unwrap();

    let get = |path: &str, payment: Option<String>| {
        let mut req = Request::get(path);
        if let Some(p) = payment {
            req = req.header("PAYMENT-SIGNATURE", p);
        }
        req.body(Body::empty()).unwrap()
    };
    let required: Value = rt.block_on(async {
        let resp = app.clone().oneshot(get(PATH, None)).await.unwrap();
        assert_eq!(resp.status(), 402);
        serde_json::from_slice(
            &B64.decode(resp.headers()["payment-required"].as_bytes())
                .unwrap(),
        )
        .unwrap()
    });

    let mut group = c.benchmark_group("licensing");
    group.bench_function("402 answer", |b| {
        b.iter(|| {
            rt.block_on(async {
                let resp = app.clone().oneshot(get(PATH, None)).await.unwrap();
                assert_eq!(resp.status(), 402);
                resp.into_body().collect().await.unwrap()
            })
        })
    });
    group.bench_function("catalog", |b| {
        b.iter(|| {
            rt.block_on(async {
                let resp = app
                    .clone()
                    .oneshot(get("/x402Article/list", None))
                    .await
                    .unwrap();
                resp.into_body().collect().await.unwrap()
            })
        })
    });
    let signer = PrivateKeySigner::random();
    group.bench_function("paid purchase (verify-only, receipt written)", |b| {
        b.iter_batched(
            || sign(&signer, &required),
            |payment| {
                rt.block_on(async {
                    let resp = app.clone().oneshot(get(PATH, Some(payment))).await.unwrap();
                    assert_eq!(resp.status(), 200);
                    resp.into_body().collect().await.unwrap()
                })
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
