//! Where the proxy keeps its counters: in the proxy, or in Redis (fixed at start).

use std::path::Path;
use std::sync::Arc;

use sluicegate::ConfigError;

use crate::proxy::error::{ProxyError, RuleFileError};
use crate::proxy::limiter::Limiter;
use crate::proxy::rules::{LimitDef, Rules};

/// Where a route's counters are.
#[derive(Debug, Clone)]
pub(crate) enum Backing {
    /// In the proxy.
    Memory,
    /// In Redis.
    Redis(Arc<crate::proxy::shared::Shared>),
}

impl Backing {
    /// Where `settings` says: Redis if given (not connected yet: see
    /// [`Backing::connect`]), memory otherwise.
    pub(crate) fn new(
        settings: Option<&crate::plumbing::RedisSettings>,
        metrics: &Arc<crate::proxy::metrics::Metrics>,
    ) -> Backing {
        match settings {
            None => Backing::Memory,
            Some(settings) => Backing::Redis(Arc::new(crate::proxy::shared::Shared::new(
                settings, metrics,
            ))),
        }
    }

    /// With Redis, connects now, or in the background while the failure policy answers.
    pub(crate) async fn connect(&self) -> Result<(), ProxyError> {
        match self {
            Backing::Memory => Ok(()),
            Backing::Redis(shared) => shared
                .connect()
                .await
                .map_err(|error| ProxyError::Redis(error.to_string())),
        }
    }

    /// Makes the state of `def` where the counters are kept; `Err` says why Redis cannot
    /// hold it.
    pub(crate) fn limiter(&self, def: LimitDef) -> Result<Limiter, ConfigError> {
        match self {
            Backing::Memory => Ok(Limiter::new(def)),
            Backing::Redis(_) => Limiter::in_redis(def),
        }
    }

    /// Checks that `rules` (from the file at `path`) can be kept here.
    pub(crate) fn check(&self, rules: &Rules, path: &Path) -> Result<(), RuleFileError> {
        match self {
            Backing::Memory => rules.check_backend(path, false, |_| None),
            Backing::Redis(_) => {
                rules.check_backend(path, true, crate::proxy::shared::Shared::refuse)
            }
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
            rules.check_backend(path, true, crate::proxy::shared::Shared::refuse)?;
        }
        _ => rules.check_backend(path, false, |_| None)?,
    }
    Ok(rules)
}
