//! Licensing terms for machines: llms.txt, the RSL document, robots.txt.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::articles::{ArticleQuery, MAX_ARTICLE_ID_LEN};
use crate::licensing::Licensing;
use crate::web::error::{ApiError, Problem};

/// `GET /serveLlmsTxt`: the licensing instructions; each call is recorded as interest in licensing.
#[utoipa::path(
    get,
    path = "/serveLlmsTxt",
    tag = "licensing",
    operation_id = "serveLlmsTxt",
    summary = "Licensing instructions for machines (llms.txt)",
    description = "Each request is recorded as interest in licensing (client address and user agent).",
    responses((status = 200, description = "Plain-text instructions.", body = String, content_type = "text/plain")),
)]
pub async fn serve_llms_txt(
    State(state): State<Arc<Licensing>>,
    request: Request,
) -> Result<Response, ApiError> {
    state.interest.record(
        time::OffsetDateTime::now_utc(),
        &request
            .headers()
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
            .unwrap_or_default(),
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
        request
            .extensions()
            .get::<crate::licensing::bot_auth::VerifiedAgent>()
            .map(|a| a.agent.as_str()),
    );
    let articles = state.articles.list();
    let text = crate::licensing::llms_txt::render(
        &state.public_url,
        &state.settings.payment,
        &state.settings.pay_to.to_checksum(None),
        &articles,
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// `GET /license.xml[?articleId=]`: the RSL 1.0 document of the catalog, or of one article (the `terms` URL
/// of its 402).
#[utoipa::path(
    get,
    path = "/license.xml",
    tag = "licensing",
    operation_id = "getLicenseTerms",
    summary = "License terms for machines (RSL 1.0)",
    params(("articleId" = Option<String>, Query, description = "One article's terms only.")),
    responses(
        (status = 200, description = "The RSL document.", body = String, content_type = "application/rsl+xml"),
        (status = 404, description = "No published article has this id.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn license_xml(
    State(state): State<Arc<Licensing>>,
    query: Result<Query<ArticleQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let articles = match query.article_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => vec![state.articles.published(id).ok_or_else(|| {
            ApiError::not_found(format!(
                "no published article has id {:?}",
                id.chars().take(MAX_ARTICLE_ID_LEN).collect::<String>()
            ))
        })?],
        None => state.articles.list(),
    };
    let contents: Vec<_> = articles
        .iter()
        .map(|a| crate::licensing::rsl::rsl_content(&state.public_url, &a.id, &a.licenses))
        .collect();
    Ok((
        [(header::CONTENT_TYPE, crate::domain::license::RSL_MEDIA_TYPE)],
        crate::licensing::rsl::rsl_document(&state.public_url, &contents),
    )
        .into_response())
}

/// `GET /robots.txt`: crawling allowed; the `License:` line points at the RSL terms.
pub async fn robots_txt(State(state): State<Arc<Licensing>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "# Content on this site is licensed per article over x402 (HTTP 402, USDC).\n\
             # Machine-readable terms (RSL 1.0): what each license permits, prohibits and costs.\n\
             License: {url}/license.xml\n\n\
             User-agent: *\n\
             Allow: /\n",
            url = state.public_url
        ),
    )
        .into_response()
}
