//! Every row of pagination.md's table, DRF's own unit tests, and the query re-encoding cases.

use crate::support::{drf_test_layer, get, registry_layer};

const A: &str = "http://h/api/v3/assets/";

/// One row: `(query, results length, first result, next, previous)`.
type Row = (
    &'static str,
    usize,
    Option<u64>,
    Option<&'static str>,
    Option<&'static str>,
);

/// pagination.md's table: count 1234, default and max 200.
const TABLE: &[Row] = &[
    ("", 200, Some(1), Some("?limit=200&offset=200"), None),
    (
        "?limit=200&offset=1000",
        200,
        Some(1001),
        Some("?limit=200&offset=1200"),
        Some("?limit=200&offset=800"),
    ),
    (
        "?offset=200",
        200,
        Some(201),
        Some("?limit=200&offset=400"),
        Some("?limit=200"),
    ),
    (
        "?offset=1200",
        34,
        Some(1201),
        None,
        Some("?limit=200&offset=1000"),
    ),
    (
        "?offset=1234",
        0,
        None,
        None,
        Some("?limit=200&offset=1034"),
    ),
    (
        "?offset=5000",
        0,
        None,
        None,
        Some("?limit=200&offset=4800"),
    ),
    (
        "?limit=abc",
        200,
        Some(1),
        Some("?limit=200&offset=200"),
        None,
    ),
    (
        "?limit=-1",
        200,
        Some(1),
        Some("?limit=200&offset=200"),
        None,
    ),
    (
        "?limit=0",
        200,
        Some(1),
        Some("?limit=200&offset=200"),
        None,
    ),
    (
        "?limit=500",
        200,
        Some(1),
        Some("?limit=200&offset=200"),
        None,
    ),
    ("?limit=", 200, Some(1), Some("?limit=200&offset=200"), None),
    (
        "?limit=1.5",
        200,
        Some(1),
        Some("?limit=200&offset=200"),
        None,
    ),
    (
        "?limit=5&offset=3",
        5,
        Some(4),
        Some("?limit=5&offset=8"),
        Some("?limit=5"),
    ),
    (
        "?offset=-5",
        200,
        Some(1),
        Some("?limit=200&offset=200"),
        None,
    ),
    (
        "?format=json&limit=2&offset=4",
        2,
        Some(5),
        Some("?format=json&limit=2&offset=6"),
        Some("?format=json&limit=2&offset=2"),
    ),
    (
        "?zeta=1&limit=5&offset=10&alpha=x%20y&tag=b&tag=a&empty=",
        5,
        Some(11),
        Some("?alpha=x+y&empty=&limit=5&offset=15&tag=b&tag=a&zeta=1"),
        Some("?alpha=x+y&empty=&limit=5&offset=5&tag=b&tag=a&zeta=1"),
    ),
];

#[tokio::test]
async fn pagination_md_table() {
    let layer = registry_layer();
    for &(query, len, first, next, previous) in TABLE {
        let seen = get(&layer, 1234, &format!("/api/v3/assets/{query}")).await;
        assert_eq!(seen.status, 200, "{query}");
        let json = seen.json();
        assert_eq!(json["count"], 1234, "{query}");
        let results = seen.results();
        assert_eq!(results.len(), len, "{query}");
        assert_eq!(results.first().copied(), first, "{query}");
        assert_eq!(seen.next(), next.map(|n| format!("{A}{n}")), "{query}");
        assert_eq!(
            seen.previous(),
            previous.map(|p| format!("{A}{p}")),
            "{query}"
        );
    }
}

#[tokio::test]
async fn envelope_is_compact_in_drf_key_order() {
    let seen = get(&registry_layer(), 12, "/api/v3/assets/?limit=2&offset=2").await;
    assert_eq!(
        seen.body,
        "{\"count\":12,\"next\":\"http://h/api/v3/assets/?limit=2&offset=4\",\
         \"previous\":\"http://h/api/v3/assets/?limit=2\",\"results\":[3,4]}"
    );
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(
        seen.headers["content-length"],
        seen.body.len().to_string().as_str()
    );
}

#[tokio::test]
async fn empty_collection() {
    let seen = get(&registry_layer(), 0, "/api/v3/assets/").await;
    assert_eq!(
        seen.body,
        "{\"count\":0,\"next\":null,\"previous\":null,\"results\":[]}"
    );
}

#[tokio::test]
async fn offset_equal_to_count_and_past_the_end() {
    let layer = registry_layer();
    let at_end = get(&layer, 10, "/x/?limit=5&offset=10").await;
    assert_eq!(
        (at_end.status.as_u16(), at_end.results(), at_end.next()),
        (200, vec![], None)
    );
    assert_eq!(
        at_end.previous().as_deref(),
        Some("http://h/x/?limit=5&offset=5")
    );
    let past = get(&layer, 10, "/x/?limit=5&offset=12").await;
    assert_eq!(
        past.previous().as_deref(),
        Some("http://h/x/?limit=5&offset=7")
    );
    let just_past = get(&layer, 10, "/x/?limit=5&offset=3").await;
    assert_eq!(just_past.previous().as_deref(), Some("http://h/x/?limit=5"));
}

#[tokio::test]
async fn thirty_digit_offset_saturates() {
    let seen = get(
        &registry_layer(),
        1234,
        "/x/?offset=123456789012345678901234567890",
    )
    .await;
    assert_eq!(seen.status, 200);
    assert_eq!((seen.results(), seen.next()), (vec![], None));
    assert_eq!(
        seen.previous(),
        Some(format!("http://h/x/?limit=200&offset={}", u64::MAX - 200))
    );
}

#[tokio::test]
async fn last_value_wins_and_python_int() {
    let layer = registry_layer();
    assert_eq!(
        get(&layer, 100, "/x/?limit=5&limit=7")
            .await
            .results()
            .len(),
        7
    );
    for q in ["limit=%205", "limit=%2B5", "limit=005", "limit=5%20"] {
        let seen = get(&layer, 100, &format!("/x/?{q}")).await;
        assert_eq!(seen.results().len(), 5, "{q}");
        assert_eq!(
            seen.next().as_deref(),
            Some("http://h/x/?limit=5&offset=5"),
            "{q}"
        );
    }
}

#[tokio::test]
async fn drf_unit_tests() {
    let layer = drf_test_layer();
    let t = |q: &str| format!("http://testserver/?{q}");

    let seen = get(&layer, 100, "/?limit=5").await;
    assert_eq!(seen.results(), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        (seen.next(), seen.previous()),
        (Some(t("limit=5&offset=5")), None)
    );

    let seen = get(&layer, 100, "/?limit=5&offset=1").await;
    assert_eq!(seen.results(), vec![2, 3, 4, 5, 6]);
    assert_eq!(
        (seen.next(), seen.previous()),
        (Some(t("limit=5&offset=6")), Some(t("limit=5")))
    );

    let seen = get(&layer, 100, "/?limit=5&offset=95").await;
    assert_eq!(seen.results(), vec![96, 97, 98, 99, 100]);
    assert_eq!(
        (seen.next(), seen.previous()),
        (None, Some(t("limit=5&offset=90")))
    );

    let seen = get(&layer, 100, "/?limit=11235&offset=50").await;
    assert_eq!(seen.results(), (51..=65).collect::<Vec<_>>());
    assert_eq!(
        (seen.next(), seen.previous()),
        (Some(t("limit=15&offset=65")), Some(t("limit=15&offset=35")))
    );

    for q in ["limit=invalid", "limit=0"] {
        let seen = get(&layer, 100, &format!("/?{q}")).await;
        assert_eq!(seen.results(), (1..=10).collect::<Vec<_>>(), "{q}");
        assert_eq!(
            (seen.next(), seen.previous()),
            (Some(t("limit=10&offset=10")), None),
            "{q}"
        );
    }

    let seen = get(&layer, 100, "/?offset=10").await;
    assert_eq!(
        (seen.next(), seen.previous()),
        (Some(t("limit=10&offset=20")), Some(t("limit=10")))
    );
}

#[tokio::test]
async fn query_re_encoding() {
    let layer = registry_layer();
    let cases = [
        ("q=a+b&r=a%20b", "limit=5&offset=5&q=a+b&r=a+b"),
        ("q=a/b*c", "limit=5&offset=5&q=a%2Fb%2Ac"),
        ("q=caf%C3%A9", "limit=5&offset=5&q=caf%C3%A9"),
        ("q=%e2%82%ac", "limit=5&offset=5&q=%E2%82%AC"),
        (
            "tag=b&tag=a&empty=&bare",
            "bare=&empty=&limit=5&offset=5&tag=b&tag=a",
        ),
        ("Z=1&a=2&_=3", "Z=1&_=3&a=2&limit=5&offset=5"),
        ("q=%7E%2D%2E%5F", "limit=5&offset=5&q=~-._"),
    ];
    for (query, expected) in cases {
        let seen = get(&layer, 100, &format!("/x/?{query}&limit=5")).await;
        assert_eq!(
            seen.next(),
            Some(format!("http://h/x/?{expected}")),
            "{query}"
        );
    }
}

#[tokio::test]
async fn base_url_path_prefix_and_request_path() {
    let layer = registry_layer();
    let prefixed =
        registry_pagination::PaginationLayer::try_new("https://pub.example:8443/registry/")
            .expect("valid");
    let seen = get(&prefixed, 300, "/api/v3/assets/").await;
    assert_eq!(
        seen.next().as_deref(),
        Some("https://pub.example:8443/registry/api/v3/assets/?limit=200&offset=200")
    );
    let seen = get(&layer, 300, "/a%7Eb/caf%C3%A9/x%22y").await;
    assert_eq!(
        seen.next().as_deref(),
        Some("http://h/a~b/caf%C3%A9/x%22y?limit=200&offset=200")
    );
}
