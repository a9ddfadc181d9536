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

use sluicegate::store::{FailureKind, MemoryStore, Now, Outcome, Request, Store, StoreError};
use sluicegate::{AnyAlgorithm, ConfigError, KeyedLimiter, Op};
use sluicegate_redis::{
    Both, FailSafe, FailurePolicy, LazyStore, NamedLimit, RedisLimit, RedisTarget, StoreConfig,
    log_failures,
};

use crate::proxy::key::KeyBytes;
use crate::proxy::metrics::Metrics;
use crate::proxy::rules::LimitDef;
use sluicegate_http::rate_limit::BackendError;

/// Where the proxy's shared counters are, and what answers when they cannot be reached.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// The server or cluster.
    pub target: RedisTarget,
    /// The key prefix and the longest a call may wait.
    pub store: StoreConfig,
    /// The answer while Redis is down, slow, or refusing work.
    pub failure_policy: FailurePolicy,
}

/// How long a concurrency permit would be leased in Redis: unused, as concurrency limits stay
/// in the proxy, but a Redis limit is made with one.
const UNUSED_LEASE: Duration = Duration::from_secs(60);

/// How often a proxy that started without Redis tries to connect again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

type SharedStore = FailSafe<LazyStore, MemoryStore<AnyAlgorithm>, KeyBytes>;

/// A limit of the shared store: in Redis, and in the proxy for the `local` policy.
pub(crate) type SharedLimit = Both<Arc<NamedLimit>, Arc<KeyedLimiter<KeyBytes, AnyAlgorithm>>>;

/// The proxy's Redis, behind its failure policy.
pub(crate) struct Shared {
    connection: Arc<LazyStore>,
    store: SharedStore,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("target", self.connection.target())
            .field("connected", &self.connection.is_connected())
            .field("policy", &self.store.policy())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Not connected yet: see [`Shared::connect`]. Failures are counted in `metrics`.
    pub(crate) fn new(settings: &RedisSettings, metrics: &Arc<Metrics>) -> Shared {
        let connection = Arc::new(LazyStore::new(
            settings.target.clone(),
            settings.store.clone(),
        ));
        let policy = settings.failure_policy;
        let metrics = Arc::clone(metrics);
        let observe = log_failures("proxy: ", policy, move |kind| {
            metrics.backend_error(kind);
        });
        let store = FailSafe::new(
            Arc::clone(&connection),
            MemoryStore::new(),
            policy,
            settings.store.timeout,
        )
        .with_observer(observe);
        Shared { connection, store }
    }

    /// Connects, or, if Redis does not answer, keeps trying in the background while the
    /// failure policy answers. Settings no retry mends (a bad URL or prefix) are an error.
    pub(crate) async fn connect(&self) -> Result<(), sluicegate_redis::RedisLimitError> {
        match self.connection.connect().await {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == FailureKind::Outage => {
                tracing::warn!(%error, policy = ?self.store.policy(),
                    "proxy: redis unreachable at start; the failure policy answers until it is up");
                let connection = Arc::clone(&self.connection);
                tokio::spawn(async move {
                    connection.connect_until_up(RECONNECT_EVERY).await;
                    tracing::info!("proxy: connected to redis");
                });
                Ok(())
            }
            Err(error) => Err(error),
        }
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
        let error = Shared::limit(def).err()?;
        Some(format!("`{}` cannot be kept in Redis: {error}", def.spec))
    }

    /// Decides `requests` in Redis (or by the failure policy), all or nothing.
    pub(crate) async fn decide(
        &self,
        requests: &[Request<'_, SharedLimit, KeyBytes>],
        max_keys: usize,
    ) -> Result<Outcome, BackendError> {
        self.store
            .decide(requests, Op::Check, Now::Store)
            .await
            .map_err(|error| match error.kind() {
                FailureKind::KeyCapacity => BackendError::KeyCapacity { max_keys },
                _ => BackendError::Unavailable(error.to_string().into()),
            })
    }
}
