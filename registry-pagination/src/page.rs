//! Reading `limit` and `offset` from a query string, exactly as DRF's `LimitOffsetPagination` does.

use std::ops::Range;

/// Name of the page-size query parameter (DRF's `limit_query_param`).
pub const LIMIT_PARAM: &str = "limit";
/// Name of the start-index query parameter (DRF's `offset_query_param`).
pub const OFFSET_PARAM: &str = "offset";

/// The page a request asked for, after DRF's rules (defaults, clamp, fallbacks) were applied.
///
/// [`PaginationLayer`](crate::PaginationLayer) inserts it into the request extensions; the handler reads
/// it to fetch records `[offset, offset + limit)` and the total count.
///
/// ```
/// use registry_pagination::Page;
///
/// let page = Page::from_query(Some("limit=5&offset=3"), 200, Some(200));
/// assert_eq!(page, Page { limit: 5, offset: 3 });
///
/// // Bad values never give an error: they fall back to the defaults.
/// let page = Page::from_query(Some("limit=abc&offset=-5"), 200, Some(200));
/// assert_eq!(page, Page { limit: 200, offset: 0 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Page {
    /// Effective page size: at least 1, at most the configured `max_limit`.
    pub limit: u64,
    /// Zero-based index of the first record of the page. Not capped: it may lie past the end.
    pub offset: u64,
}

impl Page {
    /// Parses `limit` and `offset` from a raw (still percent-encoded) query string.
    ///
    /// Follows DRF 3.18: the last occurrence of a parameter wins; `limit` absent, not an integer, zero or
    /// negative gives `default_limit`; a `limit` above `max_limit` gives `max_limit`; `offset` absent, not an
    /// integer or negative gives `0`. Integers are read like Python's `int()` (surrounding whitespace, a
    /// leading `+`, leading zeros, `_` between digits and decimal digits of any script are accepted) and
    /// saturate at `u64::MAX`.
    ///
    /// `default_limit` is returned as given (DRF does not clamp it to `max_limit` either).
    ///
    /// ```
    /// use registry_pagination::Page;
    ///
    /// // DRF's own unit-test configuration: default 10, max 15.
    /// assert_eq!(Page::from_query(Some("limit=11235&offset=50"), 10, Some(15)).limit, 15);
    /// assert_eq!(Page::from_query(Some("limit=%2B5&limit=7"), 10, Some(15)).limit, 7);
    /// assert_eq!(Page::from_query(None, 10, Some(15)), Page { limit: 10, offset: 0 });
    /// ```
    #[must_use]
    pub fn from_query(query: Option<&str>, default_limit: u64, max_limit: Option<u64>) -> Self {
        let mut raw_limit = None;
        let mut raw_offset = None;
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            if key == LIMIT_PARAM {
                raw_limit = Some(value);
            } else if key == OFFSET_PARAM {
                raw_offset = Some(value);
            }
        }
        let limit = raw_limit
            .and_then(|v| parse_python_int(&v))
            .and_then(|n| match n {
                PyInt::Positive(0) | PyInt::Negative => None,
                PyInt::Positive(n) => Some(max_limit.map_or(n, |max| n.min(max))),
            })
            .unwrap_or(default_limit);
        let offset = raw_offset
            .and_then(|v| parse_python_int(&v))
            .and_then(|n| match n {
                PyInt::Positive(n) => Some(n),
                PyInt::Negative => None,
            })
            .unwrap_or(0);
        Self { limit, offset }
    }

    /// Offset of the record just after this page (saturating).
    #[must_use]
    pub const fn end(&self) -> u64 {
        self.offset.saturating_add(self.limit)
    }

    /// Indices of the records on this page for a collection of `count` records: `[offset, offset + limit)`
    /// clipped to the collection, empty when the offset is at or past the end.
    ///
    /// ```
    /// use registry_pagination::Page;
    ///
    /// let page = Page { limit: 200, offset: 1200 };
    /// assert_eq!(page.range(1234), 1200..1234);
    /// assert!(Page { limit: 200, offset: 5000 }.range(1234).is_empty());
    /// ```
    #[must_use]
    pub fn range(&self, count: u64) -> Range<u64> {
        let start = self.offset.min(count);
        start..self.end().min(count)
    }
}

/// The total number of records of a paginated collection, set by the handler as a **response** extension.
///
/// Its presence is what marks a response as a page: [`Pagination`](crate::Pagination) wraps the body of a
/// response carrying a `PageCount` in the DRF envelope, and passes every other response through untouched.
///
/// ```
/// use registry_pagination::PageCount;
///
/// let mut response = http::Response::new("[1,2,3]".to_owned());
/// response.extensions_mut().insert(PageCount(1234));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageCount(pub u64);

/// Result of reading a Python integer: the sign matters only to reject negatives.
enum PyInt {
    Positive(u64),
    Negative,
}

/// Reads an integer the way Python's `int(str)` does, saturating at `u64::MAX`.
///
/// Accepted: surrounding Unicode whitespace, one leading `+` or `-`, decimal digits of any script
/// (Unicode `Nd`, e.g. `٣` or `７`) with single `_` between digits.
fn parse_python_int(text: &str) -> Option<PyInt> {
    // Python strips exactly the characters Rust calls whitespace (checked against CPython 3.11).
    let text = text.trim_matches(char::is_whitespace);
    let (negative, digits) = match text.as_bytes().first()? {
        b'+' => (false, &text[1..]),
        b'-' => (true, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') {
        return None;
    }
    let mut value: u64 = 0;
    let mut previous_underscore = false;
    for c in digits.chars() {
        if c == '_' && !previous_underscore {
            previous_underscore = true;
            continue;
        }
        let digit = decimal_value(c)?;
        value = value.saturating_mul(10).saturating_add(u64::from(digit));
        previous_underscore = false;
    }
    Some(if negative && value != 0 {
        PyInt::Negative
    } else {
        PyInt::Positive(value)
    })
}

/// The value of a decimal digit of any script (Unicode general category `Nd`).
fn decimal_value(c: char) -> Option<u32> {
    if let Some(digit) = c.to_digit(10) {
        return Some(digit);
    }
    let code = u32::from(c);
    let zero = match DECIMAL_ZEROS.binary_search(&code) {
        Ok(i) => DECIMAL_ZEROS[i],
        Err(0) => return None,
        Err(i) => DECIMAL_ZEROS[i - 1],
    };
    let value = code - zero;
    (value < 10).then_some(value)
}

/// The digit zero of every run of ten decimal digits (`Nd`) in Unicode 14.0, the table of CPython 3.11,
/// generated with `unicodedata.decimal` (every `Nd` character is in one of these runs).
const DECIMAL_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn page(query: &str) -> Page {
        Page::from_query(Some(query), 200, Some(200))
    }

    #[test]
    fn defaults_when_absent() {
        assert_eq!(
            Page::from_query(None, 200, Some(200)),
            Page {
                limit: 200,
                offset: 0
            }
        );
        assert_eq!(
            page(""),
            Page {
                limit: 200,
                offset: 0
            }
        );
    }

    #[test]
    fn invalid_limits_fall_back_to_default() {
        for q in [
            "limit=abc",
            "limit=",
            "limit=0",
            "limit=-1",
            "limit=1.5",
            "limit",
            "limit=1e3",
            "limit=0x10",
        ] {
            assert_eq!(page(q).limit, 200, "{q}");
        }
    }

    #[test]
    fn limit_is_clamped_to_max() {
        assert_eq!(page("limit=500").limit, 200);
        assert_eq!(Page::from_query(Some("limit=500"), 200, None).limit, 500);
        assert_eq!(
            Page::from_query(Some("limit=99999999999999999999999"), 200, None).limit,
            u64::MAX
        );
    }

    #[test]
    fn python_int_leniency() {
        for q in [
            "limit=%205",
            "limit=+5",
            "limit=++5",
            "limit=%2B5",
            "limit=005",
            "limit=5%20",
            "limit=%095%0A",
            "limit=%0B5%0C",
            "limit=0_5",
        ] {
            assert_eq!(page(q).limit, 5, "{q}");
        }
        for q in [
            "limit=_5",
            "limit=5_",
            "limit=5__0",
            "limit=+-5",
            "limit=%2B%2B5",
            "limit=5%200",
            "limit=%2B",
        ] {
            assert_eq!(page(q).limit, 200, "{q}");
        }
    }

    #[test]
    fn non_ascii_digits_and_whitespace_like_python() {
        // int('\u0663') == 3, int('\uff17') == 7, int('1\u0663_\uff17') == 137; '\x1c' is not stripped.
        assert_eq!(page("limit=%D9%A3").limit, 3);
        assert_eq!(page("limit=%EF%BC%97").limit, 7);
        assert_eq!(page("limit=1%D9%A3_%EF%BC%97").limit, 137);
        assert_eq!(page("limit=%E3%80%805%E2%80%A8").limit, 5);
        assert_eq!(page("limit=%1C5").limit, 200);
        assert_eq!(page("limit=%E2%80%8B5").limit, 200);
        assert!(DECIMAL_ZEROS.is_sorted());
    }

    #[test]
    fn last_value_wins() {
        assert_eq!(page("limit=5&limit=7").limit, 7);
        assert_eq!(page("offset=5&offset=abc").offset, 0);
        assert_eq!(page("limit=abc&limit=5").limit, 5);
    }

    #[test]
    fn offsets() {
        assert_eq!(page("offset=-5").offset, 0);
        assert_eq!(page("offset=-0").offset, 0);
        assert_eq!(page("offset=abc").offset, 0);
        assert_eq!(page("offset=0").offset, 0);
        assert_eq!(page("offset=1200").offset, 1200);
        assert_eq!(
            page("offset=123456789012345678901234567890").offset,
            u64::MAX
        );
    }

    #[test]
    fn negative_zero_limit_is_default() {
        assert_eq!(page("limit=-0").limit, 200);
    }

    #[test]
    fn range_saturates() {
        let p = Page {
            limit: 200,
            offset: u64::MAX,
        };
        assert_eq!(p.end(), u64::MAX);
        assert!(p.range(1234).is_empty());
        assert_eq!(
            Page {
                limit: 5,
                offset: 3
            }
            .range(1234),
            3..8
        );
        assert!(
            Page {
                limit: 5,
                offset: 0
            }
            .range(0)
            .is_empty()
        );
    }
}
