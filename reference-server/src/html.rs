//! HTML helpers shared by the pages the server writes itself (receipt certificates, the registry's
//! browsable API).

/// Escape text for HTML element content and attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
