//! Reconciliation: payments whose settlement outcome is unknown, on a resend or in the background.

use tracing::{Instrument, debug_span, error};

use crate::payment::{SettleTiming, VerifiedPayment};
use crate::proto::SettleResponse;
use crate::settle::{SETTLEMENT_PENDING, SettleOutcome};
use crate::store::{Event, PaymentStore, StoreError};

use super::admit::pending_transaction;
use super::{Admitted, Answer, Attempt, PaymentEngine, facilitator};

/// What a background reconciliation pass did ([`PaymentEngine::reconcile_unresolved`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Records looked at.
    pub examined: usize,
    /// Found settled.
    pub settled: usize,
    /// Found failed for good.
    pub failed: usize,
    /// Found unsettled and still usable: released (nothing was charged; the payer may pay with it again).
    pub released: usize,
    /// Still unknown.
    pub pending: usize,
    /// Claimed by someone else first, or unreadable.
    pub skipped: usize,
}

impl PaymentEngine {
    /// Asks the settler what became of a claimed payment (never moving money again), reports it, and writes
    /// it as a settlement outcome ([`PaymentEngine::apply`]). `None`: not settled and still usable, which the
    /// caller decides (settle anew, or release).
    pub(super) async fn reconcile(
        &self,
        attempt: &mut Attempt,
        timing: Option<SettleTiming>,
    ) -> Option<Result<SettleResponse, Answer>> {
        if attempt.record.settlement.is_none() && self.settler.moves_money() {
            // Left `InFlight` before it was marked as settling ([`PaymentEngine::mark_settling`]): the
            // settler was never asked to move it. (A settler that moves no money marks nothing: it is asked,
            // and its answer recorded, as for any other record.)
            return None;
        }
        let transaction = pending_transaction(&attempt.record);
        let outcome = self
            .settler
            .reconcile(&attempt.request, transaction.as_deref())
            .instrument(debug_span!("x402.reconcile"))
            .await;
        self.observe(
            &attempt.verified,
            &attempt.record.resource,
            &outcome,
            timing,
            true,
        )
        .await;
        match outcome {
            SettleOutcome::Failed {
                authorization_still_usable: true,
                ..
            } => None,
            outcome => Some(self.apply(attempt, outcome).await),
        }
    }

    /// Reconciles a claimed `Pending` (or abandoned) payment on a resend: delivered when settled, settled
    /// anew under this claim when nothing moved, refused otherwise.
    pub(super) async fn reconcile_claimed(
        &self,
        mut attempt: Box<Attempt>,
        timing: Option<SettleTiming>,
    ) -> Admitted {
        match self.reconcile(&mut attempt, timing).await {
            None => Admitted::Fresh(attempt),
            Some(Ok(settlement)) => {
                attempt.verified.settlement = Some(settlement);
                attempt.verified.redelivered = true;
                Admitted::Redeliver(attempt)
            }
            Some(Err(answer)) => Admitted::Answer(answer),
        }
    }

    /// Resolves, without any client, up to `limit` payments whose settlement outcome is unknown (`Pending`)
    /// or whose request died mid-flight: asks [`Settler::reconcile`](crate::Settler::reconcile), reports to the observer (with
    /// `reconciled: true`) and writes the outcome. A payment found unsettled and still usable is released:
    /// nothing was charged. So is, without asking the settler, one whose request died before its settlement
    /// began (see the [store's states](crate::store#states-and-the-keeprelease-rule)). Run it periodically
    /// (the reference server does, every 30 s).
    pub async fn reconcile_unresolved(&self, limit: usize) -> Result<ReconcileReport, StoreError> {
        let now = self.now();
        let list = self
            .store
            .unresolved(now, now.saturating_sub(self.stale_after), limit)
            .await?;
        let mut report = ReconcileReport::default();
        for (key, record) in list {
            report.examined += 1;
            let request = match facilitator::stored_request(&self.schemes, &record.payment) {
                Ok(r) => r,
                Err(e) => {
                    error!(payer = %key.from, nonce = %key.nonce, error = %e.message, "stored payment unreadable");
                    report.skipped += 1;
                    continue;
                }
            };
            let Some(claimed) = self.claim(&key, &record, now).await? else {
                report.skipped += 1;
                continue;
            };
            let verified = VerifiedPayment::from_request(&request);
            let mut attempt = Attempt {
                request,
                key,
                record: claimed,
                verified,
                on_settled: None,
            };
            match self.reconcile(&mut attempt, None).await {
                None => {
                    // Nothing was charged: the payer may present the authorization again.
                    let event = Event::SettlementFailed { still_usable: true };
                    self.dispose(&mut attempt, event, None).await;
                    report.released += 1;
                }
                Some(Ok(_)) => report.settled += 1,
                Some(Err(Answer::PaymentRequired { error, .. })) if error == SETTLEMENT_PENDING => {
                    report.pending += 1
                }
                Some(Err(_)) => report.failed += 1,
            }
        }
        Ok(report)
    }
}
