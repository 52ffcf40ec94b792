//! The application: each part's state and router, merged, wrapped once in the layers every request goes
//! through.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;
use tower::{Layer as _, ServiceBuilder};
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{NotForContentType, Predicate as _, SizeAbove};
use tower_http::cors::{Any, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use super::ops::{self, Ops};
use crate::config::Settings;
use crate::licensing::{self, Licensing};
use crate::metrics::Metrics;
use crate::registry::RegistryConfig;
use crate::store::Stores;
use crate::web::layers::{CountRequestsLayer, ErrorAnswersLayer, PlainOptionsLayer};
use crate::{facilitator, registry};

/// The whole application as one service: the routes, wrapped once in the layers every request goes through.
/// Cloned once per connection; [`super::serve::serve`] serves it, and it answers `oneshot` in tests.
pub type App = BoxCloneSyncService<Request, Response, Infallible>;

/// Why the app could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Interface A could not be built.
    #[error(transparent)]
    Licensing(#[from] licensing::BuildError),
    /// The OpenAPI document could not be serialised.
    #[error("OpenAPI document: {0}")]
    OpenApi(#[source] serde_json::Error),
}

/// The parts of a running server, built from `settings` over `stores` for clients at `public_url`.
#[derive(Debug)]
pub struct Parts {
    /// Interface A.
    pub licensing: Arc<Licensing>,
    /// The operations endpoints' state.
    pub ops: Arc<Ops>,
    /// The registry's configuration.
    pub registry: RegistryConfig,
    /// The facilitator API's configuration.
    pub facilitator: crate::facilitator::FacilitatorConfig,
    /// The x402 layer of the registry's paid export (`upto`, over interface A's engine), when offered.
    pub export: Option<x402_tower::X402Layer>,
}

impl Parts {
    /// Builds every part's state.
    pub async fn new(
        settings: &Settings,
        public_url: String,
        stores: Stores,
    ) -> Result<Self, BuildError> {
        let metrics = Arc::new(Metrics::default());
        let (settler, onchain) = super::settler::settler(&settings.licensing)?;
        let licensing = Arc::new(
            Licensing::new(
                settings.licensing.clone(),
                public_url.clone(),
                &stores,
                metrics.clone(),
                settler,
                onchain,
            )
            .await?,
        );
        let openapi = Bytes::from(
            serde_json::to_vec(&super::openapi::document(
                &public_url,
                &settings.licensing.payment,
            ))
            .map_err(BuildError::OpenApi)?,
        );
        let ops = Arc::new(Ops {
            openapi_etag: crate::web::conditional::body_etag(
                &openapi,
                Some(&HeaderValue::from_static("application/json")),
            ),
            openapi,
            metrics,
            connections: Default::default(),
            licensing: licensing.clone(),
            stores,
        });
        let export = export_layer(settings, &public_url, &licensing)?;
        Ok(Self {
            export,
            registry: registry_config(settings, public_url),
            facilitator: settings.facilitator.clone(),
            licensing,
            ops,
        })
    }
}

/// Builds the whole application: interface A, interface B, the facilitator API, the operations endpoints,
/// and the common layers.
pub fn build_router(parts: &Parts) -> App {
    let licensing = &parts.licensing;
    let stores = &parts.ops.stores;
    // The facilitator's discovery listing (x402 bazaar): public, unlike verify/settle; the articles first.
    let own_resources = {
        let licensing = licensing.clone();
        Arc::new(move || licensing::discovery::resources(&licensing))
    };
    let app = Router::new()
        .merge(licensing::router(licensing.clone()))
        .merge(ops::router(parts.ops.clone()))
        // Swagger UI for /openapi.json (its files are compiled in: no CDN, works offline).
        .merge(
            utoipa_swagger_ui::SwaggerUi::new("/docs")
                .config(utoipa_swagger_ui::Config::from("/openapi.json")),
        )
        // The x402 facilitator API for other services: a second door into the paid route's payment engine
        // (one store, one settler: an authorization settles once whichever door it comes through).
        .merge(facilitator::router(
            licensing.payments.engine(),
            parts.facilitator.clone(),
            Arc::new(facilitator::discovery::Catalogue::new(
                stores.settlements.clone(),
            )),
        ))
        .merge(facilitator::discovery::router(
            own_resources,
            stores.settlements.clone(),
        ))
        // Interface B: `/api/v3/assets/`, its signed media URLs and verification pages.
        .merge(registry::router(
            stores.assets.clone(),
            parts.registry.clone(),
            parts.export.clone(),
        ));
    let metrics = parts.ops.metrics.clone();

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
    let counted = CountRequestsLayer::new(metrics).layer(app.fallback(not_found));
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
        .layer(ErrorAnswersLayer)
        .layer(cors)
        .service(counted)
        .map_response(IntoResponse::into_response);
    App::new(service)
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

/// The registry's configuration, from the server's settings.
fn registry_config(s: &Settings, public_url: String) -> RegistryConfig {
    let media = s.media_dir.clone().unwrap_or_else(|| super::media_dir(s));
    let mut cfg = RegistryConfig::new(public_url, media);
    cfg.api_token = s.api_token.clone();
    if let Some(key) = &s.url_signing_key {
        cfg.url_signing_key = key.clone();
    }
    cfg.url_ttl = s.url_ttl;
    cfg.export_per_record = s.export_price;
    cfg
}

/// The x402 layer selling the registry's bulk export (`upto`: `limit` records at most, charged per record
/// returned), over interface A's payment engine (one store, one settler, one set of money rules). Not offered
/// when its price is 0.
fn export_layer(
    settings: &Settings,
    public_url: &str,
    licensing: &Licensing,
) -> Result<Option<x402_tower::X402Layer>, BuildError> {
    let payment = &settings.licensing;
    if settings.export_price == 0 {
        return Ok(None);
    }
    let prices = registry::export::ExportPricing {
        network: payment.payment.network.clone(),
        token: payment.payment.token.clone(),
        pay_to: payment.pay_to,
        per_record: settings.export_price,
        facilitator: payment.upto_facilitator.unwrap_or(payment.pay_to),
    }
    .prices(registry::PAGE_SIZE);
    let mut layer = x402_tower::X402Layer::builder(public_url.to_owned());
    if payment.onchain.is_some() {
        // The relayer applies a buyer's EIP-2612 permit for Permit2 in the settlement: no approval first.
        layer = layer.extension(std::sync::Arc::new(
            x402_tower::extensions::Fixed::eip2612_gas_sponsoring(),
        ));
    }
    layer
        .engine(licensing.payments.engine())
        .price_source(move |parts: &http::request::Parts| {
            std::future::ready(prices.decide(parts.uri.query()))
        })
        .build()
        .map(Some)
        .map_err(|e| BuildError::Licensing(licensing::BuildError::Payment(e.to_string())))
}

async fn not_found() -> Response {
    crate::web::error::ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
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
        let lines = crate::server::log_lines::tests::captured(|| {
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
