//! Building the absolute `next` / `previous` (and `first` / `last`) URLs exactly as DRF does.

use std::fmt::Write as _;

use http::Uri;

use crate::{
    BaseUrl, Page,
    page::{LIMIT_PARAM, OFFSET_PARAM},
    query::{QueryEdit, SortedQuery},
};

/// The URL of the current request, decoded once, from which every page link is derived.
///
/// ```
/// use registry_pagination::{BaseUrl, Page, RequestUrl};
///
/// let base: BaseUrl = "http://h".parse()?;
/// let url = RequestUrl::new(&base, "/api/v3/assets/", Some("offset=200"));
/// let page = Page { limit: 200, offset: 200 };
/// assert_eq!(url.next(page, 1234).as_deref(), Some("http://h/api/v3/assets/?limit=200&offset=400"));
/// assert_eq!(url.previous(page).as_deref(), Some("http://h/api/v3/assets/?limit=200"));
/// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
/// ```
#[derive(Debug, Clone)]
pub struct RequestUrl {
    /// Base URL followed by the request path, normalised like Django's `escape_uri_path`.
    prefix: String,
    query: SortedQuery,
}

impl RequestUrl {
    /// Starts from a base URL, the request path (as received, percent-encoded) and its raw query.
    #[must_use]
    pub fn new(base: &BaseUrl, path: &str, query: Option<&str>) -> Self {
        Self::with_origin(base.as_str(), path, query)
    }

    /// Like [`new`](Self::new), from the request's URI.
    #[must_use]
    pub fn from_uri(base: &BaseUrl, uri: &Uri) -> Self {
        Self::new(base, uri.path(), uri.query())
    }

    /// `origin` must be a validated `scheme://host[:port][/prefix]` without trailing `/`.
    pub(crate) fn with_origin(origin: &str, path: &str, query: Option<&str>) -> Self {
        let mut prefix = String::with_capacity(origin.len() + path.len() + 1);
        prefix.push_str(origin);
        push_normalised_path(path, &mut prefix);
        Self {
            prefix,
            query: SortedQuery::parse(query.unwrap_or_default()),
        }
    }

    /// DRF's `get_next_link`: `None` when `offset + limit >= count`, else the URL with the effective
    /// `limit` and `offset + limit`.
    #[must_use]
    pub fn next(&self, page: Page, count: u64) -> Option<String> {
        (page.end() < count).then(|| self.url(page.limit, page.end()))
    }

    /// DRF's `get_previous_link`: `None` at offset 0; without `offset` when `offset - limit <= 0`; else
    /// `offset - limit` (past the end too: it does not jump back to the last real page).
    #[must_use]
    pub fn previous(&self, page: Page) -> Option<String> {
        (page.offset > 0).then(|| self.url(page.limit, page.offset.saturating_sub(page.limit)))
    }

    /// The first page at the effective limit (no `offset`).
    #[must_use]
    pub fn first(&self, page: Page) -> String {
        self.url(page.limit, 0)
    }

    /// The last page of the grid that `next` walks from the first page: offset
    /// `floor((count - 1) / limit) * limit` (the first page when the collection is empty).
    #[must_use]
    pub fn last(&self, page: Page, count: u64) -> String {
        let offset = count.saturating_sub(1) / page.limit.max(1) * page.limit;
        self.url(page.limit, offset)
    }

    /// All four links at once.
    #[must_use]
    pub fn links(&self, page: Page, count: u64) -> Links {
        Links {
            next: self.next(page, count),
            previous: self.previous(page),
            first: self.first(page),
            last: self.last(page, count),
        }
    }

    /// The request URL with `limit` set and `offset` set, or removed when it is 0.
    fn url(&self, limit: u64, offset: u64) -> String {
        let limit_edit = QueryEdit::Set(LIMIT_PARAM, limit);
        let offset_edit = if offset == 0 {
            QueryEdit::Remove(OFFSET_PARAM)
        } else {
            QueryEdit::Set(OFFSET_PARAM, offset)
        };
        let mut url = String::with_capacity(self.prefix.len() + 64);
        url.push_str(&self.prefix);
        url.push('?');
        self.query.encode_into(&[limit_edit, offset_edit], &mut url);
        // `limit` is always written, so the query is never empty and the `?` always stays.
        url
    }
}

/// The links of one page: `next` / `previous` as in DRF's envelope, `first` / `last` for the `Link` header.
///
/// After [`Pagination`](crate::Pagination) wrapped a page, a copy is in the response extensions, for
/// outer layers (a browsable HTML rendering, logging) that need the links without parsing the body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Links {
    /// Following page, `None` on the last page.
    pub next: Option<String>,
    /// Preceding page, `None` on the first page.
    pub previous: Option<String>,
    /// First page at the effective limit.
    pub first: String,
    /// Last page of the grid that `next` walks from the first page.
    pub last: String,
}

impl Links {
    /// The RFC 8288 `Link` header value: `<url>; rel="next", <url>; rel="prev", ... rel="first", ... rel="last"`.
    ///
    /// ```
    /// use registry_pagination::Links;
    ///
    /// let links = Links {
    ///     next: Some("http://h/?limit=5&offset=5".into()),
    ///     previous: None,
    ///     first: "http://h/?limit=5".into(),
    ///     last: "http://h/?limit=5&offset=95".into(),
    /// };
    /// assert_eq!(
    ///     links.header_value(),
    ///     r#"<http://h/?limit=5&offset=5>; rel="next", <http://h/?limit=5>; rel="first", <http://h/?limit=5&offset=95>; rel="last""#,
    /// );
    /// ```
    #[must_use]
    pub fn header_value(&self) -> String {
        let urls = self.next.as_ref().map_or(0, String::len)
            + self.previous.as_ref().map_or(0, String::len)
            + self.first.len()
            + self.last.len();
        let mut out = String::with_capacity(urls + 4 * 16);
        let entries = [
            (self.next.as_deref(), "next"),
            (self.previous.as_deref(), "prev"),
            (Some(self.first.as_str()), "first"),
            (Some(self.last.as_str()), "last"),
        ];
        for (url, rel) in entries {
            if let Some(url) = url {
                if !out.is_empty() {
                    out.push_str(", ");
                }
                let _ = write!(out, "<{url}>; rel=\"{rel}\"");
            }
        }
        out
    }
}

/// DRF's `next` link for a request URI (see [`RequestUrl::next`]).
///
/// ```
/// use registry_pagination::{BaseUrl, Page, next_url};
///
/// let base: BaseUrl = "http://testserver".parse()?;
/// let uri = "/?limit=5".parse()?;
/// let page = Page { limit: 5, offset: 0 };
/// assert_eq!(next_url(&base, &uri, page, 100).as_deref(), Some("http://testserver/?limit=5&offset=5"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn next_url(base: &BaseUrl, uri: &Uri, page: Page, count: u64) -> Option<String> {
    if page.end() >= count {
        return None;
    }
    RequestUrl::from_uri(base, uri).next(page, count)
}

/// DRF's `previous` link for a request URI (see [`RequestUrl::previous`]).
///
/// ```
/// use registry_pagination::{BaseUrl, Page, previous_url};
///
/// let base: BaseUrl = "http://testserver".parse()?;
/// let uri = "/?limit=5&offset=1".parse()?;
/// let page = Page { limit: 5, offset: 1 };
/// assert_eq!(previous_url(&base, &uri, page).as_deref(), Some("http://testserver/?limit=5"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn previous_url(base: &BaseUrl, uri: &Uri, page: Page) -> Option<String> {
    if page.offset == 0 {
        return None;
    }
    RequestUrl::from_uri(base, uri).previous(page)
}

/// Appends a request path the way Django's `get_full_path` renders it: percent-decoded, then re-quoted
/// with `escape_uri_path`'s safe set (`/:@&+$,-_.!~*'()` and alphanumerics). An empty path is `/`.
pub(crate) fn push_normalised_path(path: &str, out: &mut String) {
    if path.is_empty() {
        out.push('/');
        return;
    }
    for b in percent_decode(path.as_bytes()) {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => out.push(char::from(b)),
            b'/' | b':' | b'@' | b'&' | b'+' | b'$' | b',' | b'-' | b'_' | b'.' | b'!' | b'~'
            | b'*' | b'\'' | b'(' | b')' => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

/// Percent-decoding that leaves invalid escapes literal (as Python's `unquote` does).
fn percent_decode(input: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let b = *input.get(i)?;
        if b == b'%' {
            let hex = |c: u8| char::from(c).to_digit(16);
            if let (Some(h), Some(l)) = (
                input.get(i + 1).and_then(|&c| hex(c)),
                input.get(i + 2).and_then(|&c| hex(c)),
            ) {
                i += 3;
                // Two hex digits are at most 0xFF.
                return u8::try_from(h * 16 + l).ok();
            }
        }
        i += 1;
        Some(b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(path: &str, query: Option<&str>) -> RequestUrl {
        let base: BaseUrl = "http://h".parse().expect("valid");
        RequestUrl::new(&base, path, query)
    }

    #[test]
    fn path_normalisation_matches_django() {
        let mut out = String::new();
        push_normalised_path("/a%7Eb/%41%2f%20x\"y%zz/caf%C3%A9/(*)", &mut out);
        assert_eq!(out, "/a~b/A/%20x%22y%25zz/caf%C3%A9/(*)");
    }

    #[test]
    fn links_on_pages() {
        let u = url("/api/v3/assets/", None);
        let links = u.links(
            Page {
                limit: 200,
                offset: 0,
            },
            1234,
        );
        assert_eq!(
            links.next.as_deref(),
            Some("http://h/api/v3/assets/?limit=200&offset=200")
        );
        assert_eq!(links.previous, None);
        assert_eq!(links.first, "http://h/api/v3/assets/?limit=200");
        assert_eq!(links.last, "http://h/api/v3/assets/?limit=200&offset=1200");
        let empty = u.links(
            Page {
                limit: 200,
                offset: 0,
            },
            0,
        );
        assert_eq!((empty.next, empty.previous), (None, None));
        assert_eq!(empty.last, "http://h/api/v3/assets/?limit=200");
    }

    #[test]
    fn saturating_offsets() {
        let u = url("/", None);
        let page = Page {
            limit: 200,
            offset: u64::MAX,
        };
        assert_eq!(u.next(page, 1234), None);
        assert_eq!(
            u.previous(page).as_deref(),
            Some(format!("http://h/?limit=200&offset={}", u64::MAX - 200).as_str())
        );
    }

    #[test]
    fn header_value_lists_present_links() {
        let links = url("/", Some("offset=10")).links(
            Page {
                limit: 5,
                offset: 10,
            },
            12,
        );
        assert_eq!(
            links.header_value(),
            "<http://h/?limit=5&offset=5>; rel=\"prev\", <http://h/?limit=5>; rel=\"first\", \
             <http://h/?limit=5&offset=10>; rel=\"last\""
        );
    }
}
