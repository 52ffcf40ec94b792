//! The articles in x402 `bazaar` terms: the declaration each article's 402 carries, and the articles as
//! items of the facilitator's discovery listing.

use serde_json::{Value, json};
use x402_tower::extensions::bazaar::{Discovery, DiscoveryResource};

use crate::licensing::Licensing;

/// The articles' discovery declaration, with `example_id` as the example `articleId`.
pub fn article_discovery(example_id: &str) -> Discovery {
    Discovery::query(http::Method::GET)
        .query_param(
            "articleId",
            example_id,
            "An article id from /x402Article/list",
        )
        .output_example(json!({
            "article": {"title": "How Newsrooms Prove a Photo Is Real", "content": "…", "author_name": "Amara Okafor"},
            "receipt": {
                "nft": {"tokenId": "4242…", "verifyUrl": "https://news.example/receipts/4242…"},
                "certificate": {"url": "https://news.example/receipts/4242…/certificate"},
                "signed": {"format": "eip712", "payload": {"version": 1}, "signature": "0x…"}
            }
        }))
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
            let offers = super::payment::article_offers(
                &state.settings.payment,
                state.settings.pay_to,
                a,
                super::payment::LicenseChoice(None),
            );
            let offer = offers.first()?;
            let id: String = form_urlencoded::byte_serialize(a.id.as_bytes()).collect();
            let mut metadata = serde_json::Map::new();
            metadata.insert(
                "bazaar".into(),
                article_discovery(&a.id).declaration()["info"].clone(),
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
