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
//! let res = client.get("https://example.com/paid").send().await?;
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
use super::{AfterPaid, ClientError, Paid, Payer, PaymentPolicy, SignedInAs};

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
        let mut requirements = read_requirements(first).await.map_err(|e| fail(e.into()))?;
        if let Some(proof) = self.payer.sign_in(&requirements).await {
            // Already bought? Read it again by signing in; a 402 means no: pay.
            let mut signed = base
                .try_clone()
                .ok_or_else(|| fail(ClientError::NotResendable))?;
            let value = HeaderValue::from_str(&proof)
                .map_err(|e| fail(RequirementsError::Body(e.into()).into()))?;
            signed
                .headers_mut()
                .insert(HeaderName::from_static(crate::siwx::HEADER), value);
            let mut answer = next.clone().run(signed, extensions).await?;
            if answer.status() != StatusCode::PAYMENT_REQUIRED {
                answer
                    .extensions_mut()
                    .insert(SignedInAs(self.payer.address()));
                return Ok(answer);
            }
            requirements = read_requirements(answer)
                .await
                .map_err(|e| fail(e.into()))?;
        }
        let (payment, offer) = self.payer.pay(&requirements).await.map_err(fail)?;
        let name = HeaderName::from_static(if payment.x402_version == 1 {
            "x-payment"
        } else {
            "payment-signature"
        });
        let value = HeaderValue::from_str(&payment.header_value)
            .map_err(|e| fail(RequirementsError::Body(e.into()).into()))?;
        let mut resends = 0;
        loop {
            let mut again = base
                .try_clone()
                .ok_or_else(|| fail(ClientError::NotResendable))?;
            again.headers_mut().insert(name.clone(), value.clone());
            let mut answer = next.clone().run(again, extensions).await?;
            match self
                .payer
                .after_paid(answer.status(), answer.headers(), resends)
            {
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
    }
}
