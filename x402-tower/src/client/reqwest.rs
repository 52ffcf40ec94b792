//! The client flow for `reqwest-middleware` users (feature `reqwest-middleware`).
//!
//! ```no_run
//! use alloy_signer_local::PrivateKeySigner;
//! use x402_tower::Price;
//! use x402_tower::client::{Paid, PaymentPolicy, reqwest::X402Middleware};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let signer: PrivateKeySigner = std::env::var("PAYER_KEY")?.parse()?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(X402Middleware::new(signer, PaymentPolicy::new(Price::from_usdc_decimal("0.10")?)))
//!     .build();
//! let res = client.get("http://127.0.0.1:8080/x402Article?articleId=c2pa-explained").send().await?;
//! if let Some(paid) = res.extensions().get::<Paid>() {
//!     println!("paid {} on {}", paid.amount(), paid.network());
//! }
//! # Ok(()) }
//! ```
//!
//! A request whose body is a stream cannot be sent twice (`reqwest::Request::try_clone` is `None`): its 402
//! is returned as it came, unpaid. Errors of the payment flow are [`reqwest_middleware::Error::Middleware`]
//! wrapping a [`ClientError`] (downcast it to tell a policy refusal from the rest).

use http::{HeaderName, HeaderValue, StatusCode};
use reqwest_middleware::{Middleware, Next};

use super::sign::{MAX_REQUIREMENTS_BYTES, Requirements, RequirementsError};
use super::{Answer, ClientError, Exchange, Payer, PaymentPolicy, after_402};

/// Pays for requests answered 402, within a [`PaymentPolicy`].
#[derive(Debug, Clone)]
pub struct X402Middleware {
    payer: Payer,
}

impl X402Middleware {
    /// A middleware paying with `signer` within `policy`.
    pub fn new(
        signer: impl alloy_signer::Signer + Send + Sync + 'static,
        policy: PaymentPolicy,
    ) -> Self {
        X402Middleware {
            payer: Payer::new(signer, policy),
        }
    }

    /// A middleware over an existing [`Payer`].
    pub fn from_payer(payer: Payer) -> Self {
        X402Middleware { payer }
    }
}

/// A reqwest answer, for the shared flow.
struct Reply(reqwest::Response);

impl Answer for Reply {
    fn status(&self) -> StatusCode {
        self.0.status()
    }
    fn headers(&self) -> &http::HeaderMap {
        self.0.headers()
    }
    fn extensions_mut(&mut self) -> &mut http::Extensions {
        self.0.extensions_mut()
    }
}

/// The request kept to be sent again through the rest of the middleware chain.
struct Resend<'a> {
    base: reqwest::Request,
    next: Next<'a>,
    extensions: &'a mut http::Extensions,
}

impl Exchange for Resend<'_> {
    type Answer = Reply;
    type Error = reqwest_middleware::Error;

    fn send(
        &mut self,
        name: HeaderName,
        value: HeaderValue,
    ) -> crate::boxed::BoxFuture<'_, Result<Reply, ClientError<reqwest_middleware::Error>>> {
        Box::pin(async move {
            let mut again = self.base.try_clone().ok_or(ClientError::NotResendable)?;
            again.headers_mut().insert(name, value);
            self.next
                .clone()
                .run(again, self.extensions)
                .await
                .map(Reply)
                .map_err(ClientError::Service)
        })
    }

    fn read(
        &mut self,
        answer: Reply,
    ) -> crate::boxed::BoxFuture<'_, Result<Requirements, RequirementsError>> {
        Box::pin(read_requirements(answer.0))
    }
}

fn fail(e: ClientError<std::convert::Infallible>) -> reqwest_middleware::Error {
    reqwest_middleware::Error::Middleware(e.into())
}

async fn read_requirements(response: reqwest::Response) -> Result<Requirements, RequirementsError> {
    if let Some(header) = response.headers().get("payment-required") {
        return Requirements::from_header(header.as_bytes());
    }
    let mut response = response;
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| RequirementsError::Body(e.into()))?
    {
        if body.len() + chunk.len() > MAX_REQUIREMENTS_BYTES {
            return Err(RequirementsError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Requirements::from_body(&body)
}

#[async_trait::async_trait]
impl Middleware for X402Middleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let Some(base) = request.try_clone() else {
            return next.run(request, extensions).await;
        };
        let first = next.clone().run(request, extensions).await?;
        if first.status() != StatusCode::PAYMENT_REQUIRED {
            return Ok(first);
        }
        let requirements = read_requirements(first).await.map_err(|e| fail(e.into()))?;
        let mut exchange = Resend {
            base,
            next,
            extensions,
        };
        match after_402(&self.payer, requirements, &mut exchange).await {
            Ok(Reply(answer)) => Ok(answer),
            Err(ClientError::Service(e)) => Err(e),
            Err(ClientError::Refused(r)) => Err(fail(ClientError::Refused(r))),
            Err(ClientError::Requirements(r)) => Err(fail(ClientError::Requirements(r))),
            Err(ClientError::Signing(e)) => Err(fail(ClientError::Signing(e))),
            Err(ClientError::NotResendable) => Err(fail(ClientError::NotResendable)),
        }
    }
}
