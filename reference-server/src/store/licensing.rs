//! Interface A storage: articles, license receipts, llms.txt interest.
//!
//! Handlers use the [`LicensingStore`] trait; [`SqliteLicensingStore`](super::SqliteLicensingStore) implements it over the tables of
//! `migrations/sqlite/0001_licensing.sql` (and `0005`), `PgLicensingStore` over PostgreSQL's.

use std::sync::Arc;

use serde::Serialize;

use super::{StoreError, StoreFuture};

use crate::domain::{Article, Receipt};

/// Requests of `/serveLlmsTxt` from one client address with one user agent within one minute: how llms.txt
/// interest is recorded (aggregated in memory, flushed in batches; see `licensing::interest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlmsTxtInterest {
    /// Start of the minute, RFC 3339 UTC (`2026-11-23T05:19:00Z`).
    pub bucket: String,
    /// `User-Agent` header (capped), or `""`.
    pub user_agent: String,
    /// Client IP address.
    pub client_addr: String,
    /// The verified crawler (Web Bot Auth agent origin), `""` for unsigned requests.
    pub agent: String,
    /// Requests in that minute.
    pub count: u64,
}

/// Purchases of one day by one verified agent (or none) of one article's license.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DailyPurchases {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    /// The verified agent, `""` when unsigned.
    pub agent: String,
    /// The article.
    pub article_id: String,
    /// The license bought, `""` for receipts issued before licenses existed.
    pub license_id: String,
    /// Receipts issued.
    pub purchases: u64,
    /// Sum paid, token atomic units.
    pub amount_atomic: u64,
}

/// llms.txt requests of one day by one verified agent (or none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DailyInterest {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    /// The verified agent, `""` when unsigned.
    pub agent: String,
    /// Requests.
    pub requests: u64,
}

/// A receipt's license token, to mint or minted (`license_mints`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LicenseMint {
    /// The receipt's token id (the token's id).
    pub token_id: String,
    /// Who it is minted to (the payer).
    pub owner: String,
    /// `pending` or `minted`.
    pub status: String,
    /// Mint transactions tried so far.
    pub attempts: u64,
    /// The mint transaction, once minted.
    pub tx_hash: Option<String>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Last change, RFC 3339 UTC.
    pub updated_at: String,
}

/// The SQL that queues receipts settled on chain without a mint row (both backends: `p1` the time, `p2`
/// the limit).
pub(crate) fn queue_mints_sql(p1: &str, p2: &str) -> String {
    format!(
        "INSERT INTO license_mints (token_id, owner, status, attempts, updated_at) \
         SELECT r.token_id, r.payer, 'pending', 0, {p1} FROM receipts r \
         WHERE r.settlement LIKE '0x%' AND NOT EXISTS \
         (SELECT 1 FROM license_mints m WHERE m.token_id = r.token_id) \
         ORDER BY r.created_at LIMIT {p2} ON CONFLICT (token_id) DO NOTHING"
    )
}

/// The columns of a [`LicenseMint`], in its field order.
pub(crate) const MINT_COLUMNS: &str =
    "token_id, owner, status, attempts, tx_hash, last_error, updated_at";

/// Most rows of each kind [`LicensingStore::licensing_activity`] returns.
pub const MAX_ACTIVITY_ROWS: u32 = 5000;

/// Aggregated llms.txt interest, for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlmsTxtStats {
    /// All requests recorded (within the retention period).
    pub total: u64,
    /// Distinct client addresses.
    pub distinct_clients: u64,
    /// Requests per user agent, most frequent first (top 20).
    pub by_user_agent: Vec<UserAgentCount>,
    /// The most recent minutes of interest (newest first, at most 20 rows).
    pub recent: Vec<LlmsTxtInterest>,
}

/// Hits of one user agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserAgentCount {
    /// The `User-Agent` value.
    pub user_agent: String,
    /// Number of hits.
    pub count: u64,
}

/// Interface A's storage, as the handlers use it.
pub trait LicensingStore: Send + Sync + std::fmt::Debug {
    /// Published articles, newest first (ties by id).
    fn list_published(&self) -> StoreFuture<'_, Vec<Article>>;
    /// One article by id whatever its state (certificates of unpublished articles stay valid).
    fn article<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Article>>;
    /// Number of articles stored (published or not).
    fn count_articles(&self) -> StoreFuture<'_, u64>;
    /// Inserts articles in one transaction (seeding); existing ids are left untouched. Returns how many
    /// were new.
    fn insert_articles(&self, articles: Vec<Article>) -> StoreFuture<'_, usize>;
    /// Stores a receipt durably. A second receipt for the same payment (same token id) is refused with
    /// [`StoreError::Conflict`]; a receipt whose token id is not its payment's ([`Receipt::token_is_its_payments`]) with
    /// [`StoreError::Invalid`], before anything is written. Shared (`Arc`): the caller answers from the same
    /// receipt, and a store that writes it on another thread need not copy it.
    fn insert_receipt(&self, receipt: Arc<Receipt>) -> StoreFuture<'_, ()>;
    /// A receipt by token id.
    fn receipt<'a>(&'a self, token_id: &'a str) -> StoreFuture<'a, Option<Receipt>>;
    /// Number of receipts issued.
    fn count_receipts(&self) -> StoreFuture<'_, u64>;
    /// The latest receipt of `payer` (checksummed) for `article_id`: whether that address bought it.
    fn receipt_of<'a>(
        &'a self,
        payer: &'a str,
        article_id: &'a str,
    ) -> StoreFuture<'a, Option<Receipt>>;
    /// Queues (as `pending` rows) up to `limit` receipts settled on chain that have no license-token row yet;
    /// returns how many. A receipt is never queued twice (the token id is the key).
    fn queue_mints(&self, now: String, limit: u32) -> StoreFuture<'_, u64>;
    /// Pending mints, fewest attempts then oldest change first (at most `limit`): rows the minter gave up on
    /// never hide new ones.
    fn pending_mints(&self, limit: u32) -> StoreFuture<'_, Vec<LicenseMint>>;
    /// Records a mint attempt for `token_ids`: `Ok(tx)` minted in `tx`, `Err(why)` still pending (one more
    /// attempt counted).
    fn record_mint(
        &self,
        token_ids: Vec<String>,
        outcome: Result<String, String>,
        now: String,
    ) -> StoreFuture<'_, ()>;
    /// The license token of a receipt, if one is queued or minted.
    fn license_mint<'a>(&'a self, token_id: &'a str) -> StoreFuture<'a, Option<LicenseMint>>;
    /// Records a re-read of a bought article (sign-in-with-x: no payment, no new receipt).
    fn record_read(&self, token_id: String, read_at: String) -> StoreFuture<'_, ()>;
    /// Number of re-reads recorded.
    fn count_reads(&self) -> StoreFuture<'_, u64>;
    /// Adds a batch of aggregated llms.txt interest (rows of the same minute, agent and client add up).
    fn add_llms_txt_interest(&self, batch: Vec<LlmsTxtInterest>) -> StoreFuture<'_, ()>;
    /// Deletes interest of minutes before `bucket` (RFC 3339); returns how many rows went.
    fn purge_llms_txt_interest(&self, before_bucket: String) -> StoreFuture<'_, u64>;
    /// Aggregated llms.txt interest for the operator.
    fn llms_txt_stats(&self) -> StoreFuture<'_, LlmsTxtStats>;
    /// Purchases and llms.txt interest per day, agent (and license) since `since_day` (`YYYY-MM-DD`), newest
    /// first, at most [`MAX_ACTIVITY_ROWS`] of each.
    fn licensing_activity(
        &self,
        since_day: String,
    ) -> StoreFuture<'_, (Vec<DailyPurchases>, Vec<DailyInterest>)>;
}

/// The query of [`LicensingStore::receipt_of`] (both backends: `payer` and `article` their placeholders): the
/// latest receipt of a payer for an article, through the index `receipts_article_payer`.
pub(crate) fn receipt_of_sql(payer: &str, article: &str) -> String {
    format!(
        "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE payer = {payer} AND article_id = {article} \
         ORDER BY created_at DESC LIMIT 1"
    )
}

/// The purchases query of [`LicensingStore::licensing_activity`] (`placeholder`: `?1`/`$1`, the first day;
/// `sum`: the backend's integer sum of `amount_atomic`).
pub(crate) fn activity_purchases_sql(placeholder: &str, sum: &str) -> String {
    format!(
        "SELECT substr(created_at, 1, 10) AS day, COALESCE(agent, '') AS agent, article_id, \
         COALESCE(license_id, '') AS license_id, COUNT(*), {sum} FROM receipts \
         WHERE created_at >= {placeholder} GROUP BY 1, 2, 3, 4 ORDER BY 1 DESC, 5 DESC, 2, 3, 4 \
         LIMIT {MAX_ACTIVITY_ROWS}"
    )
}

/// The interest query of [`LicensingStore::licensing_activity`] (`sum`: the backend's integer sum of `hits`).
pub(crate) fn activity_interest_sql(placeholder: &str, sum: &str) -> String {
    format!(
        "SELECT substr(bucket, 1, 10) AS day, agent, {sum} FROM llms_txt_interest \
         WHERE bucket >= {placeholder} GROUP BY 1, 2 ORDER BY 1 DESC, 3 DESC, 2 LIMIT {MAX_ACTIVITY_ROWS}"
    )
}

/// A receipt's columns, in the order both backends bind and read them.
pub(crate) const RECEIPT_COLUMNS: &str = "token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce, \
     x402_version, settlement, created_at, signed_receipt, license_id, license_version, agent";

/// An article's price as a database integer.
pub(crate) fn price(a: &Article) -> Result<i64, StoreError> {
    i64::try_from(a.price_atomic)
        .map_err(|_| StoreError::Invalid(format!("price of {} too large", a.id)))
}

/// A uniqueness violation on a receipt insert, as the trait reports it.
/// [`StoreError::Invalid`] unless the receipt's token id is its payment's
/// ([`Receipt::token_is_its_payments`]).
pub(crate) fn check_token(r: &Receipt) -> Result<(), StoreError> {
    if r.token_is_its_payments() {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "receipt token id {} is not its payment's",
            r.token_id
        )))
    }
}

pub(crate) fn receipt_conflict(e: StoreError, r: &Receipt) -> StoreError {
    if e.is_unique_violation() {
        already_issued(&r.token_id)
    } else {
        e
    }
}

/// The trait's error for a receipt whose token id is taken.
pub(crate) fn already_issued(token_id: &str) -> StoreError {
    StoreError::Conflict(format!("receipt {token_id} already issued"))
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
        licenses: Vec::new(),
    }
}
