//! The composition root: the one place that knows every part. It opens the database, builds each part's
//! state and router ([`app`]), binds the socket, runs the background tasks and serves ([`mod@serve`]); the
//! command line ([`cli`]) and logging live here too. Nothing else in the crate imports this module.

pub mod app;
pub mod cli;
pub(crate) mod log_lines;
pub mod openapi;
pub mod ops;
pub mod serve;
mod settler;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{Config, ConfigError, LogFormat, Settings};
use crate::licensing::Licensing;
use crate::store::{DatabaseUrl, StoreError, Stores};
use crate::{licensing, registry};
use app::{BuildError, Parts};

/// How long in-flight requests may take to finish after a shutdown request (SIGTERM, Ctrl-C) before the
/// server closes the connections that are still open.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Why the server could not start. Every variant happens before it listens; the binary exits with
/// status 2 for all of them.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configuration value is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be opened, migrated or seeded.
    #[error("database {path}: {source}")]
    Database {
        /// The database location.
        path: String,
        /// The underlying error.
        source: StoreError,
    },
    /// The media directory could not be created.
    #[error("media directory {path}: {source}")]
    MediaDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The router could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// Build the application router over open stores, for a server reachable at `public_url`.
pub async fn build_app(
    settings: Settings,
    public_url: String,
    stores: Stores,
) -> Result<app::App, BuildError> {
    Ok(app::build_router(
        &Parts::new(&settings, public_url, stores).await?,
    ))
}

/// Open the configured database (migrations run) and seed it when empty.
pub async fn open_database(settings: &Settings) -> Result<Stores, StartError> {
    let db_err = |source| StartError::Database {
        path: settings.database.to_string(),
        source,
    };
    let stores = Stores::open(&settings.database).await.map_err(db_err)?;
    let seeded = licensing::seed(&*stores.licensing).await.map_err(db_err)?;
    if seeded > 0 {
        tracing::info!(articles = seeded, "seeded the article catalog");
    }
    // `registry::seed` logs how many assets it seeded.
    registry::seed(&*stores.assets, settings.seed_assets)
        .await
        .map_err(db_err)?;
    Ok(stores)
}

/// The media directory: configured, `<database>.media` next to a SQLite file, `reference-server.media`
/// (in the working directory) for PostgreSQL, or a fresh temporary directory for an in-memory database.
pub fn media_dir(settings: &Settings) -> PathBuf {
    match (&settings.media_dir, &settings.database) {
        (Some(dir), _) => dir.clone(),
        (None, DatabaseUrl::SqliteFile(p)) => {
            let mut s = p.clone().into_os_string();
            s.push(".media");
            PathBuf::from(s)
        }
        (None, DatabaseUrl::Postgres(_)) => PathBuf::from("reference-server.media"),
        (None, DatabaseUrl::SqliteMemory) => {
            std::env::temp_dir().join(format!("reference-server-media-{}", uuid::Uuid::new_v4()))
        }
    }
}

/// A server bound to its socket, database open and seeded, ready to [`run`](Server::run).
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    app: app::App,
    parts: Parts,
    settings: Settings,
    addr: SocketAddr,
}

impl Server {
    /// Bind the listen address, open and seed the database, build the app.
    pub async fn bind(settings: Settings) -> Result<Server, StartError> {
        Self::bind_wrapping(settings, |stores| stores).await
    }

    /// [`Server::bind`], with the opened stores passed through `wrap` before anything uses them (tests put
    /// a store that fails on chosen calls in front of the real one).
    pub async fn bind_wrapping(
        mut settings: Settings,
        wrap: impl FnOnce(Stores) -> Stores,
    ) -> Result<Server, StartError> {
        // The socket first: a port already in use fails before any database or media directory is
        // created, so a failed start leaves nothing behind.
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: settings.listen,
            source,
        })?;
        let db = wrap(open_database(&settings).await?);
        let media = media_dir(&settings);
        settings.media_dir = Some(media.clone());
        std::fs::create_dir_all(&media).map_err(|source| StartError::MediaDir {
            path: media.clone(),
            source,
        })?;
        let public_url = settings
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        let parts = Parts::new(&settings, public_url, db).await?;
        let app = app::build_router(&parts);
        Ok(Server {
            listener,
            app,
            parts,
            settings,
            addr,
        })
    }

    /// The bound socket address (the real port when the configuration said port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The public base URL (no trailing slash).
    pub fn public_url(&self) -> &str {
        &self.parts.licensing.public_url
    }

    /// Interface A's state (its stores, catalog, payment layer...).
    pub fn state(&self) -> &Arc<Licensing> {
        &self.parts.licensing
    }

    /// What the server prints at start: where it listens and how to pay.
    pub fn banner(&self) -> String {
        let s = &self.parts.licensing;
        let p = &s.settings.payment;
        let u = &s.public_url;
        format!(
            "reference-server listening on http://{addr} (public URL {u})\n\
             \n  Interface A (content licensing, x402):\n\
             \x20   catalog       {u}/x402Article/list\n\
             \x20   article       {u}/x402Article?articleId=<id>   (402 until paid)\n\
             \x20   llms.txt      {u}/serveLlmsTxt\n\
             \x20   OpenAPI       {u}/openapi.json\n\
             \n  Interface B (asset registry):\n\
             \x20   list          {u}/api/v3/assets/\n\
             \n  Operations: {u}/healthz  {u}/metrics  {u}/operator/llms-txt  {u}/operator/settlements\n\
             \x20   operator endpoints: {operator}\n\
             \n  How to pay: x402 `exact` scheme, USDC {asset} (EIP-712 \"{name}\" v{version}) on {net}{v1},\n\
             \x20 to {pay_to}; send PAYMENT-SIGNATURE (x402 v2) or X-PAYMENT (v1), e.g. with @x402/fetch.\n\
             \x20 Settlement: {mode}.\n\
             \x20 Offers and receipts are signed (x402 offer-receipt, EIP-712) by {receipt_signer}{receipt_key}.\n\
             \n  Facilitator API ({u}/facilitator/verify|settle|supported): {facilitator}\n",
            addr = self.addr,
            asset = p.token.address,
            name = p.token.name,
            version = p.token.version,
            net = p.caip2(),
            v1 = p
                .v1_name()
                .map(|n| format!(" (v1 \"{n}\")"))
                .unwrap_or_default(),
            pay_to = s.settings.pay_to,
            mode = s.settlement_mode(),
            receipt_signer = s.settings.receipt_key.signer().address(),
            receipt_key = match &s.settings.receipt_key {
                crate::licensing::settings::ReceiptKey::Given(_) => String::new(),
                crate::licensing::settings::ReceiptKey::Derived(_) =>
                    " (derived from --url-signing-key)".to_owned(),
                crate::licensing::settings::ReceiptKey::Generated(k) => format!(
                    "\n  (key generated for this run: {}; set --receipt-signing-key to keep it)",
                    alloy_primitives::hex::encode_prefixed(k.to_bytes())
                ),
            },
            operator = match &s.settings.operator_token {
                crate::licensing::settings::OperatorToken::Given(_) =>
                    "`Authorization: token <--api-token>`".to_owned(),
                crate::licensing::settings::OperatorToken::Generated(t) => format!(
                    "`Authorization: token {t}` (generated for this run; --api-token sets one)"
                ),
            },
            facilitator = match (&self.settings.facilitator.token, &s.settings.onchain) {
                (Some(_), _) =>
                    "on, behind `Authorization: Bearer <--facilitator-token>`".to_owned(),
                (None, Some(_)) =>
                    "OFF: on-chain settlement is configured and no --facilitator-token was given \
                                    (without one, anybody could spend the relayer's gas)"
                        .to_owned(),
                (None, None) => "off (start with --facilitator-token to turn it on)".to_owned(),
            },
        )
    }

    /// Serve until `shutdown` completes, then finish in-flight requests (for at most
    /// [`SHUTDOWN_GRACE`]) and return.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.run_with_grace(shutdown, SHUTDOWN_GRACE).await
    }

    /// [`run`](Server::run) with another grace period. Connections still open `grace` after `shutdown`
    /// completed (a client that never finishes sending its request, a stalled download) are dropped, so a
    /// stuck client cannot keep the process from stopping.
    pub async fn run_with_grace(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        grace: Duration,
    ) -> std::io::Result<()> {
        let (requested, on_request) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            shutdown.await;
            let _ = requested.send(());
        };
        let serve = self.serve_until(shutdown);
        tokio::pin!(serve);
        tokio::select! {
            result = &mut serve => result,
            () = async {
                match on_request.await {
                    Ok(()) => tokio::time::sleep(grace).await,
                    // The shutdown future was dropped unfinished: only `serve` ending can get here.
                    Err(_) => std::future::pending().await,
                }
            } => {
                tracing::warn!(grace_secs = grace.as_secs_f64(), "connections still open after the shutdown grace period; closing them");
                Ok(())
            }
        }
    }

    async fn serve_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let state = self.parts.licensing.clone();
        let reconciler = spawn_reconciler(state.clone(), RECONCILE_INTERVAL);
        let catalog = spawn_catalog_refresh(state.clone(), licensing::articles::REFRESH);
        let interest = spawn_interest_flush(state.clone(), licensing::interest::FLUSH_EVERY);
        let minter = state.minter.clone().map(|m| tokio::spawn(m.run()));
        let served = serve::serve(
            self.listener,
            self.app,
            self.settings.connections,
            self.parts.ops.connections.clone(),
            shutdown,
        )
        .await;
        reconciler.abort();
        catalog.abort();
        interest.abort();
        if let Some(m) = minter {
            m.abort();
        }
        // What was counted since the last flush is written before the process ends.
        if let Err(e) = state.interest.flush(&*state.licensing).await {
            tracing::error!(error = %e, "writing the last llms.txt interest failed");
        }
        served
    }
}

/// Writes the llms.txt interest counted in memory every `interval`, and once an hour deletes what is older
/// than the retention period ([`licensing::interest::DEFAULT_RETENTION`]).
pub fn spawn_interest_flush(
    state: Arc<Licensing>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let purge_every = (3600 / interval.as_secs().max(1)).max(1);
        let mut ticks: u64 = 0;
        loop {
            tick.tick().await;
            if let Err(e) = state.interest.flush(&*state.licensing).await {
                tracing::warn!(error = %e, "writing llms.txt interest failed; kept for the next flush");
            }
            if ticks.is_multiple_of(purge_every) {
                let cutoff = licensing::interest::retention_cutoff(
                    time::OffsetDateTime::now_utc(),
                    licensing::interest::DEFAULT_RETENTION,
                );
                if let Err(e) = state.licensing.purge_llms_txt_interest(cutoff).await {
                    tracing::warn!(error = %e, "deleting old llms.txt interest failed");
                }
            }
            ticks += 1;
        }
    })
}

/// Reloads the in-memory article catalog every `interval`, so that articles changed in the database (by
/// another instance or an operator) are served within that time.
pub fn spawn_catalog_refresh(
    state: Arc<Licensing>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // loaded at start already
        loop {
            tick.tick().await;
            if let Err(e) = state.articles.reload(&*state.licensing).await {
                tracing::warn!(error = %e, "reloading the article catalog failed; serving the previous one");
            }
        }
    })
}

/// How often the background reconciler looks for payments whose settlement outcome is unknown.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(30);

/// Runs the payment engine's reconciler every `interval` (pending settlements, requests that died
/// mid-flight), and forgets payment records that expired more than an hour ago. One pass at most 100
/// payments; every instance may run it (records are claimed with compare-and-set, so two instances never
/// act on one payment).
pub fn spawn_reconciler(state: Arc<Licensing>, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match state.payments.engine().reconcile_unresolved(100).await {
                Ok(r) if r.examined > 0 => tracing::info!(?r, "reconciled payments"),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "payment reconciliation failed"),
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            if let Err(e) = state
                .payment_store
                .purge_expired(now.saturating_sub(3600))
                .await
            {
                tracing::warn!(error = %e, "purging expired payment records failed");
            }
        }
    })
}

/// Validate `config`, start, print the banner, and serve until `shutdown`.
pub async fn serve(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let settings = config.validate().map_err(StartError::from)?;
    let server = Server::bind(settings).await?;
    println!("{}", server.banner());
    tracing::info!(addr = %server.local_addr(), public_url = %server.public_url(), "listening");
    server.run(shutdown).await.map_err(ServeError::Io)?;
    tracing::info!("shut down");
    Ok(())
}

/// Why [`serve()`] returned with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Start failed (exit code 2).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The server failed while running (exit code 1).
    #[error("server error: {0}")]
    Io(std::io::Error),
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown requested; finishing in-flight requests");
}

/// Most log lines waiting for the writer thread; past it, new lines are dropped and counted
/// (`log_lines_dropped_total`) rather than make a request wait (~500 bytes a line: ~8 MB at most).
const LOG_QUEUE_LINES: usize = 16 * 1024;

/// The log writer's dropped-line counter, for `/metrics` (set by [`init_tracing`]).
static LOG_DROPPED: std::sync::OnceLock<tracing_appender::non_blocking::ErrorCounter> =
    std::sync::OnceLock::new();

/// Lines the log writer dropped because its queue was full (a log sink that stopped reading).
pub(crate) fn log_lines_dropped() -> u64 {
    LOG_DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// Flushes the log lines still queued when dropped: keep it until the process ends.
#[must_use = "log lines still queued are lost unless the guard is kept until the end"]
#[derive(Debug)]
pub struct LogGuard {
    _writer: Option<tracing_appender::non_blocking::WorkerGuard>,
}

/// Install the global tracing subscriber (`RUST_LOG` filter, default `info`). Idempotent (a second call
/// installs nothing and its guard guards nothing).
///
/// Lines go to stderr from a writer thread of their own, so a log sink that stops reading (a full pipe, a
/// stalled log shipper) never stops the server: written in place, every request would wait on the full
/// pipe. Past 16,384 waiting lines, new ones are dropped and counted
/// (`log_lines_dropped_total`). This buys no CPU: the access line costs the same either way (its `write`, or
/// the hand-off to the writer thread; docs/bench/reference-server-licensing.md); `RUST_LOG=warn`
/// turns the access log off. JSON lines are tracing-subscriber's JSON format written by `log_lines`, which
/// stores a span's fields as JSON once and copies them into each line (a 402 at `info` 70,400 instructions
/// against 116,700 with `fmt().json()`, 56,800 at `warn`; callgrind, November 2026). Lines still queued when the process
/// is killed (`SIGKILL`) are lost; the returned guard writes them out on a normal exit.
pub fn init_tracing(format: LogFormat) -> LogGuard {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tower_http=info"));
    use std::io::IsTerminal as _;
    let terminal = std::io::stderr().is_terminal();
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .lossy(true)
        .thread_name("log-writer")
        // Buffered: the lines that queued up while one was written go out in one `write`.
        .finish(std::io::BufWriter::new(std::io::stderr()));
    let dropped = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(terminal);
    let json = match format {
        LogFormat::Auto => !terminal,
        LogFormat::Json => true,
        LogFormat::Text => false,
    };
    let installed = if json {
        builder
            .fmt_fields(log_lines::JsonSpanFields)
            .event_format(log_lines::JsonLines)
            .try_init()
    } else {
        builder.try_init()
    };
    if installed.is_err() {
        return LogGuard { _writer: None };
    }
    let _ = LOG_DROPPED.set(dropped);
    LogGuard {
        _writer: Some(guard),
    }
}
