//! Link generation and envelope assembly per request, and the bytes allocated around a 1 MB page.
//!
//! A counting global allocator measures what one request through the layer allocates: if the 1 MB results
//! were copied, at least 1 MB would show up.
#![allow(unsafe_code)] // The counting allocator below; nothing else.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    convert::Infallible,
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::FutureExt as _;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use registry_pagination::{BaseUrl, Page, PageCount, PaginationLayer, RequestUrl, envelope_prefix};
use tower::{Layer as _, service_fn};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const FILTERED: &str = "zeta=1&limit=5&offset=10&alpha=x%20y&tag=b&tag=a&empty=";

fn links(c: &mut Criterion) {
    let base: BaseUrl = "https://registry.example.com".parse().expect("valid");
    let mut group = c.benchmark_group("links");
    group.bench_function("registry_no_query", |b| {
        let page = Page {
            limit: 200,
            offset: 1000,
        };
        b.iter(|| RequestUrl::new(&base, black_box("/api/v3/assets/"), None).links(page, 1234))
    });
    group.bench_function("filtered_query", |b| {
        let page = Page::from_query(Some(FILTERED), 200, Some(200));
        b.iter(|| {
            RequestUrl::new(
                &base,
                black_box("/api/v3/assets/"),
                Some(black_box(FILTERED)),
            )
            .links(page, 1234)
        })
    });
    group.bench_function("parse_page", |b| {
        b.iter(|| Page::from_query(Some(black_box(FILTERED)), 200, Some(200)))
    });
    group.bench_function("envelope_prefix", |b| {
        b.iter(|| {
            envelope_prefix(
                black_box(1234),
                Some("https://registry.example.com/api/v3/assets/?limit=200&offset=1200"),
                Some("https://registry.example.com/api/v3/assets/?limit=200&offset=800"),
            )
        })
    });
    group.finish();
}

/// A JSON array of about `size` bytes.
fn results_of(size: usize) -> Bytes {
    let mut json = Vec::with_capacity(size);
    json.push(b'[');
    while json.len() + 32 < size {
        json.extend_from_slice(b"{\"id\":\"bafy0000000000\"},");
    }
    json.pop();
    json.push(b']');
    Bytes::from(json)
}

/// One request through the layer, the body drained frame by frame (no collecting copy). Returns body length.
fn one_request<S>(service: &mut S, uri: &'static str) -> u64
where
    S: tower::Service<
            Request<()>,
            Response = Response<registry_pagination::ResponseBody<Full<Bytes>>>,
            Error = Infallible,
        >,
{
    let response = service
        .call(Request::get(uri).body(()).expect("request"))
        .now_or_never()
        .expect("ready")
        .expect("ok");
    let mut body = response.into_body();
    let mut len = 0;
    while let Some(frame) = body.frame().now_or_never().expect("ready") {
        len += frame
            .expect("infallible")
            .into_data()
            .map_or(0, |d| d.len() as u64);
    }
    len
}

/// The handler's body as it comes out without the layer.
struct BareBody(Full<Bytes>);

fn drain_bare<S>(service: &mut S)
where
    S: tower::Service<Request<()>, Response = Response<BareBody>, Error = Infallible>,
{
    let response = service
        .call(
            Request::get("/api/v3/assets/?offset=1000")
                .body(())
                .expect("request"),
        )
        .now_or_never();
    let mut body = response.expect("ready").expect("ok").into_body().0;
    while let Some(frame) = body.frame().now_or_never().expect("ready") {
        black_box(frame.expect("infallible"));
    }
}

fn envelope(c: &mut Criterion) {
    let layer = PaginationLayer::try_new("https://registry.example.com").expect("valid");
    let mut group = c.benchmark_group("layer_request");
    for (name, size) in [("small_2kb", 2 << 10), ("page_1mb", 1 << 20)] {
        let results = results_of(size);
        let inner = results.clone();
        let handler = service_fn(move |_req: Request<()>| {
            let mut response = Response::new(Full::new(inner.clone()));
            response.extensions_mut().insert(PageCount(1234));
            std::future::ready(Ok::<_, Infallible>(response))
        });
        // Baseline: the same request and handler without the layer.
        let mut bare =
            tower::util::MapResponseLayer::new(|r: Response<Full<Bytes>>| r.map(BareBody))
                .layer(handler.clone());
        drain_bare(&mut bare);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        drain_bare(&mut bare);
        println!(
            "layer_request/{name}: baseline without the layer: {} allocations",
            ALLOCATIONS.load(Ordering::Relaxed) - before
        );
        let mut service = layer.layer(handler);

        // Allocation figures for one request (after one warm-up request).
        one_request(&mut service, "/api/v3/assets/?offset=1000");
        let (count_before, bytes_before) = (
            ALLOCATIONS.load(Ordering::Relaxed),
            ALLOCATED_BYTES.load(Ordering::Relaxed),
        );
        let len = one_request(&mut service, "/api/v3/assets/?offset=1000");
        let (count, bytes) = (
            ALLOCATIONS.load(Ordering::Relaxed) - count_before,
            ALLOCATED_BYTES.load(Ordering::Relaxed) - bytes_before,
        );
        println!(
            "layer_request/{name}: results {} B, response body {len} B, {count} allocations, {bytes} B allocated per request",
            results.len()
        );

        group.throughput(Throughput::Bytes(len));
        group.bench_function(name, |b| {
            b.iter(|| one_request(&mut service, "/api/v3/assets/?offset=1000"))
        });
    }
    group.finish();
}

criterion_group!(benches, links, envelope);
criterion_main!(benches);
