//! The public base URL that absolute links start with, and the opt-in reading of it from request headers.

use std::{fmt, str::FromStr, sync::Arc};

use http::{HeaderMap, Uri, header, uri::Authority};

/// Longest base URL accepted, and longest host taken from a trusted header.
const MAX_BASE_URL_LEN: usize = 2048;
const MAX_HOST_LEN: usize = 255;

/// Why a base URL was refused when the layer was configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBaseUrl {
    /// The text is not a URI at all.
    #[error("base URL is not a valid URI: {0}")]
    Syntax(String),
    /// Only `http` and `https` absolute URLs can start a link.
    #[error("base URL must be an absolute http:// or https:// URL")]
    NotHttp,
    /// User info (`user:pass@`), a query or a fragment has no place in a base URL.
    #[error("base URL must not carry user info, a query or a fragment")]
    Extra,
    /// More than 2048 bytes.
    #[error("base URL is longer than 2048 bytes")]
    TooLong,
}

/// A validated public base URL: `scheme://host[:port]` plus an optional path prefix, without trailing `/`.
///
/// Links are this base + the request path + the rebuilt query.
///
/// ```
/// use registry_pagination::BaseUrl;
///
/// let base: BaseUrl = "https://registry.example.com/".parse()?;
/// assert_eq!(base.as_str(), "https://registry.example.com");
/// let prefixed: BaseUrl = "http://h:8080/mounted/here/".parse()?;
/// assert_eq!(prefixed.as_str(), "http://h:8080/mounted/here");
/// assert!("ftp://h".parse::<BaseUrl>().is_err());
/// assert!("/relative".parse::<BaseUrl>().is_err());
/// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BaseUrl {
    /// `scheme://authority`, lower-case scheme.
    origin: Arc<str>,
    /// Origin followed by the normalised path prefix (no trailing `/`).
    full: Arc<str>,
}

impl BaseUrl {
    /// The base URL as links start with it (never ends with `/`).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.full
    }

    /// The path prefix (empty, or starting with `/` and not ending with it).
    #[must_use]
    pub fn path_prefix(&self) -> &str {
        &self.full[self.origin.len()..]
    }
}

impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BaseUrl").field(&self.full).finish()
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

impl FromStr for BaseUrl {
    type Err = InvalidBaseUrl;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_BASE_URL_LEN {
            return Err(InvalidBaseUrl::TooLong);
        }
        let uri: Uri = s
            .parse()
            .map_err(|e: http::uri::InvalidUri| InvalidBaseUrl::Syntax(e.to_string()))?;
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => "http",
            Some(s) if s.eq_ignore_ascii_case("https") => "https",
            _ => return Err(InvalidBaseUrl::NotHttp),
        };
        let authority = uri.authority().ok_or(InvalidBaseUrl::NotHttp)?;
        if authority.as_str().contains('@') || uri.query().is_some() || s.contains('#') {
            return Err(InvalidBaseUrl::Extra);
        }
        let origin = format!("{scheme}://{authority}");
        let mut full = origin.clone();
        crate::links::push_normalised_path(uri.path(), &mut full);
        while full.len() > origin.len() && full.ends_with('/') {
            full.pop();
        }
        Ok(Self {
            origin: origin.into(),
            full: full.into(),
        })
    }
}

impl TryFrom<&str> for BaseUrl {
    type Error = InvalidBaseUrl;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl TryFrom<String> for BaseUrl {
    type Error = InvalidBaseUrl;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// The origin a trusted proxy says the client used, read from `Forwarded`, then `X-Forwarded-Proto` /
/// `X-Forwarded-Host`, then `Host`. Returns `None` when nothing usable is there (the base URL applies).
///
/// Of comma-separated values the last one is taken: it is the one added by the proxy nearest to this
/// service, the only one a deployment can vouch for.
pub(crate) fn forwarded_origin(headers: &HeaderMap, base: &BaseUrl) -> Option<String> {
    let mut proto = None;
    let mut host = None;
    if let Some(element) = last_value(headers, &header::FORWARDED) {
        for pair in element.split(';') {
            let Some((name, value)) = pair.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match name.trim() {
                n if n.eq_ignore_ascii_case("proto") => proto = Some(value),
                n if n.eq_ignore_ascii_case("host") => host = Some(value),
                _ => {}
            }
        }
    }
    proto = proto.or_else(|| last_value(headers, "x-forwarded-proto"));
    host = host
        .or_else(|| last_value(headers, "x-forwarded-host"))
        .or_else(|| last_value(headers, &header::HOST));
    if proto.is_none() && host.is_none() {
        return None;
    }
    let base_scheme = if base.origin.starts_with("https:") {
        "https"
    } else {
        "http"
    };
    let scheme = match proto {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        Some(p) if p.eq_ignore_ascii_case("http") => "http",
        _ => base_scheme,
    };
    let authority = match host.map(valid_host) {
        Some(Some(h)) => h,
        _ => base
            .origin
            .split_once("://")
            .map_or("", |(_, a)| a)
            .to_owned(),
    };
    Some(format!("{scheme}://{authority}{}", base.path_prefix()))
}

/// A host (with optional port) from a header, if it is a plain authority: no user info, bounded length.
fn valid_host(host: &str) -> Option<String> {
    if host.is_empty() || host.len() > MAX_HOST_LEN || host.contains('@') {
        return None;
    }
    let authority: Authority = host.parse().ok()?;
    Some(authority.as_str().to_ascii_lowercase())
}

/// The last comma-separated value of the last occurrence of a header, trimmed.
fn last_value<K: http::header::AsHeaderName>(headers: &HeaderMap, name: K) -> Option<&str> {
    let value = headers.get_all(name).iter().next_back()?.to_str().ok()?;
    let last = value.rsplit(',').next()?.trim();
    (!last.is_empty()).then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, v.parse().expect("test header"));
        }
        map
    }

    #[test]
    fn parses_and_normalises() {
        let b: BaseUrl = "HTTPS://h".parse().expect("valid");
        assert_eq!(b.as_str(), "https://h");
        assert_eq!(b.path_prefix(), "");
        let b: BaseUrl = "http://h:81/p/".parse().expect("valid");
        assert_eq!(b.as_str(), "http://h:81/p");
        assert_eq!(b.path_prefix(), "/p");
    }

    #[test]
    fn refuses_bad_base_urls() {
        assert_eq!("ftp://h".parse::<BaseUrl>(), Err(InvalidBaseUrl::NotHttp));
        assert_eq!("h".parse::<BaseUrl>(), Err(InvalidBaseUrl::NotHttp));
        assert_eq!("http://u@h".parse::<BaseUrl>(), Err(InvalidBaseUrl::Extra));
        assert_eq!(
            "http://h/?a=1".parse::<BaseUrl>(),
            Err(InvalidBaseUrl::Extra)
        );
        assert!(matches!(
            "http://h h".parse::<BaseUrl>(),
            Err(InvalidBaseUrl::Syntax(_))
        ));
        assert_eq!(
            format!("http://h/{}", "a".repeat(3000)).parse::<BaseUrl>(),
            Err(InvalidBaseUrl::TooLong)
        );
    }

    #[test]
    fn forwarded_headers() {
        let base: BaseUrl = "http://internal:8000/pre".parse().expect("valid");
        let o = |h: &[(&'static str, &'static str)]| forwarded_origin(&headers(h), &base);
        assert_eq!(o(&[]), None);
        assert_eq!(
            o(&[("host", "Public.Example")]).as_deref(),
            Some("http://public.example/pre")
        );
        assert_eq!(
            o(&[
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "evil, pub.example:8443"),
                ("host", "x")
            ])
            .as_deref(),
            Some("https://pub.example:8443/pre")
        );
        assert_eq!(
            o(&[
                ("forwarded", "for=1.2.3.4;proto=https;host=\"f.example\""),
                ("x-forwarded-host", "x")
            ])
            .as_deref(),
            Some("https://f.example/pre")
        );
        // An unusable host falls back to the configured one; an unknown proto to the configured scheme.
        assert_eq!(
            o(&[("host", "a@b"), ("x-forwarded-proto", "gopher")]).as_deref(),
            Some("http://internal:8000/pre")
        );
    }
}
