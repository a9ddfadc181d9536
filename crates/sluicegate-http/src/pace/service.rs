//! The paced service: waits for a permit (and for any hold the server asked for), calls, and
//! reads the answer for a new hold.

use std::future::{Future, poll_fn};
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::header::HOST;
use http::{Request, Response};
use sluicegate::Clock;
use tower_service::Service;

use crate::pace::error::PaceError;
use crate::pace::hold::server_hold;
use crate::pace::pacer::Pacer;

/// The future of a paced call.
pub type PaceFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, PaceError<E>>> + Send>>;

/// A client service paced by a [`PaceLayer`](crate::pace::PaceLayer).
pub struct Pace<S, C: Clock> {
    inner: S,
    pacer: Arc<Pacer<C>>,
}

impl<S, C: Clock> Pace<S, C> {
    pub(crate) fn new(inner: S, pacer: Arc<Pacer<C>>) -> Self {
        Pace { inner, pacer }
    }

    /// The wrapped client.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, C: Clock> Clone for Pace<S, C> {
    fn clone(&self) -> Self {
        Pace {
            inner: self.inner.clone(),
            pacer: Arc::clone(&self.pacer),
        }
    }
}

impl<S: std::fmt::Debug, C: Clock> std::fmt::Debug for Pace<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pace")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, C, B, R> Service<Request<B>> for Pace<S, C>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
    C: Clock + 'static,
{
    type Response = Response<R>;
    type Error = PaceError<S::Error>;
    type Future = PaceFuture<Response<R>, S::Error>;

    /// Always ready: the wait for a permit, and for the client's own readiness, is part of
    /// each call's future (a permit taken in `poll_ready` would be spent on a call that may
    /// never come).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let pacer = Arc::clone(&self.pacer);
        let mut inner = self.inner.clone();
        let host = if pacer.per_host {
            host_of(&request)
        } else {
            String::new()
        };
        Box::pin(async move {
            let mut budget = pacer.max_wait;
            wait_for_hold(&pacer, &host, &mut budget).await?;
            take_permit(&pacer, &host, &mut budget).await?;
            // A hold the server set while this call waited for its permit.
            wait_for_hold(&pacer, &host, &mut budget).await?;
            poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(PaceError::Inner)?;
            let response = inner.call(request).await.map_err(PaceError::Inner)?;
            if let Some(hold) =
                server_hold(response.status(), response.headers(), SystemTime::now())
                && !hold.is_zero()
            {
                pacer.holds.hold(&host, hold);
            }
            Ok(response)
        })
    }
}

/// The host a call is paced by: the URI's `host:port`, else the `Host` header, else empty.
fn host_of<B>(request: &Request<B>) -> String {
    if let Some(authority) = request.uri().authority() {
        return authority.as_str().to_ascii_lowercase();
    }
    request
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default()
}

/// Sleeps out the server's hold on `host`, or fails if it outlasts what is left of `budget`.
async fn wait_for_hold<C: Clock, E>(
    pacer: &Pacer<C>,
    host: &str,
    budget: &mut Option<Duration>,
) -> Result<(), PaceError<E>> {
    let Some(left) = pacer.holds.remaining(host) else {
        return Ok(());
    };
    if let Some(max) = *budget {
        if left > max {
            return Err(PaceError::HeldByServer {
                host: host.to_owned(),
                retry_in: left,
                max_wait: pacer.max_wait.unwrap_or(max),
            });
        }
        *budget = Some(max - left);
    }
    tokio::time::sleep(left).await;
    Ok(())
}

/// Waits for one permit of the limiter, within what is left of `budget`.
async fn take_permit<C: Clock, E>(
    pacer: &Pacer<C>,
    host: &str,
    budget: &mut Option<Duration>,
) -> Result<(), PaceError<E>> {
    let key: Box<str> = host.into();
    let one = NonZeroU64::MIN;
    let decision = match *budget {
        Some(left) => pacer.limiter.try_acquire_for_async(&key, one, left).await,
        None => pacer.limiter.acquire_async(&key, one).await,
    }
    .map_err(PaceError::Limiter)?;
    if !decision.allowed() {
        return Err(PaceError::WaitTooLong {
            host: host.to_owned(),
            max_wait: pacer.max_wait.unwrap_or_default(),
        });
    }
    if let Some(left) = budget {
        *left = left.saturating_sub(decision.wait());
    }
    Ok(())
}
