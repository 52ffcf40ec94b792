//! The client flow as a Tower layer over any HTTP client service.

use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower_layer::Layer;
use tower_service::Service;

use super::sign::{MAX_REQUIREMENTS_BYTES, Requirements, RequirementsError};
use super::{BoxError, ClientError, Exchange, Payer, PaymentPolicy, after_402};
use crate::boxed::BoxFuture;

/// Pays for requests answered 402, within a [`PaymentPolicy`]. See the [module docs](super).
#[derive(Debug, Clone)]
pub struct X402ClientLayer {
    payer: Payer,
}

impl X402ClientLayer {
    /// A layer paying with `signer` within `policy`.
    pub fn new(
        signer: impl alloy_signer::Signer + Send + Sync + 'static,
        policy: PaymentPolicy,
    ) -> Self {
        X402ClientLayer {
            payer: Payer::new(signer, policy),
        }
    }

    /// A layer over an existing [`Payer`] (clients sharing one signer and budget).
    pub fn from_payer(payer: Payer) -> Self {
        X402ClientLayer { payer }
    }
}

impl<S> Layer<S> for X402ClientLayer {
    type Service = X402Client<S>;

    fn layer(&self, inner: S) -> X402Client<S> {
        X402Client {
            inner,
            payer: self.payer.clone(),
        }
    }
}

/// The service of [`X402ClientLayer`].
///
/// Its future is boxed: one request may take several sends (the first, the paid one, resends while the
/// settlement is pending), an asynchronous signer and a body read; the allocation is nothing next to a
/// signature and a round trip. Its error is [`ClientError`], which wraps the inner service's: a refusal by
/// the policy must reach the caller as an error, since no response was paid for.
#[derive(Debug, Clone)]
pub struct X402Client<S> {
    inner: S,
    payer: Payer,
}

impl<S> X402Client<S> {
    /// The payer (its address, its policy).
    pub fn payer(&self) -> &Payer {
        &self.payer
    }
}

impl<S, B, RB> Service<Request<B>> for X402Client<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Clone + Send + 'static,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Response = Response<RB>;
    type Error = ClientError<S::Error>;
    type Future = BoxFuture<'static, Result<Response<RB>, ClientError<S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ClientError::Service)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The ready service takes the first send; a clone makes the others.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let payer = self.payer.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let mut exchange = Resend { inner, parts, body };
            let first = exchange
                .inner
                .call(exchange.request(None))
                .await
                .map_err(ClientError::Service)?;
            if first.status() != StatusCode::PAYMENT_REQUIRED {
                return Ok(first);
            }
            let requirements = read_requirements(first).await?;
            after_402(&payer, requirements, &mut exchange).await
        })
    }
}

/// The request kept to be sent again, and the service that sends it.
struct Resend<S, B> {
    inner: S,
    parts: http::request::Parts,
    body: B,
}

impl<S, B> Resend<S, B>
where
    B: Clone,
{
    /// The original request, with one more header.
    fn request(&self, extra: Option<(HeaderName, HeaderValue)>) -> Request<B> {
        let mut r = Request::new(self.body.clone());
        *r.method_mut() = self.parts.method.clone();
        *r.uri_mut() = self.parts.uri.clone();
        *r.version_mut() = self.parts.version;
        *r.headers_mut() = self.parts.headers.clone();
        *r.extensions_mut() = self.parts.extensions.clone();
        if let Some((name, value)) = extra {
            r.headers_mut().insert(name, value);
        }
        r
    }
}

impl<S, B, RB> Exchange for Resend<S, B>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Clone + Send + 'static,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Answer = Response<RB>;
    type Error = S::Error;

    fn send(
        &mut self,
        name: HeaderName,
        value: HeaderValue,
    ) -> BoxFuture<'_, Result<Response<RB>, ClientError<S::Error>>> {
        let request = self.request(Some((name, value)));
        let mut svc = self.inner.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| svc.poll_ready(cx))
                .await
                .map_err(ClientError::Service)?;
            svc.call(request).await.map_err(ClientError::Service)
        })
    }

    fn read(
        &mut self,
        answer: Response<RB>,
    ) -> BoxFuture<'_, Result<Requirements, RequirementsError>> {
        Box::pin(read_requirements(answer))
    }
}

/// The requirements of a 402: its `PAYMENT-REQUIRED` header, else its JSON body (read up to
/// [`MAX_REQUIREMENTS_BYTES`]).
async fn read_requirements<RB>(response: Response<RB>) -> Result<Requirements, RequirementsError>
where
    RB: Body,
    RB::Error: Into<BoxError>,
{
    if let Some(header) = response.headers().get("payment-required") {
        return Requirements::from_header(header.as_bytes());
    }
    let body = Limited::new(response.into_body(), MAX_REQUIREMENTS_BYTES)
        .collect()
        .await
        .map_err(|e| match e.downcast::<http_body_util::LengthLimitError>() {
            Ok(_) => RequirementsError::TooLarge,
            Err(e) => RequirementsError::Body(e),
        })?
        .to_bytes();
    Requirements::from_body(&body)
}
