//! Query layer for interface A: articles, license receipts, llms.txt hits.
//!
//! Handlers use [`LicensingStore`]; only this file knows the tables of `0001_licensing.sql`.

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::{Db, StoreError};

/// One article of the catalog, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Article {
    /// Identifier (a URL-safe slug), the `articleId` of the API.
    pub id: String,
    /// Title.
    pub title: String,
    /// Short free teaser shown in the catalog.
    pub excerpt: String,
    /// Full text, sold.
    pub content: String,
    /// Author's display name.
    pub author_name: String,
    /// Publication date, `YYYY-MM-DD`.
    pub published_date: String,
    /// Price in USDC atomic units (6 decimals: 10 000 = 0.01 USDC).
    pub price_atomic: u64,
    /// Only published articles are listed and sold.
    pub published: bool,
}

/// A durable license receipt: proof that `payer` paid for `article_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// Receipt (NFT-style) token id: a decimal uint256 derived from the payment identity.
    pub token_id: String,
    /// The licensed article.
    pub article_id: String,
    /// Who paid (0x address).
    pub payer: String,
    /// Who was paid (0x address).
    pub pay_to: String,
    /// Amount paid, token atomic units, decimal string.
    pub amount_atomic: String,
    /// CAIP-2 network of the payment.
    pub network: String,
    /// Token contract address.
    pub asset: String,
    /// EIP-3009 authorization nonce.
    pub nonce: String,
    /// x402 protocol version the client used (1 or 2).
    pub x402_version: u8,
    /// Settlement transaction hash, or `verify-only`.
    pub settlement: String,
    /// When the receipt was issued, RFC 3339 UTC.
    pub created_at: String,
}

/// One recorded `GET /serveLlmsTxt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlmsTxtHit {
    /// RFC 3339 UTC time of the request.
    pub at: String,
    /// `User-Agent` header (capped), or `""`.
    pub user_agent: String,
    /// Client socket address.
    pub client_addr: String,
}

/// Aggregated llms.txt interest, for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlmsTxtStats {
    /// All hits ever recorded.
    pub total: u64,
    /// Distinct client addresses.
    pub distinct_clients: u64,
    /// Hits per user agent, most frequent first (top 20).
    pub by_user_agent: Vec<UserAgentCount>,
    /// The most recent hits (newest first, at most 20).
    pub recent: Vec<LlmsTxtHit>,
}

/// Hits of one user agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserAgentCount {
    /// The `User-Agent` value.
    pub user_agent: String,
    /// Number of hits.
    pub count: u64,
}

/// The licensing query layer over a [`Db`].
#[derive(Debug, Clone)]
pub struct LicensingStore {
    db: Db,
}

const ARTICLE_COLUMNS: &str =
    "id, title, excerpt, content, author_name, published_date, price_atomic, published";

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
    })
}

const RECEIPT_COLUMNS: &str = "token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce, \
     x402_version, settlement, created_at";

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
    })
}

fn select_published(c: &rusqlite::Connection) -> Result<Vec<Article>, StoreError> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {ARTICLE_COLUMNS} FROM articles WHERE published = 1 ORDER BY published_date DESC, id"
    ))?;
    let rows = stmt.query_map([], article_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

impl LicensingStore {
    /// The query layer over `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Published articles, newest first (ties by id).
    pub async fn list_published(&self) -> Result<Vec<Article>, StoreError> {
        self.db.read(select_published).await
    }

    /// [`LicensingStore::list_published`], blocking the calling thread (start-up).
    pub fn list_published_blocking(&self) -> Result<Vec<Article>, StoreError> {
        self.db.read_blocking(select_published)
    }

    /// One article by id whatever its state (certificates of unpublished articles stay valid).
    pub async fn article(&self, id: &str) -> Result<Option<Article>, StoreError> {
        let id = id.to_owned();
        self.db
            .read(move |c| {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {ARTICLE_COLUMNS} FROM articles WHERE id = ?1"
                ))?;
                Ok(stmt.query_row([id], article_from_row).optional()?)
            })
            .await
    }

    /// Number of articles stored (published or not).
    pub async fn count_articles(&self) -> Result<u64, StoreError> {
        self.db
            .read(|c| {
                Ok(
                    c.query_row("SELECT COUNT(*) FROM articles", [], |r| r.get::<_, i64>(0))?
                        as u64,
                )
            })
            .await
    }

    /// Insert articles in one transaction (seeding). Existing ids are left untouched.
    pub async fn insert_articles(&self, articles: Vec<Article>) -> Result<usize, StoreError> {
        self.db
            .write(move |c| {
                let mut n = 0;
                {
                    let mut stmt = c.prepare(&format!(
                        "INSERT OR IGNORE INTO articles ({ARTICLE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                    ))?;
                    for a in &articles {
                        let price = i64::try_from(a.price_atomic)
                            .map_err(|_| StoreError::Invalid(format!("price of {} too large", a.id)))?;
                        n += stmt.execute(params![
                            a.id,
                            a.title,
                            a.excerpt,
                            a.content,
                            a.author_name,
                            a.published_date,
                            price,
                            a.published
                        ])?;
                    }
                }
                Ok(n)
            })
            .await
    }

    /// Store a receipt durably. A second receipt for the same payment (same token id, or same
    /// network/asset/payer/nonce) is refused with [`StoreError::Conflict`].
    pub async fn insert_receipt(&self, receipt: Receipt) -> Result<(), StoreError> {
        self.db
            .write(move |c| {
                let mut stmt = c.prepare_cached(&format!(
                    "INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                ))?;
                let r = &receipt;
                match stmt.execute(params![
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
                    r.created_at
                ]) {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        let e = StoreError::from(e);
                        if e.is_unique_violation() {
                            Err(StoreError::Conflict(format!("receipt {} already issued", r.token_id)))
                        } else {
                            Err(e)
                        }
                    }
                }
            })
            .await
    }

    /// A receipt by token id.
    pub async fn receipt(&self, token_id: &str) -> Result<Option<Receipt>, StoreError> {
        let token_id = token_id.to_owned();
        self.db
            .read(move |c| {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE token_id = ?1"
                ))?;
                Ok(stmt.query_row([token_id], receipt_from_row).optional()?)
            })
            .await
    }

    /// Number of receipts issued.
    pub async fn count_receipts(&self) -> Result<u64, StoreError> {
        self.db
            .read(|c| {
                Ok(
                    c.query_row("SELECT COUNT(*) FROM receipts", [], |r| r.get::<_, i64>(0))?
                        as u64,
                )
            })
            .await
    }

    /// Record one llms.txt request durably.
    pub async fn record_llms_txt_hit(&self, hit: LlmsTxtHit) -> Result<(), StoreError> {
        self.db
            .write(move |c| {
                c.prepare_cached(
                    "INSERT INTO llms_txt_hits (at, user_agent, client_addr) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![hit.at, hit.user_agent, hit.client_addr])?;
                Ok(())
            })
            .await
    }

    /// Total llms.txt hits ever recorded.
    pub async fn count_llms_txt_hits(&self) -> Result<u64, StoreError> {
        self.db
            .read(|c| {
                Ok(c.query_row("SELECT COUNT(*) FROM llms_txt_hits", [], |r| {
                    r.get::<_, i64>(0)
                })? as u64)
            })
            .await
    }

    /// Aggregated llms.txt interest for the operator.
    pub async fn llms_txt_stats(&self) -> Result<LlmsTxtStats, StoreError> {
        self.db
            .read(|c| {
                let (total, distinct): (i64, i64) = c.query_row(
                    "SELECT COUNT(*), COUNT(DISTINCT client_addr) FROM llms_txt_hits",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let by_user_agent = c
                    .prepare_cached(
                        "SELECT user_agent, COUNT(*) AS n FROM llms_txt_hits GROUP BY user_agent \
                         ORDER BY n DESC, user_agent LIMIT 20",
                    )?
                    .query_map([], |r| {
                        Ok(UserAgentCount { user_agent: r.get(0)?, count: r.get::<_, i64>(1)? as u64 })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                let recent = c
                    .prepare_cached(
                        "SELECT at, user_agent, client_addr FROM llms_txt_hits ORDER BY id DESC LIMIT 20",
                    )?
                    .query_map([], |r| {
                        Ok(LlmsTxtHit { at: r.get(0)?, user_agent: r.get(1)?, client_addr: r.get(2)? })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(LlmsTxtStats {
                    total: total as u64,
                    distinct_clients: distinct as u64,
                    by_user_agent,
                    recent,
                })
            })
            .await
    }
}

/// An article for tests: `Title <id>`, 0.01 USDC.
#[cfg(test)]
pub(crate) fn test_article(id: &str, published: bool) -> Article {
    Article {
        id: id.into(),
        title: format!("Title {id}"),
        excerpt: "e".into(),
        content: "c".into(),
        author_name: "a".into(),
        published_date: "2025-01-02".into(),
        price_atomic: 10_000,
        published,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_article as article;

    fn receipt(token: &str, nonce: &str) -> Receipt {
        Receipt {
            token_id: token.into(),
            article_id: "a".into(),
            payer: "0x1".into(),
            pay_to: "0x2".into(),
            amount_atomic: "10000".into(),
            network: "eip155:84532".into(),
            asset: "0x3".into(),
            nonce: nonce.into(),
            x402_version: 2,
            settlement: "verify-only".into(),
            created_at: "2025-01-01T00:00:00Z".into(),
        }
    }

    #[tokio::test]
    async fn articles_receipts_and_hits_round_trip() {
        let store = LicensingStore::new(Db::open_in_memory().unwrap());
        store
            .insert_articles(vec![article("a", true), article("b", false)])
            .await
            .unwrap();
        assert_eq!(store.list_published().await.unwrap().len(), 1);
        assert!(
            store
                .list_published()
                .await
                .unwrap()
                .iter()
                .all(|a| a.id != "b"),
            "an unpublished article is not among the published"
        );
        assert!(store.article("b").await.unwrap().is_some());

        store.insert_receipt(receipt("1", "0xaa")).await.unwrap();
        assert_eq!(store.receipt("1").await.unwrap().unwrap().nonce, "0xaa");
        let dup = store
            .insert_receipt(receipt("2", "0xaa"))
            .await
            .unwrap_err();
        assert!(matches!(dup, StoreError::Conflict(_)), "{dup:?}");

        for ua in ["x", "x", "y"] {
            let hit = LlmsTxtHit {
                at: "t".into(),
                user_agent: ua.into(),
                client_addr: "127.0.0.1:1".into(),
            };
            store.record_llms_txt_hit(hit).await.unwrap();
        }
        let stats = store.llms_txt_stats().await.unwrap();
        assert_eq!(stats.total, 3);
        assert_eq!(
            stats.by_user_agent[0],
            UserAgentCount {
                user_agent: "x".into(),
                count: 2
            }
        );
    }
}
