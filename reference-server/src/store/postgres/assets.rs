//! [`AssetStore`] on PostgreSQL.
//!
//! A page is one statement: the count (`max(pos) + 1`, an index edge) and the page's rows (a range of the
//! unique `pos` index) come from one snapshot, at the same cost at every offset. Inserts take a
//! transaction-scoped advisory lock ([`ASSET_LOCK`]) before they read the count and shift positions, so
//! concurrent uploads on any number of instances keep `pos` dense and unique.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::{ASSET_LOCK, Pg, big, unsigned};
use crate::store::assets::{
    AssetFile, AssetStore, FileSource, NewAsset, PageRows, SEED_CHUNK, SeedAsset,
};
use crate::store::{StoreError, StoreFuture};

/// [`AssetStore`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgAssetStore {
    pg: Pg,
}

impl PgAssetStore {
    /// The store over `pg` (migrated).
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

/// Offsets and limits beyond this are clamped (keeps `count - offset - limit` inside `BIGINT`).
const MAX_WINDOW: u64 = 1 << 40;

const INSERT: &str = "INSERT INTO assets (cid, uuid, uploaded_us, pos, seed_index, file_path, file_name, mime, \
     size, proof_hash, tpl) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id";

async fn count(c: &impl GenericClient) -> Result<u64, StoreError> {
    let n: i64 = c
        .query_one("SELECT COALESCE(max(pos) + 1, 0) FROM assets", &[])
        .await?
        .try_get(0)?;
    Ok(unsigned(n))
}

async fn insert_at(c: &impl GenericClient, a: &NewAsset, pos: i64) -> Result<u64, StoreError> {
    let (seed_index, file_path) = match &a.source {
        FileSource::Seed(i) => (Some(big(*i)), None),
        FileSource::Stored(p) => (None, Some(p.as_str())),
    };
    let size = big(a.size);
    let params: [&(dyn ToSql + Sync); 11] = [
        &a.cid,
        &a.uuid,
        &a.uploaded_us,
        &pos,
        &seed_index,
        &file_path,
        &a.file_name,
        &a.mime,
        &size,
        &a.proof_hash,
        &a.template,
    ];
    let stmt = c.prepare_cached(INSERT).await?;
    let id: i64 = c.query_one(&stmt, &params).await?.try_get(0)?;
    Ok(unsigned(id))
}

/// A chunk of seeded assets as column arrays (one `INSERT … SELECT FROM UNNEST` per chunk).
#[derive(Default)]
struct SeedColumns {
    cid: Vec<String>,
    uuid: Vec<String>,
    uploaded_us: Vec<i64>,
    pos: Vec<i64>,
    seed_index: Vec<Option<i64>>,
    file_path: Vec<Option<String>>,
    file_name: Vec<String>,
    mime: Vec<String>,
    size: Vec<i64>,
    proof_hash: Vec<String>,
    tpl: Vec<Vec<u8>>,
}

impl SeedColumns {
    fn push(&mut self, a: NewAsset, pos: i64) {
        let (seed_index, file_path) = match a.source {
            FileSource::Seed(i) => (Some(big(i)), None),
            FileSource::Stored(p) => (None, Some(p)),
        };
        self.cid.push(a.cid);
        self.uuid.push(a.uuid);
        self.uploaded_us.push(a.uploaded_us);
        self.pos.push(pos);
        self.seed_index.push(seed_index);
        self.file_path.push(file_path);
        self.file_name.push(a.file_name);
        self.mime.push(a.mime);
        self.size.push(big(a.size));
        self.proof_hash.push(a.proof_hash);
        self.tpl.push(a.template);
    }
}

impl AssetStore for PgAssetStore {
    fn count(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move { count(&self.pg.client().await?).await })
    }

    fn page(&self, offset: u64, limit: u64) -> StoreFuture<'_, PageRows> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(
                    "WITH n AS (SELECT COALESCE(max(pos) + 1, 0) AS c FROM assets) \
                     SELECT n.c, a.id, a.tpl FROM n LEFT JOIN assets a \
                     ON a.pos BETWEEN n.c - $1 - $2 AND n.c - 1 - $1 ORDER BY a.pos DESC",
                )
                .await?;
            let (offset, limit) = (big(offset.min(MAX_WINDOW)), big(limit.min(MAX_WINDOW)));
            let rows = c.query(&stmt, &[&offset, &limit]).await?;
            let mut page = PageRows {
                count: 0,
                rows: Vec::with_capacity(rows.len()),
            };
            for row in &rows {
                page.count = unsigned(row.try_get(0)?);
                let id: Option<i64> = row.try_get(1)?;
                let tpl: Option<&[u8]> = row.try_get(2)?;
                if let (Some(id), Some(tpl)) = (id, tpl) {
                    page.rows
                        .push((unsigned(id), bytes::Bytes::copy_from_slice(tpl)));
                }
            }
            Ok(page)
        })
    }

    fn template(&self, cid: String) -> StoreFuture<'_, (u64, Vec<u8>)> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached("SELECT id, tpl FROM assets WHERE cid = $1")
                .await?;
            let row = c
                .query_opt(&stmt, &[&cid])
                .await?
                .ok_or(StoreError::NotFound)?;
            Ok((unsigned(row.try_get(0)?), row.try_get(1)?))
        })
    }

    fn file(&self, cid: String) -> StoreFuture<'_, AssetFile> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached(
                    "SELECT seed_index, file_path, mime, file_name FROM assets WHERE cid = $1",
                )
                .await?;
            let row = c
                .query_opt(&stmt, &[&cid])
                .await?
                .ok_or(StoreError::NotFound)?;
            let seed: Option<i64> = row.try_get(0)?;
            let path: Option<String> = row.try_get(1)?;
            let source = match (seed, path) {
                (_, Some(path)) => FileSource::Stored(path),
                (Some(i), None) => FileSource::Seed(unsigned(i)),
                _ => return Err(StoreError::Invalid(format!("asset {cid} has no file"))),
            };
            Ok(AssetFile {
                source,
                mime: row.try_get(2)?,
                file_name: row.try_get(3)?,
            })
        })
    }

    fn exists(&self, cid: String) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let stmt = c
                .prepare_cached("SELECT EXISTS(SELECT 1 FROM assets WHERE cid = $1)")
                .await?;
            Ok(c.query_one(&stmt, &[&cid]).await?.try_get(0)?)
        })
    }

    fn insert(&self, a: NewAsset) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let mut c = self.pg.client().await?;
            let tx = c.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ASSET_LOCK])
                .await?;
            let exists: bool = tx
                .query_one(
                    "SELECT EXISTS(SELECT 1 FROM assets WHERE cid = $1)",
                    &[&a.cid],
                )
                .await?
                .try_get(0)?;
            if exists {
                return Err(StoreError::Conflict(format!(
                    "an asset with cid {} already exists",
                    a.cid
                )));
            }
            let n = big(count(&tx).await?);
            // The new row gets the largest id, so it sorts after every row with the same uploaded_us.
            let newest: Option<i64> = tx
                .query_one("SELECT max(uploaded_us) FROM assets", &[])
                .await?
                .try_get(0)?;
            let pos = match newest {
                Some(newest) if newest > a.uploaded_us => {
                    let p: i64 = tx
                        .query_one(
                            "SELECT count(*) FROM assets WHERE uploaded_us <= $1",
                            &[&a.uploaded_us],
                        )
                        .await?
                        .try_get(0)?;
                    // Shift [p, n) up by one without transient duplicates in the unique index.
                    tx.execute("UPDATE assets SET pos = -pos - 1 WHERE pos >= $1", &[&p])
                        .await?;
                    tx.execute("UPDATE assets SET pos = -pos WHERE pos < 0", &[])
                        .await?;
                    p
                }
                _ => n,
            };
            let id = insert_at(&tx, &a, pos)
                .await
                .map_err(|e| match e.is_unique_violation() {
                    true => StoreError::Conflict(format!("asset {} already exists", a.cid)),
                    false => e,
                })?;
            tx.commit().await?;
            Ok(id)
        })
    }

    fn seed(&self, n: u64, make: SeedAsset) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let mut c = self.pg.client().await?;
            let tx = c.transaction().await?;
            // Instances starting together: the others wait here, then find the registry seeded.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ASSET_LOCK])
                .await?;
            if count(&tx).await? > 0 {
                return Ok(0);
            }
            let insert = tx
                .prepare(
                    "INSERT INTO assets (cid, uuid, uploaded_us, pos, seed_index, file_path, file_name, mime, \
                     size, proof_hash, tpl) \
                     SELECT cid, uuid, up, pos, seed, path, name, mime, size, proof, tpl \
                     FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::text[], \
                     $7::text[], $8::text[], $9::int8[], $10::text[], $11::bytea[]) WITH ORDINALITY \
                     AS u(cid, uuid, up, pos, seed, path, name, mime, size, proof, tpl, ord) ORDER BY ord",
                )
                .await?;
            let mut last = i64::MIN;
            let mut start = 0;
            while start < n {
                let end = (start + SEED_CHUNK).min(n);
                let mut cols = SeedColumns::default();
                for i in start..end {
                    let a = make(i, n)?;
                    // Seeds come in upload order, so the i-th has rank i (ties sort by the larger id,
                    // assigned in array order).
                    if a.uploaded_us < last {
                        return Err(StoreError::Invalid(format!(
                            "seed asset {i} is older than the one before it"
                        )));
                    }
                    last = a.uploaded_us;
                    cols.push(a, big(i));
                }
                let params: [&(dyn ToSql + Sync); 11] = [
                    &cols.cid,
                    &cols.uuid,
                    &cols.uploaded_us,
                    &cols.pos,
                    &cols.seed_index,
                    &cols.file_path,
                    &cols.file_name,
                    &cols.mime,
                    &cols.size,
                    &cols.proof_hash,
                    &cols.tpl,
                ];
                tx.execute(&insert, &params).await?;
                start = end;
            }
            tx.commit().await?;
            Ok(n as usize)
        })
    }
}
