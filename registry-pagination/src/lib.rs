//! Django REST Framework's `LimitOffsetPagination`, exactly, as a Tower layer.
//!
//! Clients written against a DRF list endpoint (`?limit=&offset=`, the envelope
//! `{"count","next","previous","results"}`) keep working byte for byte against a Tower or axum service:
//!
//! 1. [`PaginationLayer`] reads `limit` and `offset` from the query with DRF's rules (defaults, clamp to
//!    `max_limit`, last value wins, bad values fall back silently, saturating arithmetic) and inserts the
//!    [`Page`] into the request extensions. It never touches the request body.
//! 2. The handler fetches records `[offset, offset + limit)` and the total count, and answers with the
//!    page's results **already serialised as a JSON array** as its body, marking the response with a
//!    [`PageCount`] extension (or returning `Paginated` with the `axum` feature).
//! 3. The layer streams `{"count":N,"next":...,"previous":...,"results":` + the handler's body frames,
//!    untouched and uncopied + `}`, fixes `Content-Length`, sets `Content-Type: application/json` and adds
//!    an RFC 8288 `Link` header (`next`, `prev`, `first`, `last`). Responses without the marker (errors,
//!    other routes) pass through untouched.
//!
//! Links are the configured public base URL + the request path + the request's query rebuilt as DRF does
//! (keys sorted, `limit` always written, `offset` dropped on the way back to the first page, form-style
//! encoding). Reading the host from `Host` / `X-Forwarded-*` / `Forwarded` is an opt-in
//! ([`PaginationLayer::trust_forwarded_headers`]).
//!
//! # Example with a bare `tower::Service`
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use registry_pagination::{Page, PageCount, PaginationLayer};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let records: Vec<u32> = (1..=100).collect();
//! let service = ServiceBuilder::new()
//!     .layer(PaginationLayer::try_new("http://testserver")?.default_limit(10).max_limit(Some(15)))
//!     .service(service_fn(move |req: Request<()>| {
//!         let page = req.extensions().get::<Page>().copied().unwrap_or(Page { limit: 10, offset: 0 });
//!         let range = page.range(records.len() as u64);
//!         let json = serde_json::to_vec(&records[range.start as usize..range.end as usize]);
//!         async move {
//!             let mut response = Response::new(Full::new(Bytes::from(json?)));
//!             response.extensions_mut().insert(PageCount(100));
//!             Ok::<_, serde_json::Error>(response)
//!         }
//!     }));
//!
//! let response = service.oneshot(Request::get("/?limit=5&offset=1").body(())?).await?;
//! assert_eq!(response.headers()["content-type"], "application/json");
//! let body = response.into_body().collect().await?.to_bytes();
//! assert_eq!(
//!     body,
//!     r#"{"count":100,"next":"http://testserver/?limit=5&offset=6","previous":"http://testserver/?limit=5","results":[2,3,4,5,6]}"#,
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # Exactness
//!
//! The integration tests replay 624 responses rendered by the real DRF 3.18.3 (pagination.md's table, DRF's
//! own unit-test cases and random requests with repeated, invalid and lenient values, odd escapes and
//! paths) and compare the bodies byte for byte. The only intended difference: numbers saturate at
//! `u64::MAX` where Python's are unbounded.
//!
//! # HEAD
//!
//! For a HEAD request the layer returns the GET headers (`Content-Length` included) and an empty body. The
//! results length is taken from the handler's `Content-Length` header first (an inner axum router empties
//! HEAD bodies but keeps that header), else from the body's exact size.
//!
//! # Pure functions
//!
//! The rules are usable without Tower: [`Page::from_query`], [`RequestUrl`] (`next`, `previous`, `first`,
//! `last`), [`next_url`] / [`previous_url`], [`SortedQuery`] (DRF's query re-encoding) and
//! [`envelope_prefix`].
//!
//! # Features
//!
//! - `axum`: `Paginated` (an `IntoResponse` page), `Page` as an extractor, and links built from axum's
//!   `OriginalUri` so that a layer inside a nested router still writes the full path.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

#[cfg(feature = "axum")]
mod axum;
mod base_url;
mod body;
mod envelope;
mod future;
mod layer;
mod links;
mod page;
mod query;
mod results;
mod service;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use crate::axum::Paginated;
pub use crate::{
    base_url::{BaseUrl, InvalidBaseUrl},
    body::ResponseBody,
    envelope::envelope_prefix,
    future::ResponseFuture,
    layer::{DEFAULT_LIMIT, DEFAULT_MAX_LIMIT, PaginationLayer},
    links::{Links, RequestUrl, next_url, previous_url},
    page::{LIMIT_PARAM, OFFSET_PARAM, Page, PageCount},
    query::{QueryEdit, SortedQuery},
    results::JsonArrayBody,
    service::Pagination,
};

/// The URI links are built from: axum's `OriginalUri` (the path before `nest` stripped it) when present.
fn request_uri<B>(req: &http::Request<B>) -> http::Uri {
    #[cfg(feature = "axum")]
    if let Some(::axum::extract::OriginalUri(uri)) = req.extensions().get() {
        return uri.clone();
    }
    req.uri().clone()
}
