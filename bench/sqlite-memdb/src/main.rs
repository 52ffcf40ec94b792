//! Group commits of random-key inserts (four writes in savepoints per commit, as the reference server's
//! writer does), 2,000 commits per round, five rounds: the time per commit as the database grows.
//!
//! `memory`: `Connection::open_in_memory()`. Every page stays in the page cache, and after a B-tree balance
//! swapped two pages through the lock page's number the commit walks the whole cache (perf:
//! `pcache1TruncateUnsafe`): the time per commit grows with the database. `memdb`: the `memdb` VFS, as
//! `reference_server::store::sqlite::Db::open_in_memory` opens it: the time per commit stays flat.

use std::time::Instant;

use rusqlite::{Connection, OpenFlags};

fn main() -> rusqlite::Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "memory".into());
    let conn = match mode.as_str() {
        "memdb" => Connection::open_with_flags(
            "file:bench?vfs=memdb",
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_URI,
        )?,
        "memory" => Connection::open_in_memory()?,
        other => panic!("unknown mode {other:?}: memory or memdb"),
    };
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.execute_batch(
        "CREATE TABLE t (k BLOB PRIMARY KEY, v BLOB); CREATE TABLE u (k BLOB PRIMARY KEY, v BLOB)",
    )?;
    // xorshift: distinct random keys without a dependency.
    let mut seed = 1u64;
    let mut key = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed.to_le_bytes().repeat(4)
    };
    for round in 0..5 {
        let start = Instant::now();
        for _ in 0..2_000 {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            for _ in 0..4 {
                conn.prepare_cached("SAVEPOINT write")?.execute([])?;
                conn.prepare_cached("INSERT INTO t VALUES (?1, ?2)")?
                    .execute((key(), vec![7u8; 900]))?;
                conn.prepare_cached("INSERT INTO u VALUES (?1, ?2)")?
                    .execute((key(), vec![7u8; 300]))?;
                conn.prepare_cached("RELEASE write")?.execute([])?;
            }
            conn.execute_batch("COMMIT")?;
        }
        let per_commit = start.elapsed().as_secs_f64() * 1e6 / 2_000.0;
        println!("{mode} round {round}: {per_commit:.1} µs per commit");
    }
    Ok(())
}
