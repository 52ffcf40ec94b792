//! The server's own HTML pages that are not part of an interface: the landing page and the one stylesheet
//! every page links. Pages are askama templates under `templates/` (one layout, `base.html`; escaping by
//! default), so no page escapes by hand.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::app::AppState;

/// The stylesheet of every page (`/assets/site.css`).
pub const STYLESHEET: &str = include_str!("../assets/site.css");

/// An article on the landing page.
struct Listed {
    id: String,
    title: String,
    author: String,
    price: String,
}

#[derive(Template)]
#[template(path = "landing.html")]
struct Landing {
    articles: Vec<Listed>,
    settlement: String,
    network: String,
}

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

/// `GET /`: what this server is, with links to everything.
pub async fn landing(State(state): State<Arc<AppState>>) -> Response {
    let articles = state
        .articles
        .list()
        .iter()
        .map(|a| Listed {
            id: a.id.clone(),
            title: a.title.clone(),
            author: a.author_name.clone(),
            price: crate::licensing::usdc_display(a.price_atomic),
        })
        .collect();
    render(&Landing {
        articles,
        settlement: state.settlement_mode(),
        network: state.settings.payment.caip2().to_owned(),
    })
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
