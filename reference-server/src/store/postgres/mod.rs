//! The PostgreSQL backend: a `deadpool-postgres` pool of `tokio-postgres` connections, and the store traits
//! implemented on it ([`PgLicensingStore`], [`PgSettlementStore`], [`PgAssetStore`], [`PgPaymentStore`]).
//!
//! # Model
//!
//! - Every instance opens its own pool (at most [`POOL_SIZE`] connections) on the one database; all state
//!   that instances share is in it (see `docs/deploy.md`).
//! - Statements are prepared once per connection and cached (`prepare_cached`).
//! - The purchase path's writes (payment records, settlement rows, receipts) are **group-committed**: queued
//!   to the instance's writer task, which commits whatever has arrived in one transaction on one connection,
//!   its statements pipelined (`writer.rs`; the SQLite backend's design). Other writes are one statement in
//!   autocommit, or one short transaction. PostgreSQL's own durability (`synchronous_commit`, the WAL)
//!   applies: a receipt is answered after its commit returned.
//! - Where a decision spans several rows, it takes a lock the database holds, never one in this process:
//!   a payment record is reserved with one `INSERT … ON CONFLICT DO UPDATE … WHERE expired` statement;
//!   assets are inserted under a transaction-scoped advisory lock that keeps their dense rank dense and
//!   unique; migrations and seeding run under advisory locks too, so instances starting together do each
//!   once.
//! - Connections use no TLS (`NoTls`): run the database on a private network or loopback. A `sslmode`
//!   other than `disable`/`prefer` in the URL is refused at start rather than silently ignored.

mod assets;
mod licensing;
mod payments;
mod settlements;
mod writer;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;
use tokio_postgres::{NoTls, Row};

pub use assets::PgAssetStore;
pub use licensing::PgLicensingStore;
pub use payments::PgPaymentStore;
pub use settlements::PgSettlementStore;
pub(crate) use writer::{Param, Statement};

use super::{Backend, StoreError, StoreFuture};

/// Schema migrations (`migrations/postgres/`), applied in order at start.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_schema",
        include_str!("../migrations/postgres/0001_schema.sql"),
    ),
    (
        "0002_receipt_reads",
        include_str!("../migrations/postgres/0002_receipt_reads.sql"),
    ),
    (
        "0003_signed_receipts",
        include_str!("../migrations/postgres/0003_signed_receipts.sql"),
    ),
    (
        "0004_discovery",
        include_str!("../migrations/postgres/0004_discovery.sql"),
    ),
    (
        "0005_licenses",
        include_str!("../migrations/postgres/0005_licenses.sql"),
    ),
    (
        "0006_purchase_pages",
        include_str!("../migrations/postgres/0006_purchase_pages.sql"),
    ),
    (
        "0007_unresolved_payments",
        include_str!("../migrations/postgres/0007_unresolved_payments.sql"),
    ),
    (
        "0008_receipt_lookup",
        include_str!("../migrations/postgres/0008_receipt_lookup.sql"),
    ),
    (
        "0009_used_nonces",
        include_str!("../migrations/postgres/0009_used_nonces.sql"),
    ),
];

/// Most connections one instance holds.
pub const POOL_SIZE: usize = 16;

/// How long a request waits for a free connection, and a new connection for the server.
const WAIT: Duration = Duration::from_secs(5);

/// Advisory lock keys (any constant distinct values; `0x7832` is "x2").
const MIGRATION_LOCK: i64 = 0x7832_0001;
pub(crate) const ASSET_LOCK: i64 = 0x7832_0002;

/// A pool on one PostgreSQL database. Cheap to clone.
#[derive(Clone)]
pub struct Pg {
    pool: Pool,
    url: String,
    writer: writer::Writer,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg")
            .field("url", &redact(&self.url))
            .field("status", &self.pool.status())
            .finish()
    }
}

/// A pool of at most `size` connections made with `config`, waiting at most [`WAIT`] for one.
pub(crate) fn pool(config: tokio_postgres::Config, size: usize) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(WAIT))
        .create_timeout(Some(WAIT))
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

impl Pg {
    /// Connects to `url`, checks the database answers and applies pending migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Unavailable(format!("invalid PostgreSQL URL: {e}")))?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(StoreError::Unavailable(
                "sslmode=require is not supported: this build connects without TLS (see docs/deploy.md)"
                    .into(),
            ));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(WAIT);
        }
        if config.get_application_name().is_none() {
            config.application_name("reference-server");
        }
        let pool = pool(config, POOL_SIZE)?;
        let pg = Self {
            writer: writer::Writer::start(pool.clone()),
            pool,
            url: url.to_owned(),
        };
        pg.migrate().await?;
        Ok(pg)
    }

    /// A connection from the pool.
    pub(crate) async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Commits `write` with the other writes queued at the same moment (see [`writer`]), and returns the
    /// rows it returned.
    pub(crate) async fn write(&self, write: Statement) -> Result<Vec<Row>, StoreError> {
        self.writer.write(write).await
    }

    /// Applies every pending migration in one transaction that holds [`MIGRATION_LOCK`] from its first
    /// statement: instances starting together wait for the first, then find every migration recorded (and
    /// the `schema_migrations` table created: two instances creating it at once, unlocked, failed on the
    /// catalog). A migration that fails leaves the schema as it was.
    async fn migrate(&self) -> Result<(), StoreError> {
        apply_migrations(&mut self.client().await?, MIGRATIONS).await
    }
}

/// [`Pg::migrate`] with the given migrations (a test applies a failing list).
async fn apply_migrations(
    client: &mut Object,
    migrations: &[(&'static str, &str)],
) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             name TEXT PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let mut applied = Vec::new();
    for &(name, sql) in migrations {
        let done: bool = tx
            .query_one(
                "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE name = $1)",
                &[&name],
            )
            .await?
            .get(0);
        if done {
            continue;
        }
        let apply = async {
            tx.batch_execute(sql).await?;
            tx.execute("INSERT INTO schema_migrations (name) VALUES ($1)", &[&name])
                .await
        };
        apply.await.map_err(|source| StoreError::Migration {
            name,
            source: Box::new(source.into()),
        })?;
        applied.push(name);
    }
    tx.commit().await?;
    for name in applied {
        tracing::info!(migration = name, "applied schema migration");
    }
    Ok(())
}

impl Backend for Pg {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.client().await?.simple_query("SELECT 1").await?;
            Ok(())
        })
    }

    fn record_metrics(&self) {
        let status = self.pool.status();
        for (name, help, value) in [
            (
                "postgres_pool_connections",
                "Connections the pool holds.",
                status.size,
            ),
            (
                "postgres_pool_available",
                "Idle connections in the pool.",
                status.available,
            ),
            (
                "postgres_pool_waiting",
                "Requests waiting for a connection.",
                status.waiting,
            ),
        ] {
            crate::metrics::gauge(name, help, value as u64);
        }
        let counters = self.writer.counters();
        crate::metrics::counter(
            "postgres_group_commits_total",
            "Commits of the PostgreSQL writer (each carries one or more writes).",
            counters.commits.load(std::sync::atomic::Ordering::Relaxed),
        );
        crate::metrics::counter(
            "postgres_group_commit_writes_total",
            "Writes carried by those commits.",
            counters.writes.load(std::sync::atomic::Ordering::Relaxed),
        );
    }
}

/// A parameter of a queued [`Statement`].
pub(crate) fn param(v: impl tokio_postgres::types::ToSql + Send + Sync + 'static) -> Param {
    Box::new(v)
}

/// Whether a written statement returned a row (changed one, with `RETURNING`).
pub(crate) fn changed(rows: Vec<Row>) -> bool {
    !rows.is_empty()
}

/// Why the pool gave no connection.
fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => StoreError::Postgres(e),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// A `u64` as a PostgreSQL `BIGINT` (saturating: nothing stored comes near `i64::MAX`).
pub(crate) fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored `BIGINT` that must not be negative.
pub(crate) fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x?sslmode=disable"),
            "postgres://app:***@db:5432/x?sslmode=disable"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact("postgresql://db/x"), "postgresql://db/x");
    }

    /// The test cluster's admin database (`REFERENCE_SERVER_TEST_POSTGRES`); `None`, said on stderr, outside
    /// the test command's PostgreSQL pass.
    pub(crate) fn test_admin() -> Option<tokio_postgres::Config> {
        let Ok(admin) = std::env::var("REFERENCE_SERVER_TEST_POSTGRES") else {
            eprintln!(
                "runs in the PostgreSQL pass of the test command (REFERENCE_SERVER_TEST_POSTGRES)"
            );
            return None;
        };
        Some(admin.parse().expect("an admin URL"))
    }

    /// How many of the failing-migration test's two tables exist.
    async fn tables(client: &Object) -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE tablename IN ('kept', 'schema_migrations')",
                &[],
            )
            .await
            .expect("the catalog")
            .get(0)
    }

    #[tokio::test]
    async fn a_failing_migration_leaves_the_schema_as_it_was() {
        let Some(admin) = test_admin() else {
            return;
        };
        let db = format!("migrate_test_{}", uuid::Uuid::new_v4().simple());
        let admin_pool = pool(admin.clone(), 1).expect("a pool");
        let admin_client = admin_pool.get().await.expect("a connection");
        admin_client
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .expect("a fresh database");
        let mut config = admin;
        config.dbname(&db);
        let db_pool = pool(config, 1).expect("a pool");
        let mut client = db_pool.get().await.expect("a connection");
        let list = [
            ("0001_kept", "CREATE TABLE kept (x INT)"),
            ("0002_broken", "CREATE TABLE broken (x no_such_type)"),
        ];
        let e = apply_migrations(&mut client, &list)
            .await
            .expect_err("an unknown type");
        assert!(
            matches!(
                e,
                StoreError::Migration {
                    name: "0002_broken",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(tables(&client).await, 0, "nothing of the list is left");
        apply_migrations(&mut client, &list[..1])
            .await
            .expect("the first alone applies");
        apply_migrations(&mut client, &list[..1])
            .await
            .expect("and is found applied the second time");
        assert_eq!(tables(&client).await, 2);
        drop(client);
        drop(db_pool);
        admin_client
            .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .await
            .expect("drop the test database");
    }

    #[tokio::test]
    async fn a_server_error_says_its_sqlstate_and_message() {
        let Some(admin) = test_admin() else {
            return;
        };
        let pool = pool(admin, 1).expect("a pool");
        let client = pool.get().await.expect("a connection");
        let e: StoreError = client
            .simple_query("SELECT * FROM no_such_table_here")
            .await
            .expect_err("an unknown table")
            .into();
        assert_eq!(
            e.to_string(),
            "database error: ERROR 42P01: relation \"no_such_table_here\" does not exist"
        );
    }
}
