//! A paginated collection of the numbers `1..=count` behind the layer, and request helpers.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use registry_pagination::{Page, PageCount, Pagination, PaginationLayer};
use serde_json::Value;
use tower::{Layer, Service, ServiceExt, service_fn};

/// What a test sees of a response.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Seen {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("body is JSON")
    }

    pub(crate) fn next(&self) -> Option<String> {
        self.json()["next"].as_str().map(str::to_owned)
    }

    pub(crate) fn previous(&self) -> Option<String> {
        self.json()["previous"].as_str().map(str::to_owned)
    }

    pub(crate) fn results(&self) -> Vec<u64> {
        self.json()["results"]
            .as_array()
            .expect("results array")
            .iter()
            .map(|v| v.as_u64().expect("u64"))
            .collect()
    }
}

/// The handler: records `1..=count`, the page given by the layer, the results serialised as a JSON array.
pub(crate) fn numbers(count: u64, req: &Request<()>) -> Response<Full<Bytes>> {
    let page = *req
        .extensions()
        .get::<Page>()
        .expect("layer inserted the page");
    let range = page.range(count);
    let results: Vec<u64> = (range.start + 1..range.end + 1).collect();
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::to_vec(&results).expect("serialise"),
    )));
    response.extensions_mut().insert(PageCount(count));
    response
}

/// The number collection behind `layer`, as a bare `tower::service_fn`.
pub(crate) fn number_service(
    layer: &PaginationLayer,
    count: u64,
) -> Pagination<
    impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
    + Clone
    + use<>,
> {
    layer.layer(service_fn(move |req: Request<()>| async move {
        Ok::<_, Infallible>(numbers(count, &req))
    }))
}

/// Sends one request through any service and collects the response.
pub(crate) async fn send<S, R, B>(
    service: S,
    method: Method,
    uri: &str,
    headers: &[(&'static str, &str)],
) -> Seen
where
    S: Service<Request<R>, Response = Response<B>>,
    R: Default,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = service
        .oneshot(request.body(R::default()).expect("request"))
        .await
        .expect("service");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Seen {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// GET through the number collection.
pub(crate) async fn get(layer: &PaginationLayer, count: u64, uri: &str) -> Seen {
    send(number_service(layer, count), Method::GET, uri, &[]).await
}

/// The registry configuration of pagination.md: host `h`, default and max 200.
pub(crate) fn registry_layer() -> PaginationLayer {
    PaginationLayer::try_new("http://h").expect("valid base URL")
}

/// DRF's own unit-test configuration: default 10, max 15, host `testserver`.
pub(crate) fn drf_test_layer() -> PaginationLayer {
    PaginationLayer::try_new("http://testserver")
        .expect("valid base URL")
        .default_limit(10)
        .max_limit(Some(15))
}
