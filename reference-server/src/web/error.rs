//! The JSON error of interface A and the operator endpoints: [`ApiError`], answered as [`ErrorBody`].

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::store::StoreError;

/// An error answered as JSON `{"error": ..., "detail": ...}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    error: &'static str,
    detail: String,
}

impl ApiError {
    /// An error with a status, a stable machine-readable code and a human explanation.
    pub fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            error,
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

/// The JSON body of an [`ApiError`] (interface A's error shape).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A stable machine-readable code (`not_found`, `bad_request`, `storage_error`...).
    error: &'static str,
    /// What went wrong, for people.
    detail: String,
    /// The request's `x-request-id`, to quote when reporting the error (added on the way out).
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.error,
            detail: self.detail,
            request_id: None,
        };
        (self.status, Json(body)).into_response()
    }
}
