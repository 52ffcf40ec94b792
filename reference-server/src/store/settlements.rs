//! Query layer for the settlement log: one row per settlement attempt of a paid article, whatever its
//! outcome (`settled`, `failed`, `unknown`).
//!
//! [`SettlementStore`] is what the application uses; [`SqliteSettlementStore`](super::SqliteSettlementStore) implements it over the table of
//! `migrations/sqlite/0003_settlements.sql` (rebuilt by `0013`), `PgSettlementStore` over PostgreSQL's. The
//! rows are written by the x402 layer's settlement observer ([`crate::licensing::settlements`]) before the
//! client is answered, and read by the operator endpoint `GET /operator/settlements`.

use serde::Serialize;

use super::{StoreError, StoreFuture};

use x402_tower::extensions::bazaar::DiscoveryResource;

/// What became of a settlement attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SettlementOutcome {
    /// The payment settled (the row has the transaction).
    Settled,
    /// The settlement failed; the payer was not charged (the row has the reason).
    Failed,
    /// Nobody knows whether money moved (timeout after broadcast): reconcile against the chain.
    Unknown,
}

impl SettlementOutcome {
    /// Every outcome, in a fixed order.
    pub const ALL: [SettlementOutcome; 3] = [
        SettlementOutcome::Settled,
        SettlementOutcome::Failed,
        SettlementOutcome::Unknown,
    ];

    /// `settled`, `failed` or `unknown`: the stored and displayed form.
    pub fn as_str(self) -> &'static str {
        match self {
            SettlementOutcome::Settled => "settled",
            SettlementOutcome::Failed => "failed",
            SettlementOutcome::Unknown => "unknown",
        }
    }

    /// The outcome named `s` (the stored form), if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// One recorded settlement attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettlementRecord {
    /// Row id (insertion order), assigned by the store; ignored on insert.
    pub id: i64,
    /// When it was recorded, RFC 3339 UTC.
    pub at: String,
    /// What became of it.
    pub outcome: SettlementOutcome,
    /// Who paid (checksummed 0x address).
    pub payer: String,
    /// Who was to be paid.
    pub pay_to: String,
    /// The article paid for (from the resource URL), if known.
    pub article_id: Option<String>,
    /// The absolute resource URL paid for.
    pub resource: String,
    /// Amount authorised, token atomic units, decimal string.
    pub amount_atomic: String,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract address.
    pub asset: String,
    /// EIP-3009 authorization nonce.
    pub nonce: String,
    /// x402 protocol version the client used (1 or 2).
    pub x402_version: u8,
    /// Settlement transaction hash (settled), or `None`.
    pub transaction: Option<String>,
    /// The spec's error string (failed), or `None`.
    pub reason: Option<String>,
    /// Detail (failed, unknown), or `None`.
    pub message: Option<String>,
    /// When a reconciliation resolved this row: what it was before (`unknown`, or `in_flight` for a request
    /// that died mid-settlement and left no row).
    pub resolved_from: Option<String>,
    /// When it was resolved, RFC 3339 UTC.
    pub resolved_at: Option<String>,
    /// The payer's verified crawler identity (Web Bot Auth), when its request was signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// What [`SettlementStore::resolve`] does with a reconciled outcome, given the payment's latest `unknown`
/// row: the rule both backends apply.
#[derive(Debug)]
pub(crate) enum Resolution {
    /// Still unknown and already logged as unknown: change nothing.
    Nothing,
    /// Give the unknown row `id` the outcome found.
    Update(i64, SettlementRecord),
    /// No unknown row (a request that died mid-settlement): write a new row, marked as resolved.
    Insert(SettlementRecord),
}

/// The latest `unknown` or `settled` row of an authorization: what [`Resolution::of`] decides from.
pub(crate) const LATEST_UNRESOLVED_OR_SETTLED: &str =
    "outcome IN ('unknown', 'settled') ORDER BY id DESC LIMIT 1";

impl Resolution {
    /// From the authorization's latest `unknown` or `settled` row (its id and outcome), if any.
    pub(crate) fn of(latest: Option<(i64, String)>, record: SettlementRecord) -> Self {
        let latest =
            latest.map(|(id, outcome)| (id, outcome == SettlementOutcome::Settled.as_str()));
        match (latest, record.outcome) {
            // Logged settled already (the record of it was what failed to be written): an authorization
            // moves money once, so this is that settlement; one row.
            (Some((_, true)), _) => Resolution::Nothing,
            (Some(_), SettlementOutcome::Unknown) => Resolution::Nothing,
            (Some((id, false)), _) => Resolution::Update(id, record),
            (None, _) => {
                let mut r = record;
                r.resolved_from = Some("in_flight".to_owned());
                r.resolved_at = Some(r.at.clone());
                Resolution::Insert(r)
            }
        }
    }
}

/// Per-outcome counts in [`SettlementOutcome::ALL`] order, from `(outcome, count)` rows.
pub(crate) fn outcome_counts(
    rows: impl IntoIterator<Item = (String, i64)>,
) -> [(SettlementOutcome, u64); 3] {
    let mut counts = SettlementOutcome::ALL.map(|o| (o, 0u64));
    for (outcome, n) in rows {
        if let Some(slot) = counts.iter_mut().find(|(o, _)| o.as_str() == outcome) {
            slot.1 = u64::try_from(n).unwrap_or(0);
        }
    }
    counts
}

/// The settlement log's storage.
pub trait SettlementStore: Send + Sync + std::fmt::Debug {
    /// Records one settlement attempt durably; returns its row id.
    fn record(&self, record: SettlementRecord) -> StoreFuture<'_, i64>;
    /// Records the reconciliation of an unknown outcome: the payment's latest `unknown` row takes the outcome
    /// found (with `resolved_from = 'unknown'` and `resolved_at`); with no such row (a request that died
    /// mid-settlement) a new row is written with `resolved_from = 'in_flight'`. A reconciliation that found
    /// nothing new (still unknown), or a payment the log has as settled already (its payment record was not
    /// written), changes nothing. Returns the row changed or written, if any.
    fn resolve(&self, record: SettlementRecord) -> StoreFuture<'_, Option<i64>>;
    /// The most recent settlement attempts (newest first, at most `limit`), of one outcome or all.
    fn recent(
        &self,
        outcome: Option<SettlementOutcome>,
        limit: u32,
    ) -> StoreFuture<'_, Vec<SettlementRecord>>;
    /// Number of recorded settlement attempts per outcome (all time), in [`SettlementOutcome::ALL`] order.
    fn count_by_outcome(&self) -> StoreFuture<'_, [(SettlementOutcome, u64); 3]>;
    /// Catalogues (or refreshes, by URL) a resource whose payment the facilitator settled (x402 bazaar).
    /// Past [`MAX_DISCOVERED`] resources a new one is not added (`false`); known ones are still refreshed.
    fn upsert_discovered(&self, resource: DiscoveryResource) -> StoreFuture<'_, bool>;
    /// The catalogued resources of `kind` (all kinds with `None`), ordered by URL: the `limit` from
    /// `offset`, and how many there are in all.
    fn discovered(
        &self,
        kind: Option<String>,
        offset: u64,
        limit: u64,
    ) -> StoreFuture<'_, (Vec<DiscoveryResource>, u64)>;
}

/// Most resources the discovery catalogue keeps (its writers hold the facilitator token, but a bug or a
/// leaked token must not grow it without bound).
pub const MAX_DISCOVERED: u64 = 10_000;

/// A catalogued resource's columns: `(resource, kind, x402_version, accepts JSON, metadata JSON,
/// last_updated)`.
pub(crate) type DiscoveredRow = (String, String, i64, String, String, i64);

/// A count or position as SQL's signed 64-bit integer (saturating).
pub(crate) fn sql_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A resource as stored.
pub(crate) fn discovered_row(r: &DiscoveryResource) -> DiscoveredRow {
    (
        r.resource.clone(),
        r.kind.clone(),
        i64::from(r.x402_version),
        serde_json::to_string(&r.accepts).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&r.metadata).unwrap_or_else(|_| "{}".into()),
        r.last_updated_unix().unwrap_or(0),
    )
}

/// A stored resource, read back.
pub(crate) fn discovered_from(row: DiscoveredRow) -> Result<DiscoveryResource, StoreError> {
    let (resource, kind, version, accepts, metadata, last_updated) = row;
    let bad = |e: serde_json::Error| StoreError::Invalid(format!("discovery_resources: {e}"));
    Ok(DiscoveryResource {
        resource,
        kind,
        x402_version: u8::try_from(version).unwrap_or(2),
        accepts: serde_json::from_str(&accepts).map_err(bad)?,
        last_updated: serde_json::json!(last_updated),
        metadata: serde_json::from_str(&metadata).map_err(bad)?,
    })
}
