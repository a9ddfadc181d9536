//! The live page's series of each route, sampled once a second from the counters the metrics
//! keep: the request path pays nothing more for the page, and a request shows up within a
//! second. A route's history is kept by name across reloads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluicegate::{Clock, Micros, SystemClock};
use tokio::sync::watch;

use crate::plumbing::{RuleSeries, RuleStats};
use crate::proxy::metrics::{Metrics, Outcomes};

/// Each route's series, by route name.
#[derive(Debug, Default)]
pub(crate) struct RouteSeries {
    routes: Mutex<HashMap<String, Sampled>>,
}

#[derive(Debug, Default)]
struct Sampled {
    stats: RuleStats,
    /// The counts at the last sample, the next sample's deltas are taken from.
    last: Outcomes,
}

impl RouteSeries {
    /// Adds at `now` what each route counted since the last sample.
    pub(crate) fn sample(&self, metrics: &Metrics, now: Micros) {
        let mut routes = self.routes.lock();
        for (route, counts) in metrics.route_outcomes() {
            let sampled = routes.entry(route).or_default();
            let since = |now: u64, then: u64| now.saturating_sub(then);
            let (stats, last) = (&sampled.stats, &sampled.last);
            stats.allowed.add(
                now,
                since(counts.allowed + counts.delayed, last.allowed + last.delayed),
            );
            stats.denied.add(now, since(counts.limited, last.limited));
            stats
                .shadow_denied
                .add(now, since(counts.dry_run, last.dry_run));
            sampled.last = counts;
        }
    }

    /// Route `name`'s series at `now` (zeros for a route not sampled yet).
    pub(crate) fn series(&self, name: &str, now: Micros) -> RuleSeries {
        match self.routes.lock().get(name) {
            Some(sampled) => sampled.stats.series(now),
            None => RuleStats::default().series(now),
        }
    }
}

/// Samples `metrics` into `series` every second until `stopped` turns true.
pub(crate) async fn sample_every_second(
    series: Arc<RouteSeries>,
    metrics: Arc<Metrics>,
    mut stopped: watch::Receiver<bool>,
) {
    let clock = SystemClock::new();
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = ticks.tick() => series.sample(&metrics, clock.now()),
            _ = stopped.changed() => return,
        }
    }
}
