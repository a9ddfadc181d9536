//! Where counters live, memory (one process) or Redis (shared by every replica), and the
//! connection to Redis: made at start if Redis answers, retried in the background if not.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use sluicegate_redis::{FailurePolicy, RedisLimitError, RedisStore, StoreConfig};

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

/// Consecutive outage failures (timeouts, lost connections) that mark Redis down.
const FAILURES_TO_OPEN: u32 = 3;

/// The first probe of a Redis marked down, after this long; then twice as long each time, up
/// to [`PROBE_AT_MOST_EVERY`]: a `PING` twice a second costs Redis nothing, and decisions go
/// back to it within half a second of its return.
const FIRST_PROBE_AFTER: Duration = Duration::from_millis(50);
const PROBE_AT_MOST_EVERY: Duration = Duration::from_millis(500);

/// Why Redis did not decide a call.
#[derive(Debug)]
pub(crate) enum BackendFailure {
    /// No connection has been made yet (Redis was down at start).
    NotConnected,
    /// Redis is known to be down: not asked until a background probe finds it up again.
    Down,
    /// The whole call took longer than the timeout.
    Timeout(Duration),
    /// The store failed.
    Redis(RedisLimitError),
}

impl BackendFailure {
    /// The `kind` label of `sluicegate_backend_errors_total`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            BackendFailure::NotConnected => "connection",
            BackendFailure::Down => "down",
            BackendFailure::Timeout(_) => "timeout",
            BackendFailure::Redis(RedisLimitError::Timeout(_)) => "timeout",
            BackendFailure::Redis(RedisLimitError::Connection(_) | RedisLimitError::Stopped) => {
                "connection"
            }
            BackendFailure::Redis(RedisLimitError::Script(_)) => "refused",
            BackendFailure::Redis(_) => "other",
        }
    }
}

impl BackendFailure {
    /// Whether the failure says Redis is unreachable or too slow (not that it refused one
    /// call): what marks it down.
    fn is_outage(&self) -> bool {
        match self {
            BackendFailure::NotConnected | BackendFailure::Down => false,
            BackendFailure::Timeout(_) => true,
            BackendFailure::Redis(error) => matches!(
                error,
                RedisLimitError::Timeout(_)
                    | RedisLimitError::Connection(_)
                    | RedisLimitError::Stopped
            ),
        }
    }

    /// The same answer again, for another limit of the same call (a store that was not
    /// available, [`RedisBackend::store`]'s failures).
    pub(crate) fn again(&self) -> BackendFailure {
        match self {
            BackendFailure::Down => BackendFailure::Down,
            _ => BackendFailure::NotConnected,
        }
    }
}

impl std::fmt::Display for BackendFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendFailure::NotConnected => write!(f, "not connected to redis yet"),
            BackendFailure::Down => write!(f, "redis is down; probing it in the background"),
            BackendFailure::Timeout(timeout) => {
                write!(f, "redis did not answer within {timeout:?}")
            }
            BackendFailure::Redis(error) => write!(f, "{error}"),
        }
    }
}

/// The Redis connection of a running service, and the bookkeeping of its failures.
pub(crate) struct RedisBackend {
    options: RedisOptions,
    store: ArcSwapOption<RedisStore>,
    warnings: RateLimitedLog,
    breaker: Arc<Breaker>,
}

/// A circuit breaker: after [`FAILURES_TO_OPEN`] outage failures in a row, Redis is marked
/// down and calls are answered by the failure policy at once, instead of each waiting out the
/// timeout, while one background task probes Redis with backoff and marks it up again when
/// it answers.
#[derive(Debug, Default)]
struct Breaker {
    failures_in_a_row: AtomicU32,
    down: AtomicBool,
    /// Every failure since start, for the live page.
    failures: AtomicU64,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("options", &self.options)
            .field("connected", &self.store.load().is_some())
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Not connected yet: see [`RedisBackend::connect`].
    pub(crate) fn new(options: RedisOptions) -> RedisBackend {
        RedisBackend {
            options,
            store: ArcSwapOption::empty(),
            warnings: RateLimitedLog::new(WARN_EVERY),
            breaker: Arc::default(),
        }
    }

    pub(crate) fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Whether keys of one call must share a hash tag to be decided in one script.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.options.target, RedisTarget::Cluster(_))
    }

    /// The store, once connected and unless Redis is known to be down. Once made, the
    /// connection reconnects by itself.
    pub(crate) fn store(&self) -> Result<Arc<RedisStore>, BackendFailure> {
        if self.breaker.down.load(Ordering::Relaxed) {
            return Err(BackendFailure::Down);
        }
        self.store.load_full().ok_or(BackendFailure::NotConnected)
    }

    /// Records that Redis answered a call.
    pub(crate) fn note_success(&self) {
        // Read first: a write on every call would bounce the line between cores.
        if self.breaker.failures_in_a_row.load(Ordering::Relaxed) != 0 {
            self.breaker.failures_in_a_row.store(0, Ordering::Relaxed);
        }
    }

    /// Counts an outage failure; the one that reaches [`FAILURES_TO_OPEN`] marks Redis down
    /// and starts the probe.
    fn note_outage(&self) {
        let failures = self
            .breaker
            .failures_in_a_row
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if failures < FAILURES_TO_OPEN || self.breaker.down.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(store) = self.store.load_full() else {
            self.breaker.down.store(false, Ordering::Release);
            return;
        };
        tracing::warn!(
            failures_in_a_row = failures,
            policy = ?self.options.failure_policy,
            "redis marked down: the failure policy answers at once while it is probed"
        );
        let breaker = Arc::clone(&self.breaker);
        // Outside a runtime (never in the service) nothing could probe: stay up instead.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(probe_until_up(breaker, store))),
            Err(_) => self.breaker.down.store(false, Ordering::Release),
        }
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
        self.store.store(Some(Arc::new(store)));
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
        !self.breaker.down.load(Ordering::Relaxed) && self.store.load().is_some()
    }

    /// Failures since start.
    pub(crate) fn failures(&self) -> u64 {
        self.breaker.failures.load(Ordering::Relaxed)
    }

    /// Counts a failure and warns about it, at most once per `WARN_EVERY` so that a Redis
    /// outage under load does not flood the log.
    pub(crate) fn note_failure(&self, metrics: &Metrics, failure: &BackendFailure) {
        self.breaker.failures.fetch_add(1, Ordering::Relaxed);
        if failure.is_outage() {
            self.note_outage();
        }
        metrics
            .backend_errors
            .get_or_create(&KindLabel {
                kind: failure.kind(),
            })
            .inc();
        self.warnings.write(|left_out| {
            tracing::warn!(
                error = %failure,
                kind = failure.kind(),
                policy = ?self.options.failure_policy,
                unreported_since_last_warning = left_out,
                "redis failed; the failure policy answers"
            );
        });
    }
}

/// Pings Redis with backoff until it answers, then marks it up.
async fn probe_until_up(breaker: Arc<Breaker>, store: Arc<RedisStore>) {
    let mut wait = FIRST_PROBE_AFTER;
    loop {
        tokio::time::sleep(wait).await;
        match store.ping().await {
            Ok(()) => {
                breaker.failures_in_a_row.store(0, Ordering::Relaxed);
                breaker.down.store(false, Ordering::Release);
                tracing::info!("redis answers again: decisions go back to it");
                return;
            }
            Err(error) => tracing::debug!(%error, ?wait, "redis still down"),
        }
        wait = (wait * 2).min(PROBE_AT_MOST_EVERY);
    }
}
