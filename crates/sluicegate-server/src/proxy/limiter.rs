//! One limit of the rule file made ready: its keyed state in the proxy, and its form in Redis
//! when the counters are shared there.

use std::sync::Arc;

use sluicegate::{AnyAlgorithm, KeyedLimiter};

use crate::proxy::key::KeyBytes;
use crate::proxy::rules::LimitDef;
use sluicegate_http::rate_limit::LimitInfo;

/// One limit's keyed state, kept across reloads while its definition stays the same (as
/// nginx keeps a zone whose size and rate are unchanged).
pub(crate) struct Limiter {
    pub(crate) def: LimitDef,
    pub(crate) info: LimitInfo,
    /// The proxy's own counters (with shared counters: the `local` policy's while Redis is
    /// away, and concurrency limits, which stay here).
    pub(crate) limiter: Arc<KeyedLimiter<KeyBytes, AnyAlgorithm>>,
    /// The limit in Redis, when the counters are shared there.
    pub(crate) redis: Option<Arc<sluicegate_redis::NamedLimit>>,
}

impl Limiter {
    /// Keeps the counters of `def` in the proxy.
    pub(crate) fn new(def: LimitDef) -> Limiter {
        let info = LimitInfo::of(&def.name, &def.algorithm);
        let limiter = KeyedLimiter::new(def.algorithm.clone()).with_max_keys(def.max_keys);
        Limiter {
            def,
            info,
            limiter: Arc::new(limiter),
            redis: None,
        }
    }

    /// Keeps the counters of `def` in Redis, but for a concurrency limit's (see
    /// [`redis_counters`](crate::proxy::redis_counters)); `Err` says why Redis cannot hold it.
    pub(crate) fn in_redis(def: LimitDef) -> Result<Limiter, sluicegate::ConfigError> {
        let redis = crate::proxy::redis_counters::RedisCounters::limit(&def)?;
        Ok(Limiter {
            redis,
            ..Limiter::new(def)
        })
    }

    /// Whether the state of `self` may serve `def` (same key, algorithm and size).
    pub(crate) fn serves(&self, def: &LimitDef) -> bool {
        self.def == *def
    }
}
