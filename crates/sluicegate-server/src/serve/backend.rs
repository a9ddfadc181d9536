//! Where counters live, memory (one process) or Redis (shared by every replica), and the
//! connection to Redis: made at start if Redis answers, retried in the background if not.
//! Redis is a store of the backend seam behind the Redis crate's failure policy ([`FailSafe`],
//! with its circuit breaker), the `local` policy deciding in this process's limiters.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use sluicegate::store::{FailureKind, Now, Outcome, Request, Store, StoreError};
use sluicegate::{AnyAlgorithm, Op, store::MemoryStore};
use sluicegate_redis::{
    Both, Event, FailSafe, Failure, FailurePolicy, NamedLimit, RedisLimitError, RedisStore,
    StoreConfig,
};

use crate::serve::clock::ServiceClock;
use crate::serve::limiter_table::Limiter;
use crate::serve::log_limit::RateLimitedLog;
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

/// A Redis server or cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (`redis://host:port/db`).
    Single(String),
    /// Any nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

/// How often a service that started without Redis tries to connect again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// At most one warning per this interval about Redis failures; the rest are counted.
const WARN_EVERY: Duration = Duration::from_secs(5);

/// The service's Redis store: Redis (once connected) behind the failure policy, falling back
/// to this process's limiters.
pub(crate) type SafeRedis =
    FailSafe<RedisConnection, MemoryStore<AnyAlgorithm, ServiceClock>, String>;

/// A limit of [`SafeRedis`]: in Redis, and in memory for the `local` policy.
pub(crate) type RedisLimits = Both<Arc<NamedLimit>, Arc<Limiter>>;

/// Why the connection did not decide a call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionError {
    /// No connection has been made yet (Redis was down at start).
    #[error("not connected to redis yet")]
    NotConnected,
    /// The store failed.
    #[error(transparent)]
    Redis(#[from] RedisLimitError),
}

impl StoreError for ConnectionError {
    fn kind(&self) -> FailureKind {
        match self {
            // Not an outage: there is nothing to probe until a connection is made.
            ConnectionError::NotConnected => FailureKind::Refused,
            ConnectionError::Redis(error) => error.kind(),
        }
    }
}

/// The `kind` label of `sluicegate_backend_errors_total`.
fn kind_label(failure: &Failure<'_, ConnectionError>) -> &'static str {
    match failure {
        Failure::Down => "down",
        Failure::Timeout(_) => "timeout",
        Failure::Store(ConnectionError::NotConnected) => "connection",
        Failure::Store(ConnectionError::Redis(error)) => match error {
            RedisLimitError::Timeout(_) => "timeout",
            RedisLimitError::Connection(_) | RedisLimitError::Stopped => "connection",
            RedisLimitError::Script(_) => "refused",
            _ => "other",
        },
    }
}

/// The Redis store once connected: a store of the seam that is not connected yet until
/// [`RedisBackend::connect`] succeeds. Once made, the connection reconnects by itself.
#[derive(Debug, Default)]
pub(crate) struct RedisConnection {
    store: ArcSwapOption<RedisStore>,
}

impl Store<String> for RedisConnection {
    type Limit = Arc<NamedLimit>;
    type Error = ConnectionError;

    fn capacity(&self, limit: &Arc<NamedLimit>) -> u64 {
        limit.limit.capacity()
    }

    async fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Arc<NamedLimit>, String>],
        op: Op,
        now: Now,
    ) -> Result<Outcome, ConnectionError> {
        let store = self
            .store
            .load_full()
            .ok_or(ConnectionError::NotConnected)?;
        Ok(Store::<String>::decide(&*store, requests, op, now).await?)
    }

    async fn ping(&self) -> Result<(), ConnectionError> {
        let store = self
            .store
            .load_full()
            .ok_or(ConnectionError::NotConnected)?;
        Ok(store.ping().await?)
    }
}

/// The Redis connection of a running service, behind its failure policy.
pub(crate) struct RedisBackend {
    options: RedisOptions,
    connection: Arc<RedisConnection>,
    store: SafeRedis,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("options", &self.options)
            .field("connected", &self.connection.store.load().is_some())
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Not connected yet: see [`RedisBackend::connect`]. Failures are counted in `metrics`
    /// and logged, at most one warning per `WARN_EVERY`.
    pub(crate) fn new(options: RedisOptions, metrics: &Arc<Metrics>) -> RedisBackend {
        let connection = Arc::new(RedisConnection::default());
        let policy = options.failure_policy;
        let metrics = Arc::clone(metrics);
        let warnings = RateLimitedLog::new(WARN_EVERY);
        let observe = move |event: &Event<'_, ConnectionError>| match event {
            Event::Failed(failure) => {
                let kind = kind_label(failure);
                metrics
                    .backend_errors
                    .get_or_create(&KindLabel { kind })
                    .inc();
                warnings.write(|left_out| {
                    tracing::warn!(
                        error = %failure,
                        kind,
                        ?policy,
                        unreported_since_last_warning = left_out,
                        "redis failed; the failure policy answers"
                    );
                });
            }
            Event::MarkedDown { failures_in_a_row } => tracing::warn!(
                failures_in_a_row,
                ?policy,
                "redis marked down: the failure policy answers at once while it is probed"
            ),
            Event::BackUp => tracing::info!("redis answers again: decisions go back to it"),
        };
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
        let config = StoreConfig {
            prefix: self.options.prefix.clone(),
            timeout: self.options.timeout,
            ..StoreConfig::default()
        };
        let store = match &self.options.target {
            RedisTarget::Single(url) => RedisStore::connect(url, config).await?,
            RedisTarget::Cluster(nodes) => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                RedisStore::connect_cluster(&nodes, config).await?
            }
        };
        self.connection.store.store(Some(Arc::new(store)));
        Ok(())
    }

    /// Tries to connect until it succeeds (a service that started while Redis was down).
    pub(crate) async fn connect_until_up(&self) {
        let mut ticker = tokio::time::interval(RECONNECT_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.connect().await {
                Ok(()) => {
                    tracing::info!("connected to redis");
                    return;
                }
                Err(error) => tracing::debug!(%error, "redis still unreachable"),
            }
        }
    }

    /// Whether Redis answers (connected and not marked down), for the live page.
    pub(crate) fn is_up(&self) -> bool {
        !self.store.is_down() && self.connection.store.load().is_some()
    }

    /// Failures since start.
    pub(crate) fn failures(&self) -> u64 {
        self.store.failures()
    }
}
