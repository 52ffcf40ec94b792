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

use alloy_primitives::{Address, B256, U256};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Admitted, Answer, PaymentEngine, payment_key};
use crate::network::{Network, Token, USDC_DECIMALS};
use crate::offer::PaymentOffer;
use crate::price::Price;
use crate::proto::{
    PaymentPayload, PaymentRequirements, PaymentRequirementsV1, PaymentRequirementsV2,
    SettleResponse, VerifyResponse,
};
use crate::scheme::{Check, Prepared, Scheme, SchemeOffer, Schemes};
use crate::settle::{SettleRequest, VerifyOutcome};
use crate::store::{PaymentState, StoredPayment};
use crate::verify::{RejectReason, payload_at};

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
    /// The extensions a payment echoes that its record leaves out: declarations of the server that sold it
    /// which no settlement reads. Default: [`SERVER_DECLARATIONS`](crate::extensions::SERVER_DECLARATIONS);
    /// every other extension (a payment identifier, gas sponsoring, one this crate does not know) is kept.
    pub left_out: Vec<String>,
}

impl Default for FacilitatorPolicy {
    fn default() -> Self {
        FacilitatorPolicy {
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            pay_to: None,
            left_out: crate::extensions::SERVER_DECLARATIONS
                .iter()
                .map(|k| (*k).to_owned())
                .collect(),
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
    /// The offer these terms describe on `network`: the token's EIP-712 name and version from `extra` (empty
    /// when absent: a scheme that needs them refuses to prepare the offer), every other string member of
    /// `extra` in the offer's (so that `assetTransferMethod` chooses the scheme).
    fn offer(&self, network: Network) -> PaymentOffer {
        let field = |k: &str| self.extra.and_then(|e| e.get(k)).and_then(Value::as_str);
        let token = Token::new(
            self.asset,
            field("name").unwrap_or_default(),
            field("version").unwrap_or_default(),
            USDC_DECIMALS,
        );
        let mut offer = PaymentOffer::new(network, token, self.pay_to, Price::from(self.amount))
            .max_timeout_seconds(self.max_timeout_seconds)
            .scheme(self.scheme.to_owned());
        let members = self.extra.and_then(Value::as_object).into_iter().flatten();
        for (key, value) in members {
            if let (false, Some(value)) = (key == "name" || key == "version", value.as_str()) {
                offer.extra.insert(key.clone(), value.to_owned());
            }
        }
        offer
    }
}

/// A settle request from a payload and the requirements it claims to pay, both as JSON text, read by the
/// built-in schemes: the payload's version decides the requirements' version; they must agree (v1: scheme
/// and network; v2: `accepted` equals the requirements). Nothing about time or signature validity is
/// checked here.
pub fn settle_request(
    payload_text: Arc<str>,
    requirements_json: &str,
) -> Result<SettleRequest, Invalid> {
    read_request(&Schemes::default(), payload_text, requirements_json).map(|read| read.request)
}

/// A settle request read by its scheme, and what the checks need.
struct Read {
    request: SettleRequest,
    /// Where the value of the payload's `extensions` member is in its text ([`payload_at`]).
    extensions_at: Option<Range<usize>>,
    scheme: Arc<dyn Scheme>,
    prepared: Prepared,
}

/// [`settle_request`] with `schemes`.
fn read_request(
    schemes: &Schemes,
    payload_text: Arc<str>,
    requirements_json: &str,
) -> Result<Read, Invalid> {
    let (payload, extensions_at) =
        payload_at(&payload_text).map_err(|r| Invalid::new(r.reason.as_str(), r.detail, None))?;
    let invalid = |r: RejectReason, m: &str| Invalid::new(r.as_str(), m, None);
    let bad_requirements = |e: serde_json::Error| {
        Invalid::new(
            "invalid_payment_requirements",
            format!("paymentRequirements: {e}"),
            None,
        )
    };
    let mut charge = None;
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
            let offer = Terms {
                scheme: &r.scheme,
                asset: r.asset,
                pay_to: r.pay_to,
                amount: r.max_amount_required,
                max_timeout_seconds: r.max_timeout_seconds,
                extra: r.extra.as_ref(),
            }
            .offer(network);
            (PaymentRequirements::V1(r), offer)
        }
        PaymentPayload::V2(p) => {
            let r: PaymentRequirementsV2 =
                serde_json::from_str(requirements_json).map_err(bad_requirements)?;
            // A scheme that settles what was used is sent the charge as the requirements' amount, the
            // maximum staying in `accepted` (as the official servers send it): the rest must be equal.
            let differs_in_amount_only = r.amount < p.accepted.amount && {
                let mut at_maximum = r.clone();
                at_maximum.amount = p.accepted.amount;
                at_maximum == p.accepted
            };
            if p.accepted != r && !differs_in_amount_only {
                return Err(invalid(
                    RejectReason::NoMatchingRequirements,
                    "accepted differs from the requirements",
                ));
            }
            charge = differs_in_amount_only.then_some(r.amount);
            let network: Network = r
                .network
                .parse()
                .map_err(|_| invalid(RejectReason::InvalidNetwork, "unknown CAIP-2 network"))?;
            let offer = Terms {
                scheme: &r.scheme,
                asset: r.asset,
                pay_to: r.pay_to,
                amount: p.accepted.amount,
                max_timeout_seconds: r.max_timeout_seconds,
                extra: r.extra.as_ref(),
            }
            .offer(network);
            (PaymentRequirements::V2(r), offer)
        }
    };
    let Some(scheme) = schemes.for_offer(&offer).cloned() else {
        return Err(invalid(
            RejectReason::InvalidScheme,
            "no scheme of this facilitator settles these requirements",
        ));
    };
    if charge.is_some() && !scheme.charges_what_was_used() {
        return Err(invalid(
            RejectReason::NoMatchingRequirements,
            "accepted differs from the requirements",
        ));
    }
    let prepared = scheme
        .prepare(SchemeOffer {
            offer: &offer,
            operator: false,
        })
        .map_err(|why| Invalid::new("invalid_payment_requirements", why, None))?;
    let authorized = scheme
        .read(payload.scheme_payload(), &offer)
        .map_err(|r| Invalid::new(r.error_code(), r.detail, None))?;
    // What a scheme that settles what was used settles: the charge sent, else the maximum.
    let charge = charge.or(scheme.charges_what_was_used().then_some(authorized.amount));
    let request = SettleRequest {
        payload,
        payload_text,
        requirements,
        offer,
        authorized,
        charge,
    };
    Ok(Read {
        request,
        extensions_at,
        scheme,
        prepared,
    })
}

/// The settle request of a stored payment (for reconciliation), read by `schemes`.
pub(crate) fn stored_request(
    schemes: &Schemes,
    stored: &StoredPayment,
) -> Result<SettleRequest, Invalid> {
    read_request(schemes, stored.payload.clone(), &stored.requirements).map(|read| read.request)
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
    /// Past its `validBefore` (checked as of its last valid second): answered from its record only, else
    /// with this refusal.
    expired: Option<crate::verify::Rejection>,
}

impl PaymentEngine {
    fn facilitator_check(
        &self,
        policy: &FacilitatorPolicy,
        body: &DoorBody<'_>,
    ) -> Result<Checked, Invalid> {
        let payload: Arc<str> = body.payload.map_or("null", RawValue::get).into();
        let requirements = body.requirements.map_or("null", RawValue::get);
        read_request(&self.schemes, payload, requirements).and_then(|read| {
            let Read {
                mut request,
                extensions_at,
                scheme,
                prepared,
            } = read;
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
            let check = |at| {
                scheme.check(
                    &request.authorized,
                    Check {
                        offer: &request.offer,
                        prepared: &prepared,
                        x402_version: request.payload.x402_version(),
                        now: at,
                        contract_wallets: self.settler.checks_contract_wallets(),
                    },
                )
            };
            let now = self.now();
            // Past its validBefore, checked as of its last valid second: only its record may answer it.
            let (fingerprint, expired) = match check(now) {
                Ok(fingerprint) => (fingerprint, None),
                Err(r) => {
                    let valid_before = request.authorized.valid_before;
                    match crate::verify::as_of_last_valid_second(
                        r.clone(),
                        valid_before,
                        now,
                        check,
                    ) {
                        Ok(fingerprint) => (fingerprint, Some(r)),
                        Err(r) => return Err(Invalid::new(r.error_code(), r.detail, payer)),
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
                &policy.left_out,
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
        let key = payment_key(&checked.request);
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
            Ok(None) if let Some(refused) = &checked.expired => {
                let invalid = Invalid::new(
                    refused.error_code(),
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
                checked.expired.as_ref(),
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
        amount: None,
        extensions: None,
    }
}
