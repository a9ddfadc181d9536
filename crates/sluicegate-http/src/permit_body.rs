//! The response body of both limiting layers: the inner service's body holding what the layer
//! granted the request until the body ends, or a refusal's short text.
//!
//! The [rate limit layer](crate::rate_limit) holds a request's concurrency permits there
//! ([`ConcurrencyPermits`](crate::rate_limit::ConcurrencyPermits): nginx `limit_conn` counts a
//! request until its answer has been sent), the [adaptive layer](crate::adaptive) its permit
//! and the sample it will record
//! ([`PendingSample`](crate::adaptive::PendingSample): the latency of an answer runs to its last
//! byte). What is held is told how the body ended, once, through [`BodyEnd`].
//!
//! # When a body ends
//!
//! - **Ended** ([`BodyEnd::ended`]): the body was sent to its end. That is the first of: the
//!   inner body answers `None`, or it says after a frame that it has ended
//!   ([`is_end_stream`](http_body::Body::is_end_stream)): servers stop polling a body that says
//!   so, and drop it, so its last frame is its end. A response whose head completes it (an
//!   empty body, an answer to `HEAD`, a 204 or 304) may have its body dropped unread: the
//!   adaptive layer ends those when the response is made, and their body holds nothing (for
//!   the rate limit layer, a drop is as good as the end).
//! - **Failed** ([`BodyEnd::failed`]): the inner body answered an error: the response broke
//!   half way.
//! - **Dropped**: the body was dropped before either (the client went away, the connection
//!   broke): what it holds is dropped unended, and its `Drop` says what that means (the rate
//!   limit layer's permits are given back, the adaptive layer's permit counts as dropped).
//!
//! Every frame is shown to [`BodyEnd::frame`] before the end is decided (trailers can say how
//! an answer really ended: a gRPC status). What is held is given up before the inner body is
//! dropped.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// What a [`PermitBody`] holds, told how its body ended (see the [module docs](self)).
///
/// A body dropped before its end says nothing: what it holds is dropped, and its own `Drop`
/// decides what that means.
pub trait BodyEnd {
    /// A frame of the body on its way, before its end is decided.
    fn frame(&mut self, frame: &Frame<Bytes>) {
        let _ = frame;
    }

    /// The body was sent to its end.
    fn ended(self);

    /// The body answered an error. By default what is held is dropped, as on an early drop.
    fn failed(self)
    where
        Self: Sized,
    {
    }
}

pin_project! {
    /// The body of a response through one of the limiting layers: the inner service's body,
    /// holding `E` until it ends (see the [module docs](self) for what counts as the end), or
    /// a refusal's short text. The layers name theirs
    /// [`RateLimitBody`](crate::rate_limit::RateLimitBody) and
    /// [`AdaptiveBody`](crate::adaptive::AdaptiveBody).
    #[derive(Debug)]
    pub struct PermitBody<B, E> {
        #[pin]
        kind: Kind<B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B, E> {
        // What is held first: fields drop in order, so it is given up before the body goes.
        Passed { held: Option<E>, #[pin] body: B },
        Answer { data: Option<Bytes> },
    }
}

impl<B, E> PermitBody<B, E> {
    /// The inner service's body, holding `held` until the body ends, fails or is dropped.
    pub(crate) fn holding(body: B, held: Option<E>) -> Self {
        PermitBody {
            kind: Kind::Passed { held, body },
        }
    }

    /// The inner service's body, holding nothing.
    #[inline]
    pub(crate) fn plain(body: B) -> Self {
        PermitBody {
            kind: Kind::Passed { held: None, body },
        }
    }

    /// A refusal's body.
    pub(crate) fn answer(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        PermitBody {
            kind: Kind::Answer { data },
        }
    }
}

impl<B: Body<Data = Bytes>, E: BodyEnd> Body for PermitBody<B, E> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Passed { held, mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                let Some(holder) = held.as_mut() else {
                    return Poll::Ready(frame);
                };
                match &frame {
                    Some(Ok(data)) => {
                        holder.frame(data);
                        if body.is_end_stream()
                            && let Some(holder) = held.take()
                        {
                            holder.ended();
                        }
                    }
                    None => {
                        if let Some(holder) = held.take() {
                            holder.ended();
                        }
                    }
                    Some(Err(_)) => {
                        if let Some(holder) = held.take() {
                            holder.failed();
                        }
                    }
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
