//! License terms for machines: the RSL 1.0 document (`/license.xml`, [`rsl_document`]), pointed at by
//! robots.txt, `Link` headers and llms.txt, and the x402 `terms` each article's 402 declares ([`terms_of`]).

use std::sync::Arc;

use askama::Template;
use x402_tower::extensions::terms::Terms;

use crate::domain::license::{License, version};

/// The URL of one article's RSL document (the `terms` of its 402).
pub fn terms_url(public_url: &str, article_id: &str) -> String {
    let id: String = form_urlencoded::byte_serialize(article_id.as_bytes()).collect();
    format!("{public_url}/license.xml?articleId={id}")
}

/// The x402 `terms` an article's 402 declares: its RSL document, with its version.
pub fn terms_of(public_url: &str, article_id: &str, licenses: &[License]) -> Arc<Terms> {
    Arc::new(Terms::uri(terms_url(public_url, article_id)).version(version(licenses)))
}

/// One `<content>` of the RSL document.
#[derive(Debug)]
pub struct RslContent {
    /// The article's URL (absolute).
    pub url: String,
    /// Its licenses.
    pub licenses: Vec<RslLicense>,
}

/// One `<license>` of a `<content>`.
#[derive(Debug)]
pub struct RslLicense {
    /// The license's id (an XML comment names it).
    pub id: String,
    /// Space-separated permitted usages ("" for none).
    pub permits: String,
    /// Space-separated prohibited usages.
    pub prohibits: String,
    /// Space-separated permitted user types.
    pub users: String,
    /// `0.05`.
    pub amount: String,
    /// The resource URL that sells this license over x402.
    pub buy_url: String,
}

/// The RSL 1.0 document (`/license.xml`).
#[derive(Debug, Template)]
#[template(path = "license.xml")]
pub struct RslDocument<'a> {
    /// One `<content>` per article.
    pub contents: &'a [RslContent],
    /// `<copyright>` contact.
    pub contact_url: &'a str,
}

/// The RSL `<content>` of one article.
pub fn rsl_content(public_url: &str, article_id: &str, licenses: &[License]) -> RslContent {
    let id: String = form_urlencoded::byte_serialize(article_id.as_bytes()).collect();
    let url = format!("{public_url}/x402Article?articleId={id}");
    RslContent {
        licenses: licenses
            .iter()
            .map(|l| RslLicense {
                id: l.id.clone(),
                permits: l.permits.join(" "),
                prohibits: l.prohibits.join(" "),
                users: l.users.join(" "),
                amount: super::usdc_display(l.price_atomic),
                buy_url: format!("{url}&license={}", l.id),
            })
            .collect(),
        url,
    }
}

/// The RSL document for `contents`.
pub fn rsl_document(public_url: &str, contents: &[RslContent]) -> String {
    RslDocument {
        contents,
        contact_url: public_url,
    }
    .render()
    .unwrap_or_default()
}
