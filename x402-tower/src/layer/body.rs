//! [`ResponseBody`]: the inner service's body, or one the layer wrote.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a response from [`X402`](super::X402): the inner service's, or the layer's own
    /// (a 402, a 502). `Error = B::Error`: the layer adds no error type of its own.
    #[project = ResponseBodyProj]
    #[derive(Debug)]
    #[allow(missing_docs)] // the fields: `body`

    pub enum ResponseBody<B> {
        /// Written by the layer.
        Early {
            #[pin]
            body: Full<Bytes>,
        },
        /// The inner service's body, untouched.
        Inner {
            #[pin]
            body: B,
        },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn early(body: Full<Bytes>) -> Self {
        ResponseBody::Early { body }
    }

    pub(crate) fn inner(body: B) -> Self {
        ResponseBody::Inner { body }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            ResponseBodyProj::Early { body } => match body.poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            ResponseBodyProj::Inner { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Early { body } => body.is_end_stream(),
            ResponseBody::Inner { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Early { body } => body.size_hint(),
            ResponseBody::Inner { body } => body.size_hint(),
        }
    }
}
