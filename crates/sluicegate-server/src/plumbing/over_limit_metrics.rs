//! The Redis over-limit cache's metrics, as `serve` and the proxy both expose them: its hits
//! (calls answered in the process, each a Redis round trip saved) and its entries, read from
//! the store when `/metrics` is scraped.

use std::sync::atomic::Ordering;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sluicegate_redis::OverLimitStats;

/// The cache's series in one registry.
#[derive(Debug, Default)]
pub(crate) struct OverLimitMetrics {
    hits: Counter,
    entries: Gauge,
}

impl OverLimitMetrics {
    /// Registered in `registry` (`..._redis_over_limit_cache_hits_total`,
    /// `..._redis_over_limit_cache_entries`); zero until a cache reports.
    pub(crate) fn register(registry: &mut Registry) -> OverLimitMetrics {
        let metrics = OverLimitMetrics::default();
        registry.register(
            "redis_over_limit_cache_hits",
            "Calls answered from the Redis over-limit cache, without a Redis round trip",
            metrics.hits.clone(),
        );
        registry.register(
            "redis_over_limit_cache_entries",
            "Denials held by the Redis over-limit cache",
            metrics.entries.clone(),
        );
        metrics
    }

    /// Brings the series up to `stats`, just before a scrape.
    pub(crate) fn update(&self, stats: OverLimitStats) {
        // The store counts hits itself; the counter follows it, never going back (two
        // scrapes at once both raise it to the same value).
        self.hits.inner().fetch_max(stats.hits, Ordering::Relaxed);
        self.entries
            .set(i64::try_from(stats.entries).unwrap_or(i64::MAX));
    }
}
