//! axum integration (feature `axum`): [`Paginated`] as a response, [`Page`] as an extractor.

use std::convert::Infallible;

use axum::{
    body::Body,
    extract::FromRequestParts,
    http::{HeaderValue, header, request::Parts},
    response::{IntoResponse, Response},
};

use crate::{Page, PageCount};

/// A page answer: the total count and the page's results, already serialised as a JSON array.
///
/// Turns into a `200 application/json` response carrying [`PageCount`], which
/// [`Pagination`](crate::Pagination) wraps in the envelope.
///
/// ```
/// use axum::{Router, routing::get};
/// use registry_pagination::{Page, Paginated, PaginationLayer};
///
/// async fn list(page: Page) -> Paginated {
///     let records: Vec<u64> = (1..=100).collect();
///     let range = page.range(records.len() as u64);
///     let slice = &records[range.start as usize..range.end as usize];
///     Paginated::new(records.len() as u64, serde_json::to_vec(slice).unwrap_or_default())
/// }
///
/// let app: Router = Router::new()
///     .route("/numbers/", get(list))
///     .layer(PaginationLayer::try_new("http://testserver")?);
/// # Ok::<(), registry_pagination::InvalidBaseUrl>(())
/// ```
#[derive(Debug)]
pub struct Paginated<B = Body> {
    count: u64,
    results: B,
}

impl<B> Paginated<B> {
    /// `count` records in the collection; `results` is the page's JSON array (any body).
    pub fn new(count: u64, results: impl Into<B>) -> Self {
        Self {
            count,
            results: results.into(),
        }
    }
}

impl<B> IntoResponse for Paginated<B>
where
    B: Into<Body>,
{
    fn into_response(self) -> Response {
        let mut response = Response::new(self.results.into());
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.extensions_mut().insert(PageCount(self.count));
        response
    }
}

/// Extracts the [`Page`] the layer parsed; without the layer, the query is read with DRF's defaults
/// (200 / 200) so the handler still gets a valid page.
impl<S: Send + Sync> FromRequestParts<S> for Page {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(match parts.extensions.get::<Page>() {
            Some(page) => *page,
            None => {
                tracing::warn!(
                    "no PaginationLayer in front of this handler: reading the page with defaults"
                );
                Page::from_query(
                    parts.uri.query(),
                    crate::DEFAULT_LIMIT,
                    Some(crate::DEFAULT_MAX_LIMIT),
                )
            }
        })
    }
}

impl From<crate::JsonArrayBody> for Body {
    fn from(body: crate::JsonArrayBody) -> Self {
        Body::new(body)
    }
}
