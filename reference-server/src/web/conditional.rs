//! Strong ETags and `If-None-Match` → `304 Not Modified` for responses whose bytes are the resource: the
//! catalog, the OpenAPI document, receipts and their certificates, media files.
//!
//! A handler that knows its ETag sets it (a media file's CID, the OpenAPI document's hash computed once at
//! start); otherwise the ETag is a hash of the response body (and its content type), so it changes exactly
//! when the bytes do, whichever instance answers. Either way this middleware answers `If-None-Match`. Applied as a route layer to those routes only; the body is already in
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

/// The strong ETag of `body` served as `content_type`.
pub fn body_etag(body: &[u8], content_type: Option<&HeaderValue>) -> HeaderValue {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    content_type.map(HeaderValue::as_bytes).hash(&mut h);
    HeaderValue::from_str(&format!("\"b{:016x}-{}\"", h.finish(), body.len()))
        .unwrap_or(HeaderValue::from_static("\"body\""))
}

/// `304 Not Modified` for a response tagged `etag`, keeping the headers a cache needs.
fn not_modified(headers: &http::HeaderMap, etag: HeaderValue) -> Response {
    let mut response = StatusCode::NOT_MODIFIED.into_response();
    for name in [header::CACHE_CONTROL, header::VARY] {
        if let Some(v) = headers.get(&name) {
            response.headers_mut().insert(name, v.clone());
        }
    }
    response.headers_mut().insert(header::ETAG, etag);
    response
}

/// The middleware: tags a successful GET/HEAD answer and answers 304 when the client has those bytes.
pub async fn etag(request: Request, next: Next) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return next.run(request).await;
    }
    let if_none_match = request.headers().get(header::IF_NONE_MATCH).cloned();
    let response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    // Tagged by the handler: no need to read the body.
    if let Some(tag) = response.headers().get(header::ETAG).cloned() {
        return if none_match(if_none_match.as_ref(), &tag) {
            not_modified(response.headers(), tag)
        } else {
            response
        };
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let tag = body_etag(&bytes, parts.headers.get(header::CONTENT_TYPE));
    if none_match(if_none_match.as_ref(), &tag) {
        return not_modified(&parts.headers, tag);
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
