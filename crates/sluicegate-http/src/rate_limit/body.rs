//! The response body: the inner service's, holding the request's concurrency permits until it
//! has been sent to the end or dropped (nginx `limit_conn`), or a rejection's short text.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// Concurrency permits, given back when dropped.
pub(crate) struct Permit(#[allow(dead_code)] Box<dyn Send + Sync>);

impl Permit {
    /// Permits released by `guard`'s destructor.
    pub(crate) fn new(guard: impl Send + Sync + 'static) -> Permit {
        Permit(Box::new(guard))
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

pin_project! {
    /// The body of a response through the rate limit layer.
    #[derive(Debug)]
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        // The permit first: fields drop in order, so it is given back before the body goes.
        Passed { permit: Option<Permit>, #[pin] body: B },
        Answer { data: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    /// The inner service's body, holding `permit` until it ends or is dropped.
    pub(crate) fn passed(body: B, permit: Option<Permit>) -> Self {
        RateLimitBody {
            kind: Kind::Passed { body, permit },
        }
    }

    /// The inner service's body, holding nothing.
    #[inline]
    pub(crate) fn plain(body: B) -> Self {
        RateLimitBody {
            kind: Kind::Passed { body, permit: None },
        }
    }

    /// A rejection's body.
    pub(crate) fn answer(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        RateLimitBody {
            kind: Kind::Answer { data },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Passed { body, permit } => {
                let frame = ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end, or an error that ends it: the request no longer holds its place.
                    permit.take();
                }
                Poll::Ready(frame)
            }
            KindProj::Answer { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passed { body, .. } => body.is_end_stream(),
            Kind::Answer { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passed { body, .. } => body.size_hint(),
            Kind::Answer { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
