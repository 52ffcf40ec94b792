//! Group commit on PostgreSQL: the purchase path's writes, queued and committed together.
//!
//! The SQLite backend's design (`store::sqlite`), on a database server. A purchase writes its payment record
//! (reserved, then settled), a settlement row and a receipt; each was one autocommitted statement, so
//! PostgreSQL flushed its WAL four times per purchase and every statement paid a commit (its snapshot, its
//! commit record, its wait for the flush). Now every such write is queued to one writer task per instance,
//! which takes everything that has arrived (up to [`MAX_BATCH`] writes) and runs it on one connection as one
//! transaction:
//!
//! - `BEGIN`, then every write's statement **pipelined** (all sent before the first answer is read), then
//!   `COMMIT`: three round trips and one WAL flush for the whole group, however many purchases are in it.
//!   A lone write goes the same way (two round trips more than an autocommitted statement, paid only when
//!   nothing else is queued): `BEGIN` is where a connection the database dropped while it sat idle (a
//!   restart, a failover, `idle_session_timeout`) fails before anything ran, and the group is then tried
//!   again on another connection (as many times as the pool holds connections, and once more). A group that
//!   gets no connection, or whose `BEGIN` fails every time, fails each of its writes with
//!   [`StoreError::Group`] (the pool's or PostgreSQL's error, shared): nothing of it ran.
//! - Every caller is answered after the `COMMIT` returned: nobody is told a write is durable before it is.
//! - A statement that fails aborts a PostgreSQL transaction, and with it every other write of the group. The
//!   group is then rolled back and each write runs **alone** (autocommitted), so a bad write fails
//!   alone and the others are committed without it. A write is data (a [`Statement`] and its parameters),
//!   so it can run again; nothing of the first try was committed.
//! - A `COMMIT` the server refuses with an error (a deferred check) rolled the group back: each write then
//!   runs alone, as after a failed statement. A `COMMIT` whose outcome is unknown (the connection broke, or
//!   the session ended with a `FATAL` error, while it was in flight) fails every write of the group with
//!   [`StoreError::CommitUnknown`], exactly as a single autocommitted statement would have failed: none is
//!   retried, since it may have been committed.
//! - A group that panics (nothing should: a write is data) fails each of its writes with
//!   [`StoreError::Task`], an outcome nobody knows, like [`StoreError::CommitUnknown`]. The connection it
//!   ran on is taken out of the pool and closed (which rolls back a transaction left open on it), and the
//!   writer goes on with the next group.
//! - Expected refusals are results, not errors, so that they do not abort a group: a conflicting receipt is
//!   `ON CONFLICT DO NOTHING` with no row returned, a lost compare-and-set is an `UPDATE … RETURNING` with no
//!   row.
//!
//! Row locks are held until the group commits. Two instances whose groups lock the same two rows in opposite
//! orders (one payment presented to both at once, together with another) deadlock; PostgreSQL aborts one
//! group after `deadlock_timeout` (1 s by default), whose writes then run alone. Within one instance there is
//! one writer, so its groups never wait on each other.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use deadpool_postgres::{GenericClient, Object, Pool};
use futures_util::FutureExt;
use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::pool_error;
use crate::store::StoreError;

/// Most writes committed together.
pub(crate) const MAX_BATCH: usize = 256;

/// A parameter of a queued statement (owned: the write waits in a queue).
pub(crate) type Param = Box<dyn ToSql + Send + Sync>;

/// One write: a statement (prepared once per connection) and its parameters. A statement that changes rows
/// says `RETURNING` what the caller needs to know (at least `1`, to count them).
pub(crate) struct Statement {
    sql: Cow<'static, str>,
    params: Vec<Param>,
}

impl Statement {
    pub(crate) fn new(sql: impl Into<Cow<'static, str>>, params: Vec<Param>) -> Self {
        Self {
            sql: sql.into(),
            params,
        }
    }

    /// Runs this statement on `c` (the writer's connection, or a transaction of a caller's own).
    pub(crate) async fn run(&self, c: &impl GenericClient) -> Result<Vec<Row>, StoreError> {
        let prepared = c.prepare_cached(&self.sql).await?;
        let params: Vec<&(dyn ToSql + Sync)> = self
            .params
            .iter()
            .map(|p| &**p as &(dyn ToSql + Sync))
            .collect();
        Ok(c.query(&prepared, &params).await?)
    }
}

type Answer = oneshot::Sender<Result<Vec<Row>, StoreError>>;

/// The handle of an instance's writer task. Cheap to clone; the task ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Writer {
    queue: mpsc::UnboundedSender<(Statement, Answer)>,
    counters: Arc<Counters>,
}

/// Commits and the writes they carried, for `/metrics`.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) commits: AtomicU64,
    pub(crate) writes: AtomicU64,
}

impl Writer {
    /// Starts the writer task on `pool` (it holds one of the pool's connections while it has work).
    pub(crate) fn start(pool: Pool) -> Self {
        let (queue, jobs) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        tokio::spawn(group_commit(pool, jobs, counters.clone()));
        Self { queue, counters }
    }

    /// Queues `write` for the next group commit and waits until it is committed (or failed); returns the
    /// rows it returned.
    pub(crate) async fn write(&self, write: Statement) -> Result<Vec<Row>, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send((write, answer))
            .map_err(|_| StoreError::Unavailable("the PostgreSQL writer has stopped".into()))?;
        answered
            .await
            .map_err(|_| StoreError::Unavailable("the PostgreSQL writer has stopped".into()))?
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// What became of a group.
enum Group {
    /// Committed: each write's rows.
    Committed(Vec<Vec<Row>>),
    /// A statement (or `COMMIT`) failed: the group was rolled back (or its connection is gone); nothing of it
    /// was written.
    RolledBack,
    /// `COMMIT` got no answer, or its session ended: it may or may not have been committed.
    Unknown(tokio_postgres::Error),
}

/// The writer task: takes every queued write (up to [`MAX_BATCH`]), commits them together, answers each.
///
/// A group that panics (nothing in it should: a write is data, and refusals are results) fails each of its
/// writes with [`StoreError::Task`], as an outcome nobody knows: the panic may have come after the `COMMIT`.
/// The connection it ran on leaves the pool ([`detach`]), and the task goes on with the next group: one
/// bad write must not stop every later purchase of the instance.
async fn group_commit(
    pool: Pool,
    mut jobs: mpsc::UnboundedReceiver<(Statement, Answer)>,
    counters: Arc<Counters>,
) {
    let mut held: Option<Object> = None;
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        counters.commits.fetch_add(1, Ordering::Relaxed);
        counters
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let (writes, answers): (Vec<Statement>, Vec<Answer>) = batch.into_iter().unzip();
        let ran = AssertUnwindSafe(commit_group(&pool, &mut held, &writes))
            .catch_unwind()
            .await;
        match ran {
            Ok(results) => {
                for (answer, result) in answers.into_iter().zip(results) {
                    let _ = answer.send(result);
                }
            }
            Err(_) => {
                detach(&mut held);
                tracing::error!(
                    writes = writes.len(),
                    "the PostgreSQL writer panicked during a group commit: its outcome is unknown"
                );
                for answer in answers {
                    let _ = answer.send(Err(StoreError::Task(
                        "the PostgreSQL writer panicked during this write's group commit: it may or may not have been written"
                            .into(),
                    )));
                }
            }
        }
    }
}

/// Commits `writes` as one group on `held` (or on a connection of `pool`, left in `held`); each write's
/// outcome, in order. The connection stays in `held` while the group runs on it, so that the caller can
/// take it out of the pool should the group panic.
async fn commit_group(
    pool: &Pool,
    held: &mut Option<Object>,
    writes: &[Statement],
) -> Vec<Result<Vec<Row>, StoreError>> {
    // A connection the database dropped while it sat idle (a restart, a failover, an idle timeout) fails
    // at `BEGIN`, before anything ran: the group is tried again on another connection, and the dropped
    // one is taken out of the pool. The pool's idle connections may all have been dropped at once, so
    // as many tries as it holds, and one.
    let mut tries = 0;
    let group = loop {
        let c = match connection(pool, held).await {
            Ok(c) => c,
            Err(e) => return fail_all(writes, e),
        };
        match together(c, writes).await {
            Ok(group) => break group,
            Err(e) => {
                detach(held);
                tries += 1;
                if tries > super::POOL_SIZE {
                    return fail_all(writes, e.into());
                }
                tracing::debug!(error = %e, "BEGIN failed: the group is tried on another connection");
            }
        }
    };
    match group {
        Group::Committed(rows) => rows.into_iter().map(Ok).collect(),
        Group::Unknown(e) => {
            tracing::error!(error = %e, writes = writes.len(), "PostgreSQL group commit broke off: its outcome is unknown");
            // Not used again: the connection is broken, or in a state nobody knows.
            detach(held);
            let e = Arc::new(e);
            writes
                .iter()
                .map(|_| Err(StoreError::CommitUnknown(e.clone())))
                .collect()
        }
        Group::RolledBack => {
            tracing::debug!(
                writes = writes.len(),
                "a write of a PostgreSQL group failed: each runs alone"
            );
            // The connection may be the cause: a broken one is replaced for the rerun.
            let c = match connection(pool, held).await {
                Ok(c) => c,
                Err(e) => return fail_all(writes, e),
            };
            let mut results = Vec::with_capacity(writes.len());
            for write in writes {
                results.push(write.run(c).await);
            }
            results
        }
    }
}

/// Takes the writer's connection out of the pool and closes it: it is broken, or may be inside an open
/// transaction (closing it rolls that back), which must never be handed to anybody else, whose statements
/// would join it.
fn detach(held: &mut Option<Object>) {
    if let Some(c) = held.take() {
        drop(Object::take(c));
    }
}

/// The writer's connection: the one in `held` while it is open, else a new one from `pool`, left in `held`.
async fn connection<'h>(
    pool: &Pool,
    held: &'h mut Option<Object>,
) -> Result<&'h Object, StoreError> {
    let c = match held.take() {
        Some(c) if !c.is_closed() => c,
        _ => pool.get().await.map_err(pool_error)?,
    };
    Ok(held.insert(c))
}

/// Every write of `writes` failed with `e`, shared ([`StoreError::Group`]): the group could not be tried.
fn fail_all(writes: &[Statement], e: StoreError) -> Vec<Result<Vec<Row>, StoreError>> {
    let e = Arc::new(e);
    writes
        .iter()
        .map(|_| Err(StoreError::Group(e.clone())))
        .collect()
}

/// `BEGIN`, every write's statement pipelined, then `COMMIT` (or `ROLLBACK`). `Err`: `BEGIN` failed, nothing
/// ran.
async fn together(c: &Object, writes: &[Statement]) -> Result<Group, tokio_postgres::Error> {
    // `BEGIN` is answered before anything else is sent: a statement must never run outside the group's
    // transaction (it would commit by itself, and run again alone after the rollback).
    c.batch_execute("BEGIN").await?;
    let ran = join_all(writes.iter().map(|write| write.run(c))).await;
    Ok(match ran.into_iter().collect::<Result<Vec<_>, _>>() {
        Ok(rows) => match c.batch_execute("COMMIT").await {
            Ok(()) => Group::Committed(rows),
            Err(e) => match e.as_db_error() {
                // The server refused the commit and the session goes on (a deferred check, a serialization
                // failure): it rolled the transaction back, so nothing of it was written.
                Some(db) if db.severity() == "ERROR" => Group::RolledBack,
                // No answer, or the session ended with it (`FATAL`: a terminated backend may end after its
                // commit is durable and before it says so): nobody knows.
                _ => Group::Unknown(e),
            },
        },
        Err(_) => {
            let _ = c.batch_execute("ROLLBACK").await;
            Group::RolledBack
        }
    })
}

#[cfg(test)]
mod tests {
    //! Run in the test command's PostgreSQL pass (`REFERENCE_SERVER_TEST_POSTGRES`, an admin URL).
    use std::error::Error;
    use std::time::{Duration, Instant};

    use bytes::BytesMut;
    use tokio_postgres::types::{IsNull, Type, to_sql_checked};

    use super::*;

    /// A parameter that panics while it is encoded, after the group's `BEGIN`.
    #[derive(Debug)]
    struct Panics;

    impl ToSql for Panics {
        fn to_sql(
            &self,
            _: &Type,
            _: &mut BytesMut,
        ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
            panic!("a parameter that panics while it is encoded")
        }

        fn accepts(_: &Type) -> bool {
            true
        }

        to_sql_checked!();
    }

    /// A pool of at most [`POOL`] connections to the test cluster's admin database, tagged with a name of its
    /// own (`application_name`) so that its sessions can be told apart, and that name. `None` (said on stderr)
    /// outside the PostgreSQL pass.
    fn test_pool() -> Option<(Pool, String)> {
        let mut config = crate::store::postgres::tests::test_admin()?;
        let name = format!("writer_test_{}", uuid::Uuid::new_v4().simple());
        config.application_name(&name);
        Some((
            crate::store::postgres::pool(config, POOL).expect("a pool"),
            name,
        ))
    }

    const POOL: usize = 4;

    /// The test's table (in the admin database; dropped at the end).
    const TABLE: &str = "writer_panic_test";

    fn insert(x: Param) -> Statement {
        Statement::new(
            format!("INSERT INTO {TABLE} (x) VALUES ($1) RETURNING 1"),
            vec![x],
        )
    }

    #[tokio::test]
    async fn a_group_that_cannot_get_a_connection_fails_each_write_with_the_pools_error() {
        // Nothing listens on port 1: every connection is refused.
        let config: tokio_postgres::Config =
            "postgres://nobody@127.0.0.1:1/none".parse().expect("a URL");
        let writer = Writer::start(crate::store::postgres::pool(config, 2).expect("a pool"));
        let (a, b) = tokio::join!(
            writer.write(insert(Box::new(1_i32))),
            writer.write(insert(Box::new(2_i32)))
        );
        for r in [a, b] {
            // The pool's own error, typed (the refused connection), not a string.
            let Err(StoreError::Group(e)) = &r else {
                panic!("{r:?}")
            };
            assert!(matches!(&**e, StoreError::Postgres(_)), "{e:?}");
            // The operator reads why, not tokio-postgres's bare "error connecting to server".
            let text = e.to_string();
            assert!(
                text.starts_with("database error: error connecting to server: ")
                    && text.len() > "database error: error connecting to server: ".len(),
                "{text}"
            );
        }
        // The writer is still there for the next group.
        assert!(matches!(
            writer.write(insert(Box::new(3_i32))).await,
            Err(StoreError::Group(_))
        ));
    }

    #[tokio::test]
    async fn a_group_that_panics_fails_its_writes_closes_its_connection_and_the_writer_goes_on() {
        let Some((pool, name)) = test_pool() else {
            return;
        };
        let c = pool.get().await.expect("a connection");
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (x INTEGER NOT NULL)"
        ))
        .await
        .expect("create the table");
        drop(c);
        let writer = Writer::start(pool.clone());

        // A good write first, so that the writer holds a connection of its own, then the one that panics.
        writer
            .write(insert(Box::new(1_i32)))
            .await
            .expect("a plain write");
        let panicked = writer.write(insert(Box::new(Panics))).await;
        assert!(
            matches!(&panicked, Err(StoreError::Task(m)) if m.contains("may or may not")),
            "{panicked:?}"
        );

        // The connection the panic left inside its group's transaction was closed, neither kept by the writer
        // nor handed back to the pool: no session of this database is left idle in a transaction (its
        // backend ends soon after the client is dropped; waited for, at most 10 s).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let open: i64 = pool
                .get()
                .await
                .expect("a connection")
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
                    &[&name],
                )
                .await
                .expect("pg_stat_activity")
                .get(0);
            if open == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{open} session(s) of the test's pool still idle in a transaction"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The writer goes on: the next write is committed, and read back on another connection.
        let rows = writer
            .write(insert(Box::new(2_i32)))
            .await
            .expect("a write after the panic");
        assert_eq!(rows.len(), 1);
        let c = pool.get().await.expect("a connection");
        let xs: Vec<i32> = c
            .query(&format!("SELECT x FROM {TABLE} ORDER BY x"), &[])
            .await
            .expect("read back")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(xs, [1, 2]);
        drop(c);

        // Every other connection of the pool (the writer holds one) is outside any transaction.
        let mut clients = Vec::new();
        for _ in 1..POOL {
            let c = pool.get().await.expect("a pooled connection");
            // `SAVEPOINT` is refused outside a transaction block.
            let refused = c.batch_execute("SAVEPOINT probe").await;
            assert!(
                refused.is_err(),
                "a pooled connection is inside a transaction"
            );
            clients.push(c);
        }
        clients[0]
            .batch_execute(&format!("DROP TABLE {TABLE}"))
            .await
            .expect("drop the table");
    }
}
