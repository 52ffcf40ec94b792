//! For any count, limit and offset: `next` from offset 0 visits every record once, `previous` walks back.

use proptest::prelude::*;
use registry_pagination::{BaseUrl, Page, QueryEdit, RequestUrl, SortedQuery};

/// Follows a link the way a client does: parse its query with the same rules as the layer.
fn page_of(link: &str, default: u64, max: Option<u64>) -> Page {
    let query = link.split_once('?').map(|(_, q)| q);
    Page::from_query(query, default, max)
}

fn records(page: Page, count: u64) -> std::ops::Range<u64> {
    page.range(count)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn next_visits_every_record_once_and_previous_walks_back(
        count in 0u64..3000,
        limit in proptest::option::of(0u64..400),
        offset in proptest::option::of(0u64..4000),
        // DRF does not clamp `default_limit` to `max_limit`: with default > max the links of a request
        // without `limit` carry the default, which the next request clamps, so no walk property can hold
        // for that (mis)configuration. The property is for `max >= default` (50 here).
        max in proptest::option::of(50u64..300),
        filter in "[a-z ]{0,5}",
    ) {
        let base: BaseUrl = "http://h/p".parse().expect("valid");
        let default = 50;
        let mut query = format!("filter={}", filter.replace(' ', "+"));
        if let Some(limit) = limit { query.push_str(&format!("&limit={limit}")); }
        // Start from the first page, with the requested limit.
        let mut page = Page::from_query(Some(&query), default, max);
        prop_assert_eq!(page.offset, 0);
        let mut seen = Vec::new();
        let mut link = None::<String>;
        let mut pages = vec![];
        loop {
            pages.push(page);
            seen.extend(records(page, count));
            let url = RequestUrl::new(&base, "/a/", link.as_deref().and_then(|l| l.split_once('?')).map(|(_, q)| q).or(Some(&query)));
            match url.next(page, count) {
                Some(next) => {
                    prop_assert!(next.starts_with("http://h/p/a/?filter="));
                    page = page_of(&next, default, max);
                    link = Some(next);
                }
                None => break,
            }
        }
        prop_assert_eq!(seen, (0..count).collect::<Vec<_>>());

        // From the last page reached (or any offset), previous walks back to the first page, without offset.
        let start = Page { limit: page.limit, offset: offset.unwrap_or(page.offset) };
        let mut page = start;
        let mut steps = 0u64;
        let mut link = format!("http://h/p/a/?{query}&offset={}", start.offset);
        loop {
            let url = RequestUrl::new(&base, "/a/", link.split_once('?').map(|(_, q)| q));
            match url.previous(page) {
                Some(previous) => {
                    let back = page_of(&previous, default, max);
                    prop_assert_eq!(back.limit, page.limit);
                    prop_assert_eq!(back.offset, page.offset.saturating_sub(page.limit));
                    prop_assert_eq!(back.offset == 0, !previous.contains("offset="));
                    page = back;
                    link = previous;
                    steps += 1;
                }
                None => break,
            }
        }
        prop_assert_eq!(page.offset, 0);
        prop_assert_eq!(steps, start.offset.div_ceil(start.limit));
    }
}

proptest! {
    /// DRF rebuilds the query twice for one link (`limit`, then `offset`); the layer does it once. That is
    /// the same only if re-encoding is idempotent: decoding an encoded query and encoding it again changes
    /// nothing, whatever the input (any bytes, escapes valid or not).
    #[test]
    fn re_encoding_is_idempotent(raw in "([a-zA-Z0-9 +%&=/*~._\\-]|%[0-9a-fA-F]{2}|\\PC){0,40}") {
        let edits = [QueryEdit::Set("limit", 5), QueryEdit::Set("offset", 10)];
        let once = SortedQuery::parse(&raw).encode(&edits);
        let twice = SortedQuery::parse(&once).encode(&edits);
        prop_assert_eq!(&once, &twice);
        let limit_then_offset = SortedQuery::parse(&SortedQuery::parse(&raw).encode(&edits[..1])).encode(&edits[1..]);
        prop_assert_eq!(&once, &limit_then_offset);
        prop_assert!(once.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-~%+=&".contains(&b)));
    }
}
