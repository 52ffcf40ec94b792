//! [`SettlementStore`] on PostgreSQL.

use tokio_postgres::Row;

use super::{Pg, Statement, param};
use crate::store::settlements::{
    LATEST_UNRESOLVED_OR_SETTLED, MAX_DISCOVERED, Resolution, SettlementOutcome, SettlementRecord,
    SettlementStore, discovered_from, discovered_row, outcome_counts, sql_int,
};
use crate::store::{StoreError, StoreFuture};
use x402_tower::extensions::bazaar::DiscoveryResource;

/// [`SettlementStore`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgSettlementStore {
    pg: Pg,
}

impl PgSettlementStore {
    /// The store over `pg` (migrated).
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

const COLUMNS: &str = "id, at, outcome, payer, pay_to, article_id, resource, amount_atomic, network, \
     asset, nonce, x402_version, tx_hash, reason, message, resolved_from, resolved_at, agent";

const INSERT: &str = "INSERT INTO settlements (at, outcome, payer, pay_to, article_id, resource, \
     amount_atomic, network, asset, nonce, x402_version, tx_hash, reason, message, resolved_from, resolved_at, \
     agent) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING id";

fn record(r: &Row) -> Result<SettlementRecord, StoreError> {
    let raw: String = r.try_get(2)?;
    let version: i16 = r.try_get(11)?;
    Ok(SettlementRecord {
        id: r.try_get(0)?,
        at: r.try_get(1)?,
        outcome: SettlementOutcome::parse(&raw)
            .ok_or_else(|| StoreError::Invalid(format!("unknown settlement outcome {raw:?}")))?,
        payer: r.try_get(3)?,
        pay_to: r.try_get(4)?,
        article_id: r.try_get(5)?,
        resource: r.try_get(6)?,
        amount_atomic: r.try_get(7)?,
        network: r.try_get(8)?,
        asset: r.try_get(9)?,
        nonce: r.try_get(10)?,
        x402_version: u8::try_from(version)
            .map_err(|_| StoreError::Invalid(format!("x402 version {version}")))?,
        transaction: r.try_get(12)?,
        reason: r.try_get(13)?,
        message: r.try_get(14)?,
        resolved_from: r.try_get(15)?,
        resolved_at: r.try_get(16)?,
        agent: r.try_get(17)?,
    })
}

/// The statement that inserts `r` and returns its id.
fn insert(r: SettlementRecord) -> Statement {
    let version = i16::from(r.x402_version);
    Statement::new(
        INSERT,
        vec![
            param(r.at),
            param(r.outcome.as_str()),
            param(r.payer),
            param(r.pay_to),
            param(r.article_id),
            param(r.resource),
            param(r.amount_atomic),
            param(r.network),
            param(r.asset),
            param(r.nonce),
            param(version),
            param(r.transaction),
            param(r.reason),
            param(r.message),
            param(r.resolved_from),
            param(r.resolved_at),
            param(r.agent),
        ],
    )
}

/// The id an `INSERT … RETURNING id` returned.
fn inserted_id(rows: &[Row]) -> Result<i64, StoreError> {
    let row = rows
        .first()
        .ok_or_else(|| StoreError::Invalid("INSERT … RETURNING id returned no row".into()))?;
    Ok(row.try_get(0)?)
}

impl SettlementStore for PgSettlementStore {
    fn record(&self, record: SettlementRecord) -> StoreFuture<'_, i64> {
        Box::pin(async move {
            let rows = self.pg.write(insert(record)).await?;
            inserted_id(&rows)
        })
    }

    fn resolve(&self, record: SettlementRecord) -> StoreFuture<'_, Option<i64>> {
        Box::pin(async move {
            let mut c = self.pg.client().await?;
            let tx = c.transaction().await?;
            let latest: Option<(i64, String)> = tx
                .query_opt(
                    &format!(
                        "SELECT id, outcome FROM settlements WHERE network = $1 AND asset = $2 AND payer = $3 \
                         AND nonce = $4 AND {LATEST_UNRESOLVED_OR_SETTLED} FOR UPDATE"
                    ),
                    &[&record.network, &record.asset, &record.payer, &record.nonce],
                )
                .await?
                .map(|r| Ok::<_, tokio_postgres::Error>((r.try_get(0)?, r.try_get(1)?)))
                .transpose()?;
            let id = match Resolution::of(latest, record) {
                Resolution::Nothing => None,
                Resolution::Update(id, record) => {
                    tx.execute(
                        "UPDATE settlements SET outcome = $2, tx_hash = COALESCE($3, tx_hash), reason = $4, \
                         message = $5, resolved_from = 'unknown', resolved_at = $6 WHERE id = $1",
                        &[
                            &id,
                            &record.outcome.as_str(),
                            &record.transaction,
                            &record.reason,
                            &record.message,
                            &record.at,
                        ],
                    )
                    .await?;
                    Some(id)
                }
                Resolution::Insert(r) => Some(inserted_id(&insert(r).run(&tx).await?)?),
            };
            tx.commit().await?;
            Ok(id)
        })
    }

    fn recent(
        &self,
        outcome: Option<SettlementOutcome>,
        limit: u32,
    ) -> StoreFuture<'_, Vec<SettlementRecord>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM settlements WHERE ($1::text IS NULL OR outcome = $1) \
                     ORDER BY id DESC LIMIT $2"
                ))
                .await?;
            c.query(&stmt, &[&outcome.map(|o| o.as_str()), &i64::from(limit)])
                .await?
                .iter()
                .map(record)
                .collect()
        })
    }

    fn count_by_outcome(&self) -> StoreFuture<'_, [(SettlementOutcome, u64); 3]> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let rows = c
                .query(
                    "SELECT outcome, COUNT(*) FROM settlements GROUP BY outcome",
                    &[],
                )
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<Vec<(String, i64)>, StoreError>>()?;
            Ok(outcome_counts(rows))
        })
    }

    fn upsert_discovered(&self, resource: DiscoveryResource) -> StoreFuture<'_, bool> {
        let (url, kind, version, accepts, metadata, at) = discovered_row(&resource);
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(
                    "INSERT INTO discovery_resources (resource, kind, x402_version, accepts, metadata, last_updated) \
                     SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM discovery_resources WHERE resource = $1) \
                        OR (SELECT COUNT(*) FROM discovery_resources) < $7 \
                     ON CONFLICT (resource) DO UPDATE SET kind = excluded.kind, x402_version = excluded.x402_version, \
                        accepts = excluded.accepts, metadata = excluded.metadata, last_updated = excluded.last_updated",
                )
                .await?;
            let version = i16::try_from(version).unwrap_or(2);
            let cap = sql_int(MAX_DISCOVERED);
            let n = c
                .execute(
                    &stmt,
                    &[&url, &kind, &version, &accepts, &metadata, &at, &cap],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn discovered(
        &self,
        kind: Option<String>,
        offset: u64,
        limit: u64,
    ) -> StoreFuture<'_, (Vec<DiscoveryResource>, u64)> {
        let (offset, limit) = (sql_int(offset), sql_int(limit));
        Box::pin(async move {
            let c = self.pg.client().await?;
            let total: i64 = c
                .query_one(
                    "SELECT COUNT(*) FROM discovery_resources WHERE $1::text IS NULL OR kind = $1",
                    &[&kind],
                )
                .await?
                .try_get(0)?;
            let stmt = c
                .prepare_cached(
                    "SELECT resource, kind, x402_version, accepts, metadata, last_updated \
                     FROM discovery_resources WHERE $1::text IS NULL OR kind = $1 \
                     ORDER BY resource LIMIT $2 OFFSET $3",
                )
                .await?;
            let mut items = Vec::new();
            for r in c.query(&stmt, &[&kind, &limit, &offset]).await? {
                let version: i16 = r.try_get(2)?;
                items.push(discovered_from((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    i64::from(version),
                    r.try_get(3)?,
                    r.try_get(4)?,
                    r.try_get(5)?,
                ))?);
            }
            Ok((items, u64::try_from(total).unwrap_or(0)))
        })
    }
}
