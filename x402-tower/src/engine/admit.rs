//! Admission: from a payment header to a claimed payment record (or the answer that refuses it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{B256, keccak256};
use tracing::{debug, debug_span, error, info};

use super::{
    Admitted, Answer, Attempt, Begin, PaymentEngine, Route, Settled, SettledHook, payment_key,
};
use crate::extensions::payment_identifier::{self as identifier, PaymentIdentifier};
use crate::payment::{SettleTiming, VerifiedPayment};
use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};
use crate::scheme::CompiledOffer;
use crate::settle::{SettleOutcome, SettleRequest};
use crate::store::{
    Event, IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentState, PaymentStore, Reservation,
    StoreError, StoredPayment,
};
use crate::verify::{self, RejectReason, Rejection};

impl PaymentEngine {
    /// A payment header for `resource_url` sold with `offers`: decode, verify, remember, maybe settle.
    pub(crate) async fn begin(
        &self,
        route: &Route,
        offers: &[CompiledOffer],
        resource_url: &str,
        header: &[u8],
        context: crate::extensions::PaymentContext,
    ) -> Begin {
        let now = self.now();
        let matched = {
            let _span = debug_span!("x402.verify", header_len = header.len()).entered();
            if header.len() > self.max_header_len {
                Err(Rejection::new(
                    RejectReason::InvalidPayload,
                    format!(
                        "the payment header is {} bytes, more than this server reads ({})",
                        header.len(),
                        self.max_header_len
                    ),
                ))
            } else {
                let decoded = {
                    let _d = debug_span!("x402.decode").entered();
                    verify::decode(header)
                };
                decoded
                    .and_then(|decoded| crate::scheme::matched(decoded, offers))
                    .and_then(|m| {
                        let compiled = &offers[m.offer_index];
                        let version = m.decoded.payload.x402_version();
                        // Past its validBefore, checked as of its last valid second: only its record
                        // may answer it.
                        let wallets = self.settler.checks_contract_wallets();
                        let check = |at| compiled.check(&m.authorized, version, at, wallets);
                        match check(now) {
                            Ok(fingerprint) => Ok((m, fingerprint, None)),
                            Err(r) => verify::as_of_last_valid_second(
                                r.clone(),
                                m.authorized.valid_before,
                                now,
                                check,
                            )
                            .map(|fingerprint| (m, fingerprint, Some(r))),
                        }
                    })
            }
        };
        let (local, fingerprint, expired) = match matched {
            Ok(v) => v,
            Err(r) => {
                info!(
                    reason = r.reason.as_str(),
                    detail = %r.detail,
                    resource = resource_url,
                    "payment refused"
                );
                return Begin::Answer(self.refuse_with(&r, 2));
            }
        };
        let offer_index = local.offer_index;
        let compiled = &offers[offer_index];
        if route.timing == SettleTiming::BeforeHandler && compiled.scheme.charges_what_was_used() {
            // A price source's offer: the route's build could not check it.
            error!(
                scheme = compiled.scheme.name(),
                "an offer of a scheme that settles what was used, on a route that settles before its handler"
            );
            return Begin::Answer(Answer::Unavailable {
                status: 500,
                message: "this route cannot sell a scheme that settles what was used",
            });
        }
        let decoded = local.decoded;
        let (requirements, requirements_json) = match &decoded.payload {
            PaymentPayload::V1(_) => match compiled.v1_requirements(resource_url) {
                Some(r) => {
                    let json: Arc<str> = serde_json::to_string(&r).unwrap_or_default().into();
                    (PaymentRequirements::V1(r), json)
                }
                None => (
                    PaymentRequirements::V2(compiled.v2.clone()),
                    compiled.v2_json.clone(),
                ),
            },
            PaymentPayload::V2(_) => (
                PaymentRequirements::V2(compiled.v2.clone()),
                compiled.v2_json.clone(),
            ),
        };
        let stored = Arc::new(StoredPayment::kept(
            &decoded.text,
            decoded.extensions_at,
            requirements_json,
            &route.left_out,
        ));
        let request = SettleRequest {
            payload: decoded.payload,
            payload_text: decoded.text,
            requirements,
            offer: compiled.offer.clone(),
            authorized: local.authorized,
            charge: None,
        };
        if let Some(policy) = &route.identifier
            && expired.is_none()
            && let Err(answer) = self
                .bind_identifier(policy, &request, fingerprint, resource_url, now)
                .await
        {
            return Begin::Answer(answer);
        }
        let mut attempt = match self
            .admit(
                request,
                stored,
                fingerprint,
                resource_url,
                Some(route.timing),
                route.on_settled.as_ref(),
                expired.as_ref(),
            )
            .await
        {
            Admitted::Answer(a) => return Begin::Answer(a),
            Admitted::Redeliver(mut a) => {
                a.verified.offer_index = offer_index;
                a.verified.context = context;
                self.metrics.accepted();
                return Begin::Serve(a, None);
            }
            Admitted::Fresh(a) => a,
        };
        attempt.verified.offer_index = offer_index;
        attempt.verified.context = context;
        let settling_now = route.timing == SettleTiming::BeforeHandler;
        if !(settling_now && route.settle_without_verify)
            && let Err(refused) = self.settler_verify(&mut attempt).await
        {
            return Begin::Answer(refused.answer);
        }
        let mut recording = None;
        if settling_now {
            let timing = Some(route.timing);
            if let Err(a) = self.mark_settling(&mut attempt).await {
                return Begin::Answer(a);
            }
            match self.settle_outcome(&attempt).await {
                SettleOutcome::Settled {
                    transaction,
                    payer,
                    network,
                } => {
                    let sr = self.settled_response(&attempt, transaction, payer, network);
                    recording = Some(self.record_settled(&attempt, &sr, timing));
                    attempt.verified.settlement = Some(sr);
                }
                outcome => match self.conclude(&mut attempt, outcome, timing).await {
                    Ok(sr) => attempt.verified.settlement = Some(sr),
                    Err(a) => return Begin::Answer(a),
                },
            }
        }
        self.metrics.accepted();
        Begin::Serve(attempt, recording)
    }

    pub(super) async fn bind_identifier(
        &self,
        policy: &PaymentIdentifier,
        request: &SettleRequest,
        fingerprint: B256,
        resource: &str,
        now: u64,
    ) -> Result<(), Answer> {
        let id = match identifier::extract(&request.payload_text) {
            Ok(Some(id)) => id,
            Ok(None) if policy.required => {
                return Err(Answer::BadRequest {
                    error: identifier::ERROR_REQUIRED,
                    message: "this resource requires a payment-identifier extension with an id"
                        .to_owned(),
                });
            }
            Ok(None) => return Ok(()),
            Err(message) => {
                return Err(Answer::BadRequest {
                    error: identifier::ERROR_INVALID,
                    message: message.to_owned(),
                });
            }
        };
        let mut bound = Vec::with_capacity(32 + resource.len());
        bound.extend_from_slice(fingerprint.as_slice());
        bound.extend_from_slice(resource.as_bytes());
        let key = payment_key(request);
        let binding = IdBinding {
            fingerprint: keccak256(&bound),
            key,
            expires_at: self.kept_until(request.authorized.valid_before),
        };
        match self.store.bind_id(&id, &binding, now).await {
            Ok(IdClaim::New | IdClaim::Same) => Ok(()),
            Ok(IdClaim::Conflict) => Err(Answer::Conflict {
                message: format!(
                    "payment identifier {id:?} was used with another payment or for another request"
                ),
            }),
            Err(e) => Err(self.store_failed(&e)),
        }
    }

    /// Reserves the payment's record, or decides from the record another request left. An `expired`
    /// payment (its refusal as of now given)
    /// payment (past its `validBefore`) reserves nothing and is never settled: only its record (settled:
    /// redelivered; unresolved: reconciled, or pending) answers it, else it is refused as expired.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn admit(
        &self,
        request: SettleRequest,
        stored: Arc<StoredPayment>,
        fingerprint: B256,
        resource: &str,
        timing: Option<SettleTiming>,
        on_settled: Option<&SettledHook>,
        expired: Option<&Rejection>,
    ) -> Admitted {
        let key = payment_key(&request);
        let mut verified = VerifiedPayment::from_request(&request);
        let now = self.now();
        let record = PaymentRecord {
            state: PaymentState::InFlight,
            resource: resource.to_owned(),
            fingerprint,
            settlement: None,
            payment: stored,
            expires_at: self.kept_until(verified.valid_before),
            updated_at: now,
            revision: 0,
        };
        let deadline = Instant::now() + self.in_flight_wait;
        let mut pause = Duration::from_millis(10);
        let version = verified.x402_version;
        let expired_refusal = || match expired {
            Some(refused) => self.refuse_with(refused, version),
            None => self.refuse(RejectReason::ValidBefore, version),
        };
        loop {
            let reserved = if expired.is_some() {
                match self.store.get(&key, self.now()).await {
                    Err(e) => Err(e),
                    Ok(Some(existing)) => Ok(Reservation::Taken(Box::new(existing))),
                    Ok(None) => return Admitted::Answer(expired_refusal()),
                }
            } else {
                self.store.reserve(&key, &record, now).await
            };
            let existing = match reserved {
                Err(e) => return Admitted::Answer(self.store_failed(&e)),
                Ok(Reservation::Reserved { revision }) => {
                    return Admitted::Fresh(Box::new(Attempt {
                        request,
                        key,
                        record: PaymentRecord { revision, ..record },
                        verified,
                        on_settled: on_settled.cloned(),
                    }));
                }
                Ok(Reservation::Taken(existing)) => existing,
            };
            match self.on_taken(&key, &record, *existing, self.now()).await {
                Taken::Refuse(reason) => {
                    debug!(payer = %key.from, nonce = %key.nonce, "authorization already used");
                    return Admitted::Answer(self.refuse(reason, verified.x402_version));
                }
                Taken::Answer(a) => return Admitted::Answer(a),
                Taken::Redeliver(mut settlement, settled_at) => {
                    if let Some(hook) = on_settled {
                        (hook.0)(&mut settlement, resource, Settled::Recorded(settled_at));
                    }
                    verified.settlement = Some(settlement);
                    verified.redelivered = true;
                    return Admitted::Redeliver(Box::new(Attempt {
                        request,
                        key,
                        record,
                        verified,
                        on_settled: on_settled.cloned(),
                    }));
                }
                Taken::Claimed(claimed) => {
                    // Settled by this reconciliation: the hook completes it before it is recorded.
                    let attempt = Box::new(Attempt {
                        request,
                        key,
                        record: claimed,
                        verified,
                        on_settled: on_settled.cloned(),
                    });
                    return match self.reconcile_claimed(attempt, timing).await {
                        // Nothing moved, and the authorization can no longer be used: released, refused.
                        Admitted::Fresh(mut attempt) if expired.is_some() => {
                            let event = Event::SettlementFailed { still_usable: true };
                            self.dispose(&mut attempt, event, None).await;
                            Admitted::Answer(expired_refusal())
                        }
                        admitted => admitted,
                    };
                }
                Taken::Busy => {}
                Taken::Changed => continue,
            }
            if Instant::now() >= deadline {
                return Admitted::Answer(Self::pending_answer(&request, None));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// The one function that reads a record another request left for this payment.
    pub(super) async fn on_taken(
        &self,
        key: &PaymentKey,
        mine: &PaymentRecord,
        existing: PaymentRecord,
        now: u64,
    ) -> Taken {
        if !existing.is_same_payment(&mine.fingerprint, &mine.resource) {
            // Another authorization with this nonce, or this one spent on another resource.
            return Taken::Refuse(RejectReason::NonceAlreadyUsed);
        }
        match existing.state {
            PaymentState::Settled => match existing.settlement {
                Some(sr) => Taken::Redeliver(sr, existing.updated_at),
                None => Taken::Refuse(RejectReason::NonceAlreadyUsed),
            },
            PaymentState::Spent => Taken::Refuse(RejectReason::NonceAlreadyUsed),
            PaymentState::InFlight
                if now < existing.updated_at.saturating_add(self.stale_after) =>
            {
                Taken::Busy
            }
            PaymentState::InFlight | PaymentState::Pending => {
                match self.claim(key, &existing, now).await {
                    Ok(Some(claimed)) => Taken::Claimed(claimed),
                    Ok(None) => Taken::Changed,
                    Err(e) => Taken::Answer(self.store_failed(&e)),
                }
            }
        }
    }

    /// Takes a `Pending` (or abandoned `InFlight`) record for reconciliation: `InFlight` again, by this
    /// caller, with compare-and-set. `None` when another request or instance changed it first.
    pub(super) async fn claim(
        &self,
        key: &PaymentKey,
        record: &PaymentRecord,
        now: u64,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let mut claimed = record.clone();
        claimed.state = PaymentState::InFlight;
        claimed.updated_at = now;
        Ok(self
            .store
            .update(key, record.revision, &claimed)
            .await?
            .then(|| PaymentRecord {
                revision: record.revision + 1,
                ..claimed
            }))
    }
}

/// What [`PaymentEngine::on_taken`] decided.
pub(super) enum Taken {
    Refuse(RejectReason),
    Answer(Answer),
    /// Settled: this settlement, recorded at these unix seconds.
    Redeliver(SettleResponse, u64),
    /// Claimed (now `InFlight` at this revision) for reconciliation.
    Claimed(PaymentRecord),
    /// Another request holds it: wait.
    Busy,
    /// It changed between reading and claiming: read again.
    Changed,
}

pub(super) fn pending_transaction(record: &PaymentRecord) -> Option<String> {
    record
        .settlement
        .as_ref()
        .map(|s| s.transaction.clone())
        .filter(|t| !t.is_empty())
}
