//! The asynchronous steps of a paid request: check (decode, verify, reserve, settler verify, maybe settle)
//! and settle after the response. The service's future drives them.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;
use tracing::{Instrument, debug, error, info_span, warn};

use super::config::{SettleTiming, Shared, VerifiedPayment};
use super::response::{RequestInfo, payment_required, plain_error, receipt, v1_requirements};
use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};
use crate::replay::{ReplayKey, Reservation};
use crate::settle::{
    ObservedOutcome, SettleOutcome, SettleRequest, SettlementEvent, SettlementObserver,
    VerifyOutcome,
};
use crate::verify::{self, CompiledOffer, RejectReason, Rejection};

/// The error of a 402 sent because no payment came with the request.
pub const NO_PAYMENT_ERROR: &str = "X-PAYMENT header is required";

pub(crate) type Receipt = (HeaderName, HeaderValue);

/// A payment accepted for the inner service.
pub(crate) struct PaidCtx {
    pub(crate) request: SettleRequest,
    pub(crate) key: ReplayKey,
    pub(crate) offers: Arc<[CompiledOffer]>,
    pub(crate) info: RequestInfo,
    pub(crate) verified: VerifiedPayment,
    /// Set when settled before the handler.
    pub(crate) receipt: Option<Receipt>,
}

pub(crate) enum Checked {
    Respond(Response<Full<Bytes>>),
    Paid(Box<PaidCtx>),
}

pub(crate) enum PostOutcome {
    /// Send the held response, with this receipt if any.
    Pass(Option<Receipt>),
    /// Drop the held response, send this one.
    Replace(Response<Full<Bytes>>),
}

/// The 402 for a request that carried no payment.
pub(crate) fn no_payment(
    shared: &Shared,
    offers: &[CompiledOffer],
    info: &RequestInfo,
) -> Response<Full<Bytes>> {
    shared.metrics.payment_required();
    payment_required(offers, info, NO_PAYMENT_ERROR, None, shared.expose_headers)
}

fn rejected(
    shared: &Shared,
    offers: &[CompiledOffer],
    info: &RequestInfo,
    reason: RejectReason,
    error: &str,
    receipt: Option<Receipt>,
) -> Response<Full<Bytes>> {
    shared.metrics.rejected(reason);
    shared.metrics.payment_required();
    payment_required(offers, info, error, receipt, shared.expose_headers)
}

fn saturate(v: alloy_primitives::U256) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Decode, verify locally, reserve, ask the settler, and settle now if so configured.
pub(crate) async fn check(
    shared: Arc<Shared>,
    offers: Arc<[CompiledOffer]>,
    info: RequestInfo,
    header: HeaderValue,
) -> Checked {
    let now = shared.now();
    let local = {
        let _span = info_span!("x402.verify", header_len = header.len()).entered();
        if header.len() > shared.max_header_len {
            Err(Rejection {
                reason: RejectReason::InvalidPayload,
                detail: "payment header too long",
            })
        } else {
            let decoded = {
                let _d = info_span!("x402.decode").entered();
                verify::decode(header.as_bytes())
            };
            decoded.and_then(|(payload, json)| verify::verify(payload, json, &offers, now))
        }
    };
    let local = match local {
        Ok(v) => v,
        Err(r) => {
            debug!(
                reason = r.reason.as_str(),
                detail = r.detail,
                "payment rejected"
            );
            return Checked::Respond(rejected(
                &shared,
                &offers,
                &info,
                r.reason,
                r.reason.as_str(),
                None,
            ));
        }
    };
    let compiled = &offers[local.offer_index];
    let auth = local.payload.exact().authorization.clone();
    let version = local.payload.x402_version();
    let requirements = match &local.payload {
        PaymentPayload::V1(_) => match v1_requirements(compiled, &info.resource_url) {
            Some(r) => PaymentRequirements::V1(r),
            None => PaymentRequirements::V2(compiled.v2.clone()),
        },
        PaymentPayload::V2(_) => PaymentRequirements::V2(compiled.v2.clone()),
    };
    let key = ReplayKey {
        chain_id: compiled.offer.network.chain_id(),
        asset: compiled.offer.token.address,
        from: auth.from,
        nonce: auth.nonce,
    };
    let valid_before = saturate(auth.valid_before);
    match shared.store.reserve(&key, valid_before, now).await {
        Ok(Reservation::Reserved) => {}
        Ok(Reservation::AlreadyUsed) => {
            let r = RejectReason::NonceAlreadyUsed;
            debug!(payer = %auth.from, nonce = %auth.nonce, "replayed authorization");
            return Checked::Respond(rejected(&shared, &offers, &info, r, r.as_str(), None));
        }
        Err(e) => {
            error!(error = %e, "replay store failed");
            shared.metrics.upstream_error();
            return Checked::Respond(plain_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "payment store unavailable",
            ));
        }
    }
    let verified = VerifiedPayment {
        payer: auth.from,
        amount: auth.value,
        network: compiled.offer.network.clone(),
        asset: compiled.offer.token.address,
        pay_to: compiled.offer.pay_to,
        nonce: auth.nonce,
        valid_before,
        x402_version: version,
        settlement: None,
    };
    let mut ctx = Box::new(PaidCtx {
        request: SettleRequest {
            payload: local.payload,
            payload_json: local.payload_json,
            requirements,
            offer: compiled.offer.clone(),
            signature: local.signature,
        },
        key,
        offers: offers.clone(),
        info,
        verified,
        receipt: None,
    });
    match shared
        .settler
        .verify(&ctx.request)
        .instrument(info_span!("x402.settler_verify"))
        .await
    {
        Ok(VerifyOutcome::Valid) => {}
        Ok(VerifyOutcome::Invalid { reason, message }) => {
            debug!(%reason, ?message, "settler rejected the payment");
            release(&shared, &ctx.key).await;
            return Checked::Respond(rejected(
                &shared,
                &offers,
                &ctx.info,
                RejectReason::SettlerRejected,
                &reason,
                None,
            ));
        }
        Err(e) => {
            warn!(error = %e, "settler verify failed");
            release(&shared, &ctx.key).await;
            shared.metrics.upstream_error();
            return Checked::Respond(plain_error(
                StatusCode::BAD_GATEWAY,
                "payment verification unavailable",
            ));
        }
    }
    if shared.timing == SettleTiming::BeforeHandler {
        match settle(&shared, &ctx).await {
            Ok(sr) => {
                ctx.receipt = Some(receipt(version, &sr));
                ctx.verified.settlement = Some(sr);
            }
            Err(resp) => return Checked::Respond(resp),
        }
    }
    shared.metrics.accepted();
    Checked::Paid(ctx)
}

async fn release(shared: &Shared, key: &ReplayKey) {
    if let Err(e) = shared.store.release(key).await {
        // The key stays blocked until it expires: the payer can sign a new authorization.
        warn!(error = %e, "replay store release failed");
    }
}

async fn mark_used(shared: &Shared, key: &ReplayKey) {
    if let Err(e) = shared.store.mark_used(key).await {
        warn!(error = %e, "replay store mark_used failed (the reservation still blocks the key)");
    }
}

/// Settles, applies the keep/release rule (see [`crate::replay`]) and reports the outcome to the observer, if
/// any, before anything is answered. `Err` is the response to send instead.
async fn settle(shared: &Shared, ctx: &PaidCtx) -> Result<SettleResponse, Response<Full<Bytes>>> {
    let outcome = shared
        .settler
        .settle(&ctx.request)
        .instrument(info_span!("x402.settle"))
        .await;
    // Copied only when someone listens: no allocation on the hot path without an observer.
    let observed = shared.observer.as_ref().map(|_| observed(&outcome));
    let result = apply(shared, ctx, outcome).await;
    if let (Some(observer), Some(observed)) = (&shared.observer, observed) {
        report(shared, observer.as_ref(), ctx, &observed).await;
    }
    result
}

fn observed(outcome: &SettleOutcome) -> ObservedOutcome {
    match outcome {
        SettleOutcome::Settled { transaction, .. } => ObservedOutcome::Settled {
            transaction: transaction.clone(),
        },
        SettleOutcome::Failed {
            reason, message, ..
        } => ObservedOutcome::Failed {
            reason: reason.clone(),
            message: message.clone(),
        },
        SettleOutcome::Unknown { message } => ObservedOutcome::Unknown {
            message: message.clone(),
        },
    }
}

/// Tells the observer; a failure is logged and counted, never propagated.
async fn report(
    shared: &Shared,
    observer: &dyn SettlementObserver,
    ctx: &PaidCtx,
    outcome: &ObservedOutcome,
) {
    let event = SettlementEvent {
        payment: &ctx.verified,
        resource: &ctx.info.resource_url,
        outcome,
        timing: shared.timing,
    };
    let result = observer
        .on_settlement(event)
        .instrument(info_span!("x402.observe", outcome = outcome.as_str()))
        .await;
    if let Err(e) = result {
        shared.metrics.observer_error();
        error!(
            error = %e,
            outcome = outcome.as_str(),
            ?outcome,
            payer = %ctx.verified.payer,
            nonce = %ctx.verified.nonce,
            amount = %ctx.verified.amount,
            network = ctx.verified.network.caip2(),
            resource = %ctx.info.resource_url,
            "SETTLEMENT NOT RECORDED: the settlement observer failed"
        );
    }
}

/// The keep/release rule and the answer for one settle outcome.
async fn apply(
    shared: &Shared,
    ctx: &PaidCtx,
    outcome: SettleOutcome,
) -> Result<SettleResponse, Response<Full<Bytes>>> {
    let version = ctx.verified.x402_version;
    match outcome {
        SettleOutcome::Settled {
            transaction,
            payer,
            network,
        } => {
            mark_used(shared, &ctx.key).await;
            Ok(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                transaction,
                network,
                payer: Some(payer.to_checksum(None)),
            })
        }
        SettleOutcome::Failed {
            reason,
            message,
            authorization_still_usable,
        } => {
            warn!(%reason, ?message, "settlement failed");
            if authorization_still_usable {
                release(shared, &ctx.key).await;
            } else {
                mark_used(shared, &ctx.key).await;
            }
            shared.metrics.settlement_failed();
            shared.metrics.payment_required();
            let sr = SettleResponse {
                success: false,
                error_reason: Some(reason.clone()),
                error_message: message,
                transaction: String::new(),
                network: ctx.request.wire_network(),
                payer: Some(ctx.verified.payer.to_checksum(None)),
            };
            Err(payment_required(
                &ctx.offers,
                &ctx.info,
                &reason,
                Some(receipt(version, &sr)),
                shared.expose_headers,
            ))
        }
        SettleOutcome::Unknown { message } => {
            error!(%message, "settlement outcome unknown");
            mark_used(shared, &ctx.key).await;
            shared.metrics.settlement_unknown();
            Err(plain_error(
                StatusCode::BAD_GATEWAY,
                "payment settlement failed upstream",
            ))
        }
    }
}

/// After the inner service answered below 400: settle.
pub(crate) async fn settle_after(shared: Arc<Shared>, ctx: Box<PaidCtx>) -> PostOutcome {
    match settle(&shared, &ctx).await {
        Ok(sr) => PostOutcome::Pass(Some(receipt(ctx.verified.x402_version, &sr))),
        Err(resp) => PostOutcome::Replace(resp),
    }
}

/// After the inner service failed (settle-after): nothing was charged, free the key.
pub(crate) async fn release_after(shared: Arc<Shared>, ctx: Box<PaidCtx>) -> PostOutcome {
    release(&shared, &ctx.key).await;
    PostOutcome::Pass(None)
}
