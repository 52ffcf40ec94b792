//! The paying side (feature `client`): buy from any x402 server.
//!
//! A [`Payer`] holds a signer (any [`alloy_signer::Signer`]: a local key, a hardware or remote signer) and a
//! [`PaymentPolicy`] (networks and tokens allowed, a maximum per request, an optional shared [`Budget`]). On
//! a 402 it reads the requirements (`PAYMENT-REQUIRED`, x402 v2, or the v1 JSON body), picks the first offer
//! the policy accepts, reserves its price from the budget, signs an EIP-3009 authorization or a Permit2
//! permit (`exact` over Permit2, `upto`) exactly as the official clients do ([`sign`]) and the request is sent
//! again with the payment. The answer carries a [`Paid`] extension with what was paid and the decoded
//! settlement receipt (for `upto`, its `amount` is what was charged; the budget gets the rest back).
//!
//! **Permit2 needs one approval.** Before its first payment over Permit2 in a token, the buyer's address
//! approves Permit2 for that token, once, with a transaction of its own ([`permit2_approval`] is its
//! target and calldata). Without it a server that settles answers 412 `permit2_allowance_required`, and
//! nothing is charged. With the `onchain` feature, the buyer's key can send it through any JSON-RPC node:
//!
//! ```no_run
//! # #[cfg(feature = "onchain")]
//! # async fn approve() -> Result<(), Box<dyn std::error::Error>> {
//! use alloy_primitives::address;
//! use x402_tower::client::permit2_approval;
//! use x402_tower::settle::onchain::OnchainSettler;
//!
//! let usdc = address!("036CbD53842c5426634e7929541eC2318f3dCF7e"); // Base Sepolia
//! let (to, data) = permit2_approval(usdc);
//! let wallet = OnchainSettler::builder("https://sepolia.base.org", "0x<the buyer's key>").build()?;
//! let tx = wallet.send_transaction(to, data).await?;
//! println!("approved in {tx}");
//! # Ok(())
//! # }
//! ```
//!
//! Two adapters run that flow:
//!
//! - [`X402ClientLayer`]: a Tower layer for any HTTP client service (`Service<http::Request<B>>`, e.g.
//!   hyper-util's legacy client). The request body must be `Clone` (`Full<Bytes>`, `String`, `Empty`...),
//!   since a paid request is the same request sent again.
//! - `reqwest::X402Middleware` (feature `reqwest-middleware`): for `reqwest-middleware` clients. A request
//!   whose body is a stream cannot be sent twice: its 402 is returned as it came.
//!
//! Guarantees: nothing is signed unless the policy accepts the offer and the budget covers it (a refusal is
//! a typed [`ClientError`], not a response); one request pays at most once (a server that answers 402 again
//! after being paid gets no second payment: that 402 is returned, with [`Paid`] saying what was sent); a
//! payment whose settlement the server reports pending is sent again identical, never re-signed, a bounded
//! number of times; when the server declares `payment-identifier`, the payment carries a fresh id.
//!
//! ```
//! use std::convert::Infallible;
//! use alloy_signer_local::PrivateKeySigner;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{Layer, ServiceExt};
//! use x402_tower::Price;
//! use x402_tower::client::{PaymentPolicy, X402ClientLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let policy = PaymentPolicy::new(Price::from_usdc_decimal("0.10").unwrap());
//! let layer = X402ClientLayer::new(PrivateKeySigner::random(), policy);
//! // Any client service; here one that is not for sale.
//! let http = tower::service_fn(|_: Request<Full<Bytes>>| async {
//!     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"free"))))
//! });
//! let client = layer.layer(http);
//! let res = client.oneshot(Request::get("http://127.0.0.1/").body(Full::default()).unwrap()).await.unwrap();
//! assert!(res.extensions().get::<x402_tower::client::Paid>().is_none()); // nothing was paid
//! # }
//! ```

mod layer;
mod policy;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub mod reqwest;
pub mod sign;

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, U256};
use alloy_signer::Signer;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

pub use layer::{X402Client, X402ClientLayer};
pub use policy::{Budget, PaymentPolicy};
pub use sign::{Offer, Requirements, RequirementsError, SignOptions, SignedPayment};

/// The transaction a buyer sends once before paying over Permit2 in `token`: its target (the token) and
/// calldata (`approve(Permit2, 2^256 - 1)`, the allowance the official clients ask for).
pub fn permit2_approval(token: Address) -> (Address, alloy_primitives::Bytes) {
    use alloy_sol_types::SolCall as _;
    alloy_sol_types::sol! {
        function approve(address spender, uint256 amount) external returns (bool);
    }
    let call = approveCall {
        spender: crate::scheme::PERMIT2,
        amount: U256::MAX,
    };
    (token, call.abi_encode().into())
}

use crate::network::{Network, Token};
use crate::proto::SettleResponse;

/// A boxed error (a request or response body's).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a client did not pay. Nothing was signed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// No offer is on an allowed network in an allowed token with the domain this client knows.
    #[error("no acceptable offer among {offered} ({})", reasons.join("; "))]
    NoAcceptableOffer {
        /// How many offers the 402 made.
        offered: usize,
        /// Why each signable offer was refused.
        reasons: Vec<String>,
    },
    /// The cheapest acceptable offer costs more than the policy's maximum per request.
    #[error("the price {amount} exceeds the maximum per request {max} (atomic units)")]
    OverMaximum {
        /// Its price, in atomic units.
        amount: U256,
        /// The maximum.
        max: U256,
    },
    /// The budget does not cover the price.
    #[error("the price {amount} exceeds the budget left {remaining} (atomic units)")]
    BudgetExhausted {
        /// The price.
        amount: U256,
        /// What the budget has left.
        remaining: U256,
    },
}

/// Why a paying request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError<E> {
    /// The inner HTTP service failed.
    #[error(transparent)]
    Service(E),
    /// The 402's payment requirements could not be read.
    #[error("unreadable payment requirements: {0}")]
    Requirements(#[from] RequirementsError),
    /// The policy refused every offer, or the budget is spent.
    #[error("payment refused by the client's policy: {0}")]
    Refused(#[from] Refusal),
    /// The signer failed.
    #[error("signing the payment failed: {0}")]
    Signing(#[source] alloy_signer::Error),
    /// The request cannot be sent again with the payment (its body is a stream).
    #[error("the request cannot be sent again with a payment: its body is a stream")]
    NotResendable,
}

/// In the answer's extensions when the request was let through by signing in (sign-in-with-x) instead of
/// paying: the address that signed in. Nothing was paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedInAs(pub Address);

/// What a paid request paid: in the answer's extensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Paid {
    /// The payment sent (its header value is in [`SignedPayment::header_value`]).
    pub payment: SignedPayment,
    /// The offer paid.
    pub offer: Offer,
    /// The payer (`authorization.from`).
    pub payer: Address,
    /// The settlement receipt (`PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`), when the server sent one.
    pub settlement: Option<SettleResponse>,
    /// How many times the identical payment was sent again because its settlement was pending.
    pub resends: u32,
    /// The resource paid for (`resource.url` of the 402), when the server said.
    pub resource_url: Option<String>,
    /// Who signed the offer paid for (offer-receipt), when the 402 carried a signed offer matching it.
    pub offer_signer: Option<Address>,
}

/// Why [`Paid::verify_receipt`] does not accept the receipt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The settlement carried no signed receipt.
    #[error("the server sent no signed receipt")]
    Missing,
    /// No key to check against: none given and the 402 had no signed offer for what was paid.
    #[error("no key to check the receipt against (the offer was not signed)")]
    NoKey,
    /// The receipt does not check out.
    #[error(transparent)]
    Proof(#[from] crate::extensions::offer_receipt::ProofError),
}

impl Paid {
    /// The signed receipt (offer-receipt) in the settlement, if the server sent one.
    pub fn signed_receipt(&self) -> Option<crate::extensions::offer_receipt::SignedReceipt> {
        crate::extensions::offer_receipt::SignedReceipt::from_settlement(self.settlement.as_ref()?)
    }

    /// Checks the signed receipt: signed by `key` (the server's published key) or, without one, by the key
    /// that signed the offer paid for; for the resource paid for; naming this payer. Keep what it returns:
    /// it proves the purchase to anyone who trusts that key.
    pub fn verify_receipt(
        &self,
        key: Option<Address>,
    ) -> Result<crate::extensions::offer_receipt::SignedReceipt, ReceiptError> {
        let receipt = self.signed_receipt().ok_or(ReceiptError::Missing)?;
        let signer = key.or(self.offer_signer).ok_or(ReceiptError::NoKey)?;
        receipt.verify(&crate::extensions::offer_receipt::ReceiptCheck {
            signer,
            resource_url: self.resource_url.as_deref(),
            payer: Some(self.payer),
        })?;
        Ok(receipt)
    }

    /// The network paid on.
    pub fn network(&self) -> &Network {
        &self.offer.network
    }

    /// The amount paid, in atomic units.
    pub fn amount(&self) -> U256 {
        self.offer.amount
    }
}

/// The settlement receipt a response carries (`PAYMENT-RESPONSE`, else `X-PAYMENT-RESPONSE`), decoded.
pub fn settlement(headers: &HeaderMap) -> Option<SettleResponse> {
    let value = headers
        .get("payment-response")
        .or_else(|| headers.get("x-payment-response"))?;
    if value.len() > sign::MAX_REQUIREMENTS_BYTES {
        return None;
    }
    let bytes = B64.decode(value.as_bytes().trim_ascii()).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What to do with the answer to a paid request.
#[derive(Debug)]
pub(crate) enum AfterPaid {
    /// Hand it to the caller.
    Deliver(Option<SettleResponse>),
    /// The settlement is pending: send the identical payment again after this wait.
    Resend(Duration),
}

/// What the flow reads and marks on an HTTP answer, whatever the client library.
pub(crate) trait Answer {
    fn status(&self) -> StatusCode;
    fn headers(&self) -> &HeaderMap;
    fn extensions_mut(&mut self) -> &mut http::Extensions;
}

impl<B> Answer for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
    fn extensions_mut(&mut self) -> &mut http::Extensions {
        self.extensions_mut()
    }
}

fn header_value<E>(value: &str) -> Result<HeaderValue, ClientError<E>> {
    // Base64 is always a valid header value.
    HeaderValue::from_str(value)
        .map_err(|e| ClientError::Requirements(RequirementsError::Body(e.into())))
}

/// `resource.url` of a 402.
fn resource_url(requirements: &Requirements) -> Option<String> {
    requirements
        .resource
        .as_ref()?
        .get("url")?
        .as_str()
        .map(str::to_owned)
}

/// Who signed the 402's offer for exactly what was paid (resource, network, token, recipient, amount).
fn offer_signer(requirements: &Requirements, paid: &Offer) -> Option<Address> {
    let url = resource_url(requirements);
    crate::extensions::offer_receipt::offers_of(requirements.extensions.as_ref()?)
        .into_iter()
        .find(|o| {
            let p = &o.payload;
            url.as_deref().is_none_or(|u| u == p.resource_url)
                && p.network == paid.network.caip2()
                && p.asset.parse::<Address>().ok() == Some(paid.asset)
                && p.pay_to.parse::<Address>().ok() == Some(paid.pay_to)
                && p.amount == paid.amount.to_string()
        })
        .and_then(|o| o.signer().ok())
}

/// How an adapter sends its request again and reads a 402, for [`after_402`].
pub(crate) trait Exchange: Send {
    /// The client's answer.
    type Answer: Answer + Send;
    /// The client's error.
    type Error: Send;
    /// Sends the request again with one more header.
    fn send(
        &mut self,
        name: HeaderName,
        value: HeaderValue,
    ) -> crate::boxed::BoxFuture<'_, Result<Self::Answer, ClientError<Self::Error>>>;
    /// Reads the requirements of a 402.
    fn read(
        &mut self,
        answer: Self::Answer,
    ) -> crate::boxed::BoxFuture<'_, Result<Requirements, RequirementsError>>;
}

/// The flow after a first 402, for any client: sign in when offered (an answer other than 402 is
/// delivered, marked [`SignedInAs`]), else pay (with the requirements of the sign-in's 402), resending the
/// identical payment while its settlement is pending; the answer is marked [`Paid`].
pub(crate) async fn after_402<X: Exchange>(
    payer: &Payer,
    mut requirements: Requirements,
    exchange: &mut X,
) -> Result<X::Answer, ClientError<X::Error>> {
    if let Some(proof) = payer.sign_in(&requirements).await {
        // Already bought? Read it again by signing in; a 402 means no: pay.
        let name = HeaderName::from_static(crate::extensions::siwx::HEADER);
        let mut answer = exchange.send(name, header_value(&proof)?).await?;
        if answer.status() != StatusCode::PAYMENT_REQUIRED {
            answer.extensions_mut().insert(SignedInAs(payer.address()));
            return Ok(answer);
        }
        requirements = exchange.read(answer).await?;
    }
    let (payment, offer) = payer.pay(&requirements).await?;
    let name = HeaderName::from_static(if payment.x402_version == 1 {
        "x-payment"
    } else {
        "payment-signature"
    });
    let value = header_value(&payment.header_value)?;
    let mut resends = 0;
    loop {
        let mut answer = exchange.send(name.clone(), value.clone()).await?;
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
                payer.charged(&offer, settlement.as_ref());
                answer.extensions_mut().insert(Paid {
                    payer: payment.authorization.from,
                    offer_signer: offer_signer(&requirements, &offer),
                    resource_url: resource_url(&requirements),
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

/// The signer and the policy: reads requirements, chooses, reserves, signs. Cheap to clone (shared).
#[derive(Clone)]
pub struct Payer {
    signer: Arc<dyn Signer + Send + Sync>,
    policy: Arc<PaymentPolicy>,
}

impl std::fmt::Debug for Payer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payer")
            .field("address", &self.signer.address())
            .field("policy", &self.policy)
            .finish()
    }
}

impl Payer {
    /// A payer signing with `signer` within `policy`.
    pub fn new(signer: impl Signer + Send + Sync + 'static, policy: PaymentPolicy) -> Self {
        Payer {
            signer: Arc::new(signer),
            policy: Arc::new(policy),
        }
    }

    /// The paying address.
    pub fn address(&self) -> Address {
        self.signer.address()
    }

    /// The first offer the policy accepts, with the token it pays in.
    pub fn choose<'r>(
        &self,
        requirements: &'r Requirements,
    ) -> Result<(&'r Offer, Token), Refusal> {
        let mut reasons = Vec::new();
        let mut cheapest_over: Option<U256> = None;
        for offer in &requirements.offers {
            let Some(token) = self.policy.token(offer.network.chain_id(), offer.asset) else {
                reasons.push(format!(
                    "{} on {} is not an allowed token",
                    offer.asset,
                    offer.network.caip2()
                ));
                continue;
            };
            let name_ok = offer.domain_name.as_deref().is_none_or(|n| n == token.name);
            let version_ok = offer
                .domain_version
                .as_deref()
                .is_none_or(|v| v == token.version);
            if !(name_ok && version_ok) {
                reasons.push(format!(
                    "{} on {}: the offer's EIP-712 domain is not the token's ({:?} {:?})",
                    offer.asset,
                    offer.network.caip2(),
                    token.name,
                    token.version
                ));
                continue;
            }
            if offer.amount > self.policy.max_per_request {
                cheapest_over = Some(cheapest_over.map_or(offer.amount, |c| c.min(offer.amount)));
                continue;
            }
            return Ok((offer, token.clone()));
        }
        Err(match cheapest_over {
            Some(amount) => Refusal::OverMaximum {
                amount,
                max: self.policy.max_per_request,
            },
            None => Refusal::NoAcceptableOffer {
                offered: requirements.offered,
                reasons,
            },
        })
    }

    /// Chooses an offer, reserves its price from the budget and signs the payment.
    pub async fn pay<E>(
        &self,
        requirements: &Requirements,
    ) -> Result<(SignedPayment, Offer), ClientError<E>> {
        let (offer, token) = self.choose(requirements)?;
        if let Some(budget) = &self.policy.budget {
            budget
                .take(offer.amount)
                .map_err(|remaining| Refusal::BudgetExhausted {
                    amount: offer.amount,
                    remaining,
                })?;
        }
        let signed = sign::sign(
            &*self.signer,
            requirements,
            offer,
            &token,
            &SignOptions::default(),
        )
        .await;
        match signed {
            Ok(payment) => Ok((payment, offer.clone())),
            Err(e) => {
                // Nothing was signed: the reservation goes back.
                if let Some(budget) = &self.policy.budget {
                    budget.give_back(offer.amount);
                }
                Err(ClientError::Signing(e))
            }
        }
    }

    /// After an `upto` payment was answered: the budget took the maximum, the receipt says what was charged
    /// (`amount`); the rest goes back. Nothing is given back without a successful receipt saying less.
    pub(crate) fn charged(&self, offer: &Offer, settlement: Option<&SettleResponse>) {
        let (Some(budget), Some(receipt)) = (&self.policy.budget, settlement) else {
            return;
        };
        let charged = receipt
            .amount
            .as_deref()
            .and_then(crate::proto::wire::parse_decimal);
        if let (true, Some(charged)) = (receipt.success, charged)
            && charged < offer.amount
        {
            budget.give_back(offer.amount - charged);
        }
    }

    /// The `SIGN-IN-WITH-X` header value for a 402 that declares the extension on a chain the policy allows
    /// (when the policy signs in: the default), so that a resource this address already paid for is read
    /// again without paying. `None` when not offered or not wanted.
    pub async fn sign_in(&self, requirements: &Requirements) -> Option<String> {
        if !self.policy.sign_in {
            return None;
        }
        let declared = requirements
            .extensions
            .as_ref()?
            .get(crate::extensions::siwx::KEY)?;
        let info = declared.get("info")?.as_object()?;
        let chain = declared
            .get("supportedChains")?
            .as_array()?
            .iter()
            .filter(|c| c.get("type").and_then(serde_json::Value::as_str) == Some("eip191"))
            .filter_map(|c| c.get("chainId")?.as_str())
            .find(|id| {
                id.parse::<Network>().is_ok_and(|n| {
                    self.policy
                        .networks
                        .as_ref()
                        .is_none_or(|allowed| allowed.contains(&n.chain_id()))
                })
            })?;
        let text = |k: &str| {
            info.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let mut proof = crate::extensions::siwx::Proof {
            domain: text("domain")?,
            address: self.signer.address().to_checksum(None),
            uri: text("uri")?,
            version: text("version")?,
            chain_id: chain.to_owned(),
            kind: "eip191".to_owned(),
            nonce: text("nonce")?,
            issued_at: text("issuedAt")?,
            expiration_time: text("expirationTime"),
            not_before: text("notBefore"),
            request_id: text("requestId"),
            statement: text("statement"),
            resources: info.get("resources").and_then(|r| {
                r.as_array()?
                    .iter()
                    .map(|x| x.as_str().map(str::to_owned))
                    .collect()
            }),
            signature: String::new(),
            signature_scheme: None,
        };
        let message = crate::extensions::siwx::message(&proof)?;
        let signature = self.signer.sign_message(message.as_bytes()).await.ok()?;
        proof.signature = format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes()));
        Some(B64.encode(serde_json::to_vec(&proof).ok()?))
    }

    /// What to do with the answer to the paid request after `resends` resends.
    pub(crate) fn after_paid(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        resends: u32,
    ) -> AfterPaid {
        let receipt = settlement(headers);
        let pending = status == StatusCode::PAYMENT_REQUIRED
            && receipt
                .as_ref()
                .is_some_and(|r| r.error_reason.as_deref() == Some("settlement_pending"));
        if pending && resends < self.policy.pending_resends {
            let wait = self
                .policy
                .pending_delay
                .saturating_mul(1u32 << resends.min(10));
            return AfterPaid::Resend(wait.min(Duration::from_secs(30)));
        }
        AfterPaid::Deliver(receipt)
    }
}
