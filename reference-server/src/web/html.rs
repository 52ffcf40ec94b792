//! HTML helpers shared by the pages the server writes itself. Pages are askama templates (`templates/`,
//! one layout); the one place that builds markup outside a template, the browsable API's JSON with its
//! links, escapes with askama's escaper through [`escape`].

/// Escape text for HTML element content and attribute values (askama's HTML escaper).
pub fn escape(s: &str) -> String {
    askama::filters::escape(s, askama::filters::Html)
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// Escape text for HTML element content only (`&`, `<`, `>`): quotes need no escaping there, and JSON shown
/// in a page is mostly quotes (askama's escaper writes each as five bytes). Never for attribute values.
pub fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Re-indents compact JSON (two spaces), keeping its key order and its bytes otherwise: the browsable
/// page shows exactly what the JSON answer says, in the same order.
pub fn pretty_json(compact: &[u8]) -> String {
    let text = String::from_utf8_lossy(compact);
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_keeps_order_and_strings() {
        let compact = br#"{"z":1,"a":[],"m":{"k":"a,b:{c}\"]"},"l":[1,{"x":null}]}"#;
        let pretty = pretty_json(compact);
        assert_eq!(
            pretty,
            "{\n  \"z\": 1,\n  \"a\": [],\n  \"m\": {\n    \"k\": \"a,b:{c}\\\"]\"\n  },\n  \"l\": [\n    1,\n    {\n      \"x\": null\n    }\n  ]\n}"
        );
        let back: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(
            back,
            serde_json::from_slice::<serde_json::Value>(compact).unwrap()
        );
    }

    #[test]
    fn text_escaping_leaves_quotes() {
        assert_eq!(
            escape_text(r#""a" <b> & 'c'"#),
            r#""a" &lt;b&gt; &amp; 'c'"#
        );
    }

    #[test]
    fn escape_is_askamas() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&#60;a href=&#34;x&#34;&#62;&#38;&#39;"
        );
    }
}
