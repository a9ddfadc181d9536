//! Redis as both applications reach it: a connection made when Redis first answers (so an
//! application starts while Redis is down), behind the failure policy, whose `local` answer
//! decides in the application's own limiters; failures counted and logged at most every 5 s.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::limiter::KeyBudget;
use sluicegate::store::Store;
use sluicegate_redis::{
    FailSafe, FailurePolicy, LazyStore, LeaseConfig, LeaseStats, OverLimitStats, RedisLimitError,
    RedisTarget, StoreConfig, log_failures,
};

/// Where shared counters are kept, and what answers when they cannot be reached.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisSettings {
    /// One server, or a cluster.
    pub target: RedisTarget,
    /// Prepended to every key.
    pub prefix: String,
    /// The longest a call waits for Redis before the failure policy answers.
    pub timeout: Duration,
    /// The answer when Redis is down, slow or refusing work.
    pub failure_policy: FailurePolicy,
    /// The most denials the over-limit cache keeps (0: no cache; see
    /// `sluicegate_redis::StoreConfig::over_limit_cache`).
    pub over_limit_cache: usize,
    /// The cap on keys the cache's entries are also taken from (`serve`'s `--max-keys`).
    pub over_limit_budget: Option<Arc<KeyBudget>>,
    /// Permit leasing, if on (see `sluicegate_redis::StoreConfig::leasing`).
    pub leasing: Option<LeaseConfig>,
}

impl RedisSettings {
    /// Redis at `target`, keys prefixed `sluicegate:`, a call waiting at most 50 ms, and the
    /// `local` policy.
    pub fn new(target: RedisTarget) -> RedisSettings {
        RedisSettings {
            target,
            prefix: "sluicegate:".to_owned(),
            timeout: Duration::from_millis(50),
            failure_policy: FailurePolicy::Local,
            over_limit_cache: 0,
            over_limit_budget: None,
            leasing: None,
        }
    }

    /// With keys prefixed `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> RedisSettings {
        self.prefix = prefix.into();
        self
    }

    /// With calls waiting at most `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> RedisSettings {
        self.timeout = timeout;
        self
    }

    /// With `policy` answering while Redis cannot.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> RedisSettings {
        self.failure_policy = policy;
        self
    }

    /// With an over-limit cache of at most `entries` denials (0: none).
    pub fn over_limit_cache(mut self, entries: usize) -> RedisSettings {
        self.over_limit_cache = entries;
        self
    }

    /// With the over-limit cache's entries also taken from `budget`.
    pub fn over_limit_budget(mut self, budget: Arc<KeyBudget>) -> RedisSettings {
        self.over_limit_budget = Some(budget);
        self
    }

    /// With permit leasing (`None`: off).
    pub fn leasing(mut self, leasing: Option<LeaseConfig>) -> RedisSettings {
        self.leasing = leasing;
        self
    }

    fn store_config(&self) -> StoreConfig {
        StoreConfig {
            prefix: self.prefix.clone(),
            timeout: self.timeout,
            over_limit_cache: self.over_limit_cache,
            over_limit_budget: self.over_limit_budget.clone(),
            leasing: self.leasing,
            ..StoreConfig::default()
        }
    }
}

/// How often an application that started without Redis tries to connect again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// Redis behind the failure policy, with `local` (the policy's in-process store) deciding when
/// it cannot, for keys of type `K`.
pub(crate) struct SafeRedis<L, K: AsRef<[u8]> + Sync + ?Sized + 'static> {
    settings: RedisSettings,
    connection: Arc<LazyStore>,
    store: FailSafe<LazyStore, L, K>,
    /// Prefixes the log lines (`"proxy: "`), so that they say which application wrote them.
    who: &'static str,
}

impl<L, K: AsRef<[u8]> + Sync + ?Sized + 'static> std::fmt::Debug for SafeRedis<L, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafeRedis")
            .field("settings", &self.settings)
            .field("connected", &self.connection.is_connected())
            .finish_non_exhaustive()
    }
}

impl<L, K> SafeRedis<L, K>
where
    L: Store<K>,
    K: AsRef<[u8]> + Sync + ?Sized + 'static,
{
    /// Not connected yet: see [`SafeRedis::connect`]. Each failure's kind is given to
    /// `count` (a metric) and logged, prefixed by `who`.
    pub(crate) fn new(
        settings: RedisSettings,
        local: L,
        who: &'static str,
        count: impl Fn(&'static str) + Send + Sync + 'static,
    ) -> SafeRedis<L, K> {
        let connection = Arc::new(LazyStore::new(
            settings.target.clone(),
            settings.store_config(),
        ));
        let policy = settings.failure_policy;
        let store = FailSafe::new(Arc::clone(&connection), local, policy, settings.timeout)
            .with_observer(log_failures(who, policy, count));
        SafeRedis {
            settings,
            connection,
            store,
            who,
        }
    }

    /// Redis behind the failure policy.
    pub(crate) fn store(&self) -> &FailSafe<LazyStore, L, K> {
        &self.store
    }

    /// How Redis is reached.
    pub(crate) fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// One attempt to connect, bounded by the timeout: `Ok(true)` if connected, `Ok(false)` if
    /// Redis did not answer (the failure policy answers meanwhile; see
    /// [`SafeRedis::connect_until_up`]), an error for settings no retry mends (a bad URL or
    /// prefix).
    pub(crate) async fn connect(&self) -> Result<bool, RedisLimitError> {
        match self.connection.connect().await {
            Ok(()) => Ok(true),
            Err(error) if error.is_backend_failure() => {
                tracing::warn!(%error, policy = ?self.settings.failure_policy,
                    "{}redis unreachable at start; the failure policy answers until it is up",
                    self.who);
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Tries to connect until it succeeds; the connection then reconnects by itself.
    pub(crate) async fn connect_until_up(&self) {
        Arc::clone(&self.connection)
            .connect_until_up(RECONNECT_EVERY)
            .await;
        tracing::info!("{}connected to redis", self.who);
    }

    /// [`SafeRedis::connect`], then, if Redis did not answer, [`SafeRedis::connect_until_up`]
    /// in the background.
    pub(crate) async fn connect_or_keep_trying(self: &Arc<Self>) -> Result<(), RedisLimitError>
    where
        L: Send + Sync + 'static,
        K: Send,
        Self: Send + Sync,
    {
        if !self.connect().await? {
            let redis = Arc::clone(self);
            tokio::spawn(async move { redis.connect_until_up().await });
        }
        Ok(())
    }

    /// Whether Redis answers (connected and not marked down).
    pub(crate) fn is_up(&self) -> bool {
        !self.store.is_down() && self.connection.is_connected()
    }

    /// Failures since start.
    pub(crate) fn failures(&self) -> u64 {
        self.store.failures()
    }

    /// The over-limit cache's hits and entries (all zero without one).
    pub(crate) fn over_limit_stats(&self) -> OverLimitStats {
        self.connection.over_limit_stats()
    }

    /// Leasing's counts (all zero without it).
    pub(crate) fn lease_stats(&self) -> LeaseStats {
        self.connection.lease_stats()
    }

    /// Gives back the unused permits of every lease held (at shutdown); a failure is logged.
    pub(crate) async fn return_leases(&self) {
        if let Err(error) = self.connection.return_leases().await {
            tracing::warn!(%error, "{}could not give leased permits back to redis", self.who);
        }
    }

    /// Drops every denial the over-limit cache holds (the manual switch changed a mode).
    pub(crate) fn clear_over_limit_cache(&self) {
        self.connection.clear_over_limit_cache();
    }
}
