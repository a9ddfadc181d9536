//! Where the proxy keeps its limits' counters: in the proxy, or in Redis (fixed at start).

use std::path::Path;
use std::sync::Arc;

use sluicegate::ConfigError;

use crate::proxy::error::{ProxyError, RuleFileError};
use crate::proxy::limiter::Limiter;
use crate::proxy::rules::{LimitDef, Rules};

/// Where a route's counters are.
#[derive(Debug, Clone)]
pub(crate) enum LimitCounters {
    /// In the proxy.
    Memory,
    /// In Redis.
    Redis(Arc<crate::proxy::redis_counters::RedisCounters>),
}

impl LimitCounters {
    /// Where `settings` says: Redis if given (not connected yet: see
    /// [`LimitCounters::connect`]), memory otherwise.
    pub(crate) fn new(
        settings: Option<&crate::plumbing::RedisSettings>,
        metrics: &Arc<crate::proxy::metrics::Metrics>,
    ) -> LimitCounters {
        match settings {
            None => LimitCounters::Memory,
            Some(settings) => LimitCounters::Redis(Arc::new(
                crate::proxy::redis_counters::RedisCounters::new(settings, metrics),
            )),
        }
    }

    /// With Redis, connects now, or in the background while the failure policy answers.
    pub(crate) async fn connect(&self) -> Result<(), ProxyError> {
        match self {
            LimitCounters::Memory => Ok(()),
            LimitCounters::Redis(redis) => redis
                .connect()
                .await
                .map_err(|error| ProxyError::Redis(error.to_string())),
        }
    }

    /// With Redis, gives back the permits leased and not used (at shutdown).
    pub(crate) async fn return_leases(&self) {
        if let LimitCounters::Redis(redis) = self {
            redis.redis().return_leases().await;
        }
    }

    /// Makes the state of `def` where the counters are kept; `Err` says why Redis cannot
    /// hold it.
    pub(crate) fn limiter(&self, def: LimitDef) -> Result<Limiter, ConfigError> {
        match self {
            LimitCounters::Memory => Ok(Limiter::new(def)),
            LimitCounters::Redis(_) => Limiter::in_redis(def),
        }
    }

    /// Checks that `rules` (from the file at `path`) can be kept here.
    pub(crate) fn check(&self, rules: &Rules, path: &Path) -> Result<(), RuleFileError> {
        match self {
            LimitCounters::Memory => rules.check_backend(path, false, |_| None),
            LimitCounters::Redis(_) => rules.check_backend(
                path,
                true,
                crate::proxy::redis_counters::RedisCounters::refuse,
            ),
        }
    }
}

/// Loads the rule file at `path` and checks it as a proxy would keep it: in Redis when the
/// file says `backend: redis` (naming each limit Redis cannot hold, at its spec), in memory
/// otherwise. What `sluicegate check-config` runs on a proxy's rule file.
pub fn check_rule_file(path: &Path) -> Result<Rules, RuleFileError> {
    let rules = Rules::load(path)?;
    match rules.backend {
        Some(crate::proxy::rules::BackendChoice::Redis) => {
            rules.check_backend(
                path,
                true,
                crate::proxy::redis_counters::RedisCounters::refuse,
            )?;
        }
        _ => rules.check_backend(path, false, |_| None)?,
    }
    Ok(rules)
}
