//! Conformance against the real DRF: bodies rendered by DRF 3.18's `LimitOffsetPagination` (Django's
//! `RequestFactory`, host `testserver`) for the numbers `1..=count`, compared byte for byte.
//! The vectors and their generator are in `tests/drf/` (see `generate.py` for how to regenerate).

use registry_pagination::{Page, PaginationLayer};
use serde_json::Value;

use crate::support::get;

#[tokio::test]
async fn bodies_match_drf_byte_for_byte() {
    let file: Value =
        serde_json::from_str(include_str!("../drf/vectors.json")).expect("vectors are JSON");
    let vectors = file["vectors"].as_array().expect("vector list");
    assert!(
        vectors.len() > 500,
        "the generator writes several hundred vectors"
    );
    let mut failures = Vec::new();
    for v in vectors {
        let path = v["path"].as_str().expect("path");
        let query = v["query"].as_str();
        let count = v["count"].as_u64().expect("count");
        let default = v["default_limit"].as_u64().expect("default");
        let max = v["max_limit"].as_u64();
        let layer = PaginationLayer::try_new("http://testserver")
            .expect("valid")
            .default_limit(default)
            .max_limit(max);
        let uri = match query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_owned(),
        };
        let page = Page::from_query(query, default, max);
        let expected_page = Page {
            limit: v["limit"].as_u64().expect("limit"),
            offset: v["offset"].as_u64().expect("offset"),
        };
        let seen = get(&layer, count, &uri).await;
        let expected = v["body"].as_str().expect("body");
        if page != expected_page || seen.body != expected.as_bytes() {
            failures.push(format!(
                "{uri} (count {count}, default {default}, max {max:?}):\n  page   {page:?} vs DRF {expected_page:?}\n  ours   {}\n  DRF    {expected}",
                String::from_utf8_lossy(&seen.body)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors differ:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}
