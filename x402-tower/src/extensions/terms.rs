//! The x402 `terms` extension: the terms a payment buys under, declared in the 402.
//!
//! A 402 declares `extensions.terms = {"info": {"format", "terms", "version"?}}`: `format` is `uri`,
//! `markdown`, `plaintext` or `json`; `terms` is a URL (format `uri`), the text, or stringified JSON;
//! `version` is an opaque marker that changes when the terms change, so a buyer (and its receipt) can pin
//! the terms it paid under. The extension's text is not final upstream (see `docs/x402-extensions.md` of
//! the workspace); this is the shape of its draft, with no schema sent (the draft allows leaving it out).
//!
//! The layer declares fixed terms with [`X402Config::terms`](crate::X402Config::terms), or per request
//! with [`X402Config::terms_per_request`](crate::X402Config::terms_per_request): then an earlier layer
//! puts an `Arc<Terms>` into the request extensions (for example, the license of the article a request
//! names). A [`Terms`] is serialised once, when it is made: declaring it costs a copy.
//!
//! ```
//! use x402_tower::extensions::terms::Terms;
//!
//! let terms = Terms::uri("https://news.example/license.xml?articleId=a1").version("3f2a9c");
//! assert_eq!(
//!     terms.declaration(),
//!     r#"{"info":{"format":"uri","terms":"https://news.example/license.xml?articleId=a1","version":"3f2a9c"}}"#
//! );
//! ```

use serde::{Deserialize, Serialize};

/// The extension's key in `extensions`.
pub const KEY: &str = "terms";

/// How `terms` is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TermsFormat {
    /// `terms` is a URL (or a data URI) of the document.
    Uri,
    /// `terms` is Markdown text.
    Markdown,
    /// `terms` is plain text.
    Plaintext,
    /// `terms` is a JSON document, stringified.
    Json,
}

/// `extensions.terms.info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermsInfo {
    /// How to read `terms`.
    pub format: TermsFormat,
    /// The URL or the text of the terms.
    pub terms: String,
    /// Changes whenever the terms change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Terms to declare in a 402, serialised once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    info: TermsInfo,
    declaration: String,
}

impl Terms {
    /// Terms of `format` with the URL or text `terms`.
    pub fn new(format: TermsFormat, terms: impl Into<String>) -> Self {
        Self::from_info(TermsInfo {
            format,
            terms: terms.into(),
            version: None,
        })
    }

    /// Terms published at `url` (format `uri`).
    pub fn uri(url: impl Into<String>) -> Self {
        Self::new(TermsFormat::Uri, url)
    }

    /// The same terms marked with `version` (changes when the terms change).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.info.version = Some(version.into());
        Self::from_info(self.info)
    }

    /// Terms as a client reads them from a 402's `extensions.terms.info`.
    pub fn from_info(info: TermsInfo) -> Self {
        let declaration = serde_json::json!({ "info": &info }).to_string();
        Self { info, declaration }
    }

    /// What the terms say.
    pub fn info(&self) -> &TermsInfo {
        &self.info
    }

    /// The JSON value of `extensions.terms`, as the 402 carries it.
    pub fn declaration(&self) -> &str {
        &self.declaration
    }

    /// The terms a 402's `extensions` declare, if any (a client reading what it is asked to accept).
    pub fn declared_in(
        extensions: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<TermsInfo> {
        let info = extensions.get(KEY)?.get("info")?;
        serde_json::from_value(info.clone()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declaration_round_trips_and_omits_an_absent_version() {
        let t = Terms::new(TermsFormat::Plaintext, "No training.");
        assert_eq!(
            t.declaration(),
            r#"{"info":{"format":"plaintext","terms":"No training."}}"#
        );
        let ext: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&format!(
            r#"{{"terms":{}}}"#,
            Terms::uri("https://a.example/l.xml")
                .version("v2")
                .declaration()
        ))
        .unwrap();
        let info = Terms::declared_in(&ext).unwrap();
        assert_eq!(info.format, TermsFormat::Uri);
        assert_eq!(info.version.as_deref(), Some("v2"));
        assert!(Terms::declared_in(&serde_json::Map::new()).is_none());
    }
}
