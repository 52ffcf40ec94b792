//! The bytes written around the handler's results: `{"count":N,"next":...,"previous":...,"results":` and `}`.

use std::fmt::Write as _;

use bytes::Bytes;

/// Closes the envelope after the results.
pub(crate) const SUFFIX: &[u8] = b"}";

/// The envelope's opening, in DRF's key order, compact, ending just before the results array.
///
/// ```
/// use registry_pagination::envelope_prefix;
///
/// assert_eq!(
///     envelope_prefix(1234, Some("http://h/?limit=200&offset=200"), None),
///     r#"{"count":1234,"next":"http://h/?limit=200&offset=200","previous":null,"results":"#,
/// );
/// ```
#[must_use]
pub fn envelope_prefix(count: u64, next: Option<&str>, previous: Option<&str>) -> Bytes {
    let capacity = 64 + next.map_or(4, str::len) + previous.map_or(4, str::len);
    let mut out = String::with_capacity(capacity);
    out.push_str("{\"count\":");
    let _ = write!(out, "{count}");
    out.push_str(",\"next\":");
    push_json_string_or_null(next, &mut out);
    out.push_str(",\"previous\":");
    push_json_string_or_null(previous, &mut out);
    out.push_str(",\"results\":");
    Bytes::from(out)
}

/// A JSON string (escaping `"`, `\` and control characters; UTF-8 left as is) or `null`.
fn push_json_string_or_null(value: Option<&str>, out: &mut String) {
    let Some(value) = value else {
        out.push_str("null");
        return;
    };
    out.push('"');
    // Links are URL-encoded ASCII: the escaping loop is for configurations nobody should have.
    if !value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(value);
        out.push('"');
        return;
    }
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_json() {
        let p = envelope_prefix(0, Some("a\"b\\c\u{1}\u{e9}"), None);
        assert_eq!(
            p,
            "{\"count\":0,\"next\":\"a\\\"b\\\\c\\u0001\u{e9}\",\"previous\":null,\"results\":"
        );
    }
}
