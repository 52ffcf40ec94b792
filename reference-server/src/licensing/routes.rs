//! Interface A's routes: [`router`].

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::handler::Handler as _;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, get_service};
use tower::ServiceBuilder;

use super::{Licensing, bot_auth, handlers, landing};
use crate::web::conditional;

/// Interface A: the catalog, the paid article, llms.txt, the license terms, receipts, the landing page and
/// the operator views of licensing. Merge it into the server's router.
pub fn router(state: Arc<Licensing>) -> Router {
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
        bot_auth::identify,
    ));
    Router::new()
        .route(
            "/x402Article/list",
            get(handlers::list_articles).route_layer(middleware::from_fn(conditional::etag)),
        )
        .route("/x402Article", paid_article)
        .route("/serveLlmsTxt", llms_txt.clone())
        // The same text and the same interest count at the conventional path.
        .route("/llms.txt", llms_txt)
        // License terms for machines: RSL 1.0, and robots.txt pointing at it.
        .route("/license.xml", get(handlers::license_xml))
        .route("/robots.txt", get(handlers::robots_txt))
        .route("/", get(landing::landing))
        .route("/receipts/signer", get(handlers::receipt_signer))
        .route(
            "/receipts/{token_id}",
            get(handlers::receipt_json).route_layer(middleware::from_fn(conditional::etag)),
        )
        .route(
            "/receipts/{token_id}/certificate",
            get(handlers::receipt_certificate).route_layer(middleware::from_fn(conditional::etag)),
        )
        // Operator views (the operator token).
        .route("/operator/licensing", get(handlers::licensing_view))
        .route("/operator/llms-txt", get(handlers::llms_txt_stats))
        .route("/operator/settlements", get(handlers::settlements))
        .with_state(state)
}

/// `/x402Article`'s middleware, in front of the x402 layer, in this order: the crawler's signature
/// ([`bot_auth::verify_agent`]: 401 on a path that requires one), the article
/// ([`handlers::with_article`]: 400 or 404, never a 402), then the x402 layer (which carries the verified
/// crawler to the settlement log with the payment) and the handler; the license terms' `Link` on the answer.
/// One middleware rather than three: each `from_fn` boxes and clones the stack below it per request.
///
/// A paid request runs on its own task: hyper drops a request's future when the client disconnects, and
/// a payment settled before the handler must still get its receipt written (and a settlement in flight
/// must finish rather than be abandoned half-way). A request without a payment header (a 402, a 400, a
/// 404) has nothing to finish and runs inline: no task spawn on the most common request.
async fn paid_article(
    State(state): State<Arc<Licensing>>,
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
        let (request, _) = match bot_auth::verify_agent(&state, request).await {
            Ok(verified) => verified,
            Err(refused) => return refused,
        };
        let request = match handlers::with_article(&state, request) {
            Ok(request) => request,
            Err(refused) => return refused.into_response(),
        };
        let response = next.run(request).await;
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
