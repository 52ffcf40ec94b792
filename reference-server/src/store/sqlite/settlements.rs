//! The settlement log on SQLite: [`SqliteSettlementStore`].

use crate::store::settlements::{
    DiscoveredRow, LATEST_UNRESOLVED_OR_SETTLED, MAX_DISCOVERED, Resolution, SettlementOutcome,
    SettlementRecord, SettlementStore, discovered_from, discovered_row, outcome_counts, sql_int,
};
use crate::store::{Db, StoreError, StoreFuture};
use rusqlite::{OptionalExtension, Row, params};
use x402_tower::extensions::bazaar::DiscoveryResource;

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
                let latest: Option<(i64, String)> = c
                    .prepare_cached(&format!(
                        "SELECT id, outcome FROM settlements WHERE network = ?1 AND asset = ?2 AND payer = ?3 \
                         AND nonce = ?4 AND {LATEST_UNRESOLVED_OR_SETTLED}"
                    ))?
                    .query_row(
                        params![record.network, record.asset, record.payer, record.nonce],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?;
                let id = match Resolution::of(latest, record) {
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
