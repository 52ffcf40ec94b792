//! Thin axum handlers of interface A, one file per group of routes.

pub mod articles;
pub mod operator;
pub mod receipts;
pub mod terms;

pub use articles::{
    MAX_ARTICLE_ID_LEN, get_article, license_link, list_articles, with_article, with_license_link,
};
pub use operator::{licensing_view, llms_txt_stats, settlements};
pub use receipts::{receipt_certificate, receipt_json, receipt_signer};
pub use terms::{license_xml, robots_txt, serve_llms_txt};
