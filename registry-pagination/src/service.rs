//! [`Pagination`]: the service that reads the page from the request and wraps page responses.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use http::{Method, Request, Response};
use tower_service::Service;

use crate::{
    Page, ResponseBody,
    base_url::forwarded_origin,
    future::{PageContext, ResponseFuture},
    layer::Config,
};

/// Middleware that gives the handler the requested [`Page`] and wraps responses marked with a
/// [`PageCount`](crate::PageCount) in DRF's envelope. Built by [`PaginationLayer`](crate::PaginationLayer).
#[derive(Debug, Clone)]
pub struct Pagination<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> Pagination<S> {
    pub(crate) fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the middleware, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Pagination<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let config = &self.config;
        let page = Page::from_query(req.uri().query(), config.default_limit, config.max_limit);
        req.extensions_mut().insert(page);
        let origin = if config.trust_forwarded_headers {
            forwarded_origin(req.headers(), &config.base_url)
        } else {
            None
        };
        let context = PageContext {
            config: Arc::clone(config),
            origin,
            uri: crate::request_uri(&req),
            page,
            head: req.method() == Method::HEAD,
        };
        // The inner service was driven to readiness by `poll_ready` on `self.inner`: call it directly.
        ResponseFuture::new(self.inner.call(req), context)
    }
}
