//! Settlement: the settler's verify, the settlement, and what becomes of the payment record.

use std::borrow::Cow;

use tracing::{Instrument, debug, debug_span, error, warn};

use super::{
    Answer, Attempt, Finish, Observed, PaymentEngine, Recording, Route, Settled,
    VERIFY_UNAVAILABLE, VerifyRefusal, observe, release_record, write_record,
};
use crate::payment::{SettleTiming, VerifiedPayment};
use crate::proto::SettleResponse;
use crate::scheme::{Charge, ChargeError};
use crate::settle::{SETTLEMENT_PENDING, SettleOutcome, SettleRequest, VerifyOutcome};
use crate::store::{Disposition, Event, PaymentRecord, PaymentState, StoredPayment, disposition};
use crate::verify::RejectReason;

impl PaymentEngine {
    /// After the protected service answered, when nothing is left to do: the receipt to add (settled before
    /// the handler, or a redelivery). `None`: call [`PaymentEngine::finish`].
    ///
    /// The money moved before the service ran, so the receipt goes with whatever it answered, an error too:
    /// the buyer learns that it paid, and its resend of the identical payment is served again without a
    /// second settlement.
    #[allow(clippy::option_option)] // None: settle now; Some(receipt or none): answer as it is.
    pub(crate) fn finish_now(
        route: &Route,
        attempt: &mut Attempt,
    ) -> Option<Option<SettleResponse>> {
        (attempt.verified.redelivered || route.timing == SettleTiming::BeforeHandler)
            .then(|| attempt.verified.settlement.take())
    }

    /// After the protected service answered (`served`: below 400): settle (settle-after), or release.
    /// `charge`: what the service reported it used ([`Charge`]), for a scheme that settles that.
    pub(crate) async fn finish(
        &self,
        route: &Route,
        mut attempt: Box<Attempt>,
        served: bool,
        charge: Option<Result<Charge, ChargeError>>,
    ) -> Finish {
        let version = attempt.verified.x402_version;
        if let Some(receipt) = PaymentEngine::finish_now(route, &mut attempt) {
            return Finish::Pass(receipt, version);
        }
        if !served {
            // Nothing was charged: the authorization may be presented again.
            self.dispose(&mut attempt, Event::NotServed, None).await;
            return Finish::Pass(None, version);
        }
        if let Err(answer) = self.charge(&mut attempt, charge).await {
            return Finish::Replace(answer);
        }
        match self.settle(&mut attempt, Some(route.timing)).await {
            Ok(sr) => Finish::Pass(Some(sr), version),
            Err(a) => Finish::Replace(a),
        }
    }

    /// The settler's own verification (balance, nonce on chain, smart wallets). Refused: the answer, and
    /// the failure as a settlement response (with the settler's message) for a door that answers with one.
    pub(super) async fn settler_verify(&self, attempt: &mut Attempt) -> Result<(), VerifyRefusal> {
        let version = attempt.verified.x402_version;
        match self
            .settler
            .verify(&attempt.request)
            .instrument(debug_span!("x402.settler_verify"))
            .await
        {
            Ok(VerifyOutcome::Valid) => Ok(()),
            Ok(VerifyOutcome::Invalid { reason, message }) => {
                debug!(%reason, ?message, "settler rejected the payment");
                let nonce_used = reason == RejectReason::NonceAlreadyUsed.as_str();
                let failure = Self::failure(attempt, &reason, message);
                self.dispose(
                    attempt,
                    Event::SettlerRefused { nonce_used },
                    Some(failure.clone()),
                )
                .await;
                self.metrics.rejected(RejectReason::SettlerRejected);
                Err(VerifyRefusal {
                    answer: Answer::PaymentRequired {
                        error: Cow::Owned(reason),
                        receipt: None,
                        version,
                    },
                    failure: Some(failure),
                })
            }
            Err(e) => {
                warn!(error = %e, "settler verify failed");
                self.dispose(attempt, Event::SettlerUnreachable, None).await;
                self.metrics.upstream_error();
                Err(VerifyRefusal {
                    answer: Answer::Unavailable {
                        status: 502,
                        message: VERIFY_UNAVAILABLE,
                    },
                    failure: None,
                })
            }
        }
    }

    /// For a scheme that settles what was used: resolves the service's `charge` against the signed
    /// maximum (none reported: the maximum) and makes it the amount to settle, in the request and in the
    /// payment record (so a reconciliation settles the same). A charge that cannot be settled (above the
    /// maximum, unreadable) charges nothing: the record is released, the answer is a 500. Other schemes
    /// settle their amount, whatever was reported.
    pub(super) async fn charge(
        &self,
        attempt: &mut Attempt,
        charge: Option<Result<Charge, ChargeError>>,
    ) -> Result<(), Answer> {
        let metered = self
            .schemes
            .for_offer(&attempt.request.offer)
            .is_some_and(|s| s.charges_what_was_used());
        if !metered {
            if charge.is_some() {
                debug!(
                    scheme = attempt.request.authorized.scheme,
                    "a charge reported for a scheme that settles its amount: ignored"
                );
            }
            return Ok(());
        }
        let maximum = attempt.request.authorized.amount;
        let decimals = attempt.request.offer.token.decimals;
        let amount = match charge.unwrap_or(Ok(Charge::Atomic(maximum))) {
            Ok(c) => c.resolve(maximum, decimals),
            Err(e) => Err(e),
        };
        let amount = match amount {
            Ok(amount) => amount,
            Err(e) => {
                error!(error = %e, payer = %attempt.verified.payer, "the service's charge cannot be settled: nothing charged");
                self.dispose(attempt, Event::NotServed, None).await;
                return Err(Answer::Unavailable {
                    status: 500,
                    message: "the charge this service reported cannot be settled; nothing was charged",
                });
            }
        };
        attempt.request.set_charge(amount);
        attempt.verified.charge = Some(amount);
        if let Ok(requirements) = serde_json::to_string(&attempt.request.requirements) {
            attempt.record.payment = std::sync::Arc::new(StoredPayment {
                payload: attempt.record.payment.payload.clone(),
                requirements: requirements.into(),
            });
        }
        Ok(())
    }

    /// Settles, reports, and applies the outcome. A charge of zero settles nothing: the payment is
    /// recorded as settled with no transaction (`amount: "0"`), the settler is not asked.
    pub(super) async fn settle(
        &self,
        attempt: &mut Attempt,
        timing: Option<SettleTiming>,
    ) -> Result<SettleResponse, Answer> {
        if attempt.request.charge.is_some_and(|c| c.is_zero()) {
            let nothing = SettleOutcome::Settled {
                transaction: String::new(),
                payer: attempt.request.payer(),
                network: attempt.request.wire_network(),
            };
            return self.conclude(attempt, nothing, timing).await;
        }
        self.mark_settling(attempt).await?;
        let outcome = self.settle_outcome(attempt).await;
        self.conclude(attempt, outcome, timing).await
    }

    /// Marks the attempt's record as settling (still `InFlight`, now holding the `settlement_pending`
    /// answer) before the settler is asked to move money. A record left `InFlight` without the mark (its
    /// request or process died before settling, e.g. inside a settle-after handler) has moved nothing: the
    /// reconciler releases it without asking the settler, whose reconciliation may settle (a facilitator
    /// is asked `/settle` again) and so would charge for a request that was never served.
    ///
    /// Not written when already marked (a claimed `Pending` record) or when no money can move
    /// ([`Settler::moves_money`](crate::Settler::moves_money)). When the mark cannot be written, nothing is
    /// settled: the record is released and the answer is 503.
    pub(super) async fn mark_settling(&self, attempt: &mut Attempt) -> Result<(), Answer> {
        if !self.settler.moves_money() || attempt.record.settlement.is_some() {
            return Ok(());
        }
        let marker = Self::pending_receipt(&attempt.request, None);
        let mut record = self.next_record(attempt, PaymentState::InFlight, Some(marker));
        let revision = attempt.record.revision;
        if write_record(&*self.store, &attempt.key, revision, &record).await {
            record.revision = revision + 1;
            attempt.record = record;
            Ok(())
        } else {
            self.release(attempt).await;
            self.metrics.upstream_error();
            Err(Answer::Unavailable {
                status: 503,
                message: "payment store unavailable",
            })
        }
    }

    /// Asks the settler to settle the attempt's payment.
    pub(super) async fn settle_outcome(&self, attempt: &Attempt) -> SettleOutcome {
        if self.verify_only
            && !self
                .verify_only_warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            warn!(
                payer = %attempt.verified.payer,
                "VERIFY-ONLY: accepting payments without settling them (no settler was configured; no money moves); logged once"
            );
        }
        self.settler
            .settle(&attempt.request)
            .instrument(debug_span!("x402.settle"))
            .await
    }

    /// Reports a settlement outcome and applies it (both written before it returns).
    pub(super) async fn conclude(
        &self,
        attempt: &mut Attempt,
        outcome: SettleOutcome,
        timing: Option<SettleTiming>,
    ) -> Result<SettleResponse, Answer> {
        if self.observer.is_none() {
            return self.apply(attempt, outcome).await;
        }
        // The observer's record and the payment record are both durable writes: issued together, a
        // group-committing store puts them in one commit (the client is still answered after both).
        let (payment, resource) = (attempt.verified.clone(), attempt.record.resource.clone());
        let observed = self.observe(&payment, &resource, &outcome, timing, false);
        let (_, result) = tokio::join!(observed, self.apply(attempt, outcome.clone()));
        result
    }

    /// Applies a settlement outcome (the keep/release rule through [`disposition`]) and builds the answer.
    pub(super) async fn apply(
        &self,
        attempt: &mut Attempt,
        outcome: SettleOutcome,
    ) -> Result<SettleResponse, Answer> {
        let version = attempt.verified.x402_version;
        match outcome {
            SettleOutcome::Settled {
                transaction,
                payer,
                network,
            } => {
                let sr = self.settled_response(attempt, transaction, payer, network);
                self.dispose(attempt, Event::Settled, Some(sr.clone()))
                    .await;
                Ok(sr)
            }
            SettleOutcome::Failed {
                reason,
                message,
                authorization_still_usable,
            } => {
                warn!(%reason, ?message, "settlement failed");
                self.metrics.settlement_failed();
                let sr = Self::failure(attempt, &reason, message);
                let event = Event::SettlementFailed {
                    still_usable: authorization_still_usable,
                };
                self.dispose(attempt, event, Some(sr.clone())).await;
                Err(Answer::PaymentRequired {
                    error: Cow::Owned(reason),
                    receipt: Some(sr),
                    version,
                })
            }
            SettleOutcome::Unknown {
                message,
                transaction,
            } => {
                error!(%message, ?transaction, "settlement outcome unknown: recorded as pending");
                self.metrics.settlement_unknown();
                let answer = Self::pending_answer(&attempt.request, transaction);
                if let Answer::PaymentRequired { receipt, .. } = &answer {
                    self.dispose(attempt, Event::OutcomeUnknown, receipt.clone())
                        .await;
                }
                Err(answer)
            }
        }
    }

    /// The answer to a successful settlement, completed by the route's hook (the signed receipt).
    pub(super) fn settled_response(
        &self,
        attempt: &Attempt,
        transaction: String,
        payer: alloy_primitives::Address,
        network: String,
    ) -> SettleResponse {
        let mut sr = SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction,
            network,
            payer: Some(crate::address::checksum(&payer)),
            amount: attempt.request.charge.map(|c| c.to_string()),
            extensions: None,
        };
        if let Some(hook) = &attempt.on_settled {
            (hook.0)(&mut sr, &attempt.record.resource, Settled::Now(self.now()));
        }
        sr
    }

    /// The writes of a successful settlement (the record kept as [`disposition`] says, the observer's
    /// report), issued together in a task of their own ([`run_to_end`]), which the door awaits before
    /// answering.
    /// The attempt's own copy of the record is not advanced: nothing reads it after a settlement.
    pub(super) fn record_settled(
        &self,
        attempt: &Attempt,
        sr: &SettleResponse,
        timing: Option<SettleTiming>,
    ) -> Recording {
        let outcome = SettleOutcome::Settled {
            transaction: sr.transaction.clone(),
            payer: attempt.verified.payer,
            network: sr.network.clone(),
        };
        let observer = self.observer.clone();
        let metrics = self.metrics.clone();
        let store = self.store.clone();
        let key = attempt.key;
        let revision = attempt.record.revision;
        let kept = match disposition(Event::Settled) {
            Disposition::Keep(state) => Some(self.next_record(attempt, state, Some(sr.clone()))),
            Disposition::Release => None,
        };
        let payment = attempt.verified.clone();
        let resource = attempt.record.resource.clone();
        // Run as a task of its own: a request dropped or a handler that panics cannot cut it short.
        let writes = self.run_to_end(async move {
            let observed = async {
                if let Some(observer) = &observer {
                    let event = Observed {
                        payment: &payment,
                        resource: &resource,
                        outcome: &outcome,
                        timing,
                        reconciled: false,
                    };
                    observe(&**observer, &metrics, event).await;
                }
            };
            let written = async {
                match &kept {
                    Some(record) => {
                        write_record(&*store, &key, revision, record).await;
                    }
                    None => release_record(&*store, &key, revision).await,
                }
            };
            tokio::join!(observed, written);
        });
        Box::pin(async move {
            writes.await;
        })
    }

    pub(super) fn failure(
        attempt: &Attempt,
        reason: &str,
        message: Option<String>,
    ) -> SettleResponse {
        SettleResponse {
            success: false,
            error_reason: Some(reason.to_owned()),
            error_message: message,
            transaction: String::new(),
            network: attempt.request.wire_network(),
            payer: Some(crate::address::checksum(&attempt.verified.payer)),
            amount: None,
            extensions: None,
        }
    }

    /// 402 with a `settlement_pending` receipt: resend the identical payment later.
    pub(super) fn pending_answer(request: &SettleRequest, transaction: Option<String>) -> Answer {
        Answer::PaymentRequired {
            error: Cow::Borrowed(SETTLEMENT_PENDING),
            receipt: Some(Self::pending_receipt(request, transaction)),
            version: request.payload.x402_version(),
        }
    }

    /// The `settlement_pending` receipt (with the transaction when one is known).
    fn pending_receipt(request: &SettleRequest, transaction: Option<String>) -> SettleResponse {
        SettleResponse {
            success: false,
            error_reason: Some(SETTLEMENT_PENDING.to_owned()),
            error_message: Some(
                "the settlement's outcome is not known yet; resend the identical payment to get the content \
                 once it is (it will not be charged twice)"
                    .to_owned(),
            ),
            transaction: transaction.unwrap_or_default(),
            network: request.wire_network(),
            payer: Some(crate::address::checksum(&request.payer())),
            amount: None,
            extensions: None,
        }
    }

    /// Applies the keep/release rule ([`disposition`]) to the attempt's record after `event`.
    pub(super) async fn dispose(
        &self,
        attempt: &mut Attempt,
        event: Event,
        settlement: Option<SettleResponse>,
    ) {
        match disposition(event) {
            Disposition::Release => self.release(attempt).await,
            Disposition::Keep(state) => self.save(attempt, state, settlement).await,
        }
    }

    /// The attempt's record in `state` with `settlement`, as it is to be written now.
    pub(super) fn next_record(
        &self,
        attempt: &Attempt,
        state: PaymentState,
        settlement: Option<SettleResponse>,
    ) -> PaymentRecord {
        let mut record = attempt.record.clone();
        record.state = state;
        record.settlement = settlement;
        record.updated_at = self.now();
        if state.is_final() {
            record.payment = StoredPayment::forgotten();
        }
        record
    }

    /// Writes the attempt's record in `state`; a failure is logged loudly (the record stays as it was, and
    /// the reconciler or a resend resolves it).
    pub(super) async fn save(
        &self,
        attempt: &mut Attempt,
        state: PaymentState,
        settlement: Option<SettleResponse>,
    ) {
        let mut record = self.next_record(attempt, state, settlement);
        let revision = attempt.record.revision;
        if write_record(&*self.store, &attempt.key, revision, &record).await {
            record.revision = revision + 1;
            attempt.record = record;
        }
    }

    pub(super) async fn release(&self, attempt: &Attempt) {
        release_record(&*self.store, &attempt.key, attempt.record.revision).await;
    }

    /// Tells the observer; a failure is logged and counted, never propagated.
    pub(super) async fn observe(
        &self,
        payment: &VerifiedPayment,
        resource: &str,
        outcome: &SettleOutcome,
        timing: Option<SettleTiming>,
        reconciled: bool,
    ) {
        let Some(observer) = &self.observer else {
            return;
        };
        let event = Observed {
            payment,
            resource,
            outcome,
            timing,
            reconciled,
        };
        observe(&**observer, &self.metrics, event).await;
    }
}
