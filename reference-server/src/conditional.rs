//! Strong ETags and `If-None-Match` → `304 Not Modified` for responses whose bytes are the resource: the
//! catalog, the OpenAPI document, receipts and their certificates, media files.
//!
//! The ETag is a hash of the response body (and its content type), so it changes exactly when the bytes do,
//! whichever instance answers. Applied as a route layer to those routes only; the body is already in
//! memory for all of them (at most a media file, capped by the upload limit), and bodies larger than
//! [`MAX_BODY`] pass through untagged. The registry's listing pages have their own cache and ETags
//! (`registry::page_cache`).

use std::hash::{Hash, Hasher};

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode, header};

/// Largest body given an ETag.
pub const MAX_BODY: usize = 32 * 1024 * 1024;

/// Whether `If-None-Match` (a list, weak forms allowed) names `etag`.
pub fn none_match(if_none_match: Option<&HeaderValue>, etag: &HeaderValue) -> bool {
    let (Some(v), Ok(etag)) = (if_none_match.and_then(|v| v.to_str().ok()), etag.to_str()) else {
        return false;
    };
    v.split(',')
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == etag)
}

/// The middleware: tags a successful GET/HEAD answer and answers 304 when the client has those bytes.
pub async fn etag(request: Request, next: Next) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return next.run(request).await;
    }
    let if_none_match = request.headers().get(header::IF_NONE_MATCH).cloned();
    let response = next.run(request).await;
    if response.status() != StatusCode::OK || response.headers().contains_key(header::ETAG) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .map(HeaderValue::as_bytes)
        .hash(&mut h);
    let tag = HeaderValue::from_str(&format!("\"b{:016x}-{}\"", h.finish(), bytes.len()))
        .unwrap_or(HeaderValue::from_static("\"body\""));
    if none_match(if_none_match.as_ref(), &tag) {
        let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
        for name in [header::ETAG, header::CACHE_CONTROL, header::VARY] {
            if let Some(v) = parts.headers.get(&name) {
                not_modified.headers_mut().insert(name, v.clone());
            }
        }
        not_modified.headers_mut().insert(header::ETAG, tag);
        return not_modified;
    }
    parts.headers.insert(header::ETAG, tag);
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_weak_forms_and_star() {
        let t = HeaderValue::from_static("\"p1-5\"");
        let m = |v: &str| none_match(Some(&HeaderValue::from_str(v).unwrap()), &t);
        assert!(m("\"p1-5\""));
        assert!(m("\"x\", W/\"p1-5\""));
        assert!(m("*"));
        assert!(!m("\"p1-6\""));
        assert!(!none_match(None, &t));
    }
}
