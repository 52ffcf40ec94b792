//! [`ResponseBody`]: the handler's body, untouched, between the envelope's opening and closing bytes.

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::envelope::SUFFIX;

pin_project! {
    /// Response body of [`Pagination`](crate::Pagination): the inner body as is, or wrapped in the envelope.
    ///
    /// The inner body's frames are handed on without being read or copied; the envelope adds one frame
    /// before them and one after them.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Passthrough { #[pin] body: B },
        Envelope {
            #[pin]
            body: B,
            prefix: Option<Bytes>,
            inner_done: bool,
            suffix_pending: bool,
            trailers: Option<HeaderMap>,
        },
        Empty,
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn passthrough(body: B) -> Self {
        Self {
            kind: Kind::Passthrough { body },
        }
    }

    pub(crate) fn envelope(prefix: Bytes, body: B) -> Self {
        Self {
            kind: Kind::Envelope {
                body,
                prefix: Some(prefix),
                inner_done: false,
                suffix_pending: true,
                trailers: None,
            },
        }
    }

    pub(crate) fn empty() -> Self {
        Self { kind: Kind::Empty }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Passthrough { .. } => "Passthrough",
            Kind::Envelope { .. } => "Envelope",
            Kind::Empty => "Empty",
        };
        f.debug_struct("ResponseBody")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Passthrough { body } => body.poll_frame(cx),
            KindProj::Empty => Poll::Ready(None),
            KindProj::Envelope {
                body,
                prefix,
                inner_done,
                suffix_pending,
                trailers,
            } => {
                if let Some(prefix) = prefix.take() {
                    return Poll::Ready(Some(Ok(Frame::data(prefix.into()))));
                }
                if !*inner_done {
                    match ready!(body.poll_frame(cx)) {
                        Some(Ok(frame)) => match frame.into_trailers() {
                            // Trailers must come after the closing brace: keep them for the end.
                            Ok(t) => {
                                *trailers = Some(t);
                                *inner_done = true;
                            }
                            Err(frame) => return Poll::Ready(Some(Ok(frame))),
                        },
                        Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                        None => *inner_done = true,
                    }
                }
                if std::mem::take(suffix_pending) {
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(SUFFIX).into()))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough { body } => body.is_end_stream(),
            Kind::Empty => true,
            Kind::Envelope {
                prefix,
                suffix_pending,
                trailers,
                ..
            } => prefix.is_none() && !*suffix_pending && trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { body } => body.size_hint(),
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Envelope {
                body,
                prefix,
                inner_done,
                suffix_pending,
                ..
            } => {
                let own = prefix.as_ref().map_or(0, Bytes::len) as u64
                    + if *suffix_pending {
                        SUFFIX.len() as u64
                    } else {
                        0
                    };
                let inner = if *inner_done {
                    SizeHint::with_exact(0)
                } else {
                    body.size_hint()
                };
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(own));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(own));
                }
                hint
            }
        }
    }
}
