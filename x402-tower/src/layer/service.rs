//! [`X402`]: the middleware service.

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::config::X402Layer;
use super::future::ResponseFuture;

/// Sells the inner service's responses for x402 payments. Made by [`X402Layer`].
#[derive(Clone, Debug)]
pub struct X402<S> {
    inner: S,
    layer: X402Layer,
}

impl<S> X402<S> {
    /// Wraps `inner` with the configuration of `layer`.
    pub fn new(inner: S, layer: X402Layer) -> Self {
        X402 { inner, layer }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for X402<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The future calls the inner service later (after pricing and verification): give it the service that
        // was polled ready, and keep a fresh clone here.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(self.layer.shared.clone(), inner, req)
    }
}
