//! The client flow as a Tower layer over any HTTP client service.

use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower_layer::Layer;
use tower_service::Service;

use super::sign::{MAX_REQUIREMENTS_BYTES, Requirements, RequirementsError};
use super::{AfterPaid, BoxError, ClientError, Paid, Payer, PaymentPolicy, SignedInAs};
use crate::BoxFuture;

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
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let payer = self.payer.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let again = move |payment: Option<(&HeaderName, &HeaderValue)>| {
                let mut r = Request::new(body.clone());
                *r.method_mut() = parts.method.clone();
                *r.uri_mut() = parts.uri.clone();
                *r.version_mut() = parts.version;
                *r.headers_mut() = parts.headers.clone();
                *r.extensions_mut() = parts.extensions.clone();
                if let Some((name, value)) = payment {
                    r.headers_mut().insert(name.clone(), value.clone());
                }
                r
            };
            let first = inner
                .call(again(None))
                .await
                .map_err(ClientError::Service)?;
            if first.status() != StatusCode::PAYMENT_REQUIRED {
                return Ok(first);
            }
            let mut requirements = read_requirements(first).await?;
            if let Some(proof) = payer.sign_in(&requirements).await {
                // Already bought? Read it again by signing in; a 402 means no: pay.
                let header = HeaderValue::from_str(&proof)
                    .map_err(|e| ClientError::Requirements(RequirementsError::Body(e.into())))?;
                let mut svc = inner.clone();
                let ready = std::future::poll_fn(|cx| svc.poll_ready(cx)).await;
                ready.map_err(ClientError::Service)?;
                let name = HeaderName::from_static(crate::siwx::HEADER);
                let mut answer = svc
                    .call(again(Some((&name, &header))))
                    .await
                    .map_err(ClientError::Service)?;
                if answer.status() != StatusCode::PAYMENT_REQUIRED {
                    answer.extensions_mut().insert(SignedInAs(payer.address()));
                    return Ok(answer);
                }
                requirements = read_requirements(answer).await?;
            }
            let (payment, offer) = payer.pay(&requirements).await?;
            let name = HeaderName::from_static(if payment.x402_version == 1 {
                "x-payment"
            } else {
                "payment-signature"
            });
            // Base64 is always a valid header value.
            let value = HeaderValue::from_str(&payment.header_value)
                .map_err(|e| ClientError::Requirements(RequirementsError::Body(e.into())))?;
            let mut resends = 0;
            loop {
                let mut svc = inner.clone();
                let ready = std::future::poll_fn(|cx| svc.poll_ready(cx)).await;
                ready.map_err(ClientError::Service)?;
                let mut answer = svc
                    .call(again(Some((&name, &value))))
                    .await
                    .map_err(ClientError::Service)?;
                match payer.after_paid(answer.status(), answer.headers(), resends) {
                    AfterPaid::Resend(wait) => {
                        tracing::info!(
                            resends,
                            ?wait,
                            "settlement pending: sending the same payment again"
                        );
                        resends += 1;
                        tokio::time::sleep(wait).await;
                    }
                    AfterPaid::Deliver(settlement) => {
                        answer.extensions_mut().insert(Paid {
                            payer: payment.authorization.from,
                            payment,
                            offer,
                            settlement,
                            resends,
                        });
                        return Ok(answer);
                    }
                }
            }
        })
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
