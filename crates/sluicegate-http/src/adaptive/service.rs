//! The middleware: a permit at once, after a wait in the queue, or a refusal.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::adaptive::answer::{self, Refusal};
use crate::adaptive::shared::Shared;
use crate::adaptive::ticket::{AdaptiveBody, Ticket};

/// A service behind an [`AdaptiveLimitLayer`](crate::adaptive::AdaptiveLimitLayer).
pub struct AdaptiveLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> AdaptiveLimit<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        AdaptiveLimit { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone> Clone for AdaptiveLimit<S> {
    fn clone(&self) -> Self {
        AdaptiveLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for AdaptiveLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveLimit")
            .field("inner", &self.inner)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The answer to a request refused for `refusal`.
    fn refuse(&self, refusal: Refusal, grpc: bool) -> Response<Bytes> {
        let metrics = self.limiter.metrics();
        answer::refused(refusal, metrics, self.options.retry_after, grpc)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for AdaptiveLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<AdaptiveBody<ResBody>>;
    type Error = S::Error;
    type Future = AdaptiveLimitFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        let Some(timeout) = shared.options.queue_timeout else {
            return match shared.limiter.try_acquire() {
                Some(permit) => {
                    let ticket = Ticket::new(permit, request.method(), Arc::clone(shared));
                    AdaptiveLimitFuture::called(self.inner.call(request), ticket)
                }
                None => {
                    let grpc = answer::is_grpc(request.headers());
                    AdaptiveLimitFuture::answered(shared.refuse(Refusal::Full, grpc))
                }
            };
        };
        let mut acquiring = shared.limiter.acquire(timeout);
        // A free place is granted on the first poll: no task, no box beyond the wait's own.
        match acquiring
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(Ok(permit)) => {
                let ticket = Ticket::new(permit, request.method(), Arc::clone(shared));
                AdaptiveLimitFuture::called(self.inner.call(request), ticket)
            }
            Poll::Ready(Err(error)) => {
                let grpc = answer::is_grpc(request.headers());
                AdaptiveLimitFuture::answered(shared.refuse(error.into(), grpc))
            }
            Poll::Pending => {
                let shared = Arc::clone(shared);
                // `poll_ready` made this one ready: it is the one to call, and a clone takes
                // its place.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                AdaptiveLimitFuture::deferred(Box::pin(async move {
                    match acquiring.await {
                        Ok(permit) => {
                            let ticket = Ticket::new(permit, request.method(), shared);
                            let response = inner.call(request).await?;
                            Ok(ticket.attach(response))
                        }
                        Err(error) => {
                            let grpc = answer::is_grpc(request.headers());
                            Ok(shared.refuse(error.into(), grpc).map(AdaptiveBody::answer))
                        }
                    }
                }))
            }
        }
    }
}

/// A boxed response future, for requests that wait in the queue.
type BoxFuture<B, E> = Pin<Box<dyn Future<Output = Result<Response<AdaptiveBody<B>>, E>> + Send>>;

pin_project! {
    /// The future of [`AdaptiveLimit`]'s responses.
    pub struct AdaptiveLimitFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        // A request abandoned before its answer drops its ticket, and the permit counts as
        // dropped.
        Called { #[pin] future: F, ticket: Option<Ticket> },
        Answered { response: Option<Response<Bytes>> },
        Deferred { future: BoxFuture<B, E> },
    }
}

impl<F, B, E> AdaptiveLimitFuture<F, B, E> {
    fn called(future: F, ticket: Ticket) -> Self {
        AdaptiveLimitFuture {
            state: State::Called {
                future,
                ticket: Some(ticket),
            },
        }
    }

    fn answered(response: Response<Bytes>) -> Self {
        AdaptiveLimitFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }

    fn deferred(future: BoxFuture<B, E>) -> Self {
        AdaptiveLimitFuture {
            state: State::Deferred { future },
        }
    }
}

impl<F, B, E> Future for AdaptiveLimitFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
{
    type Output = Result<Response<AdaptiveBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called { future, ticket } => {
                let response = ready!(future.poll(cx))?;
                let ticket = ticket
                    .take()
                    .expect("AdaptiveLimitFuture polled after it completed");
                Poll::Ready(Ok(ticket.attach(response)))
            }
            StateProj::Answered { response } => {
                let response = response
                    .take()
                    .expect("AdaptiveLimitFuture polled after it completed");
                Poll::Ready(Ok(response.map(AdaptiveBody::answer)))
            }
            StateProj::Deferred { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> std::fmt::Debug for AdaptiveLimitFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Answered { .. } => "answered",
            State::Deferred { .. } => "deferred",
        };
        f.debug_struct("AdaptiveLimitFuture")
            .field("state", &state)
            .finish()
    }
}
