//! The HTML plumbing every part's pages share: [`render`] an askama template, the one stylesheet every page
//! links, the favicon. Pages are askama templates under `templates/` (one layout, `base.html`; escaping by
//! default), so no page escapes by hand.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// The stylesheet of every page (`/assets/site.css`).
pub const STYLESHEET: &str = include_str!("../../assets/site.css");

/// Renders a template, or a plain 500 if it cannot (it cannot fail on the data these pages hold).
pub fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "page unavailable").into_response()
        }
    }
}

/// `GET /favicon.ico`: no icon (204), so a browser showing a JSON answer logs no 404.
pub async fn favicon() -> Response {
    (
        StatusCode::NO_CONTENT,
        [(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=86400"),
        )],
    )
        .into_response()
}

/// `GET /assets/site.css`.
pub async fn stylesheet() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/css; charset=utf-8"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            ),
        ],
        STYLESHEET,
    )
        .into_response()
}
