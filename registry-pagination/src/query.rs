//! Rebuilding a query string the way DRF's `replace_query_param` / `remove_query_param` do.
//!
//! DRF decodes every pair with `parse_qs(keep_blank_values=True)`, sets or removes one key, sorts the keys
//! and re-encodes with `urlencode(doseq=True)`, i.e. `quote_plus`: space becomes `+`, only
//! `A-Z a-z 0-9 _ . - ~` stay literal, everything else is `%XX` with upper-case hex over UTF-8.

use std::fmt::Write as _;

/// One change applied to a query string before it is re-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryEdit<'a> {
    /// Set the key to this single value (a repeated key collapses to it).
    Set(&'a str, u64),
    /// Remove every occurrence of the key.
    Remove(&'a str),
}

/// The decoded pairs of a query string, grouped by key and sorted by key as DRF sorts them.
///
/// Decode once, then [`encode`](Self::encode) several variants (next, previous, first, last) cheaply.
///
/// ```
/// use registry_pagination::{QueryEdit, SortedQuery};
///
/// let query = SortedQuery::parse("zeta=1&limit=5&offset=10&alpha=x%20y&tag=b&tag=a&empty=");
/// assert_eq!(
///     query.encode(&[QueryEdit::Set("limit", 5), QueryEdit::Set("offset", 15)]),
///     "alpha=x+y&empty=&limit=5&offset=15&tag=b&tag=a&zeta=1",
/// );
/// assert_eq!(
///     query.encode(&[QueryEdit::Set("limit", 5), QueryEdit::Remove("offset")]),
///     "alpha=x+y&empty=&limit=5&tag=b&tag=a&zeta=1",
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SortedQuery {
    /// `(key, value)` pairs sorted by key (code-point order); a stable sort keeps the values of a
    /// repeated key in their order of appearance.
    pairs: Vec<(String, String)>,
}

impl SortedQuery {
    /// Decodes a raw query string (without the leading `?`) like Python's `parse_qs(keep_blank_values=True)`:
    /// pairs split on `&`, empty pieces skipped, a piece without `=` has an empty value, `+` is a space,
    /// invalid UTF-8 becomes U+FFFD.
    #[must_use]
    pub fn parse(query: &str) -> Self {
        let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        // Stable and O(n log n): a query of many thousand keys costs milliseconds at most.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        Self { pairs }
    }

    /// Re-encodes the query after applying `edits`, DRF style. Returns an empty string when no pair is left.
    #[must_use]
    pub fn encode(&self, edits: &[QueryEdit<'_>]) -> String {
        let mut out = String::new();
        self.encode_into(edits, &mut out);
        out
    }

    /// Like [`encode`](Self::encode), appending to `out`.
    pub fn encode_into(&self, edits: &[QueryEdit<'_>], out: &mut String) {
        // The last edit of a key decides. Keys set by an edit but absent from the query are merged in at
        // their sorted position; edits are few, so they are searched rather than collected (no allocation).
        let decision = |key: &str| edits.iter().rev().find(|e| e.key() == key).copied();
        let absent = |k: &str| {
            self.pairs
                .binary_search_by(|(key, _)| key.as_str().cmp(k))
                .is_err()
        };
        let next_added = |after: Option<&str>| {
            edits
                .iter()
                .filter_map(|e| match *e {
                    QueryEdit::Set(k, v)
                        if after.is_none_or(|a| k > a) && decision(k) == Some(*e) && absent(k) =>
                    {
                        Some((k, v))
                    }
                    _ => None,
                })
                .min_by(|a, b| a.0.cmp(b.0))
        };

        let mut writer = PairWriter { out, first: true };
        let mut added = next_added(None);
        for run in self.pairs.chunk_by(|a, b| a.0 == b.0) {
            let key = run[0].0.as_str();
            while let Some((k, v)) = added.filter(|(k, _)| *k < key) {
                writer.int(k, v);
                added = next_added(Some(k));
            }
            match decision(key) {
                Some(QueryEdit::Remove(_)) => {}
                Some(QueryEdit::Set(_, v)) => writer.int(key, v),
                None => run.iter().for_each(|(_, value)| writer.text(key, value)),
            }
        }
        while let Some((k, v)) = added {
            writer.int(k, v);
            added = next_added(Some(k));
        }
    }
}

impl QueryEdit<'_> {
    fn key(&self) -> &str {
        match *self {
            QueryEdit::Set(k, _) | QueryEdit::Remove(k) => k,
        }
    }
}

/// Writes `key=value` pairs separated by `&`, both sides quoted.
struct PairWriter<'o> {
    out: &'o mut String,
    first: bool,
}

impl PairWriter<'_> {
    fn key(&mut self, key: &str) {
        if !std::mem::take(&mut self.first) {
            self.out.push('&');
        }
        quote_plus_into(key, self.out);
        self.out.push('=');
    }

    fn text(&mut self, key: &str, value: &str) {
        self.key(key);
        quote_plus_into(value, self.out);
    }

    fn int(&mut self, key: &str, value: u64) {
        self.key(key);
        // Digits need no quoting.
        let _ = write!(self.out, "{value}");
    }
}

/// Python's `urllib.parse.quote_plus(text, safe='')`, appended to `out`.
pub(crate) fn quote_plus_into(text: &str, out: &mut String) {
    for &b in text.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(query: &str, limit: u64, offset: u64) -> String {
        SortedQuery::parse(query).encode(&[
            QueryEdit::Set("limit", limit),
            QueryEdit::Set("offset", offset),
        ])
    }

    #[test]
    fn sorts_keys_keeps_value_order_and_blanks() {
        assert_eq!(
            next(
                "zeta=1&limit=5&offset=10&alpha=x%20y&tag=b&tag=a&empty=",
                5,
                15
            ),
            "alpha=x+y&empty=&limit=5&offset=15&tag=b&tag=a&zeta=1"
        );
    }

    #[test]
    fn plus_and_percent_20_are_both_spaces() {
        assert_eq!(next("q=a+b&r=a%20b", 1, 1), "limit=1&offset=1&q=a+b&r=a+b");
    }

    #[test]
    fn escapes_everything_but_unreserved() {
        assert_eq!(next("q=a/b*c", 1, 1), "limit=1&offset=1&q=a%2Fb%2Ac");
        assert_eq!(next("q=%7e_.-", 1, 1), "limit=1&offset=1&q=~_.-");
        assert_eq!(next("q=%2b%26%3d", 1, 1), "limit=1&offset=1&q=%2B%26%3D");
        assert_eq!(
            next("q=caf%C3%A9&s=\u{e9}", 1, 1),
            "limit=1&offset=1&q=caf%C3%A9&s=%C3%A9"
        );
        assert_eq!(next("k%20ey=1", 1, 1), "k+ey=1&limit=1&offset=1");
    }

    #[test]
    fn invalid_utf8_becomes_replacement_char() {
        assert_eq!(next("q=%FF", 1, 1), "limit=1&offset=1&q=%EF%BF%BD");
    }

    #[test]
    fn invalid_percent_escape_is_literal() {
        assert_eq!(next("q=%zz%4", 1, 1), "limit=1&offset=1&q=%25zz%254");
    }

    #[test]
    fn bare_keys_and_empty_pieces() {
        assert_eq!(next("a&&b=&=c", 1, 1), "=c&a=&b=&limit=1&offset=1");
    }

    #[test]
    fn repeated_limit_collapses() {
        assert_eq!(
            next("limit=5&limit=7&offset=1&offset=2", 7, 9),
            "limit=7&offset=9"
        );
    }

    #[test]
    fn remove_and_empty_result() {
        let q = SortedQuery::parse("offset=10");
        assert_eq!(q.encode(&[QueryEdit::Remove("offset")]), "");
        assert_eq!(
            q.encode(&[QueryEdit::Set("limit", 5), QueryEdit::Remove("offset")]),
            "limit=5"
        );
        assert_eq!(
            SortedQuery::parse("").encode(&[QueryEdit::Set("limit", 5)]),
            "limit=5"
        );
    }

    #[test]
    fn format_kept_only_when_present() {
        assert_eq!(
            next("format=json&limit=2&offset=4", 2, 6),
            "format=json&limit=2&offset=6"
        );
        assert_eq!(next("", 2, 6), "limit=2&offset=6");
    }

    #[test]
    fn many_keys_in_reverse_order() {
        let query: String = (0..20_000).rev().map(|i| format!("k{i:05}=&")).collect();
        let encoded = SortedQuery::parse(&query).encode(&[QueryEdit::Set("limit", 1)]);
        assert!(encoded.starts_with("k00000=&k00001=&"));
        assert!(encoded.ends_with("k19999=&limit=1"));
    }

    #[test]
    fn several_edits_merge_in_order() {
        let q = SortedQuery::parse("m=1");
        let edits = [
            QueryEdit::Set("z", 1),
            QueryEdit::Set("a", 2),
            QueryEdit::Set("z", 3),
            QueryEdit::Remove("m"),
        ];
        assert_eq!(q.encode(&edits), "a=2&z=3");
        let edits = [
            QueryEdit::Set("n", 1),
            QueryEdit::Set("b", 2),
            QueryEdit::Set("m", 3),
        ];
        assert_eq!(q.encode(&edits), "b=2&m=3&n=1");
        assert_eq!(
            q.encode(&[QueryEdit::Set("n", 1), QueryEdit::Remove("n")]),
            "m=1"
        );
    }

    #[test]
    fn sort_is_by_code_point() {
        assert_eq!(
            next("b=1&B=2&%C3%A9=3&_=4", 1, 1),
            "B=2&_=4&b=1&limit=1&offset=1&%C3%A9=3"
        );
    }
}
