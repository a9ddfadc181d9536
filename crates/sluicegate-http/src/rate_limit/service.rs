//! The middleware: reads the key, asks the backend, and passes the request on (at once, or
//! after its shaping wait) or answers it.

use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use sluicegate::state_machine::Op;
use tower_service::Service;

use crate::rate_limit::answer;
use crate::rate_limit::backend::{AtOnce, Backend, HeldInStore, Verdict};
use crate::rate_limit::error::BackendError;
use crate::rate_limit::future::{Finish, RateLimitFuture};
use crate::rate_limit::headers;
use crate::rate_limit::held::{ConcurrencyPermits, RateLimitBody};
use crate::rate_limit::key::{KeyExtractor, RequestHead};
use crate::rate_limit::policy::{MissingKey, OnBackendError, Options};
use crate::rate_limit::stats::Counters;

/// The state every clone of a layer and of its services shares.
pub(crate) struct Shared<X, Bk> {
    pub(crate) extractor: X,
    pub(crate) backend: Bk,
    pub(crate) options: Options,
    pub(crate) counters: Counters,
}

/// A service rate limited by a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer).
pub struct RateLimit<S, X, Bk> {
    inner: S,
    shared: Arc<Shared<X, Bk>>,
}

impl<S, X, Bk> RateLimit<S, X, Bk> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<X, Bk>>) -> Self {
        RateLimit { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, X, Bk> Clone for RateLimit<S, X, Bk> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: std::fmt::Debug, X: std::fmt::Debug, Bk> std::fmt::Debug for RateLimit<S, X, Bk> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("key", &self.shared.extractor)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// What to do with a request once decided.
enum Judged {
    /// Passed on, after `wait`, with what its response gets (nothing, usually).
    Pass {
        finish: Option<Box<Finish>>,
        wait: Duration,
    },
    Answer(Response<Bytes>),
}

/// Gives the request's concurrency permits back when dropped.
struct Held<X: KeyExtractor, Bk: Backend<X::Key>> {
    shared: Arc<Shared<X, Bk>>,
    key: X::Key,
    permits: NonZeroU64,
    /// What the store holds under its own ids (Redis's leases), and what renews them.
    in_store: HeldInStore,
}

impl<X: KeyExtractor, Bk: Backend<X::Key>> Drop for Held<X, Bk> {
    fn drop(&mut self) {
        let HeldInStore { held, renewing } = std::mem::take(&mut self.in_store);
        // Renewals stop before the release is sent. One already on its way may still reach
        // the store after it, which is harmless: a lease given back is not taken again.
        drop(renewing);
        self.shared.backend.release(&self.key, self.permits, held);
    }
}

impl<X: KeyExtractor, Bk: Backend<X::Key>> Shared<X, Bk> {
    /// Turns the backend's answer into a pass (with its permit, fields and wait) or an answer
    /// (`grpc` says in which form). The plain pass touches no shared counter.
    fn judge(
        self: &Arc<Self>,
        decided: Result<Verdict, BackendError>,
        key: X::Key,
        grpc: impl FnOnce() -> bool,
    ) -> Judged {
        let options = &self.options;
        let mut verdict = match decided {
            Ok(verdict) => verdict,
            Err(error) => {
                Counters::count(&self.counters.backend_errors);
                tracing::warn!(%error, "rate limit: the backend could not decide");
                return match options.on_backend_error {
                    OnBackendError::Allow => Judged::Pass {
                        finish: None,
                        wait: Duration::ZERO,
                    },
                    _ => Judged::Answer(answer::backend_error(options, error, grpc())),
                };
            }
        };
        let denied = !verdict.allowed();
        if denied || options.headers.on_allowed {
            verdict.describe_with(self.backend.limits());
        }
        if denied && !options.dry_run {
            Counters::count(&self.counters.denied);
            return Judged::Answer(answer::limited(options, verdict, grpc()));
        }
        if denied {
            Counters::count(&self.counters.dry_run_denied);
            tracing::info!(
                limit = verdict.tightest().map(|(_, l)| l.name()),
                "rate limit: would reject (dry run)"
            );
        }
        let fields = if options.headers.on_allowed {
            headers::fields(&verdict, &options.headers, false)
        } else {
            Vec::new()
        };
        let permit = verdict.holds_permits().then(|| {
            ConcurrencyPermits::new(Held {
                shared: Arc::clone(self),
                key,
                permits: options.permits,
                in_store: verdict.take_held(),
            })
        });
        // A dry run shapes nothing (nginx's DELAYED_DRY_RUN passes at once).
        let wait = if options.dry_run {
            Duration::ZERO
        } else {
            verdict.wait()
        };
        if !wait.is_zero() {
            Counters::count(&self.counters.delayed);
        }
        let finish =
            (permit.is_some() || !fields.is_empty()).then(|| Box::new(Finish { permit, fields }));
        Judged::Pass { finish, wait }
    }
}

impl<S, X, Bk, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, X, Bk>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
    X: KeyExtractor,
    Bk: Backend<X::Key>,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = RateLimitFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        let peer = (shared.options.peer_of_body.as_ref()).and_then(|peer| peer(request.body()));
        let head = RequestHead::of(&request).with_peer(peer);
        let key = match shared.extractor.extract(&head) {
            Ok(key) => key,
            Err(error) => {
                Counters::count(&shared.counters.missing_key);
                if shared.options.missing_key == MissingKey::Allow {
                    return RateLimitFuture::called(self.inner.call(request), None);
                }
                let grpc = answer::is_grpc(request.headers());
                let response = answer::missing_key(&shared.options, error, grpc);
                return RateLimitFuture::answered(response);
            }
        };
        let permits = shared.options.permits;
        // The fast path: a backend that decides at once, and allowed responses that get no
        // fields. The usual answer passes with no verdict built, moved or matched.
        if !shared.options.headers.on_allowed {
            match shared.backend.decide_at_once(&key, permits, Op::Check) {
                AtOnce::Pass => return RateLimitFuture::called(self.inner.call(request), None),
                AtOnce::Decided(decided) => return self.decided(decided, key, request),
                AtOnce::Later => {}
            }
        }
        let mut decision = shared.backend.decide(&key, permits, Op::Check);
        // A backend that answers at once (memory) is done with here: no box, no clone.
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut decision).poll(&mut cx) {
            Poll::Ready(decided) => self.decided(decided, key, request),
            Poll::Pending => {
                let shared = Arc::clone(shared);
                let mut inner = take_ready(&mut self.inner);
                RateLimitFuture::deferred(Box::pin(async move {
                    let decided = decision.await;
                    match shared.judge(decided, key, || answer::is_grpc(request.headers())) {
                        Judged::Answer(response) => Ok(answer::into_response(response)),
                        Judged::Pass { finish, wait } => {
                            if !wait.is_zero() {
                                tokio::time::sleep(wait).await;
                            }
                            Ok(Finish::apply(finish, inner.call(request).await?))
                        }
                    }
                }))
            }
        }
    }
}

impl<S, X, Bk> RateLimit<S, X, Bk>
where
    X: KeyExtractor,
    Bk: Backend<X::Key>,
{
    /// The response future of a request decided at once.
    fn decided<ReqBody, ResBody>(
        &mut self,
        decided: Result<Verdict, BackendError>,
        key: X::Key,
        request: Request<ReqBody>,
    ) -> RateLimitFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
    {
        match self
            .shared
            .judge(decided, key, || answer::is_grpc(request.headers()))
        {
            Judged::Answer(response) => RateLimitFuture::answered(response),
            Judged::Pass { finish, wait } if wait.is_zero() => {
                RateLimitFuture::called(self.inner.call(request), finish)
            }
            Judged::Pass { finish, wait } => {
                let mut inner = take_ready(&mut self.inner);
                RateLimitFuture::deferred(Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    Ok(Finish::apply(finish, inner.call(request).await?))
                }))
            }
        }
    }
}

/// The service `poll_ready` made ready, to be called later; a clone takes its place.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}
