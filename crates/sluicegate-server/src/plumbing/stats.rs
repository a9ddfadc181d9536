//! `GET /admin/stats`, the live page's JSON, as types: the README documents this shape
//! ("Live page and manual switch") and scripts read it, so both applications fill these
//! structs rather than each building its own JSON, and a field cannot drift in one of them.

use serde::Serialize;
use sluicegate::Micros;
use sluicegate::store::Store;
use sluicegate_redis::FailurePolicy;

use crate::plumbing::live::{DEFAULT_SECONDS, RuleSeries};
use crate::plumbing::{Mode, ModeTable, SafeRedis};

/// The whole answer.
#[derive(Debug, Serialize)]
pub(crate) struct AdminStats {
    /// Seconds since the epoch, with the microseconds as a fraction.
    pub(crate) now: f64,
    /// The length of every rule's series.
    pub(crate) window_seconds: usize,
    pub(crate) modes: ModeTable,
    pub(crate) backend: BackendStats,
    pub(crate) latency_micros: LatencyPercentiles,
    pub(crate) keys: KeyCount,
    pub(crate) rules: Vec<RuleEntry>,
}

impl AdminStats {
    /// An answer read at `now` (microseconds since the epoch), over the page's window.
    pub(crate) fn at(
        now: Micros,
        modes: ModeTable,
        backend: BackendStats,
        latency_micros: LatencyPercentiles,
        keys: KeyCount,
        rules: Vec<RuleEntry>,
    ) -> AdminStats {
        AdminStats {
            now: now as f64 / 1e6,
            window_seconds: DEFAULT_SECONDS,
            modes,
            backend,
            latency_micros,
            keys,
            rules,
        }
    }
}

/// Where the counters live, and how loading the rules went.
#[derive(Debug, Serialize)]
#[serde(tag = "store", rename_all = "lowercase")]
pub(crate) enum BackendStats {
    Memory {
        /// Always 0: memory does not fail; there so that a reader finds it in both.
        errors: u64,
        reloads: Reloads,
    },
    Redis {
        redis_up: bool,
        failure_policy: &'static str,
        errors: u64,
        reloads: Reloads,
        over_limit_cache: OverLimitCacheStats,
        leasing: LeasingStats,
    },
}

/// Redis permit leasing: whether it is on, and its counts (see
/// `sluicegate_redis::LeaseStats`).
#[derive(Debug, Serialize)]
pub(crate) struct LeasingStats {
    pub(crate) on: bool,
    pub(crate) leases: u64,
    pub(crate) local_grants: u64,
    pub(crate) permits_returned: u64,
    pub(crate) permits_expired_unused: u64,
    pub(crate) permits_held: u64,
}

/// The Redis over-limit cache: its cap (0: off), the denials it holds, and the calls it
/// answered without Redis.
#[derive(Debug, Serialize)]
pub(crate) struct OverLimitCacheStats {
    pub(crate) capacity: usize,
    pub(crate) entries: usize,
    pub(crate) hits: u64,
}

impl BackendStats {
    /// In memory.
    pub(crate) fn memory(reloads: Reloads) -> BackendStats {
        BackendStats::Memory { errors: 0, reloads }
    }

    /// On `redis`.
    pub(crate) fn redis<L, K>(redis: &SafeRedis<L, K>, reloads: Reloads) -> BackendStats
    where
        L: Store<K>,
        K: AsRef<[u8]> + Sync + ?Sized + 'static,
    {
        BackendStats::Redis {
            redis_up: redis.is_up(),
            failure_policy: match redis.settings().failure_policy {
                FailurePolicy::Open => "open",
                FailurePolicy::Closed => "closed",
                FailurePolicy::Local => "local",
            },
            errors: redis.failures(),
            reloads,
            over_limit_cache: {
                let stats = redis.over_limit_stats();
                OverLimitCacheStats {
                    // Before a connection the store does not exist yet: the configured cap.
                    capacity: redis.settings().over_limit_cache,
                    entries: stats.entries,
                    hits: stats.hits,
                }
            },
            leasing: {
                let stats = redis.lease_stats();
                LeasingStats {
                    on: redis.settings().leasing.is_some(),
                    leases: stats.leases_taken,
                    local_grants: stats.local_grants,
                    permits_returned: stats.permits_returned,
                    permits_expired_unused: stats.permits_expired_unused,
                    permits_held: stats.permits_held,
                }
            },
        }
    }
}

/// Rule loads since start.
#[derive(Debug, Serialize)]
pub(crate) struct Reloads {
    pub(crate) success: u64,
    pub(crate) failure: u64,
}

/// Decision latency over the last minute; `None` (null) where nothing was timed, rather than
/// zeros a reader would take for fast answers.
#[derive(Debug, Default, Serialize)]
pub(crate) struct LatencyPercentiles {
    pub(crate) p50: Option<u64>,
    pub(crate) p90: Option<u64>,
    pub(crate) p99: Option<u64>,
    pub(crate) p999: Option<u64>,
}

/// The fractions [`LatencyPercentiles`] reports, in its fields' order.
pub(crate) const LATENCY_QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

impl LatencyPercentiles {
    /// From the values at [`LATENCY_QUANTILES`], in order (missing ones: `None`).
    pub(crate) fn from_values(values: &[u64]) -> LatencyPercentiles {
        let at = |i: usize| values.get(i).copied();
        LatencyPercentiles {
            p50: at(0),
            p90: at(1),
            p99: at(2),
            p999: at(3),
        }
    }
}

/// Live counter keys and their cap; `None` (null) for an application that does not count
/// them.
#[derive(Debug, Default, Serialize)]
pub(crate) struct KeyCount {
    pub(crate) live: Option<usize>,
    pub(crate) max: Option<usize>,
}

/// One rule (for the proxy, one route).
#[derive(Debug, Serialize)]
pub(crate) struct RuleEntry {
    pub(crate) id: String,
    pub(crate) domain: String,
    /// The file the rule was read from, and where in it.
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) mode: Mode,
    pub(crate) shadow_mode: bool,
    #[serde(flatten)]
    pub(crate) series: RuleSeries,
    pub(crate) top_limited: Vec<LimitedKey>,
}

/// A counter key a rule denied, and how many permits it was denied in the last minute.
#[derive(Debug, Serialize)]
pub(crate) struct LimitedKey {
    pub(crate) key: String,
    pub(crate) count: u64,
}

/// What `PUT /admin/mode` answers: the change made.
#[derive(Debug, Serialize)]
pub(crate) struct ModeChanged {
    pub(crate) rule: String,
    pub(crate) mode: Mode,
    pub(crate) previous: Mode,
}
