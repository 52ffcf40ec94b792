//! The articles in x402 `bazaar` terms: the declaration each article's 402 carries, and the articles as
//! items of the facilitator's discovery listing.

use std::sync::Arc;

use serde_json::{Value, json};
use x402_tower::extensions::bazaar::{Discovery, DiscoveryResource};
use x402_tower::extensions::{Declaration, Extension, Offered};

use super::articles::ArticleCatalog;
use crate::domain::Article;
use crate::licensing::Licensing;

/// `article`'s discovery declaration: how to ask for it (`GET` with its `articleId`) and an example of the
/// paid answer (its title and author; the content and receipt abridged).
pub fn article_discovery(article: &Article) -> Discovery {
    Discovery::query(http::Method::GET)
        .query_param(
            "articleId",
            &article.id,
            "An article id from /x402Article/list",
        )
        .output_example(json!({
            "article": {"title": article.title, "content": "…", "author_name": article.author_name},
            "receipt": {
                "nft": {"tokenId": "…", "verifyUrl": "…"},
                "certificate": {"url": "…"},
                "signed": {"format": "eip712", "payload": {"version": 1}, "signature": "0x…"}
            }
        }))
}

/// The `bazaar` declaration of each article's 402: that article's [`article_discovery`], made once per
/// catalog load (`ForSale::bazaar`) and found from the 402's resource URL (`?articleId=`). A resource that
/// names no published article declares nothing.
#[derive(Debug)]
pub(crate) struct ArticleDeclarations(pub(crate) Arc<ArticleCatalog>);

impl Extension for ArticleDeclarations {
    fn key(&self) -> &str {
        x402_tower::extensions::bazaar::KEY
    }

    fn declare(&self, offered: &Offered<'_>) -> Option<Declaration> {
        let id = super::offers::article_id_of(offered.resource_url())?;
        Some(Declaration::lasting(self.0.for_sale(&id)?.bazaar))
    }
}

/// The articles as discovery items (`GET /facilitator/discovery/resources` lists them first).
pub fn resources(state: &Licensing) -> Vec<DiscoveryResource> {
    let changed_at = state.articles.changed_at();
    state
        .articles
        .list()
        .iter()
        .filter_map(|a| {
            // One offer per license, as the article's 402 (the first is its catalog price).
            let offers = super::offers::article_offers(
                &state.settings.payment,
                state.settings.pay_to,
                a,
                super::offers::LicenseChoice(None),
            );
            let offer = offers.first()?;
            let id: String = form_urlencoded::byte_serialize(a.id.as_bytes()).collect();
            let mut metadata = serde_json::Map::new();
            metadata.insert(
                "bazaar".into(),
                article_discovery(a).declaration()["info"].clone(),
            );
            metadata.insert("description".into(), json!(offer.description));
            metadata.insert("mimeType".into(), json!(offer.mime_type));
            Some(DiscoveryResource {
                resource: format!("{}/x402Article?articleId={id}", state.public_url),
                kind: "http".into(),
                x402_version: 2,
                accepts: offers
                    .iter()
                    .map(|o| serde_json::to_value(o.requirements_v2()).unwrap_or(Value::Null))
                    .collect(),
                last_updated: json!(changed_at),
                metadata,
            })
        })
        .collect()
}
