//! The response future: the inner service's response with the fields and the permit added, a
//! rejection ready at once, or (a shaping wait, a backend that waits) a boxed future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use crate::rate_limit::answer;
use crate::rate_limit::headers::{self, Fields};
use crate::rate_limit::held::{ConcurrencyPermits, HoldPermits, RateLimitBody};

/// A boxed response future, for the paths that wait.
pub(crate) type BoxFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<RateLimitBody<B>>, E>> + Send>>;

/// What an allowed response gets: the permit its body holds, and the rate limit fields.
#[derive(Debug)]
pub(crate) struct Finish {
    pub(crate) permit: Option<ConcurrencyPermits>,
    pub(crate) fields: Fields,
}

impl Finish {
    /// `response` with what `finish` adds, if anything (boxed: most responses get nothing, and
    /// a small future is cheaper to move).
    #[inline]
    pub(crate) fn apply<B>(
        finish: Option<Box<Finish>>,
        mut response: Response<B>,
    ) -> Response<RateLimitBody<B>> {
        let Some(finish) = finish else {
            return response.map(RateLimitBody::plain);
        };
        let Finish { permit, fields } = *finish;
        headers::extend(response.headers_mut(), fields);
        // An exchange that goes on after its body (an upgraded connection) holds the permit.
        let permit = match (permit, response.extensions().get::<HoldPermits>()) {
            (Some(permit), Some(holder)) => {
                holder.hold(permit);
                None
            }
            (permit, _) => permit,
        };
        response.map(|body| RateLimitBody::holding(body, permit))
    }
}

pin_project! {
    /// The future of [`RateLimit`](crate::rate_limit::RateLimit)'s responses.
    pub struct RateLimitFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        Called { #[pin] future: F, finish: Option<Box<Finish>> },
        Answered { response: Option<Box<Response<Bytes>>> },
        Deferred { future: BoxFuture<B, E> },
    }
}

impl<F, B, E> RateLimitFuture<F, B, E> {
    #[inline]
    pub(crate) fn called(future: F, finish: Option<Box<Finish>>) -> Self {
        RateLimitFuture {
            state: State::Called { future, finish },
        }
    }

    pub(crate) fn answered(response: Response<Bytes>) -> Self {
        RateLimitFuture {
            state: State::Answered {
                response: Some(Box::new(response)),
            },
        }
    }

    pub(crate) fn deferred(future: BoxFuture<B, E>) -> Self {
        RateLimitFuture {
            state: State::Deferred { future },
        }
    }
}

impl<F, B, E> Future for RateLimitFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<RateLimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            // Nothing to add (the usual case): mapped where it lies, written once.
            StateProj::Called { future, finish } if finish.is_none() => future
                .poll(cx)
                .map(|result| result.map(|response| response.map(RateLimitBody::plain))),
            StateProj::Called { future, finish } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(Finish::apply(finish.take(), response)))
            }
            StateProj::Answered { response } => {
                let response = response
                    .take()
                    .expect("RateLimitFuture polled after it completed");
                Poll::Ready(Ok(answer::into_response(*response)))
            }
            StateProj::Deferred { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> std::fmt::Debug for RateLimitFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Answered { .. } => "answered",
            State::Deferred { .. } => "deferred",
        };
        f.debug_struct("RateLimitFuture")
            .field("state", &state)
            .finish()
    }
}
