//! Listing pages served from a bounded cache, compressed once, with strong ETags.
//!
//! A page of the collection is determined by: the request's query (`limit`, `offset`, `format`) and
//! `Accept` header (JSON or the browsable HTML), the signed URLs' `Expires` (rounded down to a minute, so it changes once a minute) and the collection's
//! content. Assets are only ever added (no update, no delete), so the content is determined by `count`,
//! which the store reads from an index edge. A GET therefore costs one `count` read; within the same
//! minute and count, the page's bytes are identical and come from this cache:
//!
//! - `If-None-Match` with the page's ETag → `304 Not Modified` without reading the page;
//! - a hit → the stored bytes, in the encoding the client accepts (`zstd`, `br`, `gzip`, or identity),
//!   each encoding compressed once per page and kept beside it;
//! - a miss → the page is built as before (store read, render, DRF envelope), then stored.
//!
//! Every answer says `Vary: Accept, Accept-Encoding`. The cache holds at most [`CACHE_BYTES`] of pages
//! (all their encodings) and evicts the least useful. With several instances, each has its own cache; the
//! key is the same everywhere (same signing key, same count), so their ETags agree.

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::sync::{Arc, OnceLock};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};

use super::Registry;
use crate::web::clock::unix_now;

/// Bytes of pages (identity plus compressed encodings) the cache holds at most.
pub(crate) const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Largest page body stored (a 200-record page is ~1.3 MB).
const MAX_PAGE: usize = 16 * 1024 * 1024;

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    query: String,
    /// The `Accept` header: it chooses JSON or the browsable HTML.
    accept: String,
    expires: u64,
    count: u64,
}

/// One cached page: what the handler answered, and its encodings once made.
pub(crate) struct CachedPage {
    headers: HeaderMap,
    identity: Bytes,
    zstd: OnceLock<Bytes>,
    br: OnceLock<Bytes>,
    gzip: OnceLock<Bytes>,
}

#[derive(Clone)]
struct Weight;

impl quick_cache::Weighter<Key, Arc<CachedPage>> for Weight {
    fn weight(&self, _: &Key, page: &Arc<CachedPage>) -> u64 {
        // Counted as if every encoding were present (at most ~1.4x the identity bytes).
        (page.identity.len() as u64 * 14 / 10).max(1)
    }
}

/// The cache of one registry.
pub(crate) struct PageCache {
    pages: quick_cache::sync::Cache<Key, Arc<CachedPage>, Weight>,
}

impl Default for PageCache {
    fn default() -> Self {
        Self {
            pages: quick_cache::sync::Cache::with_weighter(256, CACHE_BYTES, Weight),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Encoding {
    Zstd,
    Br,
    Gzip,
    Identity,
}

impl Encoding {
    /// The best encoding `accept` allows (q-values of 0 refuse; otherwise zstd, br, gzip in that order).
    fn choose(accept: Option<&HeaderValue>) -> Self {
        let Some(accept) = accept.and_then(|v| v.to_str().ok()) else {
            return Encoding::Identity;
        };
        let allows = |name: &str| {
            accept.split(',').any(|part| {
                let mut it = part.split(';');
                let coding = it.next().unwrap_or("").trim();
                let refused = it.any(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                (coding.eq_ignore_ascii_case(name) || coding == "*") && !refused
            })
        };
        [
            (Encoding::Zstd, "zstd"),
            (Encoding::Br, "br"),
            (Encoding::Gzip, "gzip"),
        ]
        .into_iter()
        .find(|(_, name)| allows(name))
        .map_or(Encoding::Identity, |(e, _)| e)
    }

    fn name(self) -> Option<&'static str> {
        match self {
            Encoding::Zstd => Some("zstd"),
            Encoding::Br => Some("br"),
            Encoding::Gzip => Some("gzip"),
            Encoding::Identity => None,
        }
    }
}

impl CachedPage {
    fn body(&self, encoding: Encoding) -> Bytes {
        let compress = |slot: &OnceLock<Bytes>, f: fn(&[u8]) -> std::io::Result<Vec<u8>>| {
            slot.get_or_init(|| match f(&self.identity) {
                Ok(b) => Bytes::from(b),
                // Cannot happen writing to memory; serve uncompressed bytes under the name rather than fail.
                Err(e) => {
                    tracing::error!(error = %e, "compressing a page failed");
                    Bytes::new()
                }
            })
            .clone()
        };
        match encoding {
            Encoding::Zstd => compress(&self.zstd, |b| zstd::bulk::compress(b, 1)),
            Encoding::Br => compress(&self.br, |b| {
                let mut out = Vec::with_capacity(b.len() / 4);
                let params = brotli::enc::BrotliEncoderParams {
                    quality: 2,
                    ..Default::default()
                };
                brotli::BrotliCompress(&mut &b[..], &mut out, &params)?;
                Ok(out)
            }),
            Encoding::Gzip => compress(&self.gzip, |b| {
                let mut e = flate2::write::GzEncoder::new(
                    Vec::with_capacity(b.len() / 4),
                    flate2::Compression::new(1),
                );
                e.write_all(b)?;
                e.finish()
            }),
            Encoding::Identity => self.identity.clone(),
        }
    }

    fn respond(&self, encoding: Encoding) -> Response {
        let body = self.body(encoding);
        let (encoding, body) = if body.is_empty() && !self.identity.is_empty() {
            (Encoding::Identity, self.identity.clone())
        } else {
            (encoding, body)
        };
        let mut response = Response::new(Body::from(body));
        *response.headers_mut() = self.headers.clone();
        if let Some(name) = encoding.name() {
            response
                .headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static(name));
        }
        response.headers_mut().remove(header::CONTENT_LENGTH);
        response
    }
}

fn etag(key: &Key) -> HeaderValue {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    let digest = h.finish();
    HeaderValue::from_str(&format!("\"p{digest:016x}-{}\"", key.count))
        .unwrap_or(HeaderValue::from_static("\"page\""))
}

fn vary(headers: &mut HeaderMap) {
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    );
}

/// The collection's GET through the cache (other methods pass through).
pub(crate) async fn serve(
    State(reg): State<Arc<Registry>>,
    request: Request,
    next: Next,
) -> Response {
    let head = request.method() == Method::HEAD;
    if !head && request.method() != Method::GET {
        return next.run(request).await;
    }
    let count = match reg.store.count().await {
        Ok(c) => c,
        // The handler reads the page and answers the store's error itself.
        Err(_) => return next.run(request).await,
    };
    let key = Key {
        query: request.uri().query().unwrap_or("").to_owned(),
        accept: request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map_or_else(String::new, |v| v[..v.floor_char_boundary(512)].to_owned()),
        expires: reg.signer.expires_at(unix_now()),
        count,
    };
    let tag = etag(&key);
    let encoding = Encoding::choose(request.headers().get(header::ACCEPT_ENCODING));
    if crate::web::conditional::none_match(request.headers().get(header::IF_NONE_MATCH), &tag) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        response.headers_mut().insert(header::ETAG, tag);
        vary(response.headers_mut());
        return response;
    }
    if let Some(page) = reg.pages.pages.get(&key) {
        // HEAD: hyper sends the headers and the length, not the body.
        return page.respond(encoding);
    }
    let mut response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    if head {
        // axum answered HEAD without the body: nothing to cache.
        response.headers_mut().insert(header::ETAG, tag);
        vary(response.headers_mut());
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let identity = match axum::body::to_bytes(body, MAX_PAGE).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "reading a rendered page failed");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    parts.headers.insert(header::ETAG, tag);
    vary(&mut parts.headers);
    parts.headers.remove(header::CONTENT_LENGTH);
    let page = Arc::new(CachedPage {
        headers: parts.headers,
        identity,
        zstd: OnceLock::new(),
        br: OnceLock::new(),
        gzip: OnceLock::new(),
    });
    let answer = page.respond(encoding);
    reg.pages.pages.insert(key, page);
    answer
}

impl std::fmt::Debug for CachedPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedPage")
            .field("etag", &self.headers.get(header::ETAG))
            .field("bytes", &self.identity.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chooses_the_best_accepted_encoding() {
        let e = |v: &str| Encoding::choose(Some(&HeaderValue::from_str(v).unwrap()));
        assert_eq!(Encoding::choose(None), Encoding::Identity);
        assert_eq!(e("gzip, deflate, br, zstd"), Encoding::Zstd);
        assert_eq!(e("gzip, deflate, br"), Encoding::Br);
        assert_eq!(e("gzip"), Encoding::Gzip);
        assert_eq!(e("zstd;q=0, gzip"), Encoding::Gzip);
        assert_eq!(e("identity"), Encoding::Identity);
        assert_eq!(e("*"), Encoding::Zstd);
    }
}
