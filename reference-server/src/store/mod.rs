//! Storage: the one module that talks to a database.
//!
//! Handlers, the registry listing, `/healthz` and the payment engine see **traits**, one per domain, never
//! a connection, a SQL string or a driver type:
//!
//! | trait | holds | SQLite | PostgreSQL |
//! |---|---|---|---|
//! | [`LicensingStore`] | articles, license receipts, llms.txt interest (interface A) | [`SqliteLicensingStore`] | [`postgres::PgLicensingStore`] |
//! | [`SettlementStore`] | the settlement log | [`SqliteSettlementStore`] | [`postgres::PgSettlementStore`] |
//! | [`AssetStore`] | registry assets and uploaded files' metadata (interface B) | [`SqliteAssetStore`] | [`postgres::PgAssetStore`] |
//! | [`ExpiringPaymentStore`] (x402-tower's `PaymentStore`) | the payment engine's durable records and payment-identifier ids | [`SqlitePaymentStore`] | [`postgres::PgPaymentStore`] |
//! | [`Backend`] | health, backend counters for `/metrics` | [`sqlite::Db`] | [`postgres::Pg`] |
//!
//! [`Stores::open`] takes a [`DatabaseUrl`] and builds the whole set over one database, migrations applied.
//!
//! # Backends
//!
//! - **SQLite** ([`sqlite`]), the embedded default: one file in WAL mode (or `sqlite::memory:`), a group-commit
//!   writer thread and a pool of readers. Several processes may open one file, but they share one writer
//!   lock: it is for one machine.
//! - **PostgreSQL** ([`postgres`]), for N instances behind a load balancer: everything shared across instances
//!   (articles, receipts, settlements, payment records, llms.txt interest, assets) lives in it, so any instance
//!   answers for any other. Driver: `tokio-postgres` with a `deadpool-postgres` pool. Not `sqlx`: sqlx 0.9
//!   and rusqlite >= 0.40 link two different `libsqlite3-sys` and cannot be in one binary, and we keep
//!   rusqlite for the embedded default (its synchronous API is what the group-commit writer is built on).
//!   tokio-postgres is the driver sqlx's own Postgres support grew next to, is async without a runtime of
//!   its own, prepares and caches statements per connection, and pulls in no TLS stack unless asked.
//!
//! Both backends keep their migrations under `migrations/<backend>/`, versioned by name in a
//! `schema_migrations` table, applied at start (SQLite: each in its own write transaction; PostgreSQL: all
//! pending ones in one transaction under an advisory lock, so instances starting together apply each
//! migration once and a failing one leaves the schema as it was).
//!
//! # Use
//!
//! ```
//! use reference_server::store::{DatabaseUrl, Stores, StoreError};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url: DatabaseUrl = "sqlite::memory:".parse()?;
//! let stores = Stores::open(&url).await?;
//! assert_eq!(stores.assets.count().await?, 0);
//! stores.backend.ping().await?;
//! # Ok(()) }
//! ```

pub mod assets;
pub mod licensing;
pub mod migrate;
pub mod payments;
pub mod postgres;
pub mod settlements;
pub mod sqlite;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

pub use assets::AssetStore;
pub use licensing::LicensingStore;
pub use payments::ExpiringPaymentStore;
pub use settlements::SettlementStore;
pub use sqlite::{
    Db, SqliteAssetStore, SqliteLicensingStore, SqlitePaymentStore, SqliteSettlementStore,
};

/// What every store method returns: a boxed future (the traits are used as `dyn`).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What can go wrong in storage.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL (or the connection to it) reported an error. The message carries the server's SQLSTATE,
    /// message, detail and hint, or the cause of a connection failure (tokio-postgres's own `Display` says
    /// only "db error").
    #[error("database error: {}", PgText(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool (the database is down or unreachable).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A migration failed to apply.
    #[error("migration {name} failed: {source}")]
    Migration {
        /// Migration name, e.g. `0001_licensing`.
        name: &'static str,
        /// The underlying error.
        source: Box<StoreError>,
    },
    /// The requested row does not exist.
    #[error("not found")]
    NotFound,
    /// A uniqueness rule was violated (duplicate content, replayed receipt...).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Data could not be decoded or does not hold together (corrupt, written by a newer version, or a
    /// receipt whose token id is not its payment's).
    #[error("invalid stored data: {0}")]
    Invalid(String),
    /// The blocking task running the query panicked or was cancelled.
    #[error("storage task failed: {0}")]
    Task(String),
    /// The write transaction of this write's batch could not begin: nothing of it was written. The error
    /// is SQLite's, shared by every write of the batch.
    #[error("cannot begin a write transaction: {0}")]
    Begin(#[source] std::sync::Arc<rusqlite::Error>),
    /// The batch this write belonged to could not be committed: nothing of it was written. The error is
    /// SQLite's (`SQLITE_FULL` for a full in-memory database, say), shared by every write of the batch.
    #[error("commit failed: {0}")]
    Commit(#[source] std::sync::Arc<rusqlite::Error>),
    /// The connection broke while the PostgreSQL commit of this write's group was in flight: it may or may
    /// not have been written (as with any statement whose connection breaks). The error is shared by every
    /// write of the group.
    #[error("commit outcome unknown: {}", PgText(.0))]
    CommitUnknown(#[source] std::sync::Arc<tokio_postgres::Error>),
    /// The PostgreSQL group this write belonged to could not be tried (no connection could be had, or
    /// `BEGIN` failed on every one): nothing of it was written. The error is shared by every write of the
    /// group.
    #[error(transparent)]
    Group(std::sync::Arc<StoreError>),
}

/// A tokio-postgres error as an operator needs to read it: the server's error (`ERROR 40P01: deadlock
/// detected`, its detail and hint) or the client-side kind with its cause (`error connecting to server:
/// Connection refused`).
struct PgText<'a>(&'a tokio_postgres::Error);

impl std::fmt::Display for PgText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            write!(
                f,
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                db.message()
            )?;
            if let Some(detail) = db.detail() {
                write!(f, " (detail: {detail})")?;
            }
            if let Some(hint) = db.hint() {
                write!(f, " (hint: {hint})")?;
            }
            return Ok(());
        }
        write!(f, "{}", self.0)?;
        std::iter::successors(std::error::Error::source(self.0), |e| e.source())
            .try_for_each(|cause| write!(f, ": {cause}"))
    }
}

impl StoreError {
    /// True when the error is a uniqueness/primary-key violation (of either backend) or a [`Conflict`].
    ///
    /// [`Conflict`]: StoreError::Conflict
    pub fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            }
            StoreError::Postgres(e) => {
                e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
            }
            StoreError::Conflict(_) => true,
            _ => false,
        }
    }
}

/// Where the database is, as `--database` / `DATABASE_URL` write it.
///
/// | written | means |
/// |---|---|
/// | `sqlite:PATH`, `sqlite://PATH`, a plain path | a SQLite file (created when missing) |
/// | `sqlite::memory:`, `:memory:` | a private in-memory SQLite database (at most [`sqlite::MEMORY_SIZE_LIMIT`] bytes) |
/// | `postgres://user:pass@host:port/db`, `postgresql://...` | a PostgreSQL database (libpq URL, with its query parameters) |
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite file.
    SqliteFile(PathBuf),
    /// A private in-memory SQLite database.
    SqliteMemory,
    /// A PostgreSQL connection URL, as given.
    Postgres(String),
}

/// Why a database URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DatabaseUrlError(String);

impl FromStr for DatabaseUrl {
    type Err = DatabaseUrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = |why: &str| DatabaseUrlError(why.to_owned());
        if s.is_empty() {
            return Err(bad("must not be empty"));
        }
        if s == ":memory:" || s == "sqlite::memory:" || s == "sqlite://:memory:" {
            return Ok(DatabaseUrl::SqliteMemory);
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            s.parse::<tokio_postgres::Config>()
                .map_err(|e| DatabaseUrlError(format!("not a valid PostgreSQL URL: {e}")))?;
            return Ok(DatabaseUrl::Postgres(s.to_owned()));
        }
        let path = if let Some(rest) = s.strip_prefix("sqlite://") {
            rest
        } else if let Some(rest) = s.strip_prefix("sqlite:") {
            rest
        } else if let Some((scheme, _)) = s.split_once("://") {
            return Err(bad(&format!(
                "unknown database scheme {scheme:?}: expected sqlite:PATH, sqlite::memory:, postgres:// or a file path"
            )));
        } else {
            s
        };
        // `sqlite:db.sqlite3?mode=rwc`: the query is SQLx's; a file path has none.
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if path.is_empty() {
            return Err(bad("the SQLite URL names no file"));
        }
        Ok(DatabaseUrl::SqliteFile(PathBuf::from(path)))
    }
}

impl DatabaseUrl {
    /// `sqlite`, or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            DatabaseUrl::SqliteFile(_) | DatabaseUrl::SqliteMemory => "sqlite",
            DatabaseUrl::Postgres(_) => "postgres",
        }
    }
}

/// Shown without the password.
impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrl::SqliteFile(p) => write!(f, "sqlite:{}", p.display()),
            DatabaseUrl::SqliteMemory => f.write_str("sqlite::memory:"),
            DatabaseUrl::Postgres(url) => f.write_str(&postgres::redact(url)),
        }
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// What every backend answers besides the domain stores.
pub trait Backend: Send + Sync + fmt::Debug {
    /// `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;
    /// One round trip to the database (`/healthz`, `/readyz`).
    fn ping(&self) -> StoreFuture<'_, ()>;
    /// Records the backend's own counters (with the server's metrics recorder current).
    fn record_metrics(&self);
}

/// The stores of one database, as the application uses them. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Stores {
    /// Interface A: articles, receipts, llms.txt interest.
    pub licensing: Arc<dyn LicensingStore>,
    /// The settlement log.
    pub settlements: Arc<dyn SettlementStore>,
    /// Interface B: assets.
    pub assets: Arc<dyn AssetStore>,
    /// The payment engine's durable records.
    pub payments: Arc<dyn ExpiringPaymentStore>,
    /// Health and counters.
    pub backend: Arc<dyn Backend>,
}

impl Stores {
    /// Opens (creating, for SQLite) the database at `url`, applies pending migrations and returns its
    /// stores. A database that cannot be reached fails here, not on the first request.
    pub async fn open(url: &DatabaseUrl) -> Result<Self, StoreError> {
        match url {
            DatabaseUrl::SqliteMemory => Ok(Self::sqlite(Db::open_in_memory()?)),
            DatabaseUrl::SqliteFile(path) => {
                let path = path.clone();
                let db = tokio::task::spawn_blocking(move || Db::open(path))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))??;
                Ok(Self::sqlite(db))
            }
            DatabaseUrl::Postgres(url) => Ok(Self::postgres(postgres::Pg::connect(url).await?)),
        }
    }

    /// The stores over an open SQLite database.
    pub fn sqlite(db: Db) -> Self {
        Self {
            licensing: Arc::new(SqliteLicensingStore::new(db.clone())),
            settlements: Arc::new(SqliteSettlementStore::new(db.clone())),
            assets: Arc::new(SqliteAssetStore::new(db.clone())),
            payments: Arc::new(SqlitePaymentStore::new(db.clone())),
            backend: Arc::new(db),
        }
    }

    /// The stores over a PostgreSQL pool.
    pub fn postgres(pg: postgres::Pg) -> Self {
        Self {
            licensing: Arc::new(postgres::PgLicensingStore::new(pg.clone())),
            settlements: Arc::new(postgres::PgSettlementStore::new(pg.clone())),
            assets: Arc::new(postgres::PgAssetStore::new(pg.clone())),
            payments: Arc::new(postgres::PgPaymentStore::new(pg.clone())),
            backend: Arc::new(pg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_as_the_ecosystem_writes_them() {
        let file = |p: &str| DatabaseUrl::SqliteFile(PathBuf::from(p));
        for (written, expected) in [
            ("db.sqlite3", file("db.sqlite3")),
            ("/var/lib/x/db.sqlite3", file("/var/lib/x/db.sqlite3")),
            ("sqlite:db.sqlite3", file("db.sqlite3")),
            ("sqlite://db.sqlite3", file("db.sqlite3")),
            ("sqlite:///abs/db.sqlite3", file("/abs/db.sqlite3")),
            ("sqlite:db.sqlite3?mode=rwc", file("db.sqlite3")),
            (":memory:", DatabaseUrl::SqliteMemory),
            ("sqlite::memory:", DatabaseUrl::SqliteMemory),
            (
                "postgres://u:p@127.0.0.1:5432/db",
                DatabaseUrl::Postgres("postgres://u:p@127.0.0.1:5432/db".into()),
            ),
            (
                "postgresql://u@localhost/db?sslmode=disable",
                DatabaseUrl::Postgres("postgresql://u@localhost/db?sslmode=disable".into()),
            ),
        ] {
            assert_eq!(written.parse::<DatabaseUrl>(), Ok(expected), "{written}");
        }
        for bad in [
            "",
            "mysql://u@h/db",
            "sqlite:",
            "postgres://u@h:notaport/db",
        ] {
            assert!(bad.parse::<DatabaseUrl>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn shown_without_the_password() {
        let url: DatabaseUrl = "postgres://app:s3cret@db.internal:5432/registry"
            .parse()
            .unwrap();
        let shown = url.to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("db.internal:5432/registry"), "{shown}");
        assert!(!format!("{url:?}").contains("s3cret"));
    }
}
