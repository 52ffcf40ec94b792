//! License terms: what a buyer of an article may do with it, in RSL 1.0's vocabulary.
//!
//! Every article is sold under one or more [`License`]s, each with its own price: what it permits and
//! prohibits by usage (`search ai-input` permitted, `ai-train` prohibited...) and by user type. An
//! article stored without licenses is sold under the site's default terms ([`DefaultTerms`], from
//! `--license-permits`, `--license-prohibits`, `--license-users`) at its own price. Two licenses on one
//! article are two offers in its 402, one per license; `&license=<id>` asks for one.
//!
//! The terms are published as an RSL 1.0 document (`crate::licensing::rsl`) and declared in each article's
//! 402 with the x402 `terms` extension: its `version` ([`version`]) changes whenever the article's licenses
//! change, and each receipt records the license id and the version it was bought under.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::Article;

/// RSL 1.0 usage tokens (`<permits type="usage">`).
pub const USAGES: &[&str] = &[
    "all", "ai-all", "ai-train", "ai-input", "ai-index", "search",
];

/// RSL 1.0 user types (`<permits type="user">`).
pub const USER_TYPES: &[&str] = &[
    "commercial",
    "non-commercial",
    "education",
    "government",
    "personal",
];

/// Longest license id.
pub const MAX_LICENSE_ID: usize = 32;

/// Most licenses one article is sold under.
pub const MAX_LICENSES: usize = 4;

/// The RSL media type.
pub const RSL_MEDIA_TYPE: &str = "application/rsl+xml";

/// One license of an article: what it allows, for how much.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct License {
    /// Short id, unique within the article (`inference`, `training`); the `license` query parameter.
    pub id: String,
    /// Usages permitted (RSL usage tokens).
    #[serde(default)]
    pub permits: Vec<String>,
    /// Usages prohibited.
    #[serde(default)]
    pub prohibits: Vec<String>,
    /// User types permitted (empty: any).
    #[serde(default)]
    pub users: Vec<String>,
    /// Price in USDC atomic units.
    pub price_atomic: u64,
}

/// The site-wide terms of articles stored without licenses of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultTerms {
    /// Usages permitted.
    pub permits: Vec<String>,
    /// Usages prohibited.
    pub prohibits: Vec<String>,
    /// User types permitted (empty: any).
    pub users: Vec<String>,
}

impl Default for DefaultTerms {
    /// Search and AI input (answering with the article) permitted, training prohibited, any user.
    fn default() -> Self {
        Self {
            permits: vec!["search".into(), "ai-input".into()],
            prohibits: vec!["ai-train".into()],
            users: Vec::new(),
        }
    }
}

/// The id of the license an article without licenses of its own is sold under.
pub const DEFAULT_LICENSE_ID: &str = "standard";

/// Why license terms are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LicenseError {
    /// A token is not in RSL 1.0's vocabulary.
    #[error("{token:?} is not an RSL {kind} (one of: {allowed})")]
    UnknownToken {
        /// `usage` or `user type`.
        kind: &'static str,
        /// The token.
        token: String,
        /// The vocabulary.
        allowed: String,
    },
    /// A usage is both permitted and prohibited.
    #[error("{0:?} is both permitted and prohibited")]
    Contradiction(String),
    /// A license id is empty, too long, not `[a-z0-9-]`, or used twice.
    #[error("license id {0:?} must be 1 to 32 of a-z, 0-9, '-' and unique within the article")]
    BadId(String),
    /// No license, or more than [`MAX_LICENSES`].
    #[error("an article has 1 to {MAX_LICENSES} licenses, not {0}")]
    Count(usize),
    /// A license is free (this server sells every license).
    #[error("license {0:?} has no price")]
    Free(String),
    /// The stored licenses are not the JSON this module writes.
    #[error("stored licenses are unreadable: {0}")]
    Stored(String),
}

/// Splits a space- or comma-separated list of tokens and checks each against `vocabulary`.
pub fn parse_tokens(
    list: &str,
    kind: &'static str,
    vocabulary: &[&str],
) -> Result<Vec<String>, LicenseError> {
    let mut out: Vec<String> = Vec::new();
    for token in list.split([' ', ',']).filter(|t| !t.is_empty()) {
        if !vocabulary.contains(&token) {
            return Err(LicenseError::UnknownToken {
                kind,
                token: token.to_owned(),
                allowed: vocabulary.join(" "),
            });
        }
        if !out.iter().any(|t| t == token) {
            out.push(token.to_owned());
        }
    }
    Ok(out)
}

impl DefaultTerms {
    /// Checks the vocabulary and that nothing is both permitted and prohibited.
    pub fn validate(&self) -> Result<(), LicenseError> {
        check_terms(&self.permits, &self.prohibits, &self.users)
    }
}

fn check_terms(
    permits: &[String],
    prohibits: &[String],
    users: &[String],
) -> Result<(), LicenseError> {
    for (list, kind, vocabulary) in [
        (permits, "usage", USAGES),
        (prohibits, "usage", USAGES),
        (users, "user type", USER_TYPES),
    ] {
        parse_tokens(&list.join(" "), kind, vocabulary)?;
    }
    if let Some(both) = permits.iter().find(|p| prohibits.contains(p)) {
        return Err(LicenseError::Contradiction(both.clone()));
    }
    Ok(())
}

/// Checks an article's own licenses (ids, vocabulary, prices, count).
pub fn validate(licenses: &[License]) -> Result<(), LicenseError> {
    if licenses.is_empty() || licenses.len() > MAX_LICENSES {
        return Err(LicenseError::Count(licenses.len()));
    }
    for (i, l) in licenses.iter().enumerate() {
        let id_ok = !l.id.is_empty()
            && l.id.len() <= MAX_LICENSE_ID
            && l.id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !licenses[..i].iter().any(|o| o.id == l.id);
        if !id_ok {
            return Err(LicenseError::BadId(l.id.clone()));
        }
        if l.price_atomic == 0 {
            return Err(LicenseError::Free(l.id.clone()));
        }
        check_terms(&l.permits, &l.prohibits, &l.users)?;
    }
    Ok(())
}

/// Stored form of an article's own licenses (`None` for the site default).
pub fn to_stored(licenses: &[License]) -> Option<String> {
    (!licenses.is_empty()).then(|| serde_json::to_string(licenses).unwrap_or_default())
}

/// An article's own licenses from their stored form (`NULL`: none, the site default applies).
pub fn from_stored(stored: Option<&str>) -> Result<Vec<License>, LicenseError> {
    let Some(text) = stored else {
        return Ok(Vec::new());
    };
    let licenses: Vec<License> =
        serde_json::from_str(text).map_err(|e| LicenseError::Stored(e.to_string()))?;
    validate(&licenses)?;
    Ok(licenses)
}

/// The licenses `article` is sold under: its own, or the site's default terms at its price.
pub fn effective(article: &Article, default: &DefaultTerms) -> Vec<License> {
    if !article.licenses.is_empty() {
        return article.licenses.clone();
    }
    vec![License {
        id: DEFAULT_LICENSE_ID.to_owned(),
        permits: default.permits.clone(),
        prohibits: default.prohibits.clone(),
        users: default.users.clone(),
        price_atomic: article.price_atomic,
    }]
}

/// The version of an article's terms: changes whenever one of its licenses (terms or price) changes.
/// The first 16 hex digits of SHA-256 over the licenses' canonical JSON.
pub fn version(licenses: &[License]) -> String {
    let json = serde_json::to_vec(licenses).unwrap_or_default();
    hex::encode(&Sha256::digest(&json)[..8])
}

/// A sentence saying what a license allows (offer descriptions, llms.txt, the certificate).
pub fn summary(l: &License) -> String {
    let mut s = String::new();
    if !l.permits.is_empty() {
        s.push_str("permits ");
        s.push_str(&l.permits.join(", "));
    }
    if !l.prohibits.is_empty() {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str("prohibits ");
        s.push_str(&l.prohibits.join(", "));
    }
    if !l.users.is_empty() {
        s.push_str("; for ");
        s.push_str(&l.users.join(", "));
        s.push_str(" users");
    }
    s
}

/// What a license allows, in words for a person (the paywall): `Allows search engines and AI answers. Not
/// AI training. For non-commercial and education users.`
pub fn in_words(l: &License) -> String {
    fn usage(token: &str) -> &str {
        match token {
            "all" => "every use",
            "ai-all" => "every AI use",
            "ai-train" => "AI training",
            "ai-input" => "AI answers (read as input)",
            "ai-index" => "AI indexing",
            "search" => "search engines",
            other => other,
        }
    }
    fn list(items: &[String], word: fn(&str) -> &str) -> String {
        let words: Vec<&str> = items.iter().map(|t| word(t)).collect();
        match words.as_slice() {
            [] => String::new(),
            [one] => (*one).to_owned(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        }
    }
    let mut s = Vec::new();
    if !l.permits.is_empty() {
        s.push(format!("Allows {}.", list(&l.permits, usage)));
    }
    if !l.prohibits.is_empty() {
        s.push(format!("Not {}.", list(&l.prohibits, usage)));
    }
    if !l.users.is_empty() {
        s.push(format!("For {} users.", list(&l.users, |u| u)));
    }
    s.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::licensing::rsl::*;

    fn lic(id: &str, permits: &str, prohibits: &str, price: u64) -> License {
        License {
            id: id.into(),
            permits: permits.split_whitespace().map(String::from).collect(),
            prohibits: prohibits.split_whitespace().map(String::from).collect(),
            users: Vec::new(),
            price_atomic: price,
        }
    }

    #[test]
    fn vocabulary_ids_prices_and_contradictions_are_checked() {
        assert!(validate(&[lic("inference", "search ai-input", "ai-train", 1)]).is_ok());
        assert!(matches!(
            validate(&[lic("a", "ai-training", "", 1)]),
            Err(LicenseError::UnknownToken { .. })
        ));
        assert_eq!(
            validate(&[lic("a", "ai-train", "ai-train", 1)]),
            Err(LicenseError::Contradiction("ai-train".into()))
        );
        assert!(matches!(
            validate(&[lic("a", "", "", 1), lic("a", "", "", 2)]),
            Err(LicenseError::BadId(_))
        ));
        assert!(matches!(
            validate(&[lic("Bad Id", "", "", 1)]),
            Err(LicenseError::BadId(_))
        ));
        assert!(matches!(
            validate(&[lic("a", "", "", 0)]),
            Err(LicenseError::Free(_))
        ));
        assert!(matches!(validate(&[]), Err(LicenseError::Count(0))));
        assert_eq!(
            parse_tokens("search, ai-input search", "usage", USAGES).unwrap(),
            ["search", "ai-input"]
        );
    }

    #[test]
    fn a_license_in_words() {
        let mut l = lic("inference", "search ai-input", "ai-train", 1);
        assert_eq!(
            in_words(&l),
            "Allows search engines and AI answers (read as input). Not AI training."
        );
        l.users = vec!["non-commercial".into(), "education".into()];
        l.permits.push("ai-index".into());
        assert_eq!(
            in_words(&l),
            "Allows search engines, AI answers (read as input) and AI indexing. Not AI training. \
             For non-commercial and education users."
        );
    }

    #[test]
    fn the_version_changes_with_the_terms_and_the_price_only() {
        let a = [lic("inference", "search ai-input", "ai-train", 10)];
        assert_eq!(version(&a), version(&a.clone()));
        assert_eq!(version(&a).len(), 16);
        let mut cheaper = a.clone();
        cheaper[0].price_atomic = 9;
        assert_ne!(version(&a), version(&cheaper));
        let mut training = a.clone();
        training[0].prohibits.clear();
        assert_ne!(version(&a), version(&training));
    }

    #[test]
    fn stored_licenses_round_trip_and_null_means_the_default() {
        let a = vec![lic("inference", "search", "ai-train", 10)];
        assert_eq!(from_stored(to_stored(&a).as_deref()).unwrap(), a);
        assert!(from_stored(None).unwrap().is_empty());
        assert!(to_stored(&[]).is_none());
        assert!(from_stored(Some("[]")).is_err());
    }

    #[test]
    fn the_rsl_document_escapes_and_lists_every_license() {
        let contents = [rsl_content(
            "https://news.example",
            "a&b",
            &[
                lic("inference", "search ai-input", "ai-train", 20_000),
                lic("training", "ai-train search ai-input", "", 100_000),
            ],
        )];
        let xml = rsl_document("https://news.example", &contents);
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
        assert!(xml.contains("<rsl xmlns=\"https://rslstandard.org/rsl\">"));
        assert!(xml.contains("url=\"https://news.example/x402Article?articleId=a%26b\""));
        assert_eq!(xml.matches("<license>").count(), 2);
        assert!(xml.contains("<prohibits type=\"usage\">ai-train</prohibits>"));
        assert!(xml.contains("<amount currency=\"USD\">0.1</amount>"));
        assert!(!xml.contains("<prohibits type=\"usage\"></prohibits>"));
    }
}
