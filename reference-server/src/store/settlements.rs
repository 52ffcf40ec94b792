//! Query layer for the settlement log: one row per settlement attempt of a paid article, whatever its
//! outcome (`settled`, `failed`, `unknown`).
//!
//! [`SettlementStore`] is what the application uses; [`SqliteSettlementStore`] implements it over the table of
//! `migrations/sqlite/0003_settlements.sql` (rebuilt by `0013`), `PgSettlementStore` over PostgreSQL's. The
//! rows are written by the x402 layer's settlement observer ([`crate::licensing::settlements`]) before the
//! client is answered, and read by the operator endpoint `GET /operator/settlements`.

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::{Db, StoreError, StoreFuture};
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

const COLUMNS: &str = "id, at, outcome, payer, pay_to, article_id, resource, amount_atomic, network, \
     asset, nonce, x402_version, tx_hash, reason, message, resolved_from, resolved_at, agent";

fn record_from_row(r: &Row<'_>) -> rusqlite::Result<SettlementRecord> {
    let raw: String = r.get(2)?;
    let outcome = SettlementOutcome::parse(&raw).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            2,
            rusqlite::types::Type::Text,
            format!("unknown settlement outcome {raw:?}").into(),
        )
    })?;
    Ok(SettlementRecord {
        id: r.get(0)?,
        at: r.get(1)?,
        outcome,
        payer: r.get(3)?,
        pay_to: r.get(4)?,
        article_id: r.get(5)?,
        resource: r.get(6)?,
        amount_atomic: r.get(7)?,
        network: r.get(8)?,
        asset: r.get(9)?,
        nonce: r.get(10)?,
        x402_version: r.get(11)?,
        transaction: r.get(12)?,
        reason: r.get(13)?,
        message: r.get(14)?,
        resolved_from: r.get(15)?,
        resolved_at: r.get(16)?,
        agent: r.get(17)?,
    })
}

fn insert(c: &rusqlite::Connection, r: &SettlementRecord) -> Result<i64, StoreError> {
    c.prepare_cached(
        "INSERT INTO settlements (at, outcome, payer, pay_to, article_id, resource, amount_atomic, network, \
         asset, nonce, x402_version, tx_hash, reason, message, resolved_from, resolved_at, agent) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    )?
    .execute(params![
        r.at,
        r.outcome.as_str(),
        r.payer,
        r.pay_to,
        r.article_id,
        r.resource,
        r.amount_atomic,
        r.network,
        r.asset,
        r.nonce,
        r.x402_version,
        r.transaction,
        r.reason,
        r.message,
        r.resolved_from,
        r.resolved_at,
        r.agent
    ])?;
    Ok(c.last_insert_rowid())
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

impl Resolution {
    pub(crate) fn of(unknown: Option<i64>, record: SettlementRecord) -> Self {
        match (unknown, record.outcome) {
            (Some(_), SettlementOutcome::Unknown) => Resolution::Nothing,
            (Some(id), _) => Resolution::Update(id, record),
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
    /// nothing new (still unknown) changes an existing unknown row not at all. Returns the row changed or
    /// written, if any.
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

/// [`SettlementStore`] on SQLite.
#[derive(Debug, Clone)]
pub struct SqliteSettlementStore {
    db: Db,
}

impl SqliteSettlementStore {
    /// The store over `db` (migrated).
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl SettlementStore for SqliteSettlementStore {
    fn record(&self, record: SettlementRecord) -> StoreFuture<'_, i64> {
        Box::pin(self.db.write_statement(move |c| insert(c, &record)))
    }

    fn resolve(&self, record: SettlementRecord) -> StoreFuture<'_, Option<i64>> {
        Box::pin(self.db.write(move |c| {
                let unknown: Option<i64> = c
                    .prepare_cached(
                        "SELECT id FROM settlements WHERE network = ?1 AND asset = ?2 AND payer = ?3 \
                         AND nonce = ?4 AND outcome = 'unknown' ORDER BY id DESC LIMIT 1",
                    )?
                    .query_row(
                        params![record.network, record.asset, record.payer, record.nonce],
                        |r| r.get(0),
                    )
                    .optional()?;
                let id = match Resolution::of(unknown, record) {
                    Resolution::Nothing => None,
                    Resolution::Update(id, record) => {
                        c.prepare_cached(
                            "UPDATE settlements SET outcome = ?2, tx_hash = COALESCE(?3, tx_hash), reason = ?4, \
                             message = ?5, resolved_from = 'unknown', resolved_at = ?6 WHERE id = ?1",
                        )?
                        .execute(params![
                            id,
                            record.outcome.as_str(),
                            record.transaction,
                            record.reason,
                            record.message,
                            record.at
                        ])?;
                        Some(id)
                    }
                    Resolution::Insert(r) => Some(insert(c, &r)?),
                };
                Ok(id)
            }))
    }

    fn recent(
        &self,
        outcome: Option<SettlementOutcome>,
        limit: u32,
    ) -> StoreFuture<'_, Vec<SettlementRecord>> {
        Box::pin(self.db.read(move |c| {
            let rows = match outcome {
                Some(o) => c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM settlements WHERE outcome = ?1 \
                             ORDER BY id DESC LIMIT ?2"
                    ))?
                    .query_map(params![o.as_str(), limit], record_from_row)?
                    .collect::<Result<Vec<_>, _>>()?,
                None => c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM settlements ORDER BY id DESC LIMIT ?1"
                    ))?
                    .query_map(params![limit], record_from_row)?
                    .collect::<Result<Vec<_>, _>>()?,
            };
            Ok(rows)
        }))
    }

    fn count_by_outcome(&self) -> StoreFuture<'_, [(SettlementOutcome, u64); 3]> {
        Box::pin(self.db.read(|c| {
            let mut stmt =
                c.prepare_cached("SELECT outcome, COUNT(*) FROM settlements GROUP BY outcome")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(outcome_counts(rows))
        }))
    }

    fn upsert_discovered(&self, resource: DiscoveryResource) -> StoreFuture<'_, bool> {
        let (url, kind, version, accepts, metadata, at) = discovered_row(&resource);
        Box::pin(self.db.write(move |c| {
            let n = c.prepare_cached(UPSERT_DISCOVERED)?.execute(params![
                url,
                kind,
                version,
                accepts,
                metadata,
                at,
                sql_int(MAX_DISCOVERED)
            ])?;
            Ok(n > 0)
        }))
    }

    fn discovered(
        &self,
        kind: Option<String>,
        offset: u64,
        limit: u64,
    ) -> StoreFuture<'_, (Vec<DiscoveryResource>, u64)> {
        let (offset, limit) = (sql_int(offset), sql_int(limit));
        Box::pin(self.db.read(move |c| {
            let total: i64 = c
                .prepare_cached(
                    "SELECT COUNT(*) FROM discovery_resources WHERE ?1 IS NULL OR kind = ?1",
                )?
                .query_row([&kind], |r| r.get(0))?;
            let mut stmt = c.prepare_cached(
                "SELECT resource, kind, x402_version, accepts, metadata, last_updated \
                 FROM discovery_resources WHERE ?1 IS NULL OR kind = ?1 ORDER BY resource LIMIT ?2 OFFSET ?3",
            )?;
            let rows = stmt
                .query_map(params![kind, limit, offset], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?
                .collect::<Result<Vec<DiscoveredRow>, _>>()?;
            let items = rows
                .into_iter()
                .map(discovered_from)
                .collect::<Result<_, _>>()?;
            Ok((items, u64::try_from(total).unwrap_or(0)))
        }))
    }
}

/// Insert a discovered resource, or refresh it; a new one only below the cap.
const UPSERT_DISCOVERED: &str = "INSERT INTO discovery_resources (resource, kind, x402_version, accepts, metadata, last_updated) \
     SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS (SELECT 1 FROM discovery_resources WHERE resource = ?1) \
        OR (SELECT COUNT(*) FROM discovery_resources) < ?7 \
     ON CONFLICT (resource) DO UPDATE SET kind = excluded.kind, x402_version = excluded.x402_version, \
        accepts = excluded.accepts, metadata = excluded.metadata, last_updated = excluded.last_updated";
