//! The SQLite backend: one file (or memory), a group-commit writer and a pool of readers.
//!
//! [`Db`] is the connection handle the SQLite implementations of the store traits
//! ([`SqliteLicensingStore`], [`SqliteSettlementStore`], [`SqliteAssetStore`], [`SqlitePaymentStore`], one
//! file each beside this one, as in `postgres/`) run their SQL on. Nothing outside `store`
//! uses it: handlers see the traits.
//!
//! # Model
//!
//! - One SQLite file in WAL mode: one **writer** connection (SQLite serialises writers anyway) and a small
//!   pool of **reader** connections that read concurrently with the writer.
//! - **Group commit**: every [`Db::write`] is queued to one writer thread, which takes everything that has
//!   arrived (up to [`MAX_BATCH`] writes), runs each in its own savepoint inside one `BEGIN IMMEDIATE … COMMIT`,
//!   and answers each caller only after the commit returned: concurrent writes (the purchases of many
//!   clients) share one fsync, nobody is answered before their write is durable, and a write that fails rolls
//!   back alone. A write is one channel send and one wake-up, no blocking-pool hand-off. A write of a single
//!   statement ([`Db::write_statement`]: the purchase path's) needs no savepoint, SQLite undoing a failed
//!   statement by itself.
//! - **The writer lets the writers-to-be go first**: woken by a write, it yields its core
//!   ([`std::thread::yield_now`]) before committing, again as long as that brings more writes (up to
//!   [`MAX_YIELDS`] times). A purchase's last writes (its settled record, its settlement row, its receipt) come
//!   from tasks that run at once on a busy core; committing the first alone would cost a commit, its fsync
//!   and a rewrite of the same pages for the others. When nothing else is runnable a yield returns at once,
//!   so an idle server pays a system call, never a wait (at 1 connection the p50 fell). Measured on one core
//!   (`docs/bench/reference-server-licensing.md`): per durable purchase 5–13% less CPU at 1
//!   and 4 connections, and at 32 a third as many commits and a fifth fewer bytes written for 4% less CPU
//!   (within the noise); 15% less CPU through a facilitator, 29% less with an in-memory database.
//! - Reads run on Tokio's blocking pool ([`tokio::task::spawn_blocking`]), so a slow query never stalls the
//!   async workers.
//! - `synchronous = FULL`: a committed write (a license receipt) survives a power cut, not only a crash.
//!   The bundled SQLite is built with `HAVE_FDATASYNC` (the workspace's `.cargo/config.toml`), so a commit
//!   is synced with `fdatasync`: the data and the size, without the journal commit a changed modification
//!   time costs `fsync` on ext4 or xfs.
//! - Checkpoints (the WAL copied back into the database file) run on a thread of their own every
//!   200 ms (`PASSIVE`: they block neither the writer nor the readers), not inside a commit. SQLite starts
//!   the WAL over only when a write begins with every frame already copied, which a writer that never
//!   pauses never does: once the WAL holds [`WAL_RESTART_FRAMES`] frames, the checkpoint thread asks the
//!   writer to copy the last few frames itself after a commit (its callers already answered), and the next
//!   write starts the WAL over. The file is then cut back to [`WAL_SIZE_LIMIT`] bytes. Writes outside the
//!   group commit ([`Db::write_blocking`]: seeding, one chunk per call) take the same step after each call.
//! - Migrations from [`MIGRATIONS`] (`migrations/sqlite/`) run once at open, recorded in `schema_migrations`.
//!
//! # Use from another module
//!
//! ```
//! use reference_server::store::{StoreError, sqlite::Db};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), StoreError> {
//! let db = Db::open_in_memory()?;
//! db.write(|conn| {
//!     conn.execute("CREATE TABLE t (x INTEGER)", [])?;
//!     conn.execute("INSERT INTO t (x) VALUES (?1)", [42])?;
//!     Ok(())
//! })
//! .await?;
//! let x: i64 = db.read(|conn| Ok(conn.query_row("SELECT x FROM t", [], |r| r.get(0))?)).await?;
//! assert_eq!(x, 42);
//! # Ok(()) }
//! ```
//!
//! A write closure gets a `&Connection` inside its own savepoint: everything it does is atomic (it commits
//! with the batch, or rolls back alone if it returns an error), so it needs no transaction of its own.

mod assets;
mod licensing;
mod payments;
mod settlements;

pub use assets::SqliteAssetStore;
pub use licensing::SqliteLicensingStore;
pub use payments::SqlitePaymentStore;
pub use settlements::SqliteSettlementStore;

use super::StoreError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, FileControl, OpenFlags};

/// Schema migrations, applied in order at start.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_licensing",
        include_str!("../migrations/sqlite/0001_licensing.sql"),
    ),
    (
        "0002_registry",
        include_str!("../migrations/sqlite/0002_registry.sql"),
    ),
    (
        "0003_settlements",
        include_str!("../migrations/sqlite/0003_settlements.sql"),
    ),
    (
        "0004_payments",
        include_str!("../migrations/sqlite/0004_payments.sql"),
    ),
    (
        "0005_llms_txt_interest",
        include_str!("../migrations/sqlite/0005_llms_txt_interest.sql"),
    ),
    (
        "0006_receipt_reads",
        include_str!("../migrations/sqlite/0006_receipt_reads.sql"),
    ),
    (
        "0007_signed_receipts",
        include_str!("../migrations/sqlite/0007_signed_receipts.sql"),
    ),
    (
        "0008_discovery",
        include_str!("../migrations/sqlite/0008_discovery.sql"),
    ),
    (
        "0009_licenses",
        include_str!("../migrations/sqlite/0009_licenses.sql"),
    ),
    (
        "0010_purchase_pages",
        include_str!("../migrations/sqlite/0010_purchase_pages.sql"),
    ),
    (
        "0011_unresolved_payments",
        include_str!("../migrations/sqlite/0011_unresolved_payments.sql"),
    ),
    (
        "0012_receipt_lookup",
        include_str!("../migrations/sqlite/0012_receipt_lookup.sql"),
    ),
    (
        "0013_check_constraints",
        include_str!("../migrations/sqlite/0013_check_constraints.sql"),
    ),
    (
        "0014_used_nonces",
        include_str!("../migrations/sqlite/0014_used_nonces.sql"),
    ),
];

/// The page size of a new database (see `Db::open`).
const PAGE_SIZE: i64 = 8192;

/// Largest in-memory database ([`Db::open_in_memory`]), in bytes: the largest single allocation SQLite makes
/// (its `memdb` buffer is one allocation), rounded down to whole pages. A write past it fails with
/// `SQLITE_FULL` like any other database error (a purchase whose reservation cannot be written is answered
/// 503 before anything is settled), and what was committed stays; a file database has no such limit.
pub const MEMORY_SIZE_LIMIT: i64 = 2_147_483_391 / PAGE_SIZE * PAGE_SIZE;

/// Number of reader connections for a file database (the machine has few cores; SQLite reads are fast).
const READERS: usize = 4;

/// How long a reader waits on a lock held by another connection before failing with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the writer waits for the write lock. Longer than a reader: another process on the same file may
/// hold it for a whole seed chunk or migration, which on a busy machine takes seconds, and a write that
/// waits is better than one that fails (a second process starting beside a seeding one must wait it out).
const WRITER_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the checkpoint thread copies the WAL into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// WAL frames (pages) after which the WAL is started over (see the module docs): 32 MiB of 8 KiB pages. The
/// WAL is never longer than this plus what is written while the writer catches up.
pub const WAL_RESTART_FRAMES: i64 = 4096;

/// The WAL file is cut back to this many bytes when it starts over (`journal_size_limit`): a burst does not
/// leave a huge file behind, and a steady load reuses the same blocks (no file growth at each commit).
pub const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// Most writes committed together by the group-commit writer.
pub const MAX_BATCH: usize = 256;

/// Most times the writer yields its core before a commit, each time to take the writes it brought.
pub const MAX_YIELDS: usize = 4;

/// A queued write: runs in the writer's transaction (or is told why there is none) and returns what to do
/// once the commit is known.
type Job = Box<dyn FnOnce(Result<&Connection, &Arc<rusqlite::Error>>) -> Ran + Send>;
/// Answers the caller with the commit's outcome (`None`: committed).
type Completion = Box<dyn FnOnce(Option<&Arc<rusqlite::Error>>) + Send>;

/// A job that ran: how to answer its caller, and whether it failed after changing the database (a
/// [`Db::write_statement`] whose change cannot be undone alone: the whole batch is rolled back).
struct Ran {
    complete: Completion,
    poisons: bool,
}

/// Handle to the database: cheap to clone, shareable across tasks.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Inner>,
}

struct Inner {
    writer: Arc<Mutex<Connection>>,
    /// The group-commit writer thread's queue.
    jobs: std::sync::mpsc::Sender<Job>,
    /// Group commits done (each carries one or more writes).
    commits: Arc<AtomicU64>,
    /// Writes committed (or failed) by the group commits.
    writes: Arc<AtomicU64>,
    /// Set by the checkpoint thread when the WAL should start over (see [`start_wal_over`]).
    restart: Arc<AtomicBool>,
    /// Empty for an in-memory database: reads then use the writer connection.
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    path: Option<PathBuf>,
    /// Dropped with the last handle: stops the checkpoint thread (none for an in-memory database).
    _checkpointer: Option<std::sync::mpsc::Sender<()>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.path)
            .field("readers", &self.inner.readers.len())
            .finish()
    }
}

impl Db {
    /// Open (creating if needed) a SQLite database file, switch it to WAL and apply pending migrations.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, WAL_RESTART_FRAMES)
    }

    /// [`Db::open`] starting the WAL over after `restart_frames` frames.
    fn open_with(path: impl AsRef<Path>, restart_frames: i64) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let writer = Connection::open(&path)?;
        configure(&writer)?;
        writer.busy_timeout(WRITER_BUSY_TIMEOUT)?;
        // Registry records are ~6 KB of JSON: an 8 KiB page keeps a record on one page (a table leaf holds up
        // to page - 35 bytes locally; 4 KiB pages spill every record into overflow pages). Smaller than the
        // 16 KiB used before: the WAL writes whole pages, and a purchase dirties a page in each of several
        // random-key indexes; 8 KiB measured +10-30% durable purchases/s and no slower registry page reads
        // (docs/bench/reference-server-licensing.md). Only takes effect when the file is new (an existing
        // file keeps its page size); WAL must come after it.
        writer.pragma_update(None, "page_size", PAGE_SIZE)?;
        // Another process opening the same new file at the same moment may hold the lock the switch to WAL
        // needs; SQLite answers that at once (no busy handler), so wait for it here.
        retry_busy(|| writer.pragma_update(None, "journal_mode", "WAL"))?;
        migrate(&writer)?;
        // Checkpoints run on their own thread (below), not inside the writer's commits.
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        writer.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
        let checkpointer = Connection::open(&path)?;
        configure(&checkpointer)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_URI,
            )?;
            configure(&conn)?;
            readers.push(Mutex::new(conn));
        }
        let restart = Arc::new(AtomicBool::new(false));
        let stop = start_checkpointer(&writer, checkpointer, restart.clone(), restart_frames);
        Ok(Self::from_parts(writer, readers, Some(path), stop, restart))
    }

    /// A private in-memory database (tests, benchmarks, demos): one connection serves reads and writes.
    ///
    /// It lives in SQLite's `memdb` VFS (a private, growable buffer; see [`MEMORY_SIZE_LIMIT`]), not in
    /// `:memory:`. A `:memory:` database keeps every page in its page cache, and SQLite's B-tree balancing
    /// parks a page at the number of the 1 GiB lock page while it swaps two pages; the commit that follows
    /// then walks the page cache's whole hash table to drop pages past the end of the database. Every commit
    /// that split or merged a page therefore cost time in proportion to the database's size: 10% of a
    /// purchase's CPU after 35,000 purchases, and growing. Under `memdb` the pager's cache is the usual
    /// bounded one, and evicted pages are copied back from the buffer.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::open_in_memory_limited(MEMORY_SIZE_LIMIT)
    }

    /// [`Db::open_in_memory`] holding at most `limit` bytes.
    fn open_in_memory_limited(mut limit: i64) -> Result<Self, StoreError> {
        let conn = Connection::open_with_flags(
            "file:reference-server-memory?vfs=memdb",
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.file_control(Some(rusqlite::MAIN_DB), FileControl::SizeLimit(&mut limit))?;
        configure(&conn)?;
        // The same page size as a file (see `open_with`), so both lay records out alike.
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
        migrate(&conn)?;
        let no_wal = Arc::new(AtomicBool::new(false));
        Ok(Self::from_parts(conn, Vec::new(), None, None, no_wal))
    }

    fn from_parts(
        writer: Connection,
        readers: Vec<Mutex<Connection>>,
        path: Option<PathBuf>,
        checkpointer: Option<std::sync::mpsc::Sender<()>>,
        restart: Arc<AtomicBool>,
    ) -> Self {
        let writer = Arc::new(Mutex::new(writer));
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let conn = writer.clone();
        let commits = Arc::new(AtomicU64::new(0));
        let writes = Arc::new(AtomicU64::new(0));
        let counters = (commits.clone(), writes.clone());
        let asked = restart.clone();
        // Ends when the last `Db` handle is dropped (the queue's sender with it).
        let spawned = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || group_commit(&conn, &queue, &counters.0, &counters.1, &asked));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the SQLite writer thread; writes will fail");
        }
        Self {
            inner: Arc::new(Inner {
                writer,
                jobs,
                commits,
                writes,
                restart,
                readers,
                next_reader: AtomicUsize::new(0),
                path,
                _checkpointer: checkpointer,
            }),
        }
    }

    /// Group commits done since the database was opened (each durable commit may carry many writes).
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// Writes carried by those group commits.
    pub fn committed_writes(&self) -> u64 {
        self.inner.writes.load(Ordering::Relaxed)
    }

    /// The database file, or `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Run a read-only closure on a reader connection, on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let db = self.clone();
        run_blocking(move || db.read_blocking(f)).await
    }

    /// Run a closure on the writer connection, in its own savepoint of the next group commit; the answer
    /// comes once that commit is durable (or failed: then nothing the closure did is kept).
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.queue(move |conn| (in_savepoint(conn, f), false)).await
    }

    /// [`Db::write`] for a closure that changes the database with **one statement** (reads besides are
    /// fine): it runs without a savepoint of its own, as SQLite undoes a failed statement by itself. A
    /// savepoint copies every page the write touches into the statement journal; the purchase path's
    /// writes (a payment record, a settlement row, a receipt) are single statements, and this saves them
    /// ~9% of a durable purchase's CPU (docs/bench/reference-server-licensing.md). Should the closure fail
    /// (or panic) after it changed something, that change cannot be undone alone: the whole group commit is
    /// rolled back and every write in it fails (nothing of it is written), never a half-done write kept.
    pub async fn write_statement<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.queue(move |conn| {
            let before = conn.total_changes();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
                .unwrap_or_else(|_| Err(StoreError::Task("the write panicked".into())));
            let poisons = result.is_err() && conn.total_changes() != before;
            (result, poisons)
        })
        .await
    }

    /// Queues `run` for the writer thread's next group commit and waits for that commit's outcome.
    async fn queue<T, R>(&self, run: R) -> Result<T, StoreError>
    where
        R: FnOnce(&Connection) -> (Result<T, StoreError>, bool) + Send + 'static,
        T: Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn: Result<&Connection, &Arc<rusqlite::Error>>| {
            let (result, poisons) = match conn {
                Ok(conn) => run(conn),
                Err(e) => (Err(StoreError::Begin(e.clone())), false),
            };
            Ran {
                complete: Box::new(move |commit: Option<&Arc<rusqlite::Error>>| {
                    let result = match (result, commit) {
                        (Ok(_), Some(e)) => Err(StoreError::Commit(e.clone())),
                        (result, _) => result,
                    };
                    let _ = answer.send(result);
                }),
                poisons,
            }
        });
        self.inner
            .jobs
            .send(job)
            .map_err(|_| StoreError::Task("the SQLite writer thread is gone".into()))?;
        answered
            .await
            .map_err(|_| StoreError::Task("the SQLite writer dropped a write".into()))?
    }

    /// Synchronous form of [`Db::read`], for code already off the async workers (seeding, benches).
    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let readers = &self.inner.readers;
        if readers.is_empty() {
            return f(&lock(&self.inner.writer));
        }
        // Prefer an idle reader; fall back to waiting on the round-robin one.
        let start = self.inner.next_reader.fetch_add(1, Ordering::Relaxed);
        for i in 0..readers.len() {
            if let Ok(conn) = readers[(start + i) % readers.len()].try_lock() {
                return f(&conn);
            }
        }
        f(&lock(&readers[start % readers.len()]))
    }

    /// Runs `f` on the writer connection now, outside the group commit (seeding, benches): `f` manages its
    /// own transaction. Afterwards, as after a group commit, the WAL is readied to start over when the
    /// checkpoint thread asked for it, so a long series of such writes (seeding a million assets chunk by
    /// chunk) does not grow the WAL without bound: commit one transaction per call.
    pub fn write_blocking<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = lock(&self.inner.writer);
        let done = f(&mut conn);
        start_wal_over(&conn, &self.inner.restart);
        done
    }
}

impl super::Backend for Db {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn ping(&self) -> super::StoreFuture<'_, ()> {
        Box::pin(self.read(|c| {
            c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?;
            Ok(())
        }))
    }

    fn record_metrics(&self) {
        crate::metrics::counter(
            "sqlite_group_commits_total",
            "Durable commits of the SQLite writer (each carries one or more writes).",
            self.commits(),
        );
        crate::metrics::counter(
            "sqlite_group_commit_writes_total",
            "Writes carried by those commits.",
            self.committed_writes(),
        );
    }
}

/// Copies the WAL back into the database file every [`CHECKPOINT_EVERY`] on a thread of its own, with
/// `PASSIVE` checkpoints (they never block the writer or the readers). SQLite's default checkpoints
/// inside the commit that crosses 1,000 WAL pages: the group-commit writer then stalls while a
/// checkpoint writes and fsyncs the database file, and every purchase queued behind it waits.
/// Durability is the WAL's (fsync'd at each commit); a checkpoint only moves committed pages.
///
/// When the WAL holds `restart_frames` frames or more it sets `restart` for the writer (see
/// [`group_commit`]) and checkpoints again at once, so the writer has only the last few frames to copy.
fn start_checkpointer(
    writer: &Connection,
    conn: Connection,
    restart: Arc<AtomicBool>,
    restart_frames: i64,
) -> Option<std::sync::mpsc::Sender<()>> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            // Ends when the last `Db` handle is dropped (the sender with it).
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(CHECKPOINT_EVERY)
            {
                match checkpoint(&conn) {
                    Ok((log, _)) if log >= restart_frames => {
                        // Copy again what came during that pass, so the writer is left a commit or two.
                        if let Err(e) = checkpoint(&conn) {
                            tracing::warn!(error = %e, "SQLite checkpoint failed; retried");
                        }
                        restart.store(true, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "SQLite checkpoint failed; retried"),
                }
            }
        });
    match spawned {
        Ok(_) => Some(stop),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the SQLite checkpoint thread; checkpointing in the writer");
            let _ = writer.pragma_update(None, "wal_autocheckpoint", 1000);
            None
        }
    }
}

/// A `PASSIVE` checkpoint: (frames in the WAL, frames copied into the database file).
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

/// The writer thread: takes every queued write (up to [`MAX_BATCH`], yielding first: see the module docs),
/// runs them in one transaction, commits, then answers each. Asked to (`restart`), it then copies what the
/// checkpoint thread has not yet copied, so that its next write starts the WAL over (SQLite does so when a
/// write begins with nothing left to copy and no reader on the WAL).
fn group_commit(
    writer: &Mutex<Connection>,
    queue: &std::sync::mpsc::Receiver<Job>,
    commits: &AtomicU64,
    writes: &AtomicU64,
    restart: &AtomicBool,
) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        take_queued(queue, &mut batch);
        // The threads a write woke us ahead of (a purchase's other writes, on this busy core) queue theirs.
        for _ in 0..MAX_YIELDS {
            let taken = batch.len();
            if taken == MAX_BATCH {
                break;
            }
            std::thread::yield_now();
            take_queued(queue, &mut batch);
            if batch.len() == taken {
                break;
            }
        }
        let conn = lock(writer);
        // Both statements prepared once (a connection's statement cache), not parsed again per commit.
        if let Err(e) = run_cached(&conn, "BEGIN IMMEDIATE") {
            tracing::error!(error = %e, writes = batch.len(), "cannot begin a write transaction");
            let e = Arc::new(e);
            for job in batch {
                (job(Err(&e)).complete)(None);
            }
            continue;
        }
        let mut poisoned = false;
        let completions: Vec<Completion> = batch
            .into_iter()
            .map(|job| {
                let ran = job(Ok(&conn));
                poisoned |= ran.poisons;
                ran.complete
            })
            .collect();
        let committed = if poisoned {
            Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some(
                    "a single-statement write failed after changing the database: the group commit was rolled back"
                        .to_owned(),
                ),
            ))
        } else {
            run_cached(&conn, "COMMIT")
        };
        if committed.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        drop(conn);
        commits.fetch_add(1, Ordering::Relaxed);
        writes.fetch_add(completions.len() as u64, Ordering::Relaxed);
        let error = committed.err().map(Arc::new);
        if let Some(e) = &error {
            tracing::error!(error = %e, writes = completions.len(), "group commit failed: nothing of it was written");
        }
        for complete in completions {
            complete(error.as_ref());
        }
        if restart.load(Ordering::Relaxed) {
            start_wal_over(&lock(writer), restart);
        }
    }
}

/// After a commit on the writer connection `conn`, when the checkpoint thread asked for it (`restart`):
/// copies the frames it has not yet copied, so that the next write starts the WAL over (SQLite does so when
/// a write begins with nothing left to copy and no reader on the WAL).
fn start_wal_over(conn: &Connection, restart: &AtomicBool) {
    if restart.load(Ordering::Relaxed) {
        match checkpoint(conn) {
            // Everything copied: the next write starts the WAL over.
            Ok((log, done)) if done >= log => restart.store(false, Ordering::Relaxed),
            // Readers on older frames, or the checkpoint thread at work: after the next commit.
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "SQLite checkpoint in the writer failed"),
        }
    }
}

/// Runs the statement `sql` (no parameters, no rows) from `conn`'s statement cache.
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Adds what is queued to `batch`, up to [`MAX_BATCH`] writes.
fn take_queued(queue: &std::sync::mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// Runs `f` in a savepoint: released on success, rolled back (alone) on error.
fn in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    run_cached(conn, "SAVEPOINT write")?;
    // A panicking write must not take the writer thread (and every later write) with it.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
        .unwrap_or_else(|_| Err(StoreError::Task("the write panicked".into())));
    let end = match &result {
        Ok(_) => run_cached(conn, "RELEASE write"),
        Err(_) => conn.execute_batch("ROLLBACK TO write; RELEASE write"),
    };
    match (result, end) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) => Err(e.into()),
        (Err(e), _) => Err(e),
    }
}

/// A poisoned lock only means another query panicked; the connection itself is still usable.
fn lock(m: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The savepoint of every write in a group commit keeps its undo pages in a statement journal: in memory,
    // not in a temporary file written on every write.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(())
}

/// Apply every migration of [`MIGRATIONS`] not yet recorded in `schema_migrations`, each in its own
/// transaction.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             name TEXT PRIMARY KEY,
             applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
         )",
    )?;
    for &(name, sql) in MIGRATIONS {
        // Checked under the write lock: a second process starting on the same file waits here and then
        // finds the migration recorded.
        let apply = || -> Result<bool, rusqlite::Error> {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let result = conn
                .query_row(
                    "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE name = ?1)",
                    [name],
                    |r| r.get::<_, bool>(0),
                )
                .and_then(|done| {
                    if done {
                        return Ok(false);
                    }
                    conn.execute_batch(sql)?;
                    conn.execute("INSERT INTO schema_migrations (name) VALUES (?1)", [name])?;
                    Ok(true)
                });
            match result {
                Ok(applied) => conn.execute_batch("COMMIT").map(|()| applied),
                Err(e) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        };
        let applied = apply().map_err(|source| StoreError::Migration {
            name,
            source: Box::new(source.into()),
        })?;
        if applied {
            tracing::info!(migration = name, "applied schema migration");
        }
    }
    Ok(())
}

/// Runs `f` again while SQLite answers `SQLITE_BUSY` at once (statements that do not wait on the busy
/// handler), for at most [`WRITER_BUSY_TIMEOUT`].
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + WRITER_BUSY_TIMEOUT;
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's `.cargo/config.toml` reaches the build: libsqlite3-sys compiles the bundled SQLite with
    /// the same environment this crate is compiled with, so a commit is synced with `fdatasync`. An
    /// environment that overrides `LIBSQLITE3_FLAGS` without it fails here instead of silently syncing with
    /// `fsync` (measured ~11% fewer durable purchases/s on ext4 with a journal).
    #[test]
    fn the_bundled_sqlite_is_built_to_sync_with_fdatasync() {
        let flags = option_env!("LIBSQLITE3_FLAGS").unwrap_or_default();
        assert!(
            flags.split_whitespace().any(|f| f == "-DHAVE_FDATASYNC=1"),
            "LIBSQLITE3_FLAGS = {flags:?}"
        );
    }

    /// The same file's other flag reaches the library: SQLite's allocations are not counted under a global
    /// mutex (`SQLITE_DEFAULT_MEMSTATUS=0`; 1.4% of an in-memory purchase's instructions). The
    /// server reads no SQLite memory statistics and sets no SQLite heap limit, which need them.
    #[test]
    fn the_bundled_sqlite_counts_no_memory_statistics() {
        let conn = Connection::open_in_memory().unwrap();
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }

    #[tokio::test]
    async fn file_db_migrates_once_and_reads_its_writes() {
        let dir = std::env::temp_dir().join(format!("rs-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.sqlite");
        {
            let db = Db::open(&path).unwrap();
            db.write(|c| {
                Ok(c.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7);")?)
            })
            .await
            .unwrap();
            let x: i64 = db
                .read(|c| Ok(c.query_row("SELECT x FROM t", [], |r| r.get(0))?))
                .await
                .unwrap();
            assert_eq!(x, 7);
        }
        let db = Db::open(&path).unwrap();
        let n: i64 = db
            .read(|c| Ok(c.query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(n as usize, MIGRATIONS.len());
        let mode: String = db
            .read(|c| Ok(c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        let page: i64 = db
            .read(|c| Ok(c.query_row("PRAGMA page_size", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(page, 8192);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_in_memory_database_is_private_migrated_and_in_a_growable_memdb_buffer() {
        let (a, b) = (Db::open_in_memory().unwrap(), Db::open_in_memory().unwrap());
        a.write(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7)")?))
            .await
            .unwrap();
        async fn tables(db: &Db) -> i64 {
            db.read(|c| {
                Ok(c.query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE name = 't'",
                    [],
                    |r| r.get(0),
                )?)
            })
            .await
            .unwrap()
        }
        assert_eq!(tables(&a).await, 1);
        assert_eq!(tables(&b).await, 0, "each in-memory database is its own");
        let applied: i64 = a
            .read(|c| Ok(c.query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(applied, MIGRATIONS.len() as i64);
        // Only SQLite's memdb VFS answers the size limit (a `:memory:` pager does not: its whole database
        // sits in a page cache whose commits slow down as it grows, see `open_in_memory`).
        let (limit, page_size) = a
            .read(|c| {
                let mut limit = -1;
                c.file_control(Some(rusqlite::MAIN_DB), FileControl::SizeLimit(&mut limit))?;
                Ok((
                    limit,
                    c.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))?,
                ))
            })
            .await
            .unwrap();
        assert_eq!((limit, page_size), (MEMORY_SIZE_LIMIT, PAGE_SIZE));
    }

    #[tokio::test]
    async fn a_full_in_memory_database_refuses_the_write_and_keeps_what_was_committed() {
        // Room for the schema and a few rows of 6 KB (a page each), not for a hundred.
        let db = Db::open_in_memory_limited(1024 * 1024).unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (x BLOB NOT NULL)")?))
            .await
            .unwrap();
        let mut written = 0;
        let full = loop {
            assert!(written < 1_000, "the limit never applied");
            match db
                .write_statement(
                    |c| Ok(c.execute("INSERT INTO t (x) VALUES (zeroblob(6000))", [])?),
                )
                .await
            {
                Ok(_) => written += 1,
                Err(e) => break e,
            }
        };
        // SQLite may refuse the page at the statement or when the commit writes it out.
        let code = match &full {
            StoreError::Sqlite(e) => e.sqlite_error_code(),
            StoreError::Commit(e) => e.sqlite_error_code(),
            _ => None,
        };
        assert_eq!(code, Some(rusqlite::ErrorCode::DiskFull), "{full:?}");
        assert!(written > 0);
        let rows: i64 = db
            .read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(rows, written, "every committed row is still there");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_commits_and_a_failing_write_rolls_back_alone() {
        let dir = std::env::temp_dir().join(format!("rs-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Db::open(dir.join("t.sqlite")).unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER)")?))
            .await
            .unwrap();
        let before = db.commits();
        let writes: Vec<_> = (0..200)
            .map(|i| {
                let db = db.clone();
                tokio::spawn(async move {
                    db.write(move |c| {
                        c.execute("INSERT INTO t (x) VALUES (?1)", [i])?;
                        if i == 13 {
                            return Err(StoreError::Conflict("thirteen".into()));
                        }
                        Ok(())
                    })
                    .await
                })
            })
            .collect();
        let mut failed = 0;
        for w in writes {
            if w.await.unwrap().is_err() {
                failed += 1;
            }
        }
        assert_eq!(failed, 1);
        let (n, has_13): (i64, bool) = db
            .read(|c| {
                Ok(c.query_row(
                    "SELECT COUNT(*), EXISTS(SELECT 1 FROM t WHERE x = 13) FROM t",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?)
            })
            .await
            .unwrap();
        assert_eq!(
            (n, has_13),
            (199, false),
            "the failing write alone rolled back"
        );
        let commits = db.commits() - before;
        assert!(commits < 200, "{commits} commits for 200 concurrent writes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_panicking_write_fails_alone_and_the_writer_goes_on() {
        let db = Db::open_in_memory().unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER)")?))
            .await
            .unwrap();
        let failed = db
            .write(|c| -> Result<(), StoreError> {
                c.execute("INSERT INTO t (x) VALUES (1)", [])?;
                panic!("a bug in a write closure")
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Task(_))), "{failed:?}");
        db.write(|c| Ok(c.execute("INSERT INTO t (x) VALUES (2)", []).map(|_| ())?))
            .await
            .unwrap();
        assert_eq!(
            xs(&db).await,
            vec![2],
            "the panicking write was rolled back"
        );
    }

    /// The values of table `t`.
    async fn xs(db: &Db) -> Vec<i64> {
        db.read(|c| {
            let mut s = c.prepare("SELECT x FROM t")?;
            let rows = s.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
        .unwrap()
    }

    /// 200 concurrent [`Db::write_statement`]s of `write(i)`, `i` in 0..200, with their answers.
    async fn concurrent_statements(
        db: &Db,
        write: impl Fn(i64, &Connection) -> Result<(), StoreError> + Clone + Send + Sync + 'static,
    ) -> Vec<(i64, Result<(), StoreError>)> {
        let writes: Vec<_> = (0..200i64)
            .map(|i| {
                let (db, write) = (db.clone(), write.clone());
                tokio::spawn(async move { (i, db.write_statement(move |c| write(i, c)).await) })
            })
            .collect();
        let mut answers = Vec::new();
        for w in writes {
            answers.push(w.await.unwrap());
        }
        answers
    }

    /// Each write answered `Ok` is in the table, each answered `Err` is not.
    async fn answers_match_the_table(
        db: &Db,
        answers: Vec<(i64, Result<(), StoreError>)>,
    ) -> (usize, usize) {
        let kept: std::collections::HashSet<i64> = xs(db).await.into_iter().collect();
        let (mut ok, mut failed) = (0, 0);
        for (i, answer) in answers {
            assert_eq!(answer.is_ok(), kept.contains(&i), "write {i}: {answer:?}");
            if answer.is_ok() { ok += 1 } else { failed += 1 }
        }
        (ok, failed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_single_statement_write_fails_alone() {
        let db = Db::open_in_memory().unwrap();
        db.write(|c| {
            Ok(c.execute_batch("CREATE TABLE t (x INTEGER UNIQUE); INSERT INTO t VALUES (-1)")?)
        })
        .await
        .unwrap();
        // 13 collides with the row already there: SQLite undoes that statement by itself.
        let answers = concurrent_statements(&db, |i, c| {
            c.execute(
                "INSERT INTO t (x) VALUES (?1)",
                [if i == 13 { -1 } else { i }],
            )?;
            Ok(())
        })
        .await;
        assert_eq!(answers_match_the_table(&db, answers).await, (199, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_single_statement_write_failing_after_its_change_rolls_its_whole_commit_back() {
        for panics in [false, true] {
            let db = Db::open_in_memory().unwrap();
            db.write(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER)")?))
                .await
                .unwrap();
            let answers = concurrent_statements(&db, move |i, c| {
                c.execute("INSERT INTO t (x) VALUES (?1)", [i])?;
                if i == 13 {
                    // A bug: failing after the change, which no savepoint can undo alone.
                    if panics {
                        panic!("after the change");
                    }
                    return Err(StoreError::Conflict("thirteen".into()));
                }
                Ok(())
            })
            .await;
            let (ok, failed) = answers_match_the_table(&db, answers).await;
            assert!(failed >= 1 && ok + failed == 200, "{ok} {failed}");
            // The writer goes on.
            db.write_statement(|c| {
                Ok(c.execute("INSERT INTO t (x) VALUES (1000)", [])
                    .map(|_| ())?)
            })
            .await
            .unwrap();
        }
    }

    #[tokio::test]
    async fn committed_writes_reach_the_database_file_without_the_writer_checkpointing() {
        let dir = std::env::temp_dir().join(format!("rs-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Db::open(dir.join("t.sqlite")).unwrap();
        let auto: i64 = lock(&db.inner.writer)
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        assert_eq!(auto, 0, "the writer does not checkpoint inside its commits");
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7);")?))
            .await
            .unwrap();
        // The main file alone (no WAL next to it) has the row once the checkpoint thread copied it there.
        let copy = dir.join("copy.sqlite");
        let mut found = false;
        for _ in 0..50 {
            tokio::time::sleep(CHECKPOINT_EVERY).await;
            std::fs::copy(dir.join("t.sqlite"), &copy).unwrap();
            let c = Connection::open(&copy).unwrap();
            found = c
                .query_row("SELECT x FROM t", [], |r| r.get::<_, i64>(0))
                .is_ok_and(|x| x == 7);
            drop(c);
            let _ = std::fs::remove_file(&copy);
            if found {
                break;
            }
        }
        assert!(found, "never checkpointed into the database file");
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An in-memory database with every migration before `name` applied and recorded: what an older server
    /// left.
    fn migrated_before(name: &str) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        configure(&conn).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)",
        )
        .unwrap();
        let before = MIGRATIONS.iter().position(|(n, _)| *n == name).unwrap();
        for (name, sql) in &MIGRATIONS[..before] {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_migrations (name) VALUES (?1)", [name])
                .unwrap();
        }
        conn
    }

    /// Applies the pending migrations to `conn`, and checks that each of `queries` answers what it answered
    /// before.
    fn migrate_keeping(conn: &Connection, queries: &[&str]) {
        unchanged_by(conn, queries, || migrate(conn).unwrap());
    }

    /// Runs `change`, and checks that each of `queries` answers what it answered before.
    fn unchanged_by(conn: &Connection, queries: &[&str], change: impl FnOnce()) {
        let before: Vec<Vec<String>> = queries.iter().map(|q| dump(conn, q)).collect();
        change();
        for (query, before) in queries.iter().zip(before) {
            assert_eq!(dump(conn, query), before, "{query}");
        }
    }

    /// Every row `sql` returns, its columns' values joined with `|`.
    fn dump(c: &Connection, sql: &str) -> Vec<String> {
        let mut st = c.prepare(sql).unwrap();
        let n = st.column_count();
        st.query_map([], |r| {
            Ok((0..n)
                .map(|i| format!("{:?}", r.get::<_, rusqlite::types::Value>(i).unwrap()))
                .collect::<Vec<_>>()
                .join("|"))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// 0010 rebuilds `receipts` without its redundant unique key: every receipt and every read of one is
    /// kept, the foreign key still holds, and a settled purchase writes one index page fewer in each of
    /// `receipts` and `settlements`.
    #[test]
    fn migration_0010_keeps_receipts_and_their_reads() {
        let conn = migrated_before("0010_purchase_pages");
        conn.execute_batch(
            "INSERT INTO articles (id, title, excerpt, content, author_name, published_date, price_atomic)
                 VALUES ('a1', 't', 'e', 'c', 'n', '2026-01-01', 10);
             INSERT INTO receipts (token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce,
                                   x402_version, settlement, created_at, signed_receipt, license_id, agent)
                 VALUES ('11', 'a1', '0xP', '0xT', '10', 'eip155:1', '0xA', '0x01', 2, '0xtx', 'now', '{}', 'std', 'bot'),
                        ('22', 'a1', '0xQ', '0xT', '10', 'eip155:1', '0xA', '0x02', 1, 'verify-only', 'now', NULL, NULL, NULL);
             INSERT INTO receipt_reads (token_id, read_at) VALUES ('11', 'r1'), ('22', 'r2'), ('11', 'r3');",
        )
        .unwrap();
        migrate_keeping(
            &conn,
            &[
                "SELECT * FROM receipts ORDER BY token_id",
                "SELECT token_id, read_at FROM receipt_reads ORDER BY rowid",
            ],
        );
        // The key still refuses a second receipt for the token, and a read of no receipt.
        assert!(
            conn.execute_batch(
                "INSERT INTO receipts (token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce,
                                       x402_version, settlement, created_at) SELECT token_id, article_id, payer,
                                       pay_to, amount_atomic, network, asset, nonce, x402_version, settlement,
                                       created_at FROM receipts WHERE token_id = '11'"
            )
            .is_err()
        );
        assert!(
            conn.execute("INSERT INTO receipt_reads VALUES ('33', 'r4')", [])
                .is_err()
        );
        // receipts: the key and one lookup (0012), no unique key on the payment identity.
        let indexes = dump(
            &conn,
            "SELECT name FROM pragma_index_list('receipts') ORDER BY name",
        );
        assert_eq!(
            indexes,
            [
                "Text(\"receipts_article_payer\")",
                "Text(\"sqlite_autoindex_receipts_1\")"
            ]
        );
        // The lookup by payer and article reads through it.
        let plan = dump(
            &conn,
            &format!(
                "EXPLAIN QUERY PLAN {}",
                crate::store::licensing::receipt_of_sql("'p'", "'a'")
            ),
        )
        .join("\n");
        assert!(plan.contains("receipts_article_payer"), "{plan}");
        // So does the foreign key's check of an article deleted (the server deletes none).
        let plan = dump(
            &conn,
            "EXPLAIN QUERY PLAN DELETE FROM articles WHERE id = 'a'",
        )
        .join("\n");
        assert!(
            plan.contains("SEARCH receipts USING COVERING INDEX receipts_article_payer"),
            "{plan}"
        );
        // Resolving an unknown settlement still finds it through an index (the partial one).
        let plan = dump(
            &conn,
            "EXPLAIN QUERY PLAN SELECT id FROM settlements WHERE network = 'n' AND asset = 'a' \
             AND payer = 'p' AND nonce = 'x' AND outcome = 'unknown' ORDER BY id DESC LIMIT 1",
        )
        .join("\n");
        assert!(plan.contains("settlements_unknown"), "{plan}");
    }

    /// 0013 rebuilds `settlements` and `payment_states` with their CHECK constraints written as equalities:
    /// every row is kept, settlement ids continue after the highest ever given, the constraints refuse what
    /// they refused, and the indexes are back.
    #[test]
    fn migration_0013_keeps_settlements_payment_records_and_the_id_sequence() {
        let conn = migrated_before("0013_check_constraints");
        conn.execute_batch(
            "INSERT INTO settlements (at, outcome, payer, pay_to, article_id, resource, amount_atomic, network,
                                      asset, nonce, x402_version, tx_hash, reason, message, resolved_from,
                                      resolved_at, agent)
                 VALUES ('t1', 'settled', '0xP', '0xT', 'a1', 'https://x/a1', '10', 'eip155:1', '0xA', '0x01', 2,
                         '0xtx', NULL, NULL, 'unknown', 't2', 'bot'),
                        ('t3', 'unknown', '0xQ', '0xT', NULL, 'https://x/a2', '20', 'eip155:1', '0xA', '0x02', 1,
                         NULL, NULL, 'timeout', NULL, NULL, NULL),
                        ('t4', 'failed', '0xR', '0xT', 'a1', 'https://x/a1', '10', 'eip155:1', '0xA', '0x03', 2,
                         NULL, 'invalid_exact_evm_payload_signature', 'no', NULL, NULL, NULL);
             -- The highest id given is 3, the highest left 2.
             DELETE FROM settlements WHERE id = 3;
             INSERT INTO payment_states (chain_id, asset, payer, nonce, state, resource, fingerprint, settlement,
                                         payload, requirements, expires_at, updated_at, revision)
                 VALUES (1, '0xA', '0xP', '0x01', 'settled', 'https://x/a1', '0xf1', '{}', '', '', 100, 50, 2),
                        (1, '0xA', '0xQ', '0x02', 'in_flight', 'https://x/a2', '0xf2', NULL, '{\"p\":1}', '{}', 200,
                         60, 1);",
        )
        .unwrap();
        migrate_keeping(
            &conn,
            &[
                "SELECT * FROM settlements ORDER BY id",
                "SELECT * FROM payment_states ORDER BY payer",
            ],
        );
        conn.execute(
            "INSERT INTO settlements (at, outcome, payer, pay_to, resource, amount_atomic, network, asset, nonce,
                                      x402_version) SELECT 't5', 'settled', payer, pay_to, resource, amount_atomic,
                                      network, asset, '0x04', 2 FROM settlements WHERE id = 1",
            [],
        )
        .unwrap();
        assert_eq!(
            conn.last_insert_rowid(),
            4,
            "ids continue after the highest given"
        );
        for refused in [
            "UPDATE settlements SET outcome = 'lost' WHERE id = 1",
            "UPDATE settlements SET outcome = NULL WHERE id = 1",
            "UPDATE payment_states SET state = 'settle' WHERE payer = '0xP'",
        ] {
            assert!(conn.execute(refused, []).is_err(), "{refused}");
        }
        let indexes = |table: &str| {
            dump(
                &conn,
                &format!("SELECT name, partial FROM pragma_index_list('{table}') ORDER BY name"),
            )
        };
        assert_eq!(
            indexes("settlements"),
            [
                "Text(\"settlements_outcome\")|Integer(0)",
                "Text(\"settlements_unknown\")|Integer(1)"
            ]
        );
        assert_eq!(
            indexes("payment_states"),
            [
                "Text(\"payment_states_expiry\")|Integer(0)",
                "Text(\"payment_states_unresolved\")|Integer(1)",
                "Text(\"sqlite_autoindex_payment_states_1\")|Integer(0)"
            ]
        );
    }

    /// 0013 is one transaction: a database it cannot copy half way through (a payment record whose state the
    /// CHECK refuses, written with checks off, after `settlements` was already rebuilt) is left exactly as
    /// it was, settlements and payment records both, and the migration is not recorded: the server refuses
    /// to start on it rather than lose a record.
    #[test]
    fn migration_0013_that_fails_half_way_leaves_every_table_as_it_was() {
        let conn = migrated_before("0013_check_constraints");
        conn.execute_batch(
            "INSERT INTO settlements (at, outcome, payer, pay_to, resource, amount_atomic, network, asset, nonce,
                                      x402_version, tx_hash)
                 VALUES ('t1', 'settled', '0xP', '0xT', 'https://x/a1', '10', 'eip155:1', '0xA', '0x01', 2, '0xtx');
             PRAGMA ignore_check_constraints = ON;
             INSERT INTO payment_states (chain_id, asset, payer, nonce, state, resource, fingerprint, settlement,
                                         payload, requirements, expires_at, updated_at, revision)
                 VALUES (1, '0xA', '0xP', '0x01', 'lost', 'https://x/a1', '0xf1', NULL, '{}', '{}', 100, 50, 1);
             PRAGMA ignore_check_constraints = OFF;",
        )
        .unwrap();
        let queries = [
            "SELECT * FROM settlements ORDER BY id",
            "SELECT * FROM payment_states ORDER BY payer",
            "SELECT * FROM sqlite_sequence ORDER BY name",
            "SELECT type, name, sql FROM sqlite_schema ORDER BY name",
            "SELECT name FROM schema_migrations ORDER BY name",
        ];
        unchanged_by(&conn, &queries, || assert!(migrate(&conn).is_err()));
    }

    /// No write to any table builds a temporary b-tree to check a constraint, as a CHECK of `IN` over more
    /// than two constants does every time it is checked (0013: three per purchase): an insert of every
    /// column and an update of every column but the key of one row of each table compile without
    /// `OpenEphemeral`.
    #[test]
    fn no_write_builds_a_temporary_btree_to_check_a_constraint() {
        let conn = Connection::open_in_memory().unwrap();
        configure(&conn).unwrap();
        migrate(&conn).unwrap();
        let tables: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(tables.iter().any(|t| t == "payment_states"), "{tables:?}");
        for table in tables {
            let columns: Vec<(String, bool)> = conn
                .prepare("SELECT name, pk > 0 FROM pragma_table_info(?1)")
                .unwrap()
                .query_map([&table], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let (all, non_key): (Vec<&str>, Vec<&str>) = (
                columns.iter().map(|(c, _)| c.as_str()).collect(),
                columns
                    .iter()
                    .filter(|(_, key)| !key)
                    .map(|(c, _)| c.as_str())
                    .collect(),
            );
            let insert = format!(
                "INSERT INTO \"{table}\" ({}) VALUES ({})",
                all.join(", "),
                vec!["?"; all.len()].join(", ")
            );
            // As the server updates rows: one row, its key kept.
            let update = format!(
                "UPDATE \"{table}\" SET {} WHERE rowid = ?",
                non_key
                    .iter()
                    .map(|c| format!("{c} = ?"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for (sql, params) in [(insert, all.len()), (update, non_key.len() + 1)] {
                let nulls = std::iter::repeat_n(rusqlite::types::Null, params);
                let opcodes: Vec<String> = conn
                    .prepare(&format!("EXPLAIN {sql}"))
                    .unwrap()
                    .query_map(rusqlite::params_from_iter(nulls), |r| r.get(1))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                assert!(!opcodes.iter().any(|o| o == "OpenEphemeral"), "{sql}");
            }
        }
    }

    /// 0011: the reconciler's index holds only `in_flight` and `pending` records (a settled purchase leaves
    /// it instead of moving to its `settled` end), and the reconciler's query still reads through it.
    #[test]
    fn the_reconciler_reads_unresolved_payments_through_their_partial_index() {
        let conn = Connection::open_in_memory().unwrap();
        configure(&conn).unwrap();
        migrate(&conn).unwrap();
        let partial: bool = conn
            .query_row(
                "SELECT partial FROM pragma_index_list('payment_states') \
                 WHERE name = 'payment_states_unresolved'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(partial);
        let sql = format!(
            "EXPLAIN QUERY PLAN {}",
            super::super::payments::unresolved_sql("?1", "?2", "?3")
        );
        let mut plan = conn.prepare(&sql).unwrap();
        let plan: Vec<String> = plan
            .query_map([0, 0, 1], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX payment_states_unresolved")),
            "{plan:?}"
        );
    }

    /// How many times the WAL of the database at `path` started over, and its size. The WAL header's
    /// checkpoint sequence number (bytes 12..16, big-endian) counts the restarts. The size would not tell on
    /// a loaded machine: a WAL that once outgrew `WAL_SIZE_LIMIT` before the checkpoint thread got a turn is
    /// only ever cut back to that size.
    fn wal_restarts(path: &Path) -> (u32, usize) {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = std::fs::read(wal).unwrap();
        (
            u32::from_be_bytes(wal[12..16].try_into().unwrap()),
            wal.len(),
        )
    }

    /// SQLite starts the WAL over only when a write begins with every frame copied back; a writer that never
    /// pauses for a checkpoint interval never gives it that moment, and the WAL grew by ~80 KB per purchase
    /// for as long as the load lasted (1 GB in an 8 s benchmark). With the restart, it stays bounded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_starts_over_under_writes_that_never_pause() {
        // Writes for several checkpoint intervals (bounded in time and count).
        const FOR: Duration = Duration::from_millis(2_000);
        const MAX_WRITES: usize = 16_000;
        let dir = std::env::temp_dir().join(format!("rs-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.sqlite");
        let db = Db::open_with(&path, 64).unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (x BLOB NOT NULL)")?))
            .await
            .unwrap();
        // 16 tasks writing back to back: the writer always has a write waiting. Each row (6 KB) fills most
        // of a page, so every write adds at least one WAL frame.
        let next = Arc::new(AtomicUsize::new(0));
        let start = std::time::Instant::now();
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (db, next) = (db.clone(), next.clone());
                tokio::spawn(async move {
                    while start.elapsed() < FOR && next.fetch_add(1, Ordering::Relaxed) < MAX_WRITES
                    {
                        db.write_statement(|c| {
                            Ok(c.execute("INSERT INTO t (x) VALUES (zeroblob(6000))", [])?)
                        })
                        .await
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let rows: i64 = db
            .read(|c| Ok(c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        let (restarts, bytes) = wal_restarts(&path);
        assert!(
            restarts >= 1,
            "the WAL never started over: {rows} rows written over {FOR:?}, {bytes} bytes of WAL"
        );
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Seeding writes outside the group commit, chunk after chunk without a pause: before it committed
    /// each chunk through its own [`Db::write_blocking`], the WAL never started over during a seed (a
    /// million assets left a 21 GB WAL beside an 8.4 GB database).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seeding_starts_the_wal_over_between_chunks() {
        use crate::store::assets::SEED_CHUNK;
        use crate::store::sqlite::SqliteAssetStore;
        let dir = std::env::temp_dir().join(format!("rs-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.sqlite");
        let db = Db::open_with(&path, 64).unwrap();
        let n = (5 * SEED_CHUNK) as usize;
        let store = SqliteAssetStore::new(db.clone());
        assert_eq!(crate::registry::seed(&store, n).await.unwrap(), n);
        let (restarts, bytes) = wal_restarts(&path);
        assert!(
            restarts >= 1,
            "the WAL never started over while seeding {n} assets: {bytes} bytes of WAL"
        );
        drop((store, db));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn readers_cannot_write() {
        let dir = std::env::temp_dir().join(format!("rs-store-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Db::open(dir.join("t.sqlite")).unwrap();
        let err = db
            .read(|c| Ok(c.execute_batch("CREATE TABLE nope (x INTEGER)")?))
            .await;
        assert!(err.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
