//! The landing page (`GET /`): the catalog for people, with links to both interfaces.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::response::Response;

use crate::licensing::Licensing;
use crate::web::pages::render;

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

/// `GET /`: what this server is, with links to everything.
pub async fn landing(State(state): State<Arc<Licensing>>) -> Response {
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
