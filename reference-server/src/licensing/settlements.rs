//! The settlement log: the x402 layer's [`SettlementObserver`] that writes every settlement attempt of a
//! paid article (settled, failed, **unknown**) to the `settlements` table before the client is answered,
//! and counts it for `/metrics`.
//!
//! Why: with an unknown outcome (the on-chain settler timed out after broadcasting, the facilitator did not
//! answer `/settle`) the client gets 402 `settlement_pending` and no receipt is written, yet money may have
//! moved. The row says so until the engine reconciles the payment, which then updates it
//! (`GET /operator/settlements?outcome=unknown` lists what is still open).

use std::sync::atomic::{AtomicU64, Ordering};

use x402_tower::pricing::BoxFuture;
use x402_tower::proto::checksum;
use x402_tower::settle::{ObservedOutcome, ObserverError, SettlementEvent, SettlementObserver};

use super::handlers::MAX_ARTICLE_ID_LEN;
use crate::store::settlements::{SettlementOutcome, SettlementRecord, SettlementStore};
use crate::web::clock::now_rfc3339;
use std::sync::Arc;

/// Writes every settlement attempt through the [`SettlementStore`] and counts what it recorded.
#[derive(Debug)]
pub struct SettlementLog {
    store: Arc<dyn SettlementStore>,
    /// Rows written since start, by outcome ([`SettlementOutcome::ALL`] order).
    recorded: [AtomicU64; 3],
    /// Settlements that could not be written.
    failures: AtomicU64,
}

impl SettlementLog {
    /// A log writing to `store`.
    pub fn new(store: Arc<dyn SettlementStore>) -> Self {
        Self {
            store,
            recorded: Default::default(),
            failures: AtomicU64::new(0),
        }
    }

    /// The store it writes to (the operator endpoint reads it).
    pub fn store(&self) -> &dyn SettlementStore {
        &*self.store
    }

    /// Rows written since start with `outcome`.
    pub fn recorded(&self, outcome: SettlementOutcome) -> u64 {
        self.recorded[slot(outcome)].load(Ordering::Relaxed)
    }

    /// Append `x402_settlements_recorded_total{outcome}` and `x402_settlement_record_failures_total` to the
    /// Prometheus text.
    pub fn record_metrics(&self) {
        metrics::describe_counter!(
            "x402_settlements_recorded_total",
            "Settlement attempts written to the settlements table since start, by outcome (unknown: money may \
             have moved, reconcile)."
        );
        for o in SettlementOutcome::ALL {
            metrics::counter!("x402_settlements_recorded_total", "outcome" => o.as_str())
                .absolute(self.recorded(o));
        }
        crate::metrics::counter(
            "x402_settlement_record_failures_total",
            "Settlement attempts that could not be written (logged as SETTLEMENT NOT RECORDED).",
            self.failures.load(Ordering::Relaxed),
        );
    }

    async fn write(&self, event: SettlementEvent<'_>) -> Result<(), ObserverError> {
        let p = event.payment;
        let (outcome, transaction, reason, message) = match event.outcome {
            ObservedOutcome::Settled { transaction } => (
                SettlementOutcome::Settled,
                Some(transaction.clone()),
                None,
                None,
            ),
            ObservedOutcome::Failed { reason, message } => (
                SettlementOutcome::Failed,
                None,
                Some(reason.clone()),
                message.clone(),
            ),
            ObservedOutcome::Unknown {
                message,
                transaction,
            } => (
                SettlementOutcome::Unknown,
                transaction.clone(),
                None,
                Some(message.clone()),
            ),
        };
        let record = SettlementRecord {
            id: 0,
            at: now_rfc3339(),
            outcome,
            payer: checksum(&p.payer),
            pay_to: checksum(&p.pay_to),
            article_id: article_id(event.resource),
            resource: event.resource.to_owned(),
            // What was charged: for `upto`, the charge, not the signed maximum.
            amount_atomic: p.charge.unwrap_or(p.amount).to_string(),
            network: p.network.caip2().to_owned(),
            asset: checksum(&p.asset),
            nonce: p.nonce.to_string(),
            x402_version: p.x402_version,
            transaction,
            reason,
            message,
            resolved_from: None,
            resolved_at: None,
            // The request's verified crawler, carried with the payment (`bot_auth::AgentOfRequest`).
            agent: p
                .context
                .get::<super::bot_auth::VerifiedAgent>()
                .map(|a| a.agent.clone()),
        };
        let written = if event.reconciled {
            // A reconciliation: the unknown row becomes what was found (a still-unknown one stays as it is).
            self.store.resolve(record).await
        } else {
            self.store.record(record).await.map(Some)
        };
        match written {
            Ok(None) => Ok(()),
            Ok(Some(id)) => {
                self.recorded[slot(outcome)].fetch_add(1, Ordering::Relaxed);
                if outcome == SettlementOutcome::Unknown {
                    tracing::warn!(
                        id, payer = %p.payer, nonce = %p.nonce, resource = event.resource,
                        "settlement outcome unknown: recorded for reconciliation"
                    );
                }
                Ok(())
            }
            Err(e) => {
                // The layer logs it again with the payment; this line names the table.
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, outcome = outcome.as_str(), payer = %p.payer, nonce = %p.nonce,
                    "settlement row could not be written");
                Err(ObserverError::new(e))
            }
        }
    }
}

impl SettlementObserver for SettlementLog {
    fn on_settlement<'a>(
        &'a self,
        event: SettlementEvent<'a>,
    ) -> BoxFuture<'a, Result<(), ObserverError>> {
        Box::pin(self.write(event))
    }
}

fn slot(outcome: SettlementOutcome) -> usize {
    match outcome {
        SettlementOutcome::Settled => 0,
        SettlementOutcome::Failed => 1,
        SettlementOutcome::Unknown => 2,
    }
}

/// The `articleId` of a resource URL (`…/x402Article?articleId=<id>`), if present and sane.
fn article_id(resource: &str) -> Option<String> {
    let (_, query) = resource.split_once('?')?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "articleId")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty() && v.len() <= MAX_ARTICLE_ID_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn article_id_comes_from_the_resource_query() {
        assert_eq!(
            article_id("http://h/x402Article?articleId=c2pa-explained").as_deref(),
            Some("c2pa-explained")
        );
        assert_eq!(
            article_id("http://h/x402Article?x=1&articleId=a%20b").as_deref(),
            Some("a b")
        );
        assert_eq!(article_id("http://h/x402Article"), None);
        assert_eq!(article_id("http://h/x402Article?articleId="), None);
    }
}
