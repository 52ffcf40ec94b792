//! `reference-server migrate-sqlite-to-postgres`: copies a SQLite database into an empty PostgreSQL one.
//!
//! Every table the server keeps (articles, receipts, llms.txt interest, assets, the settlement log, the
//! payment engine's records and payment identifiers) is copied row for row, ids included, in **one
//! PostgreSQL transaction**: a failure leaves the target as it was. The source is opened read-only and
//! read in one snapshot, so stop the server first (or accept that writes made during the copy are not in
//! it). The target must hold no data (its schema is created by the copy if missing). Identity sequences
//! continue after the copied ids. Uploaded files are not in the database: copy the media directory
//! (`<sqlite file>.media`) to the directory the PostgreSQL instances share (`docs/deploy.md`).

use std::path::Path;

use bytes::BytesMut;
use rusqlite::OpenFlags;
use rusqlite::types::Value as SqlValue;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::StoreError;
use super::postgres::Pg;

/// The tables copied, parents first (receipts refer to articles).
pub const TABLES: &[&str] = &[
    "articles",
    "receipts",
    "receipt_reads",
    "llms_txt_interest",
    "assets",
    "settlements",
    "payment_states",
    "payment_ids",
    "discovery_resources",
    "license_mints",
];

/// Tables whose `id` is a PostgreSQL identity to move past the copied ids.
const IDENTITIES: &[&str] = &["assets", "settlements"];

/// Rows copied per table, in [`TABLES`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// `(table, rows)`.
    pub tables: Vec<(&'static str, u64)>,
}

impl std::fmt::Display for MigrationReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (table, rows) in &self.tables {
            writeln!(f, "{table}: {rows} rows")?;
        }
        Ok(())
    }
}

/// One SQLite value, written as the PostgreSQL column's type asks.
#[derive(Debug)]
struct Cell(SqlValue);

impl ToSql for Cell {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (&self.0, ty) {
            (SqlValue::Null, _) => Ok(IsNull::Yes),
            (SqlValue::Integer(i), &Type::BOOL) => (*i != 0).to_sql(ty, out),
            (SqlValue::Integer(i), &Type::INT2) => i16::try_from(*i)?.to_sql(ty, out),
            (SqlValue::Integer(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (SqlValue::Integer(i), &Type::INT8) => i.to_sql(ty, out),
            (SqlValue::Integer(i), &Type::TEXT) => i.to_string().to_sql(ty, out),
            (SqlValue::Real(r), &Type::FLOAT8) => r.to_sql(ty, out),
            (SqlValue::Text(t), &Type::TEXT) => t.to_sql(ty, out),
            (SqlValue::Text(t), &Type::BYTEA) => t.as_bytes().to_sql(ty, out),
            (SqlValue::Blob(b), &Type::BYTEA) => b.to_sql(ty, out),
            (v, ty) => Err(format!("cannot store SQLite {v:?} in a PostgreSQL {ty} column").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Reads every row of `table` from the SQLite file.
fn read_table(
    conn: &rusqlite::Connection,
    table: &str,
) -> Result<(Vec<String>, Vec<Vec<SqlValue>>), StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT * FROM {table}"))?;
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let n = columns.len();
    let rows = stmt
        .query_map([], |r| (0..n).map(|i| r.get::<_, SqlValue>(i)).collect())?
        .collect::<Result<Vec<Vec<SqlValue>>, _>>()?;
    Ok((columns, rows))
}

/// Copies the SQLite database at `sqlite` into the (empty) PostgreSQL database at `postgres`.
pub async fn sqlite_to_postgres(
    sqlite: &Path,
    postgres: &str,
) -> Result<MigrationReport, StoreError> {
    if !sqlite.is_file() {
        return Err(StoreError::Invalid(format!(
            "{} is not a SQLite database file",
            sqlite.display()
        )));
    }
    // Bring the source to the current schema first (an older file gets its pending migrations).
    let path = sqlite.to_path_buf();
    tokio::task::spawn_blocking(move || super::Db::open(path).map(drop))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))??;
    let pg = Pg::connect(postgres).await?;
    let mut client = pg.client().await?;
    let tx = client.transaction().await?;
    for table in TABLES {
        let rows: i64 = tx
            .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
            .await?
            .try_get(0)?;
        if rows > 0 {
            return Err(StoreError::Conflict(format!(
                "the target database is not empty ({table} has {rows} rows): migrate into a new database"
            )));
        }
    }
    let source = rusqlite::Connection::open_with_flags(sqlite, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    // One read transaction: every table from the same snapshot.
    source.execute_batch("BEGIN")?;
    let mut report = MigrationReport { tables: Vec::new() };
    for &table in TABLES {
        let (columns, rows) = read_table(&source, table)?;
        let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
        let insert = tx
            .prepare(&format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                columns.join(", "),
                placeholders.join(", ")
            ))
            .await?;
        let n = rows.len() as u64;
        for row in rows {
            let cells: Vec<Cell> = row.into_iter().map(Cell).collect();
            let params: Vec<&(dyn ToSql + Sync)> =
                cells.iter().map(|c| c as &(dyn ToSql + Sync)).collect();
            tx.execute(&insert, &params).await?;
        }
        report.tables.push((table, n));
        tracing::info!(table, rows = n, "copied");
    }
    source.execute_batch("COMMIT")?;
    for table in IDENTITIES {
        tx.execute(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM {table}"
            ),
            &[],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(report)
}
