//! The permit's way through a response: granted before the inner service is called, attached
//! to the response's body, and completed when the body has been sent to the end (its latency
//! is then measured), or dropped as `dropped` when the body is abandoned (a client that went
//! away, a connection that broke).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use sluicegate::adaptive::{Outcome, Permit};
use tokio::time::Instant;

use crate::adaptive::classify::grpc_outcome;
use crate::adaptive::shared::Shared;

/// A permit granted to a request the inner service is answering.
pub(crate) struct Ticket {
    permit: Permit,
    granted: Instant,
    bodiless: bool,
    shared: Arc<Shared>,
}

impl Ticket {
    /// `permit` for a request with `method`: a `HEAD` answer has no body to wait for.
    pub(crate) fn new(permit: Permit, method: &Method, shared: Arc<Shared>) -> Ticket {
        Ticket {
            permit,
            granted: Instant::now(),
            bodiless: method == Method::HEAD,
            shared,
        }
    }

    /// `response` holding the permit in its body, classified by its head.
    pub(crate) fn attach<B: Body>(self, response: Response<B>) -> Response<AdaptiveBody<B>> {
        let outcome = (self.shared.options.classify.0)(response.status(), response.headers());
        let status = response.status();
        // Servers send no body for these, so they may drop it unread: the answer is complete
        // with its head.
        let bodiless = self.bodiless
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || response.body().is_end_stream();
        let guard = Guard {
            permit: self.permit,
            outcome,
            granted: self.granted,
            shared: self.shared,
        };
        if bodiless {
            guard.finish();
            return response.map(|body| AdaptiveBody::passed(body, None));
        }
        response.map(|body| AdaptiveBody::passed(body, Some(guard)))
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

/// The permit a response body holds, and what its head said.
struct Guard {
    permit: Permit,
    /// What the head (or the trailers) said; `None`: no sample.
    outcome: Option<Outcome>,
    granted: Instant,
    shared: Arc<Shared>,
}

impl Guard {
    /// The trailers have come: a gRPC status there says how the call really ended.
    fn trailers(&mut self, trailers: &HeaderMap) {
        if self.outcome == Some(Outcome::Ok)
            && let Some(outcome) = grpc_outcome(trailers)
        {
            self.outcome = Some(outcome);
        }
    }

    /// The body was sent to the end: report the outcome (an answer slower than the layer's
    /// `timeout_after` counts as a timeout).
    fn finish(self) {
        let slow = self
            .shared
            .options
            .timeout_after
            .is_some_and(|limit| self.granted.elapsed() > limit);
        match self.outcome {
            None => self.permit.ignore(),
            Some(Outcome::Ok) if slow => self.permit.timeout(),
            Some(outcome) => self.permit.complete(outcome),
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("permit", &self.permit)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

pin_project! {
    /// The body of a response through an
    /// [`AdaptiveLimitLayer`](crate::adaptive::AdaptiveLimitLayer): the inner service's,
    /// holding its permit until it ends, or a refusal's short text.
    #[derive(Debug)]
    pub struct AdaptiveBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Passed { guard: Option<Guard>, #[pin] body: B },
        Answer { data: Option<Bytes> },
    }
}

impl<B> AdaptiveBody<B> {
    fn passed(body: B, guard: Option<Guard>) -> Self {
        AdaptiveBody {
            kind: Kind::Passed { guard, body },
        }
    }

    /// A refusal's body.
    pub(crate) fn answer(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        AdaptiveBody {
            kind: Kind::Answer { data },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for AdaptiveBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Passed { guard, mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                match &frame {
                    Some(Ok(frame)) => {
                        if let (Some(held), Some(trailers)) = (guard.as_mut(), frame.trailers_ref())
                        {
                            held.trailers(trailers);
                        }
                        // Servers stop polling a body that says it has ended, so its last
                        // frame is its end.
                        if body.is_end_stream()
                            && let Some(held) = guard.take()
                        {
                            held.finish();
                        }
                    }
                    // The end.
                    None => {
                        if let Some(held) = guard.take() {
                            held.finish();
                        }
                    }
                    // Broken half way: the permit drops, as `dropped`.
                    Some(Err(_)) => drop(guard.take()),
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
