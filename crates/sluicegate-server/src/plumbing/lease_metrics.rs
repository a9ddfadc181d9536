//! Redis permit leasing's metrics, as `serve` and the proxy both expose them (next to the
//! over-limit cache's): leases taken, permits leased, returned and expired unused, calls
//! granted from a lease (each a Redis round trip saved) and permits held, read from the store
//! when `/metrics` is scraped.

use std::sync::atomic::Ordering;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sluicegate_redis::LeaseStats;

/// Leasing's series in one registry.
#[derive(Debug, Default)]
pub(crate) struct LeaseMetrics {
    leases: Counter,
    permits_leased: Counter,
    local_grants: Counter,
    permits_returned: Counter,
    permits_expired: Counter,
    permits_held: Gauge,
}

impl LeaseMetrics {
    /// Registered in `registry` (`..._redis_leases_total`, `..._redis_lease_*`); zero until
    /// leasing reports.
    pub(crate) fn register(registry: &mut Registry) -> LeaseMetrics {
        let metrics = LeaseMetrics::default();
        let counters = [
            (
                "redis_leases",
                "Leases of permits taken from Redis",
                &metrics.leases,
            ),
            (
                "redis_lease_permits_leased",
                "Permits leased from Redis, beyond the requests that took the leases",
                &metrics.permits_leased,
            ),
            (
                "redis_lease_local_grants",
                "Calls granted from a lease, without a Redis round trip",
                &metrics.local_grants,
            ),
            (
                "redis_lease_permits_returned",
                "Unused leased permits Redis took back",
                &metrics.permits_returned,
            ),
            (
                "redis_lease_permits_expired_unused",
                "Unused leased permits not taken back (spent until time frees them)",
                &metrics.permits_expired,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "redis_lease_permits_held",
            "Leased permits this process holds unused",
            metrics.permits_held.clone(),
        );
        metrics
    }

    /// Brings the series up to `stats`, just before a scrape.
    pub(crate) fn update(&self, stats: LeaseStats) {
        // The store counts; the counters follow it, never going back (two scrapes at once
        // both raise them to the same values).
        for (counter, value) in [
            (&self.leases, stats.leases_taken),
            (&self.permits_leased, stats.permits_leased),
            (&self.local_grants, stats.local_grants),
            (&self.permits_returned, stats.permits_returned),
            (&self.permits_expired, stats.permits_expired_unused),
        ] {
            counter.inner().fetch_max(value, Ordering::Relaxed);
        }
        self.permits_held
            .set(i64::try_from(stats.permits_held).unwrap_or(i64::MAX));
    }
}
