//! Registry listing cost in process (no sockets): `GET /api/v3/assets/` through the full registry router
//! (DRF surface, pagination layer, page read from the store, signed-URL splicing) at offset 0 and at the
//! deepest offset, and the store read alone.
//!
//! Seeds `REGISTRY_BENCH_ASSETS` assets (default 100,000, ~15 s) into a temporary SQLite file first, or
//! into the (empty, or already seeded with that many) database `REGISTRY_BENCH_DATABASE` names
//! (`postgres://...`).
//!
//! ```text
//! cargo bench -p reference-server --bench registry -- --warm-up-time 1 --measurement-time 3
//! REGISTRY_BENCH_DATABASE=postgres://... cargo bench -p reference-server --bench registry
//! ```

use std::time::Duration;

use axum::body::Body;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::Request;
use http_body_util::BodyExt as _;
use reference_server::registry::{self, RegistryConfig};
use reference_server::store::{DatabaseUrl, Stores};
use tower::ServiceExt as _;

fn bench(c: &mut Criterion) {
    let n: u64 = std::env::var("REGISTRY_BENCH_ASSETS")
        .ok()
        .and_then(|v| v.parse().ok())
        // `cargo test --all-targets` runs benches once in test mode (no `--bench` argument): a small
        // database proves the bench works without seeding 100,000 assets in a debug build.
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            100_000
        } else {
            500
        });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("registry-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url: DatabaseUrl = std::env::var("REGISTRY_BENCH_DATABASE")
        .unwrap_or_else(|_| dir.join("db.sqlite3").display().to_string())
        .parse()
        .expect("database URL");
    let stores = rt.block_on(Stores::open(&url)).expect("database");
    rt.block_on(registry::seed(&*stores.assets, n as usize))
        .expect("seed");
    let n = rt.block_on(stores.assets.count()).expect("count");
    let app = registry::router(
        stores.assets.clone(),
        RegistryConfig::new("http://127.0.0.1:8080", dir.join("media")),
        None,
    );
    let store = stores.assets;
    let deepest = n.saturating_sub(200);

    let mut g = c.benchmark_group("registry_page_200");
    g.throughput(Throughput::Elements(1));
    for (name, offset) in [("offset_0", 0), ("deepest", deepest)] {
        let uri = format!("/api/v3/assets/?limit=200&offset={offset}");
        g.bench_function(format!("router_{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let req = Request::get(uri.as_str())
                        .body(Body::empty())
                        .expect("request");
                    let resp = app.clone().oneshot(req).await.expect("response");
                    assert_eq!(resp.status(), 200);
                    resp.into_body()
                        .collect()
                        .await
                        .expect("body")
                        .to_bytes()
                        .len()
                })
            })
        });
        g.bench_function(format!("store_read_{name}"), |b| {
            b.iter(|| rt.block_on(store.page(offset, 200)).expect("page"))
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30);
    targets = bench
}
criterion_main!(benches);
