//! Interface B storage: the asset table behind [`AssetStore`].
//!
//! Handlers call [`AssetStore`]; only this file knows the SQL. A page is read by position
//! (`pos BETWEEN lo AND hi`), so page cost does not grow with the offset; see
//! `migrations/0002_registry.sql` for the schema and its invariants.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Db, StoreError};

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

/// One page of templates, newest first, and the total count read in the same transaction.
#[derive(Debug, Clone, Default)]
pub struct PageRows {
    /// Number of assets.
    pub count: u64,
    /// Templates of the page's records, in listing order.
    pub templates: Vec<Vec<u8>>,
}

/// The asset query layer.
#[derive(Debug, Clone)]
pub struct AssetStore {
    db: Db,
}

impl AssetStore {
    /// Wrap a database handle.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Number of assets.
    pub async fn count(&self) -> Result<u64, StoreError> {
        self.db.read(count).await
    }

    /// Records `[offset, offset + limit)` in listing order (descending `uploaded_at`, then descending
    /// insertion id) with the count, in one read transaction.
    pub async fn page(&self, offset: u64, limit: u64) -> Result<PageRows, StoreError> {
        self.db.read(move |c| page(c, offset, limit)).await
    }

    /// Like [`AssetStore::page`], but hands each record's id and stored template to `f` straight from
    /// the database row (no intermediate copy), on the blocking pool. Returns the count and the accumulator.
    pub async fn page_each<T, F>(
        &self,
        offset: u64,
        limit: u64,
        acc: T,
        f: F,
    ) -> Result<(u64, T), StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut T, u64, &[u8]) -> Result<(), StoreError> + Send + 'static,
    {
        self.db
            .read(move |c| page_each(c, offset, limit, acc, f))
            .await
    }

    /// The id and template of one asset by CID.
    pub async fn template(&self, cid: String) -> Result<(u64, Vec<u8>), StoreError> {
        self.db
            .read(move |c| {
                c.query_row("SELECT id, tpl FROM assets WHERE cid = ?1", [cid], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
                })
                .optional()?
                .ok_or(StoreError::NotFound)
            })
            .await
    }

    /// The file behind an asset CID.
    pub async fn file(&self, cid: String) -> Result<AssetFile, StoreError> {
        self.db.read(move |c| file(c, &cid)).await
    }

    /// True if an asset with this CID exists.
    pub async fn exists(&self, cid: String) -> Result<bool, StoreError> {
        self.db
            .read(move |c| {
                Ok(c.query_row(
                    "SELECT EXISTS(SELECT 1 FROM assets WHERE cid = ?1)",
                    [cid],
                    |r| r.get(0),
                )?)
            })
            .await
    }

    /// Insert one asset, keeping positions dense; returns its id. A duplicate CID gives
    /// [`StoreError::Conflict`].
    pub async fn insert(&self, asset: NewAsset) -> Result<u64, StoreError> {
        self.db
            .write(move |c| {
                insert(c, &asset)?;
                let id = c.last_insert_rowid() as u64;
                Ok(id)
            })
            .await
    }

    /// Insert many assets in one transaction (seeding).
    pub fn insert_many_blocking(
        &self,
        assets: impl IntoIterator<Item = NewAsset>,
    ) -> Result<usize, StoreError> {
        self.db.write_blocking(|c| {
            let tx = c.transaction()?;
            let mut n = 0;
            for a in assets {
                insert(&tx, &a)?;
                n += 1;
            }
            tx.commit()?;
            Ok(n)
        })
    }
}

fn count(c: &Connection) -> Result<u64, StoreError> {
    let max: Option<i64> = c.query_row("SELECT max(pos) FROM assets", [], |r| r.get(0))?;
    Ok(max.map_or(0, |m| (m + 1).max(0) as u64))
}

fn page(c: &Connection, offset: u64, limit: u64) -> Result<PageRows, StoreError> {
    let (count, templates) = page_each(
        c,
        offset,
        limit,
        Vec::new(),
        |acc: &mut Vec<Vec<u8>>, _, t| {
            acc.push(t.to_vec());
            Ok(())
        },
    )?;
    Ok(PageRows { count, templates })
}

fn page_each<T>(
    c: &Connection,
    offset: u64,
    limit: u64,
    mut acc: T,
    mut f: impl FnMut(&mut T, u64, &[u8]) -> Result<(), StoreError>,
) -> Result<(u64, T), StoreError> {
    tune_reader(c)?;
    // One read transaction: the count and the page agree even while uploads land.
    let tx = c.unchecked_transaction()?;
    let count = count(&tx)?;
    if offset < count && limit > 0 {
        // Descending position `count-1-offset` down to `count-offset-limit` (clamped at 0).
        let hi = (count - 1 - offset) as i64;
        let lo = count.saturating_sub(offset.saturating_add(limit)) as i64;
        let mut stmt = tx.prepare_cached(
            "SELECT id, tpl FROM assets WHERE pos BETWEEN ?1 AND ?2 ORDER BY pos DESC",
        )?;
        let mut rows = stmt.query(params![lo, hi])?;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            let blob = row
                .get_ref(1)?
                .as_blob()
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            f(&mut acc, id as u64, blob)?;
        }
    }
    tx.finish()?;
    Ok((count, acc))
}

/// Page cache of a connection that serves listings: big enough for the hot pages of 200 records of
/// ~6 KB (two overflow pages each), so repeated pages are served from memory. Applied once per
/// connection (the check is one cached statement).
const READER_CACHE_KIB: i64 = 32 * 1024;
/// Address space a listing connection may memory-map (SQLite maps at most the file size).
const READER_MMAP_BYTES: i64 = 1 << 30;

fn tune_reader(c: &Connection) -> Result<(), StoreError> {
    let current: i64 = c
        .prepare_cached("PRAGMA cache_size")?
        .query_row([], |r| r.get(0))?;
    if current != -READER_CACHE_KIB {
        c.pragma_update(None, "cache_size", -READER_CACHE_KIB)?;
        // Memory-mapped reads: pages come straight from the OS page cache instead of `pread` copies.
        c.execute_batch(&format!("PRAGMA mmap_size = {READER_MMAP_BYTES}"))?;
    }
    Ok(())
}

fn file(c: &Connection, cid: &str) -> Result<AssetFile, StoreError> {
    let row = c
        .query_row(
            "SELECT seed_index, file_path, mime, file_name FROM assets WHERE cid = ?1",
            [cid],
            |r| {
                Ok((
                    r.get::<_, Option<i64>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            },
        )
        .optional()?
        .ok_or(StoreError::NotFound)?;
    let source = match row {
        (_, Some(path), ..) => FileSource::Stored(path),
        (Some(i), None, ..) => FileSource::Seed(i as u64),
        _ => return Err(StoreError::Invalid(format!("asset {cid} has no file"))),
    };
    Ok(AssetFile {
        source,
        mime: row.2,
        file_name: row.3,
    })
}

fn insert(c: &Connection, a: &NewAsset) -> Result<(), StoreError> {
    let exists: bool = c.query_row(
        "SELECT EXISTS(SELECT 1 FROM assets WHERE cid = ?1)",
        [&a.cid],
        |r| r.get(0),
    )?;
    if exists {
        return Err(StoreError::Conflict(format!(
            "an asset with cid {} already exists",
            a.cid
        )));
    }
    let n = count(c)? as i64;
    // The new row gets the largest id, so it sorts after every row with the same uploaded_us.
    let newest: Option<i64> =
        c.query_row("SELECT max(uploaded_us) FROM assets", [], |r| r.get(0))?;
    let pos = match newest {
        Some(newest) if newest > a.uploaded_us => {
            let p: i64 = c.query_row(
                "SELECT count(*) FROM assets WHERE uploaded_us <= ?1",
                [a.uploaded_us],
                |r| r.get(0),
            )?;
            // Shift [p, n) up by one without transient duplicates in the unique index.
            c.execute("UPDATE assets SET pos = -pos - 1 WHERE pos >= ?1", [p])?;
            c.execute("UPDATE assets SET pos = -pos WHERE pos < 0", [])?;
            p
        }
        _ => n,
    };
    let (seed_index, file_path) = match &a.source {
        FileSource::Seed(i) => (Some(*i as i64), None),
        FileSource::Stored(p) => (None, Some(p.as_str())),
    };
    c.prepare_cached(
        "INSERT INTO assets (cid, uuid, uploaded_us, pos, seed_index, file_path, file_name, mime, size, proof_hash, tpl)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        a.cid,
        a.uuid,
        a.uploaded_us,
        pos,
        seed_index,
        file_path,
        a.file_name,
        a.mime,
        a.size as i64,
        a.proof_hash,
        a.template
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset(cid: &str, us: i64) -> NewAsset {
        NewAsset {
            cid: cid.into(),
            uuid: format!("u-{cid}"),
            uploaded_us: us,
            source: FileSource::Seed(0),
            file_name: "f".into(),
            mime: "image/jpeg".into(),
            size: 1,
            proof_hash: "00".into(),
            template: cid.as_bytes().to_vec(),
        }
    }

    #[tokio::test]
    async fn pages_follow_descending_time_with_id_tie_break_and_positions_stay_dense() {
        let store = AssetStore::new(Db::open_in_memory().unwrap());
        for (cid, us) in [
            ("a", 10),
            ("b", 30),
            ("c", 20),
            ("d", 30),
            ("e", 5),
            ("f", 40),
        ] {
            store.insert(asset(cid, us)).await.unwrap();
        }
        let p = store.page(0, 100).await.unwrap();
        assert_eq!(p.count, 6);
        let order: Vec<String> = p
            .templates
            .iter()
            .map(|t| String::from_utf8(t.clone()).unwrap())
            .collect();
        assert_eq!(order, ["f", "d", "b", "c", "a", "e"]);
        let p = store.page(2, 3).await.unwrap();
        assert_eq!(p.templates, [b"b".to_vec(), b"c".to_vec(), b"a".to_vec()]);
        assert!(store.page(6, 3).await.unwrap().templates.is_empty());
        assert!(
            store
                .page(u64::MAX, u64::MAX)
                .await
                .unwrap()
                .templates
                .is_empty()
        );
        assert_eq!(
            store.page(5, u64::MAX).await.unwrap().templates,
            [b"e".to_vec()]
        );
        let dup = store.insert(asset("a", 99)).await.unwrap_err();
        assert!(dup.is_unique_violation());
        assert_eq!(
            store.file("c".into()).await.unwrap().source,
            FileSource::Seed(0)
        );
        assert!(matches!(
            store.file("zz".into()).await,
            Err(StoreError::NotFound)
        ));
    }
}
