//! The application: shared state and the one function that builds the whole [`App`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::handler::Handler as _;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, get_service};
use bytes::Bytes;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;
use tower::{Layer as _, ServiceBuilder};
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{NotForContentType, Predicate as _, SizeAbove};
use tower_http::cors::{Any, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::config::Settings;
use crate::licensing::articles::ArticleCatalog;
use crate::licensing::settlements::SettlementLog;
use crate::licensing::{self, handlers};
use crate::metrics::Metrics;
use crate::registry::RegistryConfig;
use crate::store::{LicensingStore, PaymentStore, Stores};
use crate::web::layers::{CountRequestsLayer, ErrorRequestIdLayer, PlainOptionsLayer};
use x402_tower::X402Layer;

/// State shared by every handler (`State<Arc<AppState>>`).
#[derive(Debug)]
pub struct AppState {
    /// Checked configuration.
    pub settings: Settings,
    /// Public base URL without a trailing slash (configured, or derived from the bound address).
    pub public_url: String,
    /// The database's stores.
    pub stores: Stores,
    /// Interface A's store (`stores.licensing`).
    pub licensing: Arc<dyn LicensingStore>,
    /// The published articles, in memory (reloaded every [`licensing::articles::REFRESH`]).
    pub articles: ArticleCatalog,
    /// Server counters.
    pub metrics: Arc<Metrics>,
    /// The server loop's connection counters.
    pub connections: Arc<crate::serve::ConnectionStats>,
    /// llms.txt interest, counted in memory and flushed in batches.
    pub interest: crate::licensing::interest::InterestRecorder,
    /// The OpenAPI document, serialised once.
    pub openapi: Bytes,
    /// Its ETag, computed once.
    pub openapi_etag: HeaderValue,
    /// The x402 layer of `/x402Article` (kept here for its metrics).
    pub payments: X402Layer,
    /// The settlement log the x402 layer reports every settlement attempt to (its store and counters).
    pub settlements: Arc<SettlementLog>,
    /// The payment engine's durable records (shared by the paid route and `/facilitator`).
    pub payment_store: Arc<dyn PaymentStore>,
    /// Web Bot Auth: verifies signed crawler requests.
    pub bots: licensing::bot_auth::BotVerifier,
    /// Mints license tokens on chain (`--license-token` with on-chain settlement).
    pub minter: Option<Arc<licensing::minter::Minter>>,
    /// `Link: <…/license.xml>; rel="license"`, built once.
    pub license_link: HeaderValue,
}

impl AppState {
    /// State for `settings`, reachable at `public_url`, over `stores` (loads the article catalog).
    pub async fn new(
        settings: Settings,
        public_url: String,
        stores: Stores,
    ) -> Result<Self, BuildError> {
        let openapi = Bytes::from(
            serde_json::to_vec(&crate::openapi::document(&public_url, &settings.payment))
                .map_err(BuildError::OpenApi)?,
        );
        let settler = licensing::payment::settler(&settings)?;
        let settlements = Arc::new(SettlementLog::new(stores.settlements.clone()));
        let payment_store = stores.payments.clone();
        let licensing = stores.licensing.clone();
        let articles = ArticleCatalog::load(
            &*licensing,
            &public_url,
            settings.default_terms.clone(),
            licensing::payment::ArticlePricing::new(settings.payment.clone(), settings.pay_to),
        )
        .await
        .map_err(|e| BuildError::Registry(format!("article catalog: {e}")))?;
        let example_article = articles
            .list()
            .first()
            .map_or_else(|| "an-article-id".to_owned(), |a| a.id.clone());
        let payments = licensing::payment::x402_layer(
            &settings,
            &public_url,
            settler,
            settlements.clone(),
            payment_store.clone(),
            stores.licensing.clone(),
            &example_article,
        )?;
        let minter = match (&settings.onchain, settings.license_token) {
            (Some(onchain), Some(contract)) => Some(Arc::new(licensing::minter::Minter::new(
                onchain.clone(),
                contract,
                licensing.clone(),
            ))),
            _ => None,
        };
        Ok(Self {
            license_link: handlers::license_link(&public_url),
            minter,
            bots: licensing::bot_auth::BotVerifier::new(settings.bot_auth.clone(), &public_url),
            articles,
            payments,
            payment_store,
            settlements,
            licensing,
            openapi_etag: crate::web::conditional::body_etag(
                &openapi,
                Some(&HeaderValue::from_static("application/json")),
            ),
            openapi,
            metrics: Arc::default(),
            interest: Default::default(),
            connections: Default::default(),
            settings,
            public_url,
            stores,
        })
    }

    /// `verify-only`, or the facilitator in use.
    pub fn settlement_mode(&self) -> String {
        if let Some(onchain) = &self.settings.onchain {
            return format!("on chain, relayer {}", onchain.relayer());
        }
        match &self.settings.facilitator_url {
            Some(url) => format!("facilitator {url}"),
            None => {
                "verify-only (signatures checked locally, nothing submitted on chain)".to_owned()
            }
        }
    }
}

/// Why the app could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The x402 layer refused its configuration.
    #[error("payment layer: {0}")]
    Payment(String),
    /// The registry could not be set up.
    #[error("registry: {0}")]
    Registry(String),
    /// The OpenAPI document could not be serialised.
    #[error("OpenAPI document: {0}")]
    OpenApi(#[source] serde_json::Error),
}

/// The whole application as one service: the routes, wrapped once in the layers every request goes through.
/// Cloned once per connection; [`crate::serve::serve`] serves it, and it answers `oneshot` in tests.
pub type App = BoxCloneSyncService<Request, Response, Infallible>;

/// Build the whole application: interface A, interface B, operations endpoints, and the common layers.
pub fn build_router(state: Arc<AppState>) -> Result<App, BuildError> {
    // The paid route's layers wrap GET (and HEAD) only, so any other method is the router's 405 before an
    // article is looked up or a payment is asked for or taken. One stack, boxed once: as `route_layer`s
    // each layer would be a boxed route of its own, and axum clones a route's stack per request.
    let paid_article = get_service(
        ServiceBuilder::new()
            .layer(middleware::from_fn_with_state(state.clone(), paid_article))
            .layer(state.payments.clone())
            .service(handlers::get_article.with_state(state.clone())),
    );
    let llms_txt = get(handlers::serve_llms_txt).route_layer(middleware::from_fn_with_state(
        state.clone(),
        licensing::bot_auth::identify,
    ));

    let app = Router::new()
        // Interface A
        .route(
            "/x402Article/list",
            get(handlers::list_articles)
                .route_layer(middleware::from_fn(crate::web::conditional::etag)),
        )
        .route("/x402Article", paid_article)
        .route("/serveLlmsTxt", llms_txt.clone())
        // The same text and the same interest count at the conventional path.
        .route("/llms.txt", llms_txt)
        // License terms for machines: RSL 1.0, and robots.txt pointing at it.
        .route("/license.xml", get(handlers::license_xml))
        .route("/robots.txt", get(handlers::robots_txt))
        .route("/operator/licensing", get(handlers::licensing_view))
        .route("/", get(crate::licensing::landing::landing))
        .route("/assets/site.css", get(crate::web::pages::stylesheet))
        .route("/favicon.ico", get(crate::web::pages::favicon))
        .route("/receipts/signer", get(handlers::receipt_signer))
        .route(
            "/receipts/{token_id}",
            get(handlers::receipt_json)
                .route_layer(middleware::from_fn(crate::web::conditional::etag)),
        )
        .route(
            "/receipts/{token_id}/certificate",
            get(handlers::receipt_certificate)
                .route_layer(middleware::from_fn(crate::web::conditional::etag)),
        )
        .route(
            "/openapi.json",
            get(openapi_json).route_layer(middleware::from_fn(crate::web::conditional::etag)),
        )
        // Operations
        .route("/operator/llms-txt", get(handlers::llms_txt_stats))
        .route("/operator/settlements", get(handlers::settlements))
        // The facilitator's discovery listing (x402 bazaar): public, unlike verify/settle.
        .route(
            "/facilitator/discovery/resources",
            get(crate::discovery::list),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .with_state(state.clone())
        // Swagger UI for /openapi.json (its files are compiled in: no CDN, works offline).
        .merge(
            utoipa_swagger_ui::SwaggerUi::new("/docs")
                .config(utoipa_swagger_ui::Config::from("/openapi.json")),
        );
    // Interface B: `/api/v3/assets/`, its signed media URLs and verification pages.
    // The x402 facilitator API for other services: a second door into the paid route's payment engine (one
    // store, one settler: an authorization settles once whichever door it comes through).
    let app = app.merge(crate::facilitator::router(
        state.payments.engine(),
        state.settings.facilitator.clone(),
        Arc::new(crate::discovery::Catalogue::new(
            state.stores.settlements.clone(),
        )),
    ));
    let app = app.merge(crate::registry::router(
        state.stores.assets.clone(),
        registry_config(&state),
    ));

    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::HEAD, Method::POST, Method::OPTIONS])
        .allow_headers(Any)
        .expose_headers([
            header::HeaderName::from_static("payment-required"),
            header::HeaderName::from_static("payment-response"),
            header::HeaderName::from_static("x-payment-response"),
            header::HeaderName::from_static("x-payment-required"),
        ])
        .max_age(Duration::from_secs(600))
        // Every CORS answer is the same whatever the request (`*` origin and headers, a fixed method
        // list), so it adds no `Vary`: the collection's `Vary` stays exactly `Accept`.
        .vary(Vec::<header::HeaderName>::new());

    // The layers every request goes through wrap the router once, outside it. Given to `Router::layer`
    // they would wrap each route, and axum clones a route's whole boxed stack per request (a heap
    // allocation per layer and level: 16% of a 402's CPU with these, perf in
    // docs/bench/reference-server-licensing.md). The request count is the innermost, where a CORS
    // preflight answered by `CorsLayer` never reaches it.
    let counted = CountRequestsLayer::new(state.metrics.clone()).layer(app.fallback(not_found));
    let service = ServiceBuilder::new()
        // Outermost: every request has an id (the caller's `x-request-id`, or a new UUID) before it is
        // logged, and every response carries it back.
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(PropagateRequestIdLayer::x_request_id())
        // Always in the stack, whatever the log level: besides the access line (INFO), it logs every 5xx
        // answer at ERROR (`tower_http::trace::on_failure`), which `RUST_LOG=warn` keeps.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(access_span)
                .on_response(access_log),
        )
        .layer(PlainOptionsLayer::new(counted.clone()))
        // JSON and HTML answers of 1 KiB or more, compressed when the client accepts it (listing pages come
        // compressed from their cache, and media files are not compressed again). zstd and gzip only: with
        // tower-http's `compression-br` every response body carries Brotli's encoder state inline (5.8 KB
        // against 328 bytes), copied about three times per answer (docs/interfaces.md, "Compression").
        .layer(
            CompressionLayer::new().compress_when(
                SizeAbove::new(1024)
                    .and(NotForContentType::IMAGES)
                    .and(NotForContentType::const_new("video/"))
                    .and(NotForContentType::const_new("audio/"))
                    .and(NotForContentType::const_new("application/octet-stream")),
            ),
        )
        .layer(ErrorRequestIdLayer)
        .layer(cors)
        .service(counted)
        .map_response(IntoResponse::into_response);
    Ok(App::new(service))
}

/// The span every log line of a request is written in: its id, method, path, client address, user agent.
fn access_span(request: &http::Request<axum::body::Body>) -> tracing::Span {
    let header = |name: header::HeaderName| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let client = ClientAddr(
        request
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0),
    );
    let user_agent = header(header::USER_AGENT);
    let user_agent = &user_agent[..user_agent.floor_char_boundary(256)];
    tracing::info_span!(
        "request",
        request_id = header(header::HeaderName::from_static("x-request-id")),
        method = %request.method(),
        path = request.uri().path(),
        client = %client,
        user_agent,
    )
}

/// The client's address as a span field: written once, into the span's fields (not first into a `String`);
/// empty when the connection's address is unknown.
struct ClientAddr(Option<std::net::SocketAddr>);

impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(addr) => addr.fmt(f),
            None => Ok(()),
        }
    }
}

/// The access log line: status and latency in milliseconds (a number).
fn access_log(response: &Response, latency: Duration, _span: &tracing::Span) {
    tracing::info!(
        status = response.status().as_u16(),
        latency_ms = latency.as_secs_f64() * 1e3,
        "answered"
    );
}

/// `/x402Article`'s middleware, in front of the x402 layer, in this order: the crawler's signature
/// ([`licensing::bot_auth::verify_agent`]: 401 on a path that requires one), the article
/// ([`handlers::with_article`]: 400 or 404, never a 402), then the x402 layer and the handler with the
/// verified crawler as the task-local the settlement log reads; the license terms' `Link` on the answer.
/// One middleware rather than three: each `from_fn` boxes and clones the stack below it per request.
///
/// A paid request runs on its own task: hyper drops a request's future when the client disconnects, and
/// a payment settled before the handler must still get its receipt written (and a settlement in flight
/// must finish rather than be abandoned half-way). A request without a payment header (a 402, a 400, a
/// 404) has nothing to finish and runs inline: no task spawn on the most common request.
async fn paid_article(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let paying = [
        x402_tower::header::PAYMENT_SIGNATURE,
        x402_tower::header::X_PAYMENT,
    ]
    .iter()
    .any(|h| request.headers().contains_key(h));
    let gate = async move {
        let (request, agent) = match licensing::bot_auth::verify_agent(&state, request).await {
            Ok(verified) => verified,
            Err(refused) => return refused,
        };
        let request = match handlers::with_article(&state, request) {
            Ok(request) => request,
            Err(refused) => return refused.into_response(),
        };
        let response = licensing::bot_auth::in_agent_scope(agent, next.run(request)).await;
        handlers::with_license_link(&state, response)
    };
    if !paying {
        return gate.await;
    }
    match tokio::spawn(gate).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "paid request task failed");
            crate::web::error::ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the request failed",
            )
            .into_response()
        }
    }
}

/// The registry's configuration, from the server's settings.
fn registry_config(state: &AppState) -> RegistryConfig {
    let s = &state.settings;
    let media = s.media_dir.clone().unwrap_or_else(|| crate::media_dir(s));
    let mut cfg = RegistryConfig::new(state.public_url.clone(), media);
    cfg.api_token = s.api_token.clone();
    if let Some(key) = &s.url_signing_key {
        cfg.url_signing_key = key.clone();
    }
    cfg.url_ttl = s.url_ttl;
    cfg
}

async fn not_found() -> Response {
    crate::web::error::ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        .into_response()
}

/// `GET /readyz`: ready to take traffic (the database answers, settlement is configured); 503 otherwise.
/// `/healthz` says the process is alive and its database reachable; a load balancer uses either.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let database = state.stores.backend.ping().await;
    let body = serde_json::json!({
        "status": if database.is_ok() { "ready" } else { "not ready" },
        "database": match &database {
            Ok(()) => format!("{} ok", state.stores.backend.kind()),
            Err(e) => format!("{}: {e}", state.stores.backend.kind()),
        },
        "settlement": state.settlement_mode(),
    });
    let status = if database.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// `GET /version`: what is running.
async fn version() -> Response {
    axum::Json(serde_json::json!({
        "name": env!("CARGO_PKG_NAME"),
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("REFERENCE_SERVER_GIT_COMMIT").unwrap_or("unknown"),
        "x402_tower": x402_tower::VERSION,
        "rustc": option_env!("REFERENCE_SERVER_RUSTC").unwrap_or("unknown"),
    }))
    .into_response()
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.stores.backend.ping().await {
        Ok(_) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"status": "ok"})),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(serde_json::json!({"status": "database unavailable"})),
            )
                .into_response()
        }
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = state.metrics.render(|| {
        licensing::payment::record_payment_metrics(&state.payments);
        state.settlements.record_metrics();
        state.interest.record_metrics();
        state.bots.record_metrics();
        if let Some(m) = &state.minter {
            m.record_metrics();
        }
        state.connections.record_metrics();
        crate::metrics::counter(
            "log_lines_dropped_total",
            "Log lines dropped because the log writer's queue was full (stderr not read fast enough).",
            crate::log_lines_dropped(),
        );
        state.stores.backend.record_metrics();
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

async fn openapi_json(State(state): State<Arc<AppState>>) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, state.openapi_etag.clone()),
        ],
        state.openapi.clone(),
    )
        .into_response()
}

#[cfg(test)]
mod compression_body {
    /// Every answer's body passes through tower-http's compression layer and is moved by value through
    /// the layers outside it. With `compression-br` it carries Brotli's encoder state inline (5.8 KB);
    /// without, 328 bytes (docs/interfaces.md, "Compression").
    #[test]
    fn stays_small() {
        let size =
            std::mem::size_of::<tower_http::compression::CompressionBody<axum::body::Body>>();
        assert!(
            size <= 1024,
            "{size} bytes: was compression-br enabled again?"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The access line's span says who asked: the connection's address, or nothing when it is unknown.
    #[test]
    fn the_access_line_names_the_client_address() {
        let request = |addr: Option<&str>| {
            let mut request = http::Request::get("/x402Article?articleId=a")
                .header(header::USER_AGENT, "crawler/1")
                .header("x-request-id", "r-1")
                .body(axum::body::Body::empty())
                .unwrap();
            if let Some(addr) = addr {
                request.extensions_mut().insert(axum::extract::ConnectInfo(
                    addr.parse::<std::net::SocketAddr>().unwrap(),
                ));
            }
            request
        };
        let lines = crate::log_lines::tests::captured(|| {
            for addr in [Some("127.0.0.1:4242"), Some("[::1]:80"), None] {
                let response = Response::new(axum::body::Body::empty());
                access_span(&request(addr)).in_scope(|| {
                    access_log(&response, Duration::from_millis(2), &tracing::Span::none())
                });
            }
        });
        let clients: Vec<&str> = lines
            .iter()
            .map(|l| l["span"]["client"].as_str().unwrap())
            .collect();
        assert_eq!(clients, ["127.0.0.1:4242", "[::1]:80", ""]);
        let span = &lines[0]["span"];
        assert_eq!(span["method"], "GET");
        assert_eq!(span["path"], "/x402Article");
        assert_eq!(span["user_agent"], "crawler/1");
        assert_eq!(span["request_id"], "r-1");
        assert_eq!(lines[0]["fields"]["status"], 200);
    }
}
