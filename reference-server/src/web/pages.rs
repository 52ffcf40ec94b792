//! The HTML plumbing every part's pages share: [`render`] an askama template, the one stylesheet every page
//! links, the favicon. Pages are askama templates under `templates/` (one layout, `base.html`; escaping by
//! default), so no page escapes by hand.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// The stylesheet of every page (`/assets/site.css`).
pub const STYLESHEET: &str = include_str!("../../assets/site.css");

/// The browsable API's script (`/assets/browsable.js`): its OPTIONS button and POST form.
pub const BROWSABLE_SCRIPT: &str = include_str!("../../assets/browsable.js");

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
    asset("text/css; charset=utf-8", STYLESHEET)
}

/// `GET /assets/browsable.js`.
pub async fn browsable_script() -> Response {
    asset("text/javascript; charset=utf-8", BROWSABLE_SCRIPT)
}

/// A static asset, cached for an hour.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            ),
        ],
        body,
    )
        .into_response()
}

/// The site's error page: an error answer (a problem document, or the registry's `{"detail"}` or
/// field map) shown to a person, with the same status.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    status: u16,
    title: &'a str,
    heading: &'a str,
    detail: String,
    /// A registry validation error's messages, per field.
    fields: Vec<(String, String)>,
    request_id: &'a str,
}

/// `status`'s error page from the members of its JSON answer (`detail`; or per-field messages).
pub fn error_page(
    status: StatusCode,
    answer: &serde_json::Map<String, serde_json::Value>,
    request_id: Option<&str>,
) -> Response {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    };
    let detail = answer.get("detail").map(text);
    let fields = if detail.is_none() {
        answer
            .iter()
            .filter(|(k, _)| k.as_str() != "request_id")
            .map(|(k, v)| (k.clone(), text(v)))
            .collect()
    } else {
        Vec::new()
    };
    let heading = match status {
        StatusCode::NOT_FOUND => "Nothing here",
        StatusCode::BAD_REQUEST => "This request cannot be answered",
        StatusCode::UNAUTHORIZED => "A token is needed",
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::METHOD_NOT_ALLOWED => "Not with this method",
        s if s.is_server_error() => "Something failed on our side",
        _ => status.canonical_reason().unwrap_or("Error"),
    };
    let page = ErrorPage {
        status: status.as_u16(),
        title: status.canonical_reason().unwrap_or("Error"),
        heading,
        detail: detail.unwrap_or_else(|| "Some fields are not valid:".to_owned()),
        fields,
        request_id: request_id.unwrap_or(""),
    };
    let mut response = render(&page);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
