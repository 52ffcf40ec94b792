//! The server's own middleware every request goes through: request counting ([`CountRequestsLayer`]),
//! error answers for people and programs ([`ErrorAnswersLayer`]) and plain OPTIONS past CORS
//! ([`PlainOptionsLayer`]).
//!
//! Written as tower layers rather than `axum::middleware::from_fn`: a `from_fn` middleware boxes its inner
//! service and its future and clones the whole stack below it on every request, which for the first two cost
//! ~5.5 µs of a 39 µs 402 (14%, measured with the load tool; docs/bench/reference-server-licensing.md).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Request, StatusCode, header};
use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower::{Layer, Service, ServiceExt as _};

use crate::metrics::Metrics;

/// Counts every request its service answers, by route group and status class, with its latency
/// ([`crate::metrics::Metrics::record_request`]).
#[derive(Debug, Clone)]
pub struct CountRequestsLayer {
    metrics: Arc<Metrics>,
}

impl CountRequestsLayer {
    /// Counts into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service of [`CountRequestsLayer`].
#[derive(Debug, Clone)]
pub struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, ResB> Service<Request<B>> for CountRequests<S>
where
    S: Service<Request<B>, Response = http::Response<ResB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = CountFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let route = crate::metrics::route_index(request.uri().path());
        CountFuture {
            inner: self.inner.call(request),
            metrics: self.metrics.clone(),
            route,
            started: Instant::now(),
        }
    }
}

pin_project! {
    /// The response future of [`CountRequests`]: counts the response when it is ready (a request whose
    /// future is dropped, its client gone, is not counted).
    pub struct CountFuture<F> {
        #[pin]
        inner: F,
        metrics: Arc<Metrics>,
        route: usize,
        started: Instant,
    }
}

impl<F, ResB, E> Future for CountFuture<F>
where
    F: Future<Output = Result<http::Response<ResB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let Ok(response) = &result {
            this.metrics.record_route(
                *this.route,
                response.status().as_u16(),
                this.started.elapsed(),
            );
        }
        Poll::Ready(result)
    }
}

/// Largest JSON error body read to add its request id or show it as a page.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What people and programs get when a request fails. A problem document (interface A, the facilitator,
/// the operator endpoints) gets the request id (`x-request-id`) as `"request_id"`, so the id a user
/// reports is in what they saw; a request whose `Accept` prefers HTML (a browser) gets any JSON error, a
/// problem or the registry's `{"detail"}`, as the site's error page, with the same status. 402s are x402
/// documents (and the paywall) and stay as the protocol defines them. Only such an error response is read
/// and rewritten; every other response passes through untouched.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorAnswersLayer;

impl<S> Layer<S> for ErrorAnswersLayer {
    type Service = ErrorAnswers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorAnswers { inner }
    }
}

/// The service of [`ErrorAnswersLayer`].
#[derive(Debug, Clone)]
pub struct ErrorAnswers<S> {
    inner: S,
}

/// What an error answer becomes, decided from the request (only when the answer is an error).
#[derive(Debug, Clone)]
struct Asked {
    id: Option<HeaderValue>,
    /// The request's `Accept` (a reference-counted copy; read only for an error).
    accept: Option<HeaderValue>,
}

impl Asked {
    /// The request prefers HTML (a browser).
    fn page(&self) -> bool {
        let mut h = http::HeaderMap::new();
        if let Some(accept) = &self.accept {
            h.insert(header::ACCEPT, accept.clone());
        }
        x402_tower::layer::prefers_html(&h)
    }
}

impl<S, B> Service<Request<B>> for ErrorAnswers<S>
where
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ErrorAnswersFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let asked = Asked {
            id: request.headers().get("x-request-id").cloned(),
            accept: request.headers().get(header::ACCEPT).cloned(),
        };
        ErrorAnswersFuture {
            state: State::Inner {
                inner: self.inner.call(request),
                asked: Some(asked),
            },
        }
    }
}

pin_project! {
    /// The response future of [`ErrorAnswers`].
    pub struct ErrorAnswersFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Inner {
            #[pin]
            inner: F,
            asked: Option<Asked>,
        },
        // A JSON error being read and rewritten (rare: boxed).
        Rewrite {
            rewrite: Pin<Box<dyn Future<Output = Response> + Send>>,
        },
    }
}

impl<F, E> Future for ErrorAnswersFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let rewrite = match this.state.as_mut().project() {
                StateProj::Inner { inner, asked } => {
                    let response = ready!(inner.poll(cx))?;
                    match asked.take().and_then(|a| kind_of(&response, a)) {
                        Some((kind, asked, page)) => {
                            Box::pin(rewrite(response, kind, asked.id, page))
                        }
                        None => return Poll::Ready(Ok(response)),
                    }
                }
                StateProj::Rewrite { rewrite } => return rewrite.as_mut().poll(cx).map(Ok),
            };
            this.state.set(State::Rewrite { rewrite });
        }
    }
}

/// The kind of JSON error body an answer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    /// `application/problem+json`.
    Problem,
    /// Other JSON (the registry's DRF errors).
    Json,
}

/// Whether `response` is an error to rewrite (not a 402), and how; with whether the request prefers HTML.
fn kind_of(response: &Response, asked: Asked) -> Option<(ErrorKind, Asked, bool)> {
    let status = response.status();
    let error = (status.is_client_error() && status != StatusCode::PAYMENT_REQUIRED)
        || status.is_server_error();
    if !error {
        return None;
    }
    let content_type = response.headers().get(header::CONTENT_TYPE)?.as_bytes();
    let kind = if content_type.starts_with(super::error::PROBLEM_JSON.as_bytes()) {
        ErrorKind::Problem
    } else if content_type.starts_with(b"application/json") {
        ErrorKind::Json
    } else {
        return None;
    };
    let page = asked.page();
    (kind == ErrorKind::Problem && asked.id.is_some() || page).then_some((kind, asked, page))
}

/// `response` as its error page (a browser), or its problem document with `"request_id"` added.
async fn rewrite(
    response: Response,
    kind: ErrorKind,
    id: Option<HeaderValue>,
    page: bool,
) -> Response {
    let status = response.status();
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        return (status, "error body too large").into_response();
    };
    let id = id.as_ref().and_then(|v| v.to_str().ok());
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_slice(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    if page {
        let mut page = super::pages::error_page(status, &map, id);
        for name in [header::WWW_AUTHENTICATE, header::ALLOW, header::RETRY_AFTER] {
            if let Some(v) = parts.headers.get(&name) {
                page.headers_mut().insert(name, v.clone());
            }
        }
        return page;
    }
    if let (ErrorKind::Problem, Some(id)) = (kind, id) {
        map.insert(
            "request_id".into(),
            serde_json::Value::String(id.to_owned()),
        );
        parts.headers.remove(header::CONTENT_LENGTH);
        let body = serde_json::to_vec(&map).unwrap_or_else(|_| bytes.to_vec());
        return Response::from_parts(parts, Body::from(body));
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// Sends a plain OPTIONS request (no `Access-Control-Request-Method`) to `plain`, past the layers it wraps.
///
/// tower-http's `CorsLayer` answers *every* OPTIONS request as a CORS preflight without calling the
/// routes; the registry's OPTIONS (DRF metadata) must reach its handler. So a real preflight goes through
/// the wrapped stack (CORS answers it) and a plain OPTIONS straight to the routes (`plain`).
#[derive(Debug, Clone)]
pub struct PlainOptionsLayer<P> {
    plain: P,
}

impl<P> PlainOptionsLayer<P> {
    /// Plain OPTIONS requests go to `plain`.
    pub fn new(plain: P) -> Self {
        Self { plain }
    }
}

impl<S, P: Clone> Layer<S> for PlainOptionsLayer<P> {
    type Service = PlainOptions<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        PlainOptions {
            inner,
            plain: self.plain.clone(),
        }
    }
}

/// The service of [`PlainOptionsLayer`].
#[derive(Debug, Clone)]
pub struct PlainOptions<S, P> {
    inner: S,
    plain: P,
}

impl<S, P, B, ResB> Service<Request<B>> for PlainOptions<S, P>
where
    S: Service<Request<B>, Response = http::Response<ResB>>,
    P: Service<Request<B>, Response = Response, Error = S::Error> + Clone,
    http::Response<ResB>: IntoResponse,
{
    type Response = Response;
    type Error = S::Error;
    type Future = PlainOptionsFuture<S::Future, Oneshot<P, Request<B>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let plain = request.method() == http::Method::OPTIONS
            && !request
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        PlainOptionsFuture {
            branch: if plain {
                // Rare: the routes are cloned for this one request (the wrapped stack stays ready).
                Branch::Plain {
                    future: self.plain.clone().oneshot(request),
                }
            } else {
                Branch::Inner {
                    future: self.inner.call(request),
                }
            },
        }
    }
}

pin_project! {
    /// The response future of [`PlainOptions`].
    pub struct PlainOptionsFuture<F, G> {
        #[pin]
        branch: Branch<F, G>,
    }
}

pin_project! {
    #[project = BranchProj]
    enum Branch<F, G> {
        Inner { #[pin] future: F },
        Plain { #[pin] future: G },
    }
}

impl<F, G, ResB, E> Future for PlainOptionsFuture<F, G>
where
    F: Future<Output = Result<http::Response<ResB>, E>>,
    G: Future<Output = Result<Response, E>>,
    http::Response<ResB>: IntoResponse,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().branch.project() {
            BranchProj::Inner { future } => future.poll(cx).map_ok(IntoResponse::into_response),
            BranchProj::Plain { future } => future.poll(cx),
        }
    }
}
