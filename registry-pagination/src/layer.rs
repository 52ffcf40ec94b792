//! [`PaginationLayer`]: the configuration, validated when it is built.

use std::sync::Arc;

use tower_layer::Layer;

use crate::{BaseUrl, InvalidBaseUrl, Pagination};

/// DRF's default page size for the registry (`limit` when the request has none or an invalid one).
pub const DEFAULT_LIMIT: u64 = 200;
/// DRF's maximum page size for the registry.
pub const DEFAULT_MAX_LIMIT: u64 = 200;

/// Shared, immutable configuration of the layer and every service it builds.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) base_url: BaseUrl,
    pub(crate) default_limit: u64,
    pub(crate) max_limit: Option<u64>,
    pub(crate) trust_forwarded_headers: bool,
    pub(crate) link_header: bool,
}

/// Applies DRF's `LimitOffsetPagination` to the wrapped service: see the [crate docs](crate).
///
/// ```
/// use registry_pagination::PaginationLayer;
///
/// let layer = PaginationLayer::try_new("https://registry.example.com")?
///     .default_limit(200)
///     .max_limit(Some(200))
///     .trust_forwarded_headers(false);
/// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
/// ```
#[derive(Debug, Clone)]
pub struct PaginationLayer {
    config: Arc<Config>,
}

impl PaginationLayer {
    /// A layer whose links start with `base_url`, with `default_limit` and `max_limit` 200, forwarded
    /// headers not trusted and the `Link` header on.
    ///
    /// ```
    /// use registry_pagination::{BaseUrl, PaginationLayer};
    ///
    /// let base: BaseUrl = "http://localhost:8000".parse()?;
    /// let layer = PaginationLayer::new(base);
    /// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
    /// ```
    #[must_use]
    pub fn new(base_url: BaseUrl) -> Self {
        Self {
            config: Arc::new(Config {
                base_url,
                default_limit: DEFAULT_LIMIT,
                max_limit: Some(DEFAULT_MAX_LIMIT),
                trust_forwarded_headers: false,
                link_header: true,
            }),
        }
    }

    /// Like [`new`](Self::new), parsing the base URL: it must be an absolute `http://` or `https://` URL
    /// (an optional path prefix is kept; no user info, query or fragment).
    ///
    /// ```
    /// use registry_pagination::PaginationLayer;
    ///
    /// assert!(PaginationLayer::try_new("http://h/prefix").is_ok());
    /// assert!(PaginationLayer::try_new("not a url").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidBaseUrl`] when the URL is not acceptable.
    pub fn try_new(base_url: &str) -> Result<Self, InvalidBaseUrl> {
        Ok(Self::new(base_url.parse()?))
    }

    /// The page size used when the request gives no valid `limit` (default 200). Not clamped to
    /// `max_limit`, as in DRF.
    ///
    /// ```
    /// use registry_pagination::PaginationLayer;
    ///
    /// let layer = PaginationLayer::try_new("http://testserver")?.default_limit(10);
    /// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
    /// ```
    ///
    /// # Panics
    ///
    /// When `limit` is 0 (a page of nothing never ends): a configuration error, caught when the layer is built.
    #[must_use]
    pub fn default_limit(mut self, limit: u64) -> Self {
        assert!(
            limit > 0,
            "registry-pagination: default_limit must be at least 1"
        );
        Arc::make_mut(&mut self.config).default_limit = limit;
        self
    }

    /// The largest page size a client may ask for (default `Some(200)`); `None` lets clients choose any size.
    ///
    /// ```
    /// use registry_pagination::PaginationLayer;
    ///
    /// let layer = PaginationLayer::try_new("http://testserver")?.max_limit(Some(15));
    /// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
    /// ```
    ///
    /// # Panics
    ///
    /// When `limit` is `Some(0)`.
    #[must_use]
    pub fn max_limit(mut self, limit: Option<u64>) -> Self {
        assert!(
            limit != Some(0),
            "registry-pagination: max_limit must be at least 1"
        );
        Arc::make_mut(&mut self.config).max_limit = limit;
        self
    }

    /// Whether to take the links' scheme and host from the request (`Forwarded`, `X-Forwarded-Proto`,
    /// `X-Forwarded-Host`, `Host`) instead of the base URL. Off by default: only turn it on behind a proxy
    /// that sets these headers, otherwise any client chooses the host your links point to.
    ///
    /// ```
    /// use registry_pagination::PaginationLayer;
    ///
    /// let layer = PaginationLayer::try_new("http://internal:8000")?.trust_forwarded_headers(true);
    /// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
    /// ```
    #[must_use]
    pub fn trust_forwarded_headers(mut self, trust: bool) -> Self {
        Arc::make_mut(&mut self.config).trust_forwarded_headers = trust;
        self
    }

    /// Whether to add the RFC 8288 `Link` header (`next`, `prev`, `first`, `last`) to pages (default on).
    ///
    /// ```
    /// use registry_pagination::PaginationLayer;
    ///
    /// let layer = PaginationLayer::try_new("http://h")?.link_header(false);
    /// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
    /// ```
    #[must_use]
    pub fn link_header(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config).link_header = enabled;
        self
    }

    /// The configured base URL.
    #[must_use]
    pub fn base_url(&self) -> &BaseUrl {
        &self.config.base_url
    }
}

impl<S> Layer<S> for PaginationLayer {
    type Service = Pagination<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Pagination::from_config(inner, Arc::clone(&self.config))
    }
}
