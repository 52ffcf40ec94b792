//! Interface B storage: the asset table behind [`AssetStore`].
//!
//! Handlers call the [`AssetStore`] trait; [`SqliteAssetStore`](super::SqliteAssetStore) implements it on
//! SQLite (`sqlite/assets.rs`), `PgAssetStore` on PostgreSQL (`postgres/assets.rs`). A page is read by position
//! (`pos BETWEEN lo AND hi`), so page cost does not grow with the offset; see
//! `migrations/0002_registry.sql` for the schema and its invariants.

use std::sync::Arc;

use super::{StoreError, StoreFuture};

/// An asset to insert.
#[derive(Debug, Clone)]
pub struct NewAsset {
    /// CIDv1 of the file (unique).
    pub cid: String,
    /// Record UUID (unique).
    pub uuid: String,
    /// `uploaded_at` in Unix microseconds.
    pub uploaded_us: i64,
    /// Where the bytes come from.
    pub source: FileSource,
    /// Original file name.
    pub file_name: String,
    /// MIME type.
    pub mime: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 hex of the bytes.
    pub proof_hash: String,
    /// The pre-serialised record template.
    pub template: Vec<u8>,
}

/// Where an asset's file bytes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// Regenerated from the seed index.
    Seed(u64),
    /// Stored in the media directory at this relative path.
    Stored(String),
}

/// What the media endpoint needs to serve an asset file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetFile {
    /// Where the bytes come from.
    pub source: FileSource,
    /// MIME type.
    pub mime: String,
    /// Original file name.
    pub file_name: String,
}

/// One page of the listing: the count and the page's records (id and stored template), newest first,
/// read in one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRows {
    /// Number of assets.
    pub count: u64,
    /// `(record id, stored template)` in listing order.
    pub rows: Vec<(u64, bytes::Bytes)>,
}

/// Makes the `i`-th of `n` seeded assets (deterministic).
pub type SeedAsset = Arc<dyn Fn(u64, u64) -> Result<NewAsset, StoreError> + Send + Sync>;

/// Seeded assets inserted per transaction chunk.
pub const SEED_CHUNK: u64 = 2000;

/// Interface B's storage, as the registry uses it.
pub trait AssetStore: Send + Sync + std::fmt::Debug {
    /// Number of assets.
    fn count(&self) -> StoreFuture<'_, u64>;
    /// Records `[offset, offset + limit)` in listing order (descending `uploaded_at`, then descending
    /// insertion id), with the count read in the same snapshot. The cost does not grow with `offset`.
    fn page(&self, offset: u64, limit: u64) -> StoreFuture<'_, PageRows>;
    /// The id and template of one asset by CID ([`StoreError::NotFound`] when there is none).
    fn template(&self, cid: String) -> StoreFuture<'_, (u64, Vec<u8>)>;
    /// The file behind an asset CID ([`StoreError::NotFound`] when there is none).
    fn file(&self, cid: String) -> StoreFuture<'_, AssetFile>;
    /// True if an asset with this CID exists.
    fn exists(&self, cid: String) -> StoreFuture<'_, bool>;
    /// Inserts one asset, keeping positions dense and unique under concurrent inserts (from any instance);
    /// returns its id. A duplicate CID gives [`StoreError::Conflict`].
    fn insert(&self, asset: NewAsset) -> StoreFuture<'_, u64>;
    /// Seeds `n` assets made by `make` into an **empty** registry; returns how many were inserted (0 when
    /// the registry already had assets). Instances starting together on one database seed it once.
    fn seed(&self, n: u64, make: SeedAsset) -> StoreFuture<'_, usize>;
}
