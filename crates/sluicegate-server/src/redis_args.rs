//! The Redis flags `sluicegate serve` and `sluicegate proxy` share, each also read from a
//! `SLUICEGATE_*` environment variable.

use std::time::Duration;

use clap::{Args, ValueEnum};
use sluicegate::lease::LeaseSizing;
use sluicegate_redis::{FailurePolicy, LeaseConfig, RedisTarget};

use crate::plumbing::RedisSettings;

/// Where shared counters live, and what to answer when they cannot be reached.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Keep the counters in this Redis server (`redis://host:port/db`), shared by every
    /// replica, instead of in memory.
    #[arg(long, env = "SLUICEGATE_REDIS", conflicts_with = "redis_cluster")]
    pub redis: Option<String>,
    /// Keep the counters in this Redis Cluster: any of its nodes, comma-separated.
    #[arg(long, env = "SLUICEGATE_REDIS_CLUSTER", value_delimiter = ',')]
    pub redis_cluster: Vec<String>,
    /// Prepended to every Redis key (must not contain `{` or `}`).
    #[arg(long, env = "SLUICEGATE_REDIS_PREFIX", default_value = "sluicegate:")]
    pub redis_prefix: String,
    /// The longest a call waits for Redis, in milliseconds, before the failure policy answers.
    #[arg(long, env = "SLUICEGATE_REDIS_TIMEOUT_MS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_timeout_ms: u64,
    /// What to answer when Redis is down or slow: `open` (allow), `closed` (deny), or `local`
    /// (decide in this process's memory, by the same rules, until Redis is back). For
    /// `serve`, also the answer at the --max-keys cap.
    // `local` by default: an outage neither lifts every limit (Envoy already fails open when
    // the service itself is unreachable) nor blocks all traffic; each replica still enforces
    // the rules, so at most replicas × the limit passes while Redis is away.
    #[arg(long, env = "SLUICEGATE_FAILURE_POLICY", value_enum, default_value_t = PolicyArg::Local)]
    pub failure_policy: PolicyArg,
    /// Answer keys Redis said are over their limit in this process until their retry time,
    /// keeping at most this many such denials (0: off). Exact: only denials are repeated,
    /// with the numbers Redis would give, for the algorithms and ops where nothing but time
    /// can free the budget (not concurrency limits, nor charges of `--count-denied` except
    /// on a full fixed window). A hot key over its limit then costs Redis one call per retry
    /// time. For `serve`, each entry also counts against --max-keys.
    #[arg(
        long,
        env = "SLUICEGATE_REDIS_OVER_LIMIT_CACHE",
        default_value_t = 0,
        value_name = "ENTRIES"
    )]
    pub redis_over_limit_cache: usize,
    /// Lease up to this many permits at a time per hot key (0: off): one Redis call takes a
    /// batch of a key's permits, which this process grants itself until they run out or the
    /// lease ends. Exact: the limit still holds across every replica (each permit is taken
    /// from Redis before it is granted, and counted as used at the lease's end). For fixed
    /// and sliding windows, GCRA, token and leaky buckets; a key sized by its recent rate (a
    /// cold key asks Redis every time). The price: at most this many permits per replica and
    /// key reserved but unused, for a lease's life. A granted call's `remaining` is this
    /// replica's view.
    #[arg(
        long,
        env = "SLUICEGATE_REDIS_LEASE",
        default_value_t = 0,
        value_name = "PERMITS"
    )]
    pub redis_lease: u64,
    /// How long a lease lasts at most, in milliseconds (with --redis-lease).
    #[arg(long, env = "SLUICEGATE_REDIS_LEASE_LIFE_MS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub redis_lease_life_ms: u64,
    /// The most leased permits this process holds at once, over every key (with
    /// --redis-lease).
    #[arg(
        long,
        env = "SLUICEGATE_REDIS_LEASE_MAX_HELD",
        default_value_t = 4096,
        value_name = "PERMITS"
    )]
    pub redis_lease_max_held: u64,
}

/// `--failure-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// Allow every request.
    Open,
    /// Deny every request.
    Closed,
    /// Decide in memory, in this process.
    Local,
}

impl From<PolicyArg> for FailurePolicy {
    fn from(policy: PolicyArg) -> Self {
        match policy {
            PolicyArg::Open => FailurePolicy::Open,
            PolicyArg::Closed => FailurePolicy::Closed,
            PolicyArg::Local => FailurePolicy::Local,
        }
    }
}

impl RedisArgs {
    /// The server or cluster named, if any (none: counters stay in memory).
    pub fn target(&self) -> Option<RedisTarget> {
        match (&self.redis, self.redis_cluster.as_slice()) {
            (Some(url), _) => Some(RedisTarget::Single(url.clone())),
            (None, []) => None,
            (None, nodes) => Some(RedisTarget::Cluster(nodes.to_vec())),
        }
    }

    /// The longest a call waits for Redis.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }

    /// How to reach the server or cluster named and what to answer without it; `None` when
    /// none is named (counters stay in memory).
    pub fn settings(&self) -> Option<RedisSettings> {
        let settings = RedisSettings::new(self.target()?)
            .prefix(self.redis_prefix.clone())
            .timeout(self.timeout())
            .failure_policy(self.failure_policy.into())
            .over_limit_cache(self.redis_over_limit_cache)
            .leasing(self.leasing());
        Some(settings)
    }

    /// Leasing as the flags ask (`None`: off): a lease holds half its life's worth of a
    /// key's rate.
    pub fn leasing(&self) -> Option<LeaseConfig> {
        if self.redis_lease == 0 {
            return None;
        }
        let life = self.redis_lease_life_ms.saturating_mul(1_000);
        Some(LeaseConfig {
            sizing: LeaseSizing {
                life,
                horizon: (life / 2).max(1),
                max_per_key: self.redis_lease,
                max_per_process: self.redis_lease_max_held,
            },
            ..LeaseConfig::default()
        })
    }
}
