//! Interface B's assets on SQLite: [`SqliteAssetStore`].

use crate::store::assets::{
    AssetFile, AssetStore, FileSource, NewAsset, PageRows, SEED_CHUNK, SeedAsset,
};
use crate::store::{Db, StoreError, StoreFuture};
use rusqlite::{Connection, OptionalExtension, params};

/// [`AssetStore`] on SQLite.
#[derive(Debug, Clone)]
pub struct SqliteAssetStore {
    db: Db,
}

impl SqliteAssetStore {
    /// The store over `db` (migrated).
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl AssetStore for SqliteAssetStore {
    fn count(&self) -> StoreFuture<'_, u64> {
        Box::pin(self.db.read(count))
    }

    fn page(&self, offset: u64, limit: u64) -> StoreFuture<'_, PageRows> {
        Box::pin(self.db.read(move |c| page(c, offset, limit)))
    }

    fn template(&self, cid: String) -> StoreFuture<'_, (u64, Vec<u8>)> {
        Box::pin(self.db.read(move |c| {
            c.query_row("SELECT id, tpl FROM assets WHERE cid = ?1", [cid], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
            })
            .optional()?
            .ok_or(StoreError::NotFound)
        }))
    }

    fn file(&self, cid: String) -> StoreFuture<'_, AssetFile> {
        Box::pin(self.db.read(move |c| file(c, &cid)))
    }

    fn exists(&self, cid: String) -> StoreFuture<'_, bool> {
        Box::pin(self.db.read(move |c| {
            Ok(c.query_row(
                "SELECT EXISTS(SELECT 1 FROM assets WHERE cid = ?1)",
                [cid],
                |r| r.get(0),
            )?)
        }))
    }

    fn insert(&self, asset: NewAsset) -> StoreFuture<'_, u64> {
        Box::pin(self.db.write(move |c| {
            insert(c, &asset)?;
            Ok(c.last_insert_rowid() as u64)
        }))
    }

    fn seed(&self, n: u64, make: SeedAsset) -> StoreFuture<'_, usize> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                // Chunks of SEED_CHUNK, one transaction and one `write_blocking` each, so that the WAL
                // starts over between them (a million assets written without that pause left a 21 GB WAL
                // beside an 8.4 GB database). The first chunk's transaction holds the emptiness check, so a
                // second process starting on the same file sees assets and seeds nothing.
                let mut start = 0;
                while start < n {
                    let end = (start + SEED_CHUNK).min(n);
                    let seeded = db.write_blocking(|c| {
                        let tx =
                            c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                        if start == 0 && count(&tx)? > 0 {
                            return Ok(false);
                        }
                        for i in start..end {
                            insert(&tx, &make(i, n)?)?;
                        }
                        tx.commit()?;
                        Ok(true)
                    })?;
                    if !seeded {
                        return Ok(0);
                    }
                    start = end;
                }
                Ok(n as usize)
            })
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
        })
    }
}

fn count(c: &Connection) -> Result<u64, StoreError> {
    let max: Option<i64> = c.query_row("SELECT max(pos) FROM assets", [], |r| r.get(0))?;
    Ok(max.map_or(0, |m| (m + 1).max(0) as u64))
}

fn page(c: &Connection, offset: u64, limit: u64) -> Result<PageRows, StoreError> {
    tune_reader(c)?;
    // One read transaction: the count and the page agree even while uploads land.
    let tx = c.unchecked_transaction()?;
    let count = count(&tx)?;
    let mut rows = Vec::with_capacity(limit.min(1000) as usize);
    if offset < count && limit > 0 {
        // Descending position `count-1-offset` down to `count-offset-limit` (clamped at 0).
        let hi = (count - 1 - offset) as i64;
        let lo = count.saturating_sub(offset.saturating_add(limit)) as i64;
        let mut stmt = tx.prepare_cached(
            "SELECT id, tpl FROM assets WHERE pos BETWEEN ?1 AND ?2 ORDER BY pos DESC",
        )?;
        let mut found = stmt.query(params![lo, hi])?;
        while let Some(row) = found.next()? {
            let id: i64 = row.get(0)?;
            let blob = row
                .get_ref(1)?
                .as_blob()
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            rows.push((id as u64, bytes::Bytes::copy_from_slice(blob)));
        }
    }
    tx.finish()?;
    Ok(PageRows { count, rows })
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
