//! Where counters live, memory (one process) or Redis (shared by every replica), and the
//! connection to Redis: made at start if Redis answers, retried in the background if not.
//! Redis is a store of the backend seam behind the Redis crate's failure policy ([`FailSafe`],
//! with its circuit breaker), the `local` policy deciding in this process's limiters.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::{AnyAlgorithm, store::MemoryStore};
pub use sluicegate_redis::RedisTarget;
use sluicegate_redis::{
    Both, FailSafe, FailurePolicy, LazyStore, NamedLimit, RedisLimitError, StoreConfig,
    log_failures,
};

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
    Redis(RedisOptions),
}

/// How to reach Redis and what to answer when it cannot.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// One server, or a cluster.
    pub target: RedisTarget,
    /// Prepended to every key.
    pub prefix: String,
    /// The longest a call waits for Redis before the failure policy answers.
    pub timeout: Duration,
    /// The answer when Redis is down, slow or refusing work.
    pub failure_policy: FailurePolicy,
}

/// How often a service that started without Redis tries to connect again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// The service's Redis store: Redis (once connected) behind the failure policy, falling back
/// to this process's limiters.
pub(crate) type SafeRedis = FailSafe<LazyStore, MemoryStore<AnyAlgorithm, ServiceClock>, String>;

/// A limit of [`SafeRedis`]: in Redis, and in memory for the `local` policy.
pub(crate) type RedisLimits = Both<Arc<NamedLimit>, Arc<Limiter>>;

/// The Redis connection of a running service, behind its failure policy.
pub(crate) struct RedisBackend {
    options: RedisOptions,
    connection: Arc<LazyStore>,
    store: SafeRedis,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("options", &self.options)
            .field("connected", &self.connection.is_connected())
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Not connected yet: see [`RedisBackend::connect`]. Failures are counted in `metrics`
    /// and logged (`sluicegate_redis::log_failures`: at most one warning every 5 s).
    pub(crate) fn new(options: RedisOptions, metrics: &Arc<Metrics>) -> RedisBackend {
        let config = StoreConfig {
            prefix: options.prefix.clone(),
            timeout: options.timeout,
            ..StoreConfig::default()
        };
        let connection = Arc::new(LazyStore::new(options.target.clone(), config));
        let policy = options.failure_policy;
        let metrics = Arc::clone(metrics);
        let observe = log_failures("", policy, move |kind| {
            metrics
                .backend_errors
                .get_or_create(&KindLabel { kind })
                .inc();
        });
        let store = FailSafe::new(
            Arc::clone(&connection),
            MemoryStore::new(),
            policy,
            options.timeout,
        )
        .with_observer(observe);
        RedisBackend {
            options,
            connection,
            store,
        }
    }

    pub(crate) fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Redis behind the failure policy.
    pub(crate) fn store(&self) -> &SafeRedis {
        &self.store
    }

    /// One attempt to connect, bounded by the timeout. A backend failure (Redis unreachable)
    /// is returned as such; any other error (bad URL or prefix) is a configuration error.
    pub(crate) async fn connect(&self) -> Result<(), RedisLimitError> {
        self.connection.connect().await
    }

    /// Tries to connect until it succeeds (a service that started while Redis was down).
    pub(crate) async fn connect_until_up(&self) {
        Arc::clone(&self.connection)
            .connect_until_up(RECONNECT_EVERY)
            .await;
        tracing::info!("connected to redis");
    }

    /// Whether Redis answers (connected and not marked down), for the live page.
    pub(crate) fn is_up(&self) -> bool {
        !self.store.is_down() && self.connection.is_connected()
    }

    /// Failures since start.
    pub(crate) fn failures(&self) -> u64 {
        self.store.failures()
    }
}
