//! The proxy's counters in Redis, shared by every proxy started with the same Redis: several
//! proxies in front of one app keep one budget. Redis sits behind the failure policy
//! (`open`, `closed`, or `local`: this proxy's own counters until Redis is back), reached
//! through a connection made when Redis first answers, so a proxy starts while Redis is down.
//!
//! Concurrency limits (nginx `limit_conn`) stay in each proxy, as an nginx zone counts one
//! server's connections: a connection is held by one proxy, and a permit in Redis would
//! outlive a proxy that dies holding it. A route's limits are still decided all or nothing:
//! its concurrency permits are taken here first, then its rate limits in Redis in one
//! script call, and the permits are given back if Redis denies.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::state_machine::Op;
use sluicegate::store::{FailureKind, MemoryStore, Now, Request, Store, StoreDecision, StoreError};
use sluicegate::{AnyAlgorithm, ConfigError, KeyedLimiter};
use sluicegate_redis::{FailSafeLimit, NamedLimit, RedisLimit};

use crate::plumbing::{RedisSettings, SafeRedis};

use crate::proxy::key::KeyBytes;
use crate::proxy::metrics::Metrics;
use crate::proxy::rules::LimitDef;
use sluicegate_http::rate_limit::BackendError;

/// How long a concurrency permit would be leased in Redis: unused, as concurrency limits stay
/// in the proxy, but a Redis limit is made with one.
const UNUSED_LEASE: Duration = Duration::from_secs(60);

/// A limit of the shared store: in Redis, and in the proxy for the `local` policy.
pub(crate) type SharedLimit =
    FailSafeLimit<Arc<NamedLimit>, Arc<KeyedLimiter<KeyBytes, AnyAlgorithm>>>;

/// The proxy's Redis, behind its failure policy.
#[derive(Debug)]
pub(crate) struct RedisCounters {
    redis: Arc<SafeRedis<MemoryStore<AnyAlgorithm>, KeyBytes>>,
}

impl RedisCounters {
    /// Redis behind its failure policy, for the live page's health line.
    pub(crate) fn redis(&self) -> &SafeRedis<MemoryStore<AnyAlgorithm>, KeyBytes> {
        &self.redis
    }

    /// Not connected yet: see [`RedisCounters::connect`]. Failures are counted in `metrics`.
    pub(crate) fn new(settings: &RedisSettings, metrics: &Arc<Metrics>) -> RedisCounters {
        let metrics = Arc::clone(metrics);
        let redis = SafeRedis::new(
            settings.clone(),
            MemoryStore::new(),
            "proxy: ",
            move |kind| {
                metrics.backend_error(kind);
            },
        );
        RedisCounters {
            redis: Arc::new(redis),
        }
    }

    /// Connects, or, if Redis does not answer, keeps trying in the background while the
    /// failure policy answers. Settings no retry mends (a bad URL or prefix) are an error.
    pub(crate) async fn connect(&self) -> Result<(), sluicegate_redis::RedisLimitError> {
        self.redis.connect_or_keep_trying().await
    }

    /// The Redis form of `def`, or none for a limit kept in the proxy (concurrency); an
    /// algorithm Redis cannot run is an error.
    pub(crate) fn limit(def: &LimitDef) -> Result<Option<Arc<NamedLimit>>, ConfigError> {
        if matches!(def.algorithm, AnyAlgorithm::Concurrency(_)) {
            return Ok(None);
        }
        let limit = RedisLimit::from_algorithm(&def.algorithm, UNUSED_LEASE)?;
        Ok(Some(Arc::new(NamedLimit {
            limit,
            name: def.name.clone(),
        })))
    }

    /// Why Redis cannot hold `def`, if it cannot (a rule file's problem at its spec).
    pub(crate) fn refuse(def: &LimitDef) -> Option<String> {
        let error = RedisCounters::limit(def).err()?;
        Some(format!("`{}` cannot be kept in Redis: {error}", def.spec))
    }

    /// Decides `requests` in Redis (or by the failure policy), all or nothing.
    pub(crate) async fn decide(
        &self,
        requests: &[Request<'_, SharedLimit, KeyBytes>],
        max_keys: usize,
    ) -> Result<StoreDecision, BackendError> {
        self.redis
            .store()
            .decide(requests, Op::Check, Now::Store)
            .await
            .map_err(|error| match error.kind() {
                FailureKind::KeyCapacity => BackendError::KeyCapacity { max_keys },
                _ => BackendError::Unavailable(error.to_string().into()),
            })
    }
}
