//! The layer and its builder.

use std::any::Any;
use std::fmt::Debug;
use std::net::IpAddr;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use sluicegate::store::Store;
use sluicegate::{
    Algorithm, AnyAlgorithm, Clock, Concurrency, ConfigError, FixedWindow, Gcra, LeakyBucket,
    LeakyQueue, SlidingLog, SlidingWindow, SmoothBursty, SmoothWarmup, SystemClock, TokenBucket,
};
use tower_layer::Layer;

use crate::rate_limit::backend::Backend;
use crate::rate_limit::error::BuildError;
use crate::rate_limit::key::KeyExtractor;
use crate::rate_limit::memory::MemoryBackend;
use crate::rate_limit::policy::{MissingKey, OnBackendError, Options, Rejection};
use crate::rate_limit::service::{RateLimit, Shared};
use crate::rate_limit::stats::{Counters, Stats};
use crate::rate_limit::store::StoreBackend;
use crate::ratelimit_fields::LimitInfo;

/// Keys a layer holds at most by default, per limit: memory stays below this many limiter
/// states (a few dozen bytes each for the bucket and window algorithms, a log's length for
/// `sliding-log`) whatever the traffic. Set another cap with [`RateLimitBuilder::max_keys`].
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// A tower [`Layer`] that rate limits requests by key. Every clone, and every service it
/// makes, shares one state: a limit set on an axum `Router` with `layer` applies across all its
/// routes, and the same layer given to two routers counts the same budget.
///
/// Built with [`RateLimitLayer::builder`]; see the [module docs](crate::rate_limit).
pub struct RateLimitLayer<X, Bk> {
    shared: Arc<Shared<X, Bk>>,
}

impl<X, Bk> Clone for RateLimitLayer<X, Bk> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<X: std::fmt::Debug, Bk> std::fmt::Debug for RateLimitLayer<X, Bk> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("key", &self.shared.extractor)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl<S, X, Bk> Layer<S> for RateLimitLayer<X, Bk> {
    type Service = RateLimit<S, X, Bk>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}

impl<X: KeyExtractor> RateLimitLayer<X, MemoryBackend<X::Key>> {
    /// A builder for a layer keying requests with `key`.
    pub fn builder(key: X) -> RateLimitBuilder<X> {
        RateLimitBuilder {
            key,
            clock: SystemClock::new(),
            limits: Vec::new(),
            max_keys: Some(DEFAULT_MAX_KEYS),
            options: Options::default(),
        }
    }
}

impl<X, Bk> RateLimitLayer<X, Bk> {
    /// What the layer did so far, over every clone.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// What the layer decides with ([`MemoryBackend`] for [`RateLimitBuilder::build`],
    /// [`StoreBackend`] for [`RateLimitBuilder::build_with_store`]), to inspect its limiters or
    /// store.
    pub fn backend(&self) -> &Bk {
        &self.shared.backend
    }
}

/// A limit for [`RateLimitBuilder::limit`]: a spec string (`"token-bucket:rate=10/s,burst=20"`), an
/// [`AnyAlgorithm`] or any algorithm of the core.
pub trait IntoLimit {
    /// The algorithm, or what is wrong with the spec (with the spec as written).
    fn into_limit(self) -> Result<AnyAlgorithm, (String, ConfigError)>;
}

impl IntoLimit for &str {
    fn into_limit(self) -> Result<AnyAlgorithm, (String, ConfigError)> {
        self.parse().map_err(|error| (self.to_owned(), error))
    }
}

impl IntoLimit for String {
    fn into_limit(self) -> Result<AnyAlgorithm, (String, ConfigError)> {
        self.as_str().into_limit()
    }
}

macro_rules! into_limit {
    ($($algorithm:ty),*) => {$(
        impl IntoLimit for $algorithm {
            fn into_limit(self) -> Result<AnyAlgorithm, (String, ConfigError)> {
                Ok(self.into())
            }
        }
    )*};
}

into_limit!(
    AnyAlgorithm,
    TokenBucket,
    Gcra,
    FixedWindow,
    SlidingLog,
    SlidingWindow,
    LeakyBucket,
    LeakyQueue,
    SmoothBursty,
    SmoothWarmup,
    Concurrency
);

/// A limit as given to the builder: its algorithm, or its spec and what is wrong with it.
type LimitOrError = Result<AnyAlgorithm, (String, ConfigError)>;

/// Builds a [`RateLimitLayer`]: its limits, key cap and answers.
pub struct RateLimitBuilder<X, C = SystemClock> {
    key: X,
    clock: C,
    limits: Vec<(Option<String>, LimitOrError)>,
    max_keys: Option<usize>,
    options: Options,
}

impl<X: std::fmt::Debug, C> std::fmt::Debug for RateLimitBuilder<X, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitBuilder")
            .field("key", &self.key)
            .field("limits", &self.limits)
            .field("max_keys", &self.max_keys)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<X: KeyExtractor, C: Clock + Clone + 'static> RateLimitBuilder<X, C> {
    /// Adds a limit, named after its algorithm in the response fields. Several limits are
    /// decided together: a request passes only if all allow it, and a request one of them
    /// denies is charged to none. A bad spec is reported by [`build`](Self::build).
    pub fn limit(mut self, limit: impl IntoLimit) -> Self {
        self.limits.push((None, limit.into_limit()));
        self
    }

    /// Adds a limit named `name` in the `RateLimit-Policy` / `RateLimit` fields.
    pub fn limit_named(mut self, name: impl Into<String>, limit: impl IntoLimit) -> Self {
        self.limits.push((Some(name.into()), limit.into_limit()));
        self
    }

    /// Holds at most `max_keys` keys per limit (`max_keys` × limits limiter states in all,
    /// one budget shared by the limits; [`DEFAULT_MAX_KEYS`] unless set). Idle keys are
    /// forgotten as the tables grow; at the cap a new key is refused as
    /// [`on_backend_error`](Self::on_backend_error) says (the denial status by default), and
    /// no limited client is ever evicted to make room.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// No key cap: memory grows with the number of clients not yet idle.
    pub fn unbounded_keys(mut self) -> Self {
        self.max_keys = None;
        self
    }

    /// The clock the limits read (a `ManualClock` in tests).
    pub fn clock<C2: Clock + Clone + 'static>(self, clock: C2) -> RateLimitBuilder<X, C2> {
        RateLimitBuilder {
            key: self.key,
            clock,
            limits: self.limits,
            max_keys: self.max_keys,
            options: self.options,
        }
    }

    /// The status of a denial: 429 by default (nginx's `limit_req_status` is 503).
    pub fn status(mut self, status: StatusCode) -> Self {
        self.options.status = status;
        self
    }

    /// Whether answers carry the IETF `RateLimit-Policy` and `RateLimit` fields (default
    /// yes).
    pub fn ietf_headers(mut self, on: bool) -> Self {
        self.options.headers.choice.ietf = on;
        self
    }

    /// Whether answers carry `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds) (default no).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.options.headers.choice.legacy = on;
        self
    }

    /// Whether denials carry `Retry-After` in whole seconds (default yes).
    pub fn retry_after(mut self, on: bool) -> Self {
        self.options.headers.choice.retry_after = on;
        self
    }

    /// Whether allowed responses carry the rate limit fields too (default no).
    pub fn headers_on_allowed(mut self, on: bool) -> Self {
        self.options.headers.on_allowed = on;
        self
    }

    /// Dry run (nginx `limit_req_dry_run`): every request is decided and counted as usual,
    /// but all pass, at once; [`RateLimitLayer::stats`] counts those that would have been
    /// rejected.
    pub fn dry_run(mut self, on: bool) -> Self {
        self.options.dry_run = on;
        self
    }

    /// The answer to a request whose key cannot be read (by default its error's status, 400
    /// or 500, with a body naming what was missing).
    pub fn on_missing_key(mut self, answer: MissingKey) -> Self {
        self.options.missing_key = answer;
        self
    }

    /// The answer when the backend cannot decide, at the key cap in particular.
    pub fn on_backend_error(mut self, answer: OnBackendError) -> Self {
        self.options.on_backend_error = answer;
        self
    }

    /// Permits each request takes of every limit (default 1).
    pub fn permits(mut self, permits: NonZeroU64) -> Self {
        self.options.permits = permits;
        self
    }

    /// Rewrites every rejection: `hook` gets why, and the default answer (status, fields and a
    /// text body, or the gRPC trailers), and returns the answer to send.
    pub fn on_rejection<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Rejection, Response<Bytes>) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.options.hook = Some(Arc::new(hook));
        self
    }

    /// Reads the peer's address from request bodies of type `Bd` with `peer`, for a server that
    /// carries it there rather than in each request's extensions (where inserting it allocates
    /// the extensions' map for every request). Requests with a body of another type are read
    /// as usual; [`PeerIp`](crate::rate_limit::key::PeerIp) and
    /// [`ClientIp`](crate::rate_limit::key::ClientIp) prefer this address to the extensions'.
    pub fn peer_from_body<Bd: 'static>(mut self, peer: fn(&Bd) -> IpAddr) -> Self {
        self.options.peer_of_body = Some(Arc::new(move |body: &dyn Any| {
            body.downcast_ref::<Bd>().map(peer)
        }));
        self
    }

    /// The layer, keeping its counters in this process.
    pub fn build(self) -> Result<RateLimitLayer<X, MemoryBackend<X::Key, C>>, BuildError> {
        if self.limits.is_empty() {
            return Err(BuildError::NoLimit);
        }
        if self.max_keys == Some(0) {
            return Err(BuildError::ZeroKeyCap);
        }
        let mut limits = Vec::with_capacity(self.limits.len());
        for (index, (name, limit)) in self.limits.into_iter().enumerate() {
            let algorithm = limit.map_err(|(spec, source)| BuildError::Limit {
                index,
                spec,
                source,
            })?;
            let name = name.unwrap_or_else(|| algorithm.name().to_owned());
            limits.push((name, algorithm));
        }
        // Default names stay apart: `gcra`, `gcra-2`.
        for i in 1..limits.len() {
            if limits[..i].iter().any(|(name, _)| *name == limits[i].0) {
                limits[i].0 = format!("{}-{}", limits[i].0, i + 1);
            }
        }
        let states = self.max_keys.map(|n| n.saturating_mul(limits.len()));
        let backend = MemoryBackend::new(limits, self.clock, states);
        Ok(layer(self.key, backend, self.options))
    }

    /// The layer, deciding `limits` together in `store`: yours, Redis's
    /// (`sluicegate_redis::RedisStore`, or `FailSafe` for its failure policy), or the core's
    /// [`MemoryStore`](sluicegate::store::MemoryStore). Each limit is in the store's form, with
    /// what the rate limit fields say of it ([`LimitInfo::of`] an algorithm, or
    /// [`LimitInfo::rate`], [`LimitInfo::concurrency`]); give none with [`limit`](Self::limit).
    ///
    /// The store is handed each key as a `String` (the key's `Debug` form) and keeps the
    /// keys itself: the key cap and the clock set here are not used. A concurrency limit's
    /// permits are given back with [`Store::release`] when the response ends, and renewed
    /// while it lasts if the store [leases](Store::lease) them.
    pub fn build_with_store<S>(
        self,
        store: Arc<S>,
        limits: impl IntoIterator<Item = (LimitInfo, S::Limit)>,
    ) -> Result<RateLimitLayer<X, StoreBackend<S>>, BuildError>
    where
        S: Store<String> + 'static,
        S::Limit: 'static,
        X::Key: Debug,
    {
        let limits: Vec<_> = limits.into_iter().collect();
        if limits.is_empty() {
            return Err(BuildError::NoLimit);
        }
        self.build_with(StoreBackend::new(store, limits))
    }

    /// The layer, deciding with `backend`, a decider of this crate that holds its own limits
    /// (give none here): a [`StoreBackend`], or a remote rate limit service's `RlsBackend`
    /// (feature `rls`). To decide in a store of your own, see
    /// [`build_with_store`](Self::build_with_store).
    pub fn build_with<Bk: Backend<X::Key>>(
        self,
        backend: Bk,
    ) -> Result<RateLimitLayer<X, Bk>, BuildError> {
        if !self.limits.is_empty() {
            return Err(BuildError::LimitsWithBackend);
        }
        Ok(layer(self.key, backend, self.options))
    }
}

fn layer<X, Bk>(key: X, backend: Bk, options: Options) -> RateLimitLayer<X, Bk> {
    RateLimitLayer {
        shared: Arc::new(Shared {
            extractor: key,
            backend,
            options,
            counters: Counters::default(),
        }),
    }
}
