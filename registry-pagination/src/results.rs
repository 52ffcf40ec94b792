//! [`JsonArrayBody`]: a JSON array streamed from records already serialised one by one.

use std::{
    collections::VecDeque,
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// A body that streams `[` + record₁ + `,` + record₂ + … + `]` from records already serialised to JSON,
/// without copying them: each record is its own frame.
///
/// Use it when the handler has the page's records as separate JSON fragments (for example cached per
/// record); a handler that has the whole array in one buffer can use any body (`Full<Bytes>`, `String`).
///
/// ```
/// use bytes::Bytes;
/// use http_body::Body as _;
/// use registry_pagination::JsonArrayBody;
///
/// let body = JsonArrayBody::new(vec![Bytes::from_static(b"{\"id\":1}"), Bytes::from_static(b"{\"id\":2}")]);
/// assert_eq!(body.size_hint().exact(), Some(19)); // [{"id":1},{"id":2}]
/// ```
#[derive(Debug, Clone)]
pub struct JsonArrayBody {
    records: VecDeque<Bytes>,
    opened: bool,
    closed: bool,
    /// Whether a `,` is due before the next record.
    separator: bool,
    remaining: u64,
}

impl JsonArrayBody {
    /// A body for these records, each a complete JSON value.
    #[must_use]
    pub fn new(records: impl Into<VecDeque<Bytes>>) -> Self {
        let records = records.into();
        let data: u64 = records.iter().map(|r| r.len() as u64).sum();
        let separators = records.len().saturating_sub(1) as u64;
        Self {
            records,
            opened: false,
            closed: false,
            separator: false,
            remaining: data + separators + 2,
        }
    }

    fn emit(&mut self, bytes: Bytes) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.remaining -= bytes.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }
}

impl Body for JsonArrayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.opened {
            self.opened = true;
            return self.emit(Bytes::from_static(b"["));
        }
        if self.separator && !self.records.is_empty() {
            self.separator = false;
            return self.emit(Bytes::from_static(b","));
        }
        if let Some(record) = self.records.pop_front() {
            self.separator = true;
            return self.emit(record);
        }
        if !self.closed {
            self.closed = true;
            return self.emit(Bytes::from_static(b"]"));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.closed
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
