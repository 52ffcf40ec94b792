//! Interface A's articles, receipts and llms.txt interest on SQLite: [`SqliteLicensingStore`].

use crate::domain::{Article, Receipt};
use crate::store::licensing::{
    DailyInterest, DailyPurchases, LicenseMint, LicensingStore, LlmsTxtInterest, LlmsTxtStats,
    MINT_COLUMNS, RECEIPT_COLUMNS, UserAgentCount, activity_interest_sql, activity_purchases_sql,
    check_token, price, queue_mints_sql, receipt_conflict, receipt_of_sql,
};
use crate::store::{Db, StoreError, StoreFuture};
use rusqlite::{OptionalExtension, Row, params};
use std::sync::Arc;

/// [`LicensingStore`] on SQLite.
#[derive(Debug, Clone)]
pub struct SqliteLicensingStore {
    db: Db,
}

const ARTICLE_COLUMNS: &str =
    "id, title, excerpt, content, author_name, published_date, price_atomic, published, licenses";

fn article_from_row(r: &Row<'_>) -> rusqlite::Result<Article> {
    let price: i64 = r.get(6)?;
    Ok(Article {
        id: r.get(0)?,
        title: r.get(1)?,
        excerpt: r.get(2)?,
        content: r.get(3)?,
        author_name: r.get(4)?,
        published_date: r.get(5)?,
        price_atomic: u64::try_from(price).unwrap_or(0),
        published: r.get(7)?,
        licenses: stored_licenses(r.get::<_, Option<String>>(8)?.as_deref())?,
    })
}

/// An article's licenses from their column (an unreadable value is a database error, not a default).
fn stored_licenses(text: Option<&str>) -> rusqlite::Result<Vec<crate::domain::license::License>> {
    crate::domain::license::from_stored(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(8, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn receipt_from_row(r: &Row<'_>) -> rusqlite::Result<Receipt> {
    Ok(Receipt {
        token_id: r.get(0)?,
        article_id: r.get(1)?,
        payer: r.get(2)?,
        pay_to: r.get(3)?,
        amount_atomic: r.get(4)?,
        network: r.get(5)?,
        asset: r.get(6)?,
        nonce: r.get(7)?,
        x402_version: r.get(8)?,
        settlement: r.get(9)?,
        created_at: r.get(10)?,
        signed: r.get(11)?,
        license_id: r.get(12)?,
        license_version: r.get(13)?,
        agent: r.get(14)?,
    })
}

fn mint_from_row(r: &Row<'_>) -> rusqlite::Result<LicenseMint> {
    Ok(LicenseMint {
        token_id: r.get(0)?,
        owner: r.get(1)?,
        status: r.get(2)?,
        attempts: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
        tx_hash: r.get(4)?,
        last_error: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

fn select_published(c: &rusqlite::Connection) -> Result<Vec<Article>, StoreError> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {ARTICLE_COLUMNS} FROM articles WHERE published = 1 ORDER BY published_date DESC, id"
    ))?;
    let rows = stmt.query_map([], article_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

impl SqliteLicensingStore {
    /// The store over `db` (migrated).
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn count(c: &rusqlite::Connection, sql: &str) -> Result<u64, StoreError> {
    Ok(u64::try_from(c.query_row(sql, [], |r| r.get::<_, i64>(0))?).unwrap_or(0))
}

impl LicensingStore for SqliteLicensingStore {
    fn list_published(&self) -> StoreFuture<'_, Vec<Article>> {
        Box::pin(self.db.read(select_published))
    }

    fn article<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Article>> {
        let id = id.to_owned();
        Box::pin(self.db.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {ARTICLE_COLUMNS} FROM articles WHERE id = ?1"
            ))?;
            Ok(stmt.query_row([id], article_from_row).optional()?)
        }))
    }

    fn count_articles(&self) -> StoreFuture<'_, u64> {
        Box::pin(self.db.read(|c| count(c, "SELECT COUNT(*) FROM articles")))
    }

    fn insert_articles(&self, articles: Vec<Article>) -> StoreFuture<'_, usize> {
        Box::pin(self.db.write(move |c| {
            let mut n = 0;
            let mut stmt = c.prepare(&format!(
                "INSERT OR IGNORE INTO articles ({ARTICLE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ))?;
            for a in &articles {
                n += stmt.execute(params![
                    a.id,
                    a.title,
                    a.excerpt,
                    a.content,
                    a.author_name,
                    a.published_date,
                    price(a)?,
                    a.published,
                    crate::domain::license::to_stored(&a.licenses)
                ])?;
            }
            Ok(n)
        }))
    }

    fn insert_receipt(&self, receipt: Arc<Receipt>) -> StoreFuture<'_, ()> {
        if let Err(e) = check_token(&receipt) {
            return Box::pin(std::future::ready(Err(e)));
        }
        Box::pin(self.db.write_statement(move |c| {
            let mut stmt = c.prepare_cached(&INSERT_RECEIPT)?;
            let r = &*receipt;
            stmt.execute(params![
                r.token_id,
                r.article_id,
                r.payer,
                r.pay_to,
                r.amount_atomic,
                r.network,
                r.asset,
                r.nonce,
                r.x402_version,
                r.settlement,
                r.created_at,
                r.signed,
                r.license_id,
                r.license_version,
                r.agent
            ])
            .map_err(|e| receipt_conflict(e.into(), r))?;
            Ok(())
        }))
    }

    fn receipt<'a>(&'a self, token_id: &'a str) -> StoreFuture<'a, Option<Receipt>> {
        let token_id = token_id.to_owned();
        Box::pin(self.db.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE token_id = ?1"
            ))?;
            Ok(stmt.query_row([token_id], receipt_from_row).optional()?)
        }))
    }

    fn count_receipts(&self) -> StoreFuture<'_, u64> {
        Box::pin(self.db.read(|c| count(c, "SELECT COUNT(*) FROM receipts")))
    }

    fn receipt_of<'a>(
        &'a self,
        payer: &'a str,
        article_id: &'a str,
    ) -> StoreFuture<'a, Option<Receipt>> {
        let (payer, article_id) = (payer.to_owned(), article_id.to_owned());
        Box::pin(self.db.read(move |c| {
            let mut stmt = c.prepare_cached(&receipt_of_sql("?1", "?2"))?;
            Ok(stmt
                .query_row([payer, article_id], receipt_from_row)
                .optional()?)
        }))
    }

    fn queue_mints(&self, now: String, limit: u32) -> StoreFuture<'_, u64> {
        Box::pin(self.db.write(move |c| {
            let n = c
                .prepare_cached(&queue_mints_sql("?1", "?2"))?
                .execute(params![now, limit])?;
            Ok(n as u64)
        }))
    }

    fn pending_mints(&self, limit: u32) -> StoreFuture<'_, Vec<LicenseMint>> {
        Box::pin(self.db.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {MINT_COLUMNS} FROM license_mints WHERE status = 'pending' \
                 ORDER BY attempts, updated_at, token_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit], mint_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        }))
    }

    fn record_mint(
        &self,
        token_ids: Vec<String>,
        outcome: Result<String, String>,
        now: String,
    ) -> StoreFuture<'_, ()> {
        Box::pin(self.db.write(move |c| {
            let mut stmt = c.prepare_cached(
                "UPDATE license_mints SET status = ?2, attempts = attempts + 1, tx_hash = ?3, \
                 last_error = ?4, updated_at = ?5 WHERE token_id = ?1 AND status = 'pending'",
            )?;
            let (status, tx, error) = match &outcome {
                Ok(tx) => ("minted", Some(tx.as_str()), None),
                Err(e) => ("pending", None, Some(e.as_str())),
            };
            for id in &token_ids {
                stmt.execute(params![id, status, tx, error, now])?;
            }
            Ok(())
        }))
    }

    fn license_mint<'a>(&'a self, token_id: &'a str) -> StoreFuture<'a, Option<LicenseMint>> {
        let token_id = token_id.to_owned();
        Box::pin(self.db.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {MINT_COLUMNS} FROM license_mints WHERE token_id = ?1"
            ))?;
            Ok(stmt.query_row([token_id], mint_from_row).optional()?)
        }))
    }

    fn record_read(&self, token_id: String, read_at: String) -> StoreFuture<'_, ()> {
        Box::pin(self.db.write(move |c| {
            c.prepare_cached("INSERT INTO receipt_reads (token_id, read_at) VALUES (?1, ?2)")?
                .execute([token_id, read_at])?;
            Ok(())
        }))
    }

    fn count_reads(&self) -> StoreFuture<'_, u64> {
        Box::pin(
            self.db
                .read(|c| count(c, "SELECT COUNT(*) FROM receipt_reads")),
        )
    }

    fn add_llms_txt_interest(&self, batch: Vec<LlmsTxtInterest>) -> StoreFuture<'_, ()> {
        Box::pin(self.db.write(move |c| {
            let mut stmt = c.prepare_cached(
                "INSERT INTO llms_txt_interest (bucket, user_agent, client_addr, agent, hits) \
                 VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (bucket, user_agent, client_addr, agent) DO UPDATE SET hits = hits + excluded.hits",
            )?;
            for i in &batch {
                let hits = i64::try_from(i.count).unwrap_or(i64::MAX);
                stmt.execute(params![i.bucket, i.user_agent, i.client_addr, i.agent, hits])?;
            }
            Ok(())
        }))
    }

    fn purge_llms_txt_interest(&self, before_bucket: String) -> StoreFuture<'_, u64> {
        Box::pin(self.db.write(move |c| {
            let n = c.execute(
                "DELETE FROM llms_txt_interest WHERE bucket < ?1",
                [before_bucket],
            )?;
            Ok(n as u64)
        }))
    }

    fn llms_txt_stats(&self) -> StoreFuture<'_, LlmsTxtStats> {
        Box::pin(self.db.read(|c| {
            let (total, distinct): (i64, i64) = c.query_row(
                "SELECT COALESCE(SUM(hits), 0), COUNT(DISTINCT client_addr) FROM llms_txt_interest",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let by_user_agent = c
                .prepare_cached(
                    "SELECT user_agent, SUM(hits) AS n FROM llms_txt_interest GROUP BY user_agent \
                     ORDER BY n DESC, user_agent LIMIT 20",
                )?
                .query_map([], |r| {
                    Ok(UserAgentCount {
                        user_agent: r.get(0)?,
                        count: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let recent = c
                .prepare_cached(
                    "SELECT bucket, user_agent, client_addr, agent, hits FROM llms_txt_interest \
                     ORDER BY bucket DESC, hits DESC, user_agent, client_addr, agent LIMIT 20",
                )?
                .query_map([], |r| {
                    Ok(LlmsTxtInterest {
                        bucket: r.get(0)?,
                        user_agent: r.get(1)?,
                        client_addr: r.get(2)?,
                        agent: r.get(3)?,
                        count: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(LlmsTxtStats {
                total: u64::try_from(total).unwrap_or(0),
                distinct_clients: u64::try_from(distinct).unwrap_or(0),
                by_user_agent,
                recent,
            })
        }))
    }

    fn licensing_activity(
        &self,
        since_day: String,
    ) -> StoreFuture<'_, (Vec<DailyPurchases>, Vec<DailyInterest>)> {
        Box::pin(self.db.read(move |c| Self::activity(c, &since_day)))
    }
}

impl SqliteLicensingStore {
    fn activity(
        c: &rusqlite::Connection,
        since_day: &str,
    ) -> Result<(Vec<DailyPurchases>, Vec<DailyInterest>), StoreError> {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let purchases = c
            .prepare_cached(&activity_purchases_sql(
                "?1",
                "SUM(CAST(amount_atomic AS INTEGER))",
            ))?
            .query_map([since_day], |r| {
                Ok(DailyPurchases {
                    day: r.get(0)?,
                    agent: r.get(1)?,
                    article_id: r.get(2)?,
                    license_id: r.get(3)?,
                    purchases: n(r.get(4)?),
                    amount_atomic: n(r.get(5)?),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let interest = c
            .prepare_cached(&activity_interest_sql("?1", "SUM(hits)"))?
            .query_map([since_day], |r| {
                Ok(DailyInterest {
                    day: r.get(0)?,
                    agent: r.get(1)?,
                    requests: n(r.get(2)?),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok((purchases, interest))
    }
}

/// The receipt's insert: the text is the statement cache's key, built once rather than per purchase.
static INSERT_RECEIPT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
    )
});
