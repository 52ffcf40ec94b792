//! The registry's query string (`?limit=&offset=` and the rest), as any client may send it: DRF's parsing of
//! the page, and the sorted query the links are built from. Never a panic; a page within its bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_pagination::{Page, SortedQuery};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let page = Page::from_query(Some(query), 100, Some(1000));
    assert!(page.limit <= 1000);
    let _ = SortedQuery::parse(query);
});
