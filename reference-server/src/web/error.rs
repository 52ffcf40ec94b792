//! The error answer of interface A, the facilitator and the operator endpoints: [`ApiError`], answered as an
//! RFC 9457 problem document ([`Problem`], `application/problem+json`). Interface B (the registry) answers
//! Django REST Framework's `{"detail": ...}` instead (`registry::handlers::error`). A browser gets either
//! as an HTML page ([`ErrorAnswersLayer`](super::layers::ErrorAnswersLayer)).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::store::StoreError;

/// The media type of a [`Problem`].
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error answered as a [`Problem`]: a status, a stable code and what went wrong.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: String,
}

impl ApiError {
    /// An error with a status, a stable machine-readable code and a human explanation.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }

    /// A 404 with the code `not_found`.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", detail)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "storage error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "storage_error",
            "the database failed; try again",
        )
    }
}

/// An RFC 9457 problem document: every error of interface A, the facilitator and the operator endpoints.
///
/// `type` is `about:blank` (the problem is what the status says), `title` the status's phrase; the
/// members a program reads are `status` and `code`, a stable snake_case name of the problem
/// (`not_found`, `missing_article_id`, `unauthorized`...); `detail` says what went wrong for a person.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// Always `about:blank`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// The HTTP status's phrase (`Not Found`).
    title: &'static str,
    /// The HTTP status.
    status: u16,
    /// What went wrong, for people.
    detail: String,
    /// A stable machine-readable code.
    code: &'static str,
    /// The request's `x-request-id`, to quote when reporting the error (added on the way out).
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Problem {
            kind: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: self.detail,
            code: self.code,
            request_id: None,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }
}
