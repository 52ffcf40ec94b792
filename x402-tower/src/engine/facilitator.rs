//! The facilitator door into the [`PaymentEngine`]: `/verify` and `/settle` of the official facilitator API
//! (`{x402Version, paymentPayload, paymentRequirements}`, exact scheme on EVM, v1 or v2), decided by the same
//! engine, store and settler as the paid routes of the same process.
//!
//! A facilitator has no offers of its own: the payment is checked against an offer built from the
//! requirements the caller sends, with two limits of the facilitator's own ([`FacilitatorPolicy`]): the
//! `validBefore` horizon (never the caller's `maxTimeoutSeconds`) and an optional `payTo` allow-list.
//!
//! Payments settled here are remembered under the resource label `facilitator:<resource url>`, so the same
//! authorization presented at one of the engine's paid routes is refused as used, and the identical payment
//! sent to `/settle` again is answered with the stored settlement (idempotent, never settled twice).
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use x402_tower::engine::PaymentEngine;
//! use x402_tower::engine::facilitator::FacilitatorPolicy;
//! use x402_tower::settle::VerifyOnlySettler;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let engine = PaymentEngine::builder().settler(Arc::new(VerifyOnlySettler)).build().unwrap();
//! let body = json!({"x402Version": 2, "paymentPayload": {}}).to_string();
//! let answer = engine
//!     .facilitator_verify(&FacilitatorPolicy::default(), body.as_bytes())
//!     .await
//!     .unwrap();
//! assert!(!answer.is_valid);
//! # }
//! ```

use std::ops::Range;
use std::sync::Arc;

use alloy_primitives::{Address, B256, Bytes, U256};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Admitted, Answer, PaymentEngine, replay_key};
use crate::network::{Network, Token, USDC_DECIMALS};
use crate::offer::PaymentOffer;
use crate::price::Price;
use crate::proto::{
    PaymentPayload, PaymentRequirements, PaymentRequirementsV1, PaymentRequirementsV2,
    SCHEME_EXACT, SettleResponse, VerifyResponse,
};
use crate::settle::{SettleRequest, VerifyOutcome};
use crate::store::{PaymentState, StoredPayment};
use crate::verify::{RejectReason, checked_authorization, parse_signature_hex, payload_at};

/// Default of [`FacilitatorPolicy::max_timeout_seconds`].
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 600;

/// The facilitator's own limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FacilitatorPolicy {
    /// A payment's `validBefore` may lie at most this far (plus 120 s of clock skew) ahead of now, whatever
    /// `maxTimeoutSeconds` the caller sends: the store keeps every settled authorization until its
    /// `validBefore`.
    pub max_timeout_seconds: u64,
    /// When set, only payments to these addresses are verified or settled.
    pub pay_to: Option<Vec<Address>>,
}

impl Default for FacilitatorPolicy {
    fn default() -> Self {
        FacilitatorPolicy {
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            pay_to: None,
        }
    }
}

/// A facilitator request the engine refused to judge: the door answers 400, 502 or 503.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FacilitatorError {
    /// The body is not a facilitator request (not a JSON object).
    #[error("not a facilitator request: {0}")]
    BadRequest(&'static str),
    /// The settler could not be reached (502).
    #[error("settler unavailable: {0}")]
    Upstream(&'static str),
    /// The payment store failed (503).
    #[error("payment store unavailable")]
    Unavailable,
}

/// A payment refused: the spec's error string, a detail, and the payer when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The spec's error string.
    pub reason: String,
    /// What exactly is wrong.
    pub message: String,
    /// The payer, when the payload could be read.
    pub payer: Option<Address>,
}

impl Invalid {
    fn new(reason: impl Into<String>, message: impl Into<String>, payer: Option<Address>) -> Self {
        Invalid {
            reason: reason.into(),
            message: message.into(),
            payer,
        }
    }
}

/// The fields of v1 and v2 requirements that make an offer.
struct Terms<'a> {
    scheme: &'a str,
    asset: Address,
    pay_to: Address,
    amount: U256,
    max_timeout_seconds: u64,
    extra: Option<&'a Value>,
}

impl Terms<'_> {
    /// The offer these terms describe on `network`; the token's EIP-712 name and version come from `extra`.
    fn offer(&self, network: Network) -> Result<PaymentOffer, (&'static str, &'static str)> {
        if self.scheme != SCHEME_EXACT {
            return Err((RejectReason::InvalidScheme.as_str(), "scheme is not exact"));
        }
        let field = |k: &str| self.extra.and_then(|e| e.get(k)).and_then(Value::as_str);
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            return Err((
                "invalid_payment_requirements",
                "extra.name and extra.version are required",
            ));
        };
        let token = Token::new(self.asset, name, version, USDC_DECIMALS);
        Ok(
            PaymentOffer::new(network, token, self.pay_to, Price::from(self.amount))
                .max_timeout_seconds(self.max_timeout_seconds),
        )
    }
}

/// A settle request from a payload and the requirements it claims to pay, both as JSON text: the payload's
/// version decides the requirements' version; they must agree (v1: scheme and network; v2: `accepted` equals
/// the requirements). Nothing about time or signature validity is checked here.
pub fn settle_request(
    payload_text: Arc<str>,
    requirements_json: &str,
) -> Result<SettleRequest, Invalid> {
    settle_request_at(payload_text, requirements_json).map(|(request, _)| request)
}

/// [`settle_request`], and where the value of the payload's `extensions` member is in its text
/// ([`payload_at`]).
fn settle_request_at(
    payload_text: Arc<str>,
    requirements_json: &str,
) -> Result<(SettleRequest, Option<Range<usize>>), Invalid> {
    let (payload, extensions_at) =
        payload_at(&payload_text).map_err(|r| Invalid::new(r.reason.as_str(), r.detail, None))?;
    let payer = Some(payload.exact().authorization.from);
    let invalid = |r: RejectReason, m: &str| Invalid::new(r.as_str(), m, payer);
    let bad_requirements = |e: serde_json::Error| {
        Invalid::new(
            "invalid_payment_requirements",
            format!("paymentRequirements: {e}"),
            payer,
        )
    };
    let (requirements, offer) = match &payload {
        PaymentPayload::V1(p) => {
            let r: PaymentRequirementsV1 =
                serde_json::from_str(requirements_json).map_err(bad_requirements)?;
            if p.network != r.network || p.scheme != r.scheme {
                return Err(invalid(
                    RejectReason::NoMatchingRequirements,
                    "payload and requirements differ",
                ));
            }
            let network = Network::from_v1_name(&r.network)
                .ok_or_else(|| invalid(RejectReason::InvalidNetwork, "unknown v1 network"))?;
            let terms = Terms {
                scheme: &r.scheme,
                asset: r.asset,
                pay_to: r.pay_to,
                amount: r.max_amount_required,
                max_timeout_seconds: r.max_timeout_seconds,
                extra: r.extra.as_ref(),
            };
            let offer = terms
                .offer(network)
                .map_err(|(reason, m)| Invalid::new(reason, m, payer))?;
            (PaymentRequirements::V1(r), offer)
        }
        PaymentPayload::V2(p) => {
            let r: PaymentRequirementsV2 =
                serde_json::from_str(requirements_json).map_err(bad_requirements)?;
            if p.accepted != r {
                return Err(invalid(
                    RejectReason::NoMatchingRequirements,
                    "accepted differs from the requirements",
                ));
            }
            let network: Network = r
                .network
                .parse()
                .map_err(|_| invalid(RejectReason::InvalidNetwork, "unknown CAIP-2 network"))?;
            let terms = Terms {
                scheme: &r.scheme,
                asset: r.asset,
                pay_to: r.pay_to,
                amount: r.amount,
                max_timeout_seconds: r.max_timeout_seconds,
                extra: r.extra.as_ref(),
            };
            let offer = terms
                .offer(network)
                .map_err(|(reason, m)| Invalid::new(reason, m, payer))?;
            (PaymentRequirements::V2(r), offer)
        }
    };
    let signature = parse_signature_hex(&payload.exact().signature)
        .ok_or_else(|| invalid(RejectReason::Signature, "signature is not 0x-prefixed hex"))?;
    let request = SettleRequest {
        payload,
        payload_text,
        requirements,
        offer,
        signature: Bytes::from(signature),
    };
    Ok((request, extensions_at))
}

/// The settle request of a stored payment (for reconciliation).
pub(crate) fn stored_request(stored: &StoredPayment) -> Result<SettleRequest, Invalid> {
    settle_request(stored.payload.clone(), &stored.requirements)
}

/// The members of a facilitator request body the door reads, kept as text until they are read.
#[derive(Deserialize)]
struct DoorBody<'a> {
    #[serde(rename = "paymentPayload", borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(rename = "paymentRequirements", borrow, default)]
    requirements: Option<&'a RawValue>,
}

impl<'a> DoorBody<'a> {
    fn parse(body: &'a [u8]) -> Result<Self, FacilitatorError> {
        if body.trim_ascii_start().first() != Some(&b'{') {
            return Err(FacilitatorError::BadRequest(
                "the body is not a JSON object",
            ));
        }
        serde_json::from_slice(body)
            .map_err(|_| FacilitatorError::BadRequest("the body is not a JSON object"))
    }

    /// `paymentRequirements.network`, for the answer of a refused settlement.
    fn network(&self) -> String {
        #[derive(Deserialize)]
        struct Network {
            #[serde(default)]
            network: Option<String>,
        }
        self.requirements
            .and_then(|r| serde_json::from_str::<Network>(r.get()).ok())
            .and_then(|n| n.network)
            .unwrap_or_default()
    }
}

/// A checked facilitator request.
struct Checked {
    request: SettleRequest,
    stored: Arc<StoredPayment>,
    fingerprint: B256,
    resource: String,
    /// Past its `validBefore` (checked as of its last valid second): answered from its record only.
    expired: bool,
}

impl PaymentEngine {
    fn facilitator_check(
        &self,
        policy: &FacilitatorPolicy,
        body: &DoorBody<'_>,
    ) -> Result<Checked, Invalid> {
        let payload: Arc<str> = body.payload.map_or("null", RawValue::get).into();
        let requirements = body.requirements.map_or("null", RawValue::get);
        settle_request_at(payload, requirements).and_then(|(mut request, extensions_at)| {
            let payer = Some(request.payer());
            if let Some(allowed) = &policy.pay_to
                && !allowed.contains(&request.offer.pay_to)
            {
                return Err(Invalid::new(
                    "invalid_payment_requirements",
                    "this facilitator does not settle payments to that payTo",
                    payer,
                ));
            }
            // The facilitator's horizon, not the caller's maxTimeoutSeconds.
            request.offer.max_timeout_seconds = policy.max_timeout_seconds;
            // USDC of a known network is remembered; any other token the caller names is not.
            let known = request.offer.token.is_usdc_on(&request.offer.network);
            let separator = self.separator(
                request.offer.network.chain_id(),
                &request.offer.token,
                known,
            );
            let check =
                |at| checked_authorization(&request.payload, &request.offer, &separator, at);
            let now = self.now();
            // Past its validBefore, checked as of its last valid second: only its record may answer it.
            let (fingerprint, expired) = match check(now) {
                Ok((_, fingerprint)) => (fingerprint, false),
                Err(r) => {
                    let valid_before = request.payload.exact().authorization.valid_before;
                    match crate::verify::as_of_last_valid_second(r, valid_before, now, check) {
                        Ok((_, fingerprint)) => (fingerprint, true),
                        Err(r) => return Err(Invalid::new(r.reason.as_str(), r.detail, payer)),
                    }
                }
            };
            let url = match (&request.payload, &request.requirements) {
                (PaymentPayload::V2(p), _) => p.resource.as_ref().map(|r| r.url.clone()),
                (_, PaymentRequirements::V1(r)) => Some(r.resource.clone()),
                _ => None,
            };
            // Only a payment that passed every check is remembered, both parts as the caller sent them
            // (less the extensions echoed from the 402: `StoredPayment::new`).
            let stored = Arc::new(StoredPayment::kept(
                &request.payload_text,
                extensions_at,
                requirements.into(),
                &crate::extensions::ECHOED_EXTENSIONS,
            ));
            Ok(Checked {
                request,
                stored,
                fingerprint,
                expired,
                resource: format!("facilitator:{}", url.unwrap_or_default()),
            })
        })
    }

    /// `POST /verify`: whether the payment would settle. An authorization this engine already settled (or
    /// holds) for another request is invalid (`invalid_exact_evm_nonce_already_used`); the identical payment
    /// it settled through this door stays valid, so a client's retry reaches `/settle`, which answers it
    /// again.
    pub async fn facilitator_verify(
        &self,
        policy: &FacilitatorPolicy,
        body: &[u8],
    ) -> Result<VerifyResponse, FacilitatorError> {
        let body = DoorBody::parse(body)?;
        let checked = match self.facilitator_check(policy, &body) {
            Ok(c) => c,
            Err(invalid) => return Ok(verify_response(Some(invalid), None)),
        };
        let payer = Some(checked.request.payer());
        let key = replay_key(&checked.request);
        match self.store.get(&key, self.now()).await {
            Err(e) => {
                self.store_failed(&e);
                return Err(FacilitatorError::Unavailable);
            }
            Ok(Some(record)) => {
                let ours = record.is_same_payment(&checked.fingerprint, &checked.resource)
                    && record.state != PaymentState::Spent;
                let invalid = (!ours).then(|| {
                    Invalid::new(
                        RejectReason::NonceAlreadyUsed.as_str(),
                        "this authorization was already presented for settlement",
                        payer,
                    )
                });
                return Ok(verify_response(invalid, payer));
            }
            Ok(None) if checked.expired => {
                let invalid = Invalid::new(
                    RejectReason::ValidBefore.as_str(),
                    "validBefore has passed, and this facilitator holds no record of the payment",
                    payer,
                );
                return Ok(verify_response(Some(invalid), payer));
            }
            Ok(None) => {}
        }
        match self.settler.verify(&checked.request).await {
            Ok(VerifyOutcome::Valid) => Ok(verify_response(None, payer)),
            Ok(VerifyOutcome::Invalid { reason, message }) => Ok(verify_response(
                Some(Invalid::new(reason, message.unwrap_or_default(), payer)),
                payer,
            )),
            Err(e) => {
                // Not known now (the settler unreachable, or the chain cannot say yet): retryable.
                tracing::warn!(error = %e, "settler verify failed");
                Err(FacilitatorError::Upstream(super::VERIFY_UNAVAILABLE))
            }
        }
    }

    /// `POST /settle`: settles the payment once. The identical payment sent again is answered with the
    /// stored settlement; a payment the settler refuses is `success:false` with its reason and message; an
    /// outcome not known yet is `success:false, errorReason:"settlement_pending"` with the transaction when
    /// there is one (send the same request again later).
    pub async fn facilitator_settle(
        &self,
        policy: &FacilitatorPolicy,
        body: &[u8],
    ) -> Result<SettleResponse, FacilitatorError> {
        let body = DoorBody::parse(body)?;
        // Read only for a refusal's answer: a settled payment's answer is its settlement.
        let network = || body.network();
        let checked = match self.facilitator_check(policy, &body) {
            Ok(c) => c,
            Err(i) => return Ok(failure(i.reason, i.message, network(), i.payer)),
        };
        let payer = Some(checked.request.payer());
        let answer = match self
            .admit(
                checked.request,
                checked.stored,
                checked.fingerprint,
                &checked.resource,
                None,
                None,
                checked.expired,
            )
            .await
        {
            Admitted::Redeliver(a) => {
                if let Some(sr) = a.verified.settlement {
                    return Ok(sr);
                }
                Answer::Unavailable {
                    status: 503,
                    message: "a settled payment without its settlement",
                }
            }
            Admitted::Fresh(mut attempt) => match self.settler_verify(&mut attempt).await {
                // The settler's refusal with its message.
                Err(refused) => match refused.failure {
                    Some(mut failure) => {
                        failure
                            .error_message
                            .get_or_insert_with(|| "the payment was refused".to_owned());
                        return Ok(failure);
                    }
                    None => refused.answer,
                },
                Ok(()) => match self.settle(&mut attempt, None).await {
                    Ok(sr) => return Ok(sr),
                    Err(a) => a,
                },
            },
            Admitted::Answer(a) => a,
        };
        match answer {
            Answer::PaymentRequired {
                receipt: Some(sr), ..
            } => Ok(sr),
            Answer::PaymentRequired { error, .. } => Ok(failure(
                error.into_owned(),
                "the payment was refused".to_owned(),
                network(),
                payer,
            )),
            Answer::Unavailable { status: 503, .. } => Err(FacilitatorError::Unavailable),
            Answer::Unavailable { message, .. } => Err(FacilitatorError::Upstream(message)),
            Answer::BadRequest { error, message } => {
                Ok(failure(error.to_owned(), message, network(), payer))
            }
            Answer::Conflict { message } => Ok(failure(
                "invalid_payload".to_owned(),
                message,
                network(),
                payer,
            )),
        }
    }
}

fn verify_response(invalid: Option<Invalid>, payer: Option<Address>) -> VerifyResponse {
    match invalid {
        None => VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            invalid_message: None,
            payer: payer.map(|p| p.to_string()),
        },
        Some(i) => VerifyResponse {
            is_valid: false,
            invalid_reason: Some(i.reason),
            invalid_message: Some(i.message),
            payer: i.payer.or(payer).map(|p| p.to_string()),
        },
    }
}

fn failure(
    reason: String,
    message: String,
    network: String,
    payer: Option<Address>,
) -> SettleResponse {
    SettleResponse {
        success: false,
        error_reason: Some(reason),
        error_message: Some(message),
        transaction: String::new(),
        network,
        payer: payer.map(|p| p.to_string()),
        extensions: None,
    }
}
