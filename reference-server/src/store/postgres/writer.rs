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
//!   once more on a new connection.
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
//! - Expected refusals are results, not errors, so that they do not abort a group: a conflicting receipt is
//!   `ON CONFLICT DO NOTHING` with no row returned, a lost compare-and-set is an `UPDATE … RETURNING` with no
//!   row.
//!
//! Row locks are held until the group commits. Two instances whose groups lock the same two rows in opposite
//! orders (one payment presented to both at once, together with another) deadlock; PostgreSQL aborts one
//! group after `deadlock_timeout` (1 s by default), whose writes then run alone. Within one instance there is
//! one writer, so its groups never wait on each other.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use deadpool_postgres::{GenericClient, Object, Pool};
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
async fn group_commit(
    pool: Pool,
    mut jobs: mpsc::UnboundedReceiver<(Statement, Answer)>,
    counters: Arc<Counters>,
) {
    let mut held: Option<Object> = None;
    'groups: while let Some(first) = jobs.recv().await {
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
        // A connection the database dropped while it sat idle (a restart, a failover, an idle timeout) fails
        // at `BEGIN`, before anything ran: the group is tried again on another connection, and the dropped
        // one is taken out of the pool. The pool's idle connections may all have been dropped at once, so
        // as many tries as it holds, and one.
        let mut tries = 0;
        let (c, group) = loop {
            let c = match held.take() {
                Some(c) if !c.is_closed() => c,
                _ => match pool.get().await {
                    Ok(c) => c,
                    Err(e) => {
                        fail_all(batch, &pool_error(e));
                        continue 'groups;
                    }
                },
            };
            match together(&c, &batch).await {
                Ok(group) => break (c, group),
                Err(e) => {
                    drop(Object::take(c));
                    tries += 1;
                    if tries > super::POOL_SIZE {
                        fail_all(batch, &e.into());
                        continue 'groups;
                    }
                    tracing::debug!(error = %e, "BEGIN failed: the group is tried on another connection");
                }
            }
        };
        match group {
            Group::Committed(rows) => {
                for ((_, answer), rows) in batch.into_iter().zip(rows) {
                    let _ = answer.send(Ok(rows));
                }
                held = Some(c);
            }
            Group::Unknown(e) => {
                tracing::error!(error = %e, writes = batch.len(), "PostgreSQL group commit broke off: its outcome is unknown");
                let e = Arc::new(e);
                for (_, answer) in batch {
                    let _ = answer.send(Err(StoreError::CommitUnknown(e.clone())));
                }
                // Not used again: the connection is broken (or in a state nobody knows).
            }
            Group::RolledBack => {
                tracing::debug!(
                    writes = batch.len(),
                    "a write of a PostgreSQL group failed: each runs alone"
                );
                // The connection may be the cause: a broken one is replaced for the rerun.
                let c = if c.is_closed() {
                    match pool.get().await {
                        Ok(fresh) => fresh,
                        Err(e) => {
                            fail_all(batch, &pool_error(e));
                            continue;
                        }
                    }
                } else {
                    c
                };
                for (write, answer) in batch {
                    let _ = answer.send(write.run(&c).await);
                }
                held = Some(c);
            }
        }
    }
}

/// Answers every write of `batch` with (a copy of) `e`: the group could not be tried.
fn fail_all(batch: Vec<(Statement, Answer)>, e: &StoreError) {
    for (_, answer) in batch {
        let _ = answer.send(Err(StoreError::Unavailable(e.to_string())));
    }
}

/// `BEGIN`, every write's statement pipelined, then `COMMIT` (or `ROLLBACK`). `Err`: `BEGIN` failed, nothing
/// ran.
async fn together(
    c: &Object,
    batch: &[(Statement, Answer)],
) -> Result<Group, tokio_postgres::Error> {
    // `BEGIN` is answered before anything else is sent: a statement must never run outside the group's
    // transaction (it would commit by itself, and run again alone after the rollback).
    c.batch_execute("BEGIN").await?;
    let ran = join_all(batch.iter().map(|(write, _)| write.run(c))).await;
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
