//! An x402 facilitator for other services: `POST /facilitator/verify`, `POST /facilitator/settle`,
//! `GET /facilitator/supported`, speaking the official facilitator API (`x402-protocol.md` part 6).
//!
//! A thin door into the same x402-tower [`PaymentEngine`] as the paid routes: the same checks
//! ([`PaymentEngine::facilitator_verify`], [`PaymentEngine::facilitator_settle`]), the same durable payment
//! records and the same settler, so **one authorization settles at most once whichever door it comes
//! through**: a payment settled here is refused at `/x402Article`, and the identical request sent to
//! `/settle` again is answered with the stored settlement.
//!
//! # Not a free relayer
//!
//! - Every endpoint requires `Authorization: Bearer <token>` (`--facilitator-token`,
//!   `REFERENCE_SERVER_FACILITATOR_TOKEN`); without a configured token the endpoints are off (404 with the
//!   reason) and the start-up banner says so. The official servers send it from their facilitator client's
//!   `createAuthHeaders` hook.
//! - A payment's `validBefore` is capped by the facilitator's own limit
//!   (`--facilitator-max-timeout-secs`, default 600 s, plus 120 s of clock skew), never by the caller's
//!   `maxTimeoutSeconds`.
//! - `--facilitator-pay-to` (repeatable) restricts the recipients it settles for.
//!
//! Answers are 200 with `isValid`/`success` false and the spec's error string for a bad payment, with the
//! settler's own words in `invalidMessage`/`errorMessage` when it refused (the token's revert, or the
//! transaction that cancelled the authorization) (`settlement_pending` with the transaction when the outcome is not known yet: send the same request
//! again); 400 for a body that is not a facilitator request; 401 without the token; 502 when the settler
//! cannot be reached; 503 when the payment store fails.
//!
//! ```no_run
//! use std::sync::Arc;
//! use reference_server::facilitator::discovery::Catalogue;
//! use reference_server::facilitator::{FacilitatorConfig, router};
//! use reference_server::store::Stores;
//! use x402_tower::{settle::VerifyOnlySettler, PaymentEngine};
//!
//! # async fn app(stores: Stores) {
//! let engine = Arc::new(PaymentEngine::builder().settler(Arc::new(VerifyOnlySettler)).build().unwrap());
//! let catalogue = Arc::new(Catalogue::new(stores.settlements.clone()));
//! let app: axum::Router = router(engine, FacilitatorConfig::with_token("s3cret"), catalogue);
//! # }
//! ```

use std::sync::Arc;

use crate::web::error::ApiError;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use x402_tower::PaymentEngine;
use x402_tower::engine::facilitator::{FacilitatorError, FacilitatorPolicy};
use x402_tower::extensions::bazaar::CatalogError;

pub mod discovery;

use discovery::{Catalogue, NotCatalogued};

/// Largest facilitator request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How the facilitator API is exposed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FacilitatorConfig {
    /// The bearer token callers must send; `None` turns the endpoints off.
    pub token: Option<String>,
    /// The facilitator's own limits.
    pub policy: FacilitatorPolicy,
}

impl FacilitatorConfig {
    /// Endpoints on, behind `token`, with the default policy.
    pub fn with_token(token: impl Into<String>) -> Self {
        FacilitatorConfig {
            token: Some(token.into()),
            policy: FacilitatorPolicy::default(),
        }
    }
}

struct Door {
    engine: Arc<PaymentEngine>,
    config: FacilitatorConfig,
    catalogue: Arc<Catalogue>,
}

/// The facilitator routes over `engine`; resources whose payments it settles are listed in `catalogue`
/// (x402 bazaar, [`discovery`]). Merge it into the server's router.
pub fn router(
    engine: Arc<PaymentEngine>,
    config: FacilitatorConfig,
    catalogue: Arc<Catalogue>,
) -> Router {
    if config.token.is_none() {
        return Router::new()
            .route("/facilitator/{*rest}", axum::routing::any(disabled))
            .route("/facilitator", axum::routing::any(disabled));
    }
    let door = Arc::new(Door {
        engine,
        config,
        catalogue,
    });
    Router::new()
        .route("/facilitator/verify", post(verify))
        .route("/facilitator/settle", post(settle))
        .route("/facilitator/supported", get(supported))
        .route_layer(middleware::from_fn_with_state(door.clone(), authorize))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(door)
}

async fn disabled() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "facilitator_disabled",
        "the facilitator API is off: start the server with --facilitator-token (it requires \
         Authorization: Bearer <token>)",
    )
    .into_response()
}

async fn authorize(State(door): State<Arc<Door>>, request: Request, next: Next) -> Response {
    let allowed = door
        .config
        .token
        .as_deref()
        .is_some_and(|t| crate::web::auth::carries(request.headers(), "Bearer", t));
    if allowed {
        return next.run(request).await;
    }
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send the facilitator token as `Authorization: Bearer <token>`",
    )
    .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn failure(e: &FacilitatorError) -> Response {
    let status = match e {
        FacilitatorError::BadRequest(_) => StatusCode::BAD_REQUEST,
        FacilitatorError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    };
    let code = match e {
        FacilitatorError::BadRequest(_) => "invalid_request",
        FacilitatorError::Unavailable => "store_unavailable",
        _ => "settler_unavailable",
    };
    ApiError::new(status, code, e.to_string()).into_response()
}

/// The request body, read as bytes (capped by the router's body limit): the engine reads the payload and
/// requirements from the text, without building a JSON tree of what the client echoed.
type Body = Result<Bytes, axum::extract::rejection::BytesRejection>;

async fn verify(State(door): State<Arc<Door>>, body: Body) -> Response {
    let Ok(body) = body else {
        return failure(&FacilitatorError::BadRequest("body could not be read"));
    };
    match door
        .engine
        .facilitator_verify(&door.config.policy, &body)
        .await
    {
        Ok(r) => Json(r).into_response(),
        Err(e) => failure(&e),
    }
}

async fn settle(State(door): State<Arc<Door>>, body: Body) -> Response {
    let Ok(body) = body else {
        return failure(&FacilitatorError::BadRequest("body could not be read"));
    };
    match door
        .engine
        .facilitator_settle(&door.config.policy, &body)
        .await
    {
        Ok(r) => {
            if r.success {
                let now = crate::web::clock::unix_now();
                match door.catalogue.settled(&body, now).await {
                    Ok(()) => tracing::debug!("resource catalogued for discovery"),
                    Err(NotCatalogued::Shape(CatalogError::Absent)) => {}
                    Err(e) => tracing::info!(reason = %e, "resource not catalogued for discovery"),
                }
            }
            Json(r).into_response()
        }
        Err(e) => failure(&e),
    }
}

async fn supported(State(door): State<Arc<Door>>) -> Response {
    match door.engine.settler().supported().await {
        Ok(mut s) => {
            let bazaar = json!(x402_tower::extensions::bazaar::KEY);
            if !s.extensions.contains(&bazaar) {
                s.extensions.push(bazaar);
            }
            Json(s).into_response()
        }
        Err(e) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "settler_unavailable",
            e.to_string(),
        )
        .into_response(),
    }
}
