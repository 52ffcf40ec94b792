//! [`ResponseFuture`]: waits for the inner response and, for a page, dresses it in the envelope.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use http::{HeaderMap, HeaderValue, Response, Uri, header};
use http_body::Body;
use pin_project_lite::pin_project;

use crate::{
    Page, PageCount, ResponseBody, envelope::envelope_prefix, layer::Config, links::RequestUrl,
};

/// What the response side needs from the request.
#[derive(Debug)]
pub(crate) struct PageContext {
    pub(crate) config: Arc<Config>,
    /// Origin (and base path prefix) taken from trusted headers, if any.
    pub(crate) origin: Option<String>,
    pub(crate) uri: Uri,
    pub(crate) page: Page,
    pub(crate) head: bool,
}

pin_project! {
    /// Response future of [`Pagination`](crate::Pagination).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        context: Option<PageContext>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, context: PageContext) -> Self {
        Self {
            inner,
            context: Some(context),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let Some(context) = this.context.take() else {
            // Polled again after completion: nothing sensible to wrap, pass through.
            return Poll::Ready(Ok(response.map(ResponseBody::passthrough)));
        };
        Poll::Ready(Ok(wrap(response, context)))
    }
}

/// Wraps a response marked with [`PageCount`] in the envelope; passes any other response through.
fn wrap<B: Body>(response: Response<B>, context: PageContext) -> Response<ResponseBody<B>> {
    let Some(&PageCount(count)) = response.extensions().get::<PageCount>() else {
        return response.map(ResponseBody::passthrough);
    };
    if response
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v != "identity")
    {
        tracing::error!(
            "page response is content-encoded: put compression outside the pagination layer"
        );
        return response.map(ResponseBody::passthrough);
    }
    let PageContext {
        config,
        origin,
        uri,
        page,
        head,
    } = context;
    let origin = origin
        .as_deref()
        .unwrap_or_else(|| config.base_url.as_str());
    let links = RequestUrl::with_origin(origin, uri.path(), uri.query()).links(page, count);
    let prefix = envelope_prefix(count, links.next.as_deref(), links.previous.as_deref());

    let (mut parts, body) = response.into_parts();
    let inner_len = results_len(&parts.headers, body.size_hint().exact(), head);
    let total = inner_len
        .and_then(|n| n.checked_add(prefix.len() as u64 + crate::envelope::SUFFIX.len() as u64));
    match total {
        Some(total) => {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(total));
        }
        None => {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
    }
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if config.link_header {
        match HeaderValue::try_from(links.header_value()) {
            Ok(value) => {
                parts.headers.insert(header::LINK, value);
            }
            Err(_) => {
                tracing::warn!("page links are not a valid header value; Link header left out")
            }
        }
    }
    tracing::trace!(
        count,
        limit = page.limit,
        offset = page.offset,
        "wrapped page response"
    );
    parts.extensions.insert(links);
    let body = if head {
        ResponseBody::empty()
    } else {
        ResponseBody::envelope(prefix, body)
    };
    Response::from_parts(parts, body)
}

/// Length of the handler's results: the body's exact size, or its `Content-Length` header. For HEAD the
/// header comes first (an outer router may already have emptied the body of a GET-shaped response).
fn results_len(headers: &HeaderMap, exact: Option<u64>, head: bool) -> Option<u64> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if head {
        declared.or(exact)
    } else {
        exact.or(declared)
    }
}
