//! Interface B: the asset registry listing (`/api/v3/assets/`), its signed media URLs and asset upload.
//!
//! # Layout
//!
//! - [`model`]: the asset record of interfaces.md part B, field for field, and its stored form (a
//!   pre-serialised JSON [`model::Template`] with holes for the per-request URLs).
//! - [`seed()`](fn@seed): the deterministic demo catalog.
//! - [`media`]: CIDv1 / SHA-256 and the small generated files behind seeded records.
//! - [`signing`]: `Expires` / `Signature` / `Key-Pair-Id` URLs (HMAC-SHA256).
//! - `drf`: the Django REST Framework surface of the collection (format, Accept, HEAD, OPTIONS, 405).
//! - `handlers` / `upload`: listing, media, verification page, and `POST` registration.
//! - SQL lives in [`crate::store::assets`] only.
//!
//! # Decisions where the spec is silent
//!
//! - Listing order: descending `uploaded_at`, ties broken by descending insertion id.
//! - Errors are Django REST Framework's: `{"detail": ...}`, and for invalid input the `{field: [messages]}`
//!   map of a `ValidationError`; a duplicate adds the existing asset's `cid`, a file too large the limit's
//!   `max_bytes`. A browser gets them as the site's error page.
//! - `POST` without a configured API token is disabled: 403. With a token,
//!   a missing or wrong `Authorization: token <t>` is 401.
//! - A duplicate file (same CID) is 409, with the existing asset's `cid` beside `detail`.
//! - Signed URLs expire `url_ttl` after issue, rounded down to a minute (so signatures are cached).
//!
//! # Example
//!
//! ```no_run
//! use reference_server::registry::{self, RegistryConfig};
//! use reference_server::store::{DatabaseUrl, Stores};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let stores = Stores::open(&"sqlite::memory:".parse::<DatabaseUrl>()?).await?;
//! registry::seed(&*stores.assets, 100).await?;
//! let cfg = RegistryConfig::new("http://127.0.0.1:8080", std::env::temp_dir().join("media"));
//! let app: axum::Router = registry::router(stores.assets, cfg, None);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

pub(crate) mod drf;
pub mod export;
pub(crate) mod handlers;
pub mod media;
pub mod model;
mod page_cache;
pub mod seed;
pub mod signing;
pub(crate) mod upload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use registry_pagination::PaginationLayer;

pub use media::cid_v1_raw;

use crate::store::StoreError;
use crate::store::assets::AssetStore;
use signing::UrlSigner;

/// Page size: default and maximum `limit` (interfaces.md: `limit=200` in every link).
pub const PAGE_SIZE: u64 = 200;

/// Default of [`RegistryConfig::export_per_record`]: 100 atomic units (0.0001 USDC) a record.
pub const DEFAULT_EXPORT_PER_RECORD: u64 = 100;

/// Configuration of the registry.
#[derive(Clone)]
pub struct RegistryConfig {
    /// Public base URL, no trailing slash: prefix of pagination links and media URLs.
    pub public_base_url: String,
    /// Token required by `POST` (`Authorization: token <t>`); `None` disables registration.
    pub api_token: Option<String>,
    /// HMAC key of the signed media URLs.
    pub url_signing_key: Vec<u8>,
    /// Directory for uploaded files (created on first upload).
    pub media_dir: PathBuf,
    /// Lifetime of signed media URLs.
    pub url_ttl: Duration,
    /// Largest accepted uploaded file, in bytes.
    pub max_upload_bytes: usize,
    /// Default and maximum page size (and the largest `limit` of one export).
    pub page_size: u64,
    /// Atomic units charged per record by the paid export ([`export`]).
    pub export_per_record: u64,
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("public_base_url", &self.public_base_url)
            .field("api_token", &self.api_token.as_ref().map(|_| "<hidden>"))
            .field("media_dir", &self.media_dir)
            .field("url_ttl", &self.url_ttl)
            .field("max_upload_bytes", &self.max_upload_bytes)
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

impl RegistryConfig {
    /// Defaults: random signing key, URLs valid one hour, uploads up to 10 MiB, no API token.
    pub fn new(public_base_url: impl Into<String>, media_dir: impl Into<PathBuf>) -> Self {
        let key = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        Self {
            public_base_url: public_base_url.into().trim_end_matches('/').to_owned(),
            api_token: None,
            url_signing_key: key.into_bytes(),
            media_dir: media_dir.into(),
            url_ttl: Duration::from_secs(3600),
            max_upload_bytes: 10 * 1024 * 1024,
            page_size: PAGE_SIZE,
            export_per_record: DEFAULT_EXPORT_PER_RECORD,
        }
    }
}

/// Shared state of the registry handlers.
pub(crate) struct Registry {
    pub(crate) store: Arc<dyn AssetStore>,
    /// Rendered listing pages, compressed once (`page_cache`).
    pub(crate) pages: page_cache::PageCache,
    pub(crate) signer: UrlSigner,
    pub(crate) cfg: RegistryConfig,
}

impl Registry {
    fn base(&self) -> &str {
        &self.cfg.public_base_url
    }
}

/// The collection's path.
pub const COLLECTION_PATH: &str = "/api/v3/assets/";

/// The registry's routes: `/api/v3/assets/` (GET, HEAD, POST, OPTIONS), `/media/...` (signed files),
/// `/verify/{cid}` (the public verification page of `certificate_link`) and, given the x402 layer that sells
/// it, `/api/v3/assets/export/` (a bulk export paid per record returned, [`export`]).
///
/// # Panics
///
/// If `public_base_url` is not an absolute `http(s)` URL (a configuration error, caught at start).
pub fn router(
    store: Arc<dyn AssetStore>,
    cfg: RegistryConfig,
    export: Option<x402_tower::X402Layer>,
) -> Router {
    let base = cfg.public_base_url.trim_end_matches('/').to_owned();
    let pagination = PaginationLayer::try_new(&base)
        .unwrap_or_else(|e| panic!("invalid public base URL {base:?}: {e}"))
        .default_limit(cfg.page_size)
        .max_limit(Some(cfg.page_size));
    let state = Arc::new(Registry {
        store,
        pages: page_cache::PageCache::default(),
        signer: UrlSigner::new(&cfg.url_signing_key, cfg.url_ttl),
        cfg: RegistryConfig {
            public_base_url: base,
            ..cfg
        },
    });
    let body_cap = state
        .cfg
        .max_upload_bytes
        .saturating_add(upload::MULTIPART_OVERHEAD);
    let collection = get(handlers::list)
        .post(upload::create)
        .options(drf::options)
        .fallback(drf::method_not_allowed)
        .layer::<_, std::convert::Infallible>(pagination)
        .layer(axum::extract::DefaultBodyLimit::max(body_cap))
        .layer(axum::middleware::from_fn_with_state(
            drf::Resource::Collection {
                page_size: state.cfg.page_size,
            },
            drf::surface,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            page_cache::serve,
        ));
    let one = get(handlers::detail)
        .options(drf::detail_options)
        .fallback(drf::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            drf::Resource::Detail,
            drf::surface,
        ));
    let router = Router::new()
        .route(COLLECTION_PATH, collection)
        .route("/api/v3/assets/{cid}/", one)
        .route(
            "/media/{*path}",
            get(handlers::media)
                .route_layer(axum::middleware::from_fn(crate::web::conditional::etag)),
        )
        .route("/verify/{cid}", get(handlers::verify_page));
    // The paid bulk export, behind the x402 layer the composition root built for it (`upto`).
    let router = match export {
        Some(layer) => router.route(export::EXPORT_PATH, get(export::export).route_layer(layer)),
        None => router,
    };
    router.with_state(state)
}

/// Seed `n_assets` deterministic demo assets into an empty registry; returns how many were inserted
/// (0 when the registry already has assets).
pub async fn seed(store: &dyn AssetStore, n_assets: usize) -> Result<usize, StoreError> {
    let make: crate::store::assets::SeedAsset =
        Arc::new(|i, n| seed::seed_asset(i, n).map_err(|e| StoreError::Invalid(e.to_string())));
    let done = store.seed(n_assets as u64, make).await?;
    if done > 0 {
        tracing::info!(assets = done, "seeded the asset registry");
    }
    Ok(done)
}
