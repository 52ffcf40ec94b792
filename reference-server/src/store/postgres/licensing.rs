//! [`LicensingStore`] on PostgreSQL.

use std::sync::{Arc, LazyLock};

use tokio_postgres::Row;

use super::{Pg, Statement, big, changed, param, unsigned};
use crate::domain::{Article, Receipt};
use crate::store::licensing::{
    DailyInterest, DailyPurchases, LicenseMint, LicensingStore, LlmsTxtInterest, LlmsTxtStats,
    MINT_COLUMNS, RECEIPT_COLUMNS, UserAgentCount, activity_interest_sql, activity_purchases_sql,
    already_issued, price, queue_mints_sql, receipt_of_sql,
};
use crate::store::{StoreError, StoreFuture};

/// [`LicensingStore`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgLicensingStore {
    pg: Pg,
}

impl PgLicensingStore {
    /// The store over `pg` (migrated).
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

const ARTICLE_COLUMNS: &str =
    "id, title, excerpt, content, author_name, published_date, price_atomic, published, licenses";

fn article(r: &Row) -> Result<Article, StoreError> {
    Ok(Article {
        id: r.try_get(0)?,
        title: r.try_get(1)?,
        excerpt: r.try_get(2)?,
        content: r.try_get(3)?,
        author_name: r.try_get(4)?,
        published_date: r.try_get(5)?,
        price_atomic: unsigned(r.try_get(6)?),
        published: r.try_get(7)?,
        licenses: crate::domain::license::from_stored(r.try_get::<_, Option<&str>>(8)?)
            .map_err(|e| StoreError::Invalid(format!("article licenses: {e}")))?,
    })
}

fn mint(r: &Row) -> Result<LicenseMint, StoreError> {
    Ok(LicenseMint {
        token_id: r.try_get(0)?,
        owner: r.try_get(1)?,
        status: r.try_get(2)?,
        attempts: unsigned(r.try_get(3)?),
        tx_hash: r.try_get(4)?,
        last_error: r.try_get(5)?,
        updated_at: r.try_get(6)?,
    })
}

fn receipt(r: &Row) -> Result<Receipt, StoreError> {
    let version: i16 = r.try_get(8)?;
    Ok(Receipt {
        token_id: r.try_get(0)?,
        article_id: r.try_get(1)?,
        payer: r.try_get(2)?,
        pay_to: r.try_get(3)?,
        amount_atomic: r.try_get(4)?,
        network: r.try_get(5)?,
        asset: r.try_get(6)?,
        nonce: r.try_get(7)?,
        x402_version: u8::try_from(version)
            .map_err(|_| StoreError::Invalid(format!("x402 version {version}")))?,
        settlement: r.try_get(9)?,
        created_at: r.try_get(10)?,
        signed: r.try_get(11)?,
        license_id: r.try_get(12)?,
        license_version: r.try_get(13)?,
        agent: r.try_get(14)?,
    })
}

/// A receipt's insert: the SQL built once (every purchase runs it).
static INSERT_RECEIPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT DO NOTHING RETURNING 1"
    )
});

impl LicensingStore for PgLicensingStore {
    fn list_published(&self) -> StoreFuture<'_, Vec<Article>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(&format!(
                    "SELECT {ARTICLE_COLUMNS} FROM articles WHERE published ORDER BY published_date DESC, id"
                ))
                .await?;
            c.query(&stmt, &[]).await?.iter().map(article).collect()
        })
    }

    fn article<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Article>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(&format!(
                    "SELECT {ARTICLE_COLUMNS} FROM articles WHERE id = $1"
                ))
                .await?;
            c.query_opt(&stmt, &[&id])
                .await?
                .as_ref()
                .map(article)
                .transpose()
        })
    }

    fn count_articles(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let n: i64 = c
                .query_one("SELECT COUNT(*) FROM articles", &[])
                .await?
                .try_get(0)?;
            Ok(unsigned(n))
        })
    }

    fn insert_articles(&self, articles: Vec<Article>) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let mut c = self.pg.client().await?;
            let tx = c.transaction().await?;
            let stmt = tx
                .prepare(&format!(
                    "INSERT INTO articles ({ARTICLE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (id) DO NOTHING"
                ))
                .await?;
            let mut n = 0;
            for a in &articles {
                n += tx
                    .execute(
                        &stmt,
                        &[
                            &a.id,
                            &a.title,
                            &a.excerpt,
                            &a.content,
                            &a.author_name,
                            &a.published_date,
                            &price(a)?,
                            &a.published,
                            &crate::domain::license::to_stored(&a.licenses),
                        ],
                    )
                    .await?;
            }
            tx.commit().await?;
            Ok(n as usize)
        })
    }

    fn insert_receipt(&self, r: Arc<Receipt>) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            crate::store::licensing::check_token(&r)?;
            // A conflict is a result, not an error: an error would abort the other writes of its group.
            let insert = Statement::new(
                INSERT_RECEIPT.as_str(),
                vec![
                    param(r.token_id.clone()),
                    param(r.article_id.clone()),
                    param(r.payer.clone()),
                    param(r.pay_to.clone()),
                    param(r.amount_atomic.clone()),
                    param(r.network.clone()),
                    param(r.asset.clone()),
                    param(r.nonce.clone()),
                    param(i16::from(r.x402_version)),
                    param(r.settlement.clone()),
                    param(r.created_at.clone()),
                    param(r.signed.clone()),
                    param(r.license_id.clone()),
                    param(r.license_version.clone()),
                    param(r.agent.clone()),
                ],
            );
            if changed(self.pg.write(insert).await?) {
                Ok(())
            } else {
                Err(already_issued(&r.token_id))
            }
        })
    }

    fn receipt<'a>(&'a self, token_id: &'a str) -> StoreFuture<'a, Option<Receipt>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(&format!(
                    "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE token_id = $1"
                ))
                .await?;
            c.query_opt(&stmt, &[&token_id])
                .await?
                .as_ref()
                .map(receipt)
                .transpose()
        })
    }

    fn count_receipts(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let n: i64 = c
                .query_one("SELECT COUNT(*) FROM receipts", &[])
                .await?
                .try_get(0)?;
            Ok(unsigned(n))
        })
    }

    fn receipt_of<'a>(
        &'a self,
        payer: &'a str,
        article_id: &'a str,
    ) -> StoreFuture<'a, Option<Receipt>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c.prepare_cached(&receipt_of_sql("$1", "$2")).await?;
            c.query_opt(&stmt, &[&payer, &article_id])
                .await?
                .as_ref()
                .map(receipt)
                .transpose()
        })
    }

    fn queue_mints(&self, now: String, limit: u32) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            Ok(
                c.execute(&queue_mints_sql("$1", "$2"), &[&now, &i64::from(limit)])
                    .await?,
            )
        })
    }

    fn pending_mints(&self, limit: u32) -> StoreFuture<'_, Vec<LicenseMint>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            c.query(
                &format!(
                    "SELECT {MINT_COLUMNS} FROM license_mints WHERE status = 'pending' \
                     ORDER BY attempts, updated_at, token_id LIMIT $1"
                ),
                &[&i64::from(limit)],
            )
            .await?
            .iter()
            .map(mint)
            .collect()
        })
    }

    fn record_mint(
        &self,
        token_ids: Vec<String>,
        outcome: Result<String, String>,
        now: String,
    ) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let (status, tx, error) = match &outcome {
                Ok(tx) => ("minted", Some(tx.as_str()), None),
                Err(e) => ("pending", None, Some(e.as_str())),
            };
            c.execute(
                "UPDATE license_mints SET status = $2, attempts = attempts + 1, tx_hash = $3, \
                 last_error = $4, updated_at = $5 WHERE token_id = ANY($1) AND status = 'pending'",
                &[&token_ids, &status, &tx, &error, &now],
            )
            .await?;
            Ok(())
        })
    }

    fn license_mint<'a>(&'a self, token_id: &'a str) -> StoreFuture<'a, Option<LicenseMint>> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            c.query_opt(
                &format!("SELECT {MINT_COLUMNS} FROM license_mints WHERE token_id = $1"),
                &[&token_id],
            )
            .await?
            .as_ref()
            .map(mint)
            .transpose()
        })
    }

    fn record_read(&self, token_id: String, read_at: String) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            c.execute(
                "INSERT INTO receipt_reads (token_id, read_at) VALUES ($1, $2)",
                &[&token_id, &read_at],
            )
            .await?;
            Ok(())
        })
    }

    fn count_reads(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let n: i64 = c
                .query_one("SELECT COUNT(*) FROM receipt_reads", &[])
                .await?
                .try_get(0)?;
            Ok(unsigned(n))
        })
    }

    fn add_llms_txt_interest(&self, batch: Vec<LlmsTxtInterest>) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            if batch.is_empty() {
                return Ok(());
            }
            let mut buckets = Vec::with_capacity(batch.len());
            let mut agents = Vec::with_capacity(batch.len());
            let mut clients = Vec::with_capacity(batch.len());
            let mut verified = Vec::with_capacity(batch.len());
            let mut hits = Vec::with_capacity(batch.len());
            for i in batch {
                buckets.push(i.bucket);
                agents.push(i.user_agent);
                clients.push(i.client_addr);
                verified.push(i.agent);
                hits.push(big(i.count));
            }
            let c = self.pg.client().await?;
            // One statement for the whole batch (its keys are distinct: the aggregator made them so).
            let stmt = c
                .prepare_cached(
                    "INSERT INTO llms_txt_interest (bucket, user_agent, client_addr, agent, hits) \
                     SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) \
                     ON CONFLICT (bucket, user_agent, client_addr, agent) \
                     DO UPDATE SET hits = llms_txt_interest.hits + EXCLUDED.hits",
                )
                .await?;
            c.execute(&stmt, &[&buckets, &agents, &clients, &verified, &hits])
                .await?;
            Ok(())
        })
    }

    fn purge_llms_txt_interest(&self, before_bucket: String) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            Ok(c.execute(
                "DELETE FROM llms_txt_interest WHERE bucket < $1",
                &[&before_bucket],
            )
            .await?)
        })
    }

    fn llms_txt_stats(&self) -> StoreFuture<'_, LlmsTxtStats> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let totals = c
                .query_one(
                    "SELECT COALESCE(SUM(hits), 0)::bigint, COUNT(DISTINCT client_addr) FROM llms_txt_interest",
                    &[],
                )
                .await?;
            let by_user_agent = c
                .query(
                    "SELECT user_agent, SUM(hits)::bigint AS n FROM llms_txt_interest GROUP BY user_agent \
                     ORDER BY n DESC, user_agent LIMIT 20",
                    &[],
                )
                .await?
                .iter()
                .map(|r| {
                    Ok(UserAgentCount {
                        user_agent: r.try_get(0)?,
                        count: unsigned(r.try_get(1)?),
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let recent = c
                .query(
                    "SELECT bucket, user_agent, client_addr, agent, hits FROM llms_txt_interest \
                     ORDER BY bucket DESC, hits DESC, user_agent, client_addr, agent LIMIT 20",
                    &[],
                )
                .await?
                .iter()
                .map(|r| {
                    Ok(LlmsTxtInterest {
                        bucket: r.try_get(0)?,
                        user_agent: r.try_get(1)?,
                        client_addr: r.try_get(2)?,
                        agent: r.try_get(3)?,
                        count: unsigned(r.try_get(4)?),
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok(LlmsTxtStats {
                total: unsigned(totals.try_get(0)?),
                distinct_clients: unsigned(totals.try_get(1)?),
                by_user_agent,
                recent,
            })
        })
    }

    fn licensing_activity(
        &self,
        since_day: String,
    ) -> StoreFuture<'_, (Vec<DailyPurchases>, Vec<DailyInterest>)> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let purchases = c
                .query(
                    &activity_purchases_sql("$1", "SUM(amount_atomic::bigint)::bigint"),
                    &[&since_day],
                )
                .await?
                .iter()
                .map(|r| {
                    Ok(DailyPurchases {
                        day: r.try_get(0)?,
                        agent: r.try_get(1)?,
                        article_id: r.try_get(2)?,
                        license_id: r.try_get(3)?,
                        purchases: unsigned(r.try_get(4)?),
                        amount_atomic: unsigned(r.try_get(5)?),
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let interest = c
                .query(
                    &activity_interest_sql("$1", "SUM(hits)::bigint"),
                    &[&since_day],
                )
                .await?
                .iter()
                .map(|r| {
                    Ok(DailyInterest {
                        day: r.try_get(0)?,
                        agent: r.try_get(1)?,
                        requests: unsigned(r.try_get(2)?),
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok((purchases, interest))
        })
    }
}
