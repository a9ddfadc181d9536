//! Where counters live, memory (one process) or Redis (shared by every replica). Redis is
//! reached as the proxy reaches it (`plumbing::SafeRedis`: made at start if Redis answers,
//! retried in the background if not, behind the failure policy), the `local` policy deciding
//! in this process's limiters.

use std::sync::Arc;

use sluicegate::{AnyAlgorithm, store::MemoryStore};
pub use sluicegate_redis::RedisTarget;
use sluicegate_redis::{FailSafeLimit, NamedLimit};

use crate::plumbing::{RedisSettings, SafeRedis};

use crate::serve::clock::ServiceClock;
use crate::serve::limiter_table::Limiter;
use crate::serve::metrics::{KindLabel, Metrics};

/// Where the service keeps its counters.
#[derive(Debug, Clone, Default)]
pub enum BackendOptions {
    /// In this process: a single binary that works out of the box.
    #[default]
    Memory,
    /// In Redis, shared by every replica.
    Redis(RedisSettings),
}

/// A limit of [`SafeRedisStore`]: in Redis, and in memory for the `local` policy.
pub(crate) type RedisLimits = FailSafeLimit<Arc<NamedLimit>, Arc<Limiter>>;

/// The Redis connection of a running service, behind its failure policy.
pub(crate) type RedisBackend = SafeRedis<MemoryStore<AnyAlgorithm, ServiceClock>, String>;

/// Not connected yet: see [`SafeRedis::connect`]. Failures are counted in `metrics` and
/// logged.
pub(crate) fn redis_backend(settings: RedisSettings, metrics: &Arc<Metrics>) -> RedisBackend {
    let metrics = Arc::clone(metrics);
    SafeRedis::new(settings, MemoryStore::new(), "", move |kind| {
        metrics
            .backend_errors
            .get_or_create(&KindLabel { kind })
            .inc();
    })
}
