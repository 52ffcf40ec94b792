//! The operations endpoints (`/healthz`, `/readyz`, `/version`, `/metrics`, `/openapi.json`) and the
//! server-wide state they read ([`Ops`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;

use super::serve::ConnectionStats;
use crate::licensing::Licensing;
use crate::metrics::Metrics;
use crate::store::Stores;
use crate::web::conditional;

/// What the operations endpoints read: the stores (their health), the counters, interface A (its counters
/// and settlement mode) and the OpenAPI document.
#[derive(Debug)]
pub struct Ops {
    /// The database's stores.
    pub stores: Stores,
    /// Server counters.
    pub metrics: Arc<Metrics>,
    /// The server loop's connection counters.
    pub connections: Arc<ConnectionStats>,
    /// Interface A.
    pub licensing: Arc<Licensing>,
    /// The OpenAPI document, serialised once.
    pub openapi: Bytes,
    /// Its ETag, computed once.
    pub openapi_etag: HeaderValue,
}

/// The operations routes, and the stylesheet and favicon every page links.
pub fn router(ops: Arc<Ops>) -> Router {
    Router::new()
        .route(
            "/openapi.json",
            get(openapi_json).route_layer(middleware::from_fn(conditional::etag)),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .route("/assets/site.css", get(crate::web::pages::stylesheet))
        .route(
            "/assets/browsable.js",
            get(crate::web::pages::browsable_script),
        )
        .route("/favicon.ico", get(crate::web::pages::favicon))
        .with_state(ops)
}

/// `GET /readyz`: ready to take traffic (the database answers, settlement is configured); 503 otherwise.
/// `/healthz` says the process is alive and its database reachable; a load balancer uses either.
pub async fn readyz(State(state): State<Arc<Ops>>) -> Response {
    let database = state.stores.backend.ping().await;
    let body = serde_json::json!({
        "status": if database.is_ok() { "ready" } else { "not ready" },
        "database": match &database {
            Ok(()) => format!("{} ok", state.stores.backend.kind()),
            Err(e) => format!("{}: {e}", state.stores.backend.kind()),
        },
        "settlement": state.licensing.settlement_mode(),
    });
    let status = if database.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// `GET /version`: what is running.
pub async fn version() -> Response {
    axum::Json(serde_json::json!({
        "name": env!("CARGO_PKG_NAME"),
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("REFERENCE_SERVER_GIT_COMMIT").unwrap_or("unknown"),
        "x402_tower": x402_tower::VERSION,
        "rustc": option_env!("REFERENCE_SERVER_RUSTC").unwrap_or("unknown"),
    }))
    .into_response()
}

/// `GET /healthz`: the process is alive and its database answers.
pub async fn healthz(State(state): State<Arc<Ops>>) -> Response {
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

/// `GET /metrics`: every counter, in Prometheus' text format.
pub async fn metrics(State(state): State<Arc<Ops>>) -> Response {
    let text = state.metrics.render(|| {
        state.licensing.record_metrics();
        state.connections.record_metrics();
        crate::metrics::counter(
            "log_lines_dropped_total",
            "Log lines dropped because the log writer's queue was full (stderr not read fast enough).",
            super::log_lines_dropped(),
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

/// `GET /openapi.json`: the OpenAPI document of both interfaces, serialised once.
pub async fn openapi_json(State(state): State<Arc<Ops>>) -> Response {
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
