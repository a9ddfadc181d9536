//! The metrics whose values live elsewhere and are read at each scrape: each route's outcomes
//! (its layers count them), client connections (the workers' loads), WebSocket tunnels (the
//! upstream pools') and the adaptive limits.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use sluicegate_http::adaptive::AdaptiveLimitLayer;
use sluicegate_http::rate_limit::Stats;

use crate::plumbing::Loads;

/// A layer's counts as they are now.
type ReadStats = Box<dyn Fn() -> Stats + Send + Sync>;

/// One route's counts, kept across reloads (by route name).
#[derive(Default)]
pub(crate) struct RouteCounters {
    /// Requests passed on to the upstream.
    pub(crate) passed: Counter,
    /// Requests the switch's `closed` mode answered.
    pub(crate) closed: Counter,
    /// What the route's layers counted, those replaced by a reload folded in.
    folded: Mutex<Stats>,
    /// The current layer's counts, read at each scrape.
    current: Mutex<Option<ReadStats>>,
}

impl fmt::Debug for RouteCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteCounters")
            .field("passed", &self.passed.get())
            .finish_non_exhaustive()
    }
}

impl RouteCounters {
    /// Counts from now on what `stats` reads (the new layer), folding in the old layer's.
    pub(crate) fn follow(&self, stats: Option<ReadStats>) {
        let mut current = self.current.lock();
        if let Some(old) = current.take() {
            add(&mut self.folded.lock(), old());
        }
        *current = stats;
    }

    fn stats(&self) -> Stats {
        let mut stats = *self.folded.lock();
        if let Some(now) = self.current.lock().as_ref() {
            add(&mut stats, now());
        }
        stats
    }

    /// The route's requests by outcome.
    fn outcomes(&self) -> Outcomes {
        let stats = self.stats();
        Outcomes {
            allowed: self
                .passed
                .get()
                .saturating_sub(stats.delayed + stats.dry_run_denied),
            delayed: stats.delayed,
            limited: stats.denied + stats.backend_errors + self.closed.get(),
            dry_run: stats.dry_run_denied,
        }
    }
}

/// A route's requests by outcome, as `sluicegate_proxy_requests_total` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Outcomes {
    /// Passed at once.
    pub(crate) allowed: u64,
    /// Passed after a shaping wait.
    pub(crate) delayed: u64,
    /// Rejected (by a limit, an undecided backend, or the switch's `closed`).
    pub(crate) limited: u64,
    /// Would have been rejected, passed.
    pub(crate) dry_run: u64,
}

impl Outcomes {
    fn labelled(self) -> [(&'static str, u64); 4] {
        [
            ("allowed", self.allowed),
            ("delayed", self.delayed),
            ("limited", self.limited),
            ("dry_run", self.dry_run),
        ]
    }
}

fn add(sum: &mut Stats, more: Stats) {
    sum.delayed += more.delayed;
    sum.denied += more.denied;
    sum.dry_run_denied += more.dry_run_denied;
    sum.backend_errors += more.backend_errors;
    sum.missing_key += more.missing_key;
}

/// What the registry reads from its owners at each scrape.
pub(super) struct Scraped {
    routes: Mutex<HashMap<String, Arc<RouteCounters>>>,
    websockets_open: Arc<AtomicU64>,
    /// The adaptive limits of the rules in force, by route name.
    adaptive: Mutex<Vec<(String, AdaptiveLimitLayer)>>,
    /// Client connections served by worker (set once the listener is up).
    connections: OnceLock<Arc<Loads>>,
}

impl fmt::Debug for Scraped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scraped")
            .field("routes", &self.routes.lock().len())
            .finish_non_exhaustive()
    }
}

impl Scraped {
    pub(super) fn new(websockets_open: Arc<AtomicU64>) -> Scraped {
        Scraped {
            routes: Mutex::default(),
            websockets_open,
            adaptive: Mutex::default(),
            connections: OnceLock::new(),
        }
    }

    pub(super) fn route(&self, name: &str) -> Arc<RouteCounters> {
        Arc::clone(self.routes.lock().entry(name.to_owned()).or_default())
    }

    pub(super) fn route_outcomes(&self) -> Vec<(String, Outcomes)> {
        let routes = self.routes.lock();
        let outcomes = routes.iter().map(|(name, c)| (name.clone(), c.outcomes()));
        outcomes.collect()
    }

    pub(super) fn connections(&self, loads: Arc<Loads>) {
        let _ = self.connections.set(loads);
    }

    pub(super) fn adaptive(&self, mut layers: Vec<(String, AdaptiveLimitLayer)>) {
        layers.sort_by(|a, b| a.0.cmp(&b.0));
        *self.adaptive.lock() = layers;
    }

    fn encode_requests(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let mut routes: Vec<(String, Arc<RouteCounters>)> = self
            .routes
            .lock()
            .iter()
            .map(|(name, counters)| (name.clone(), Arc::clone(counters)))
            .collect();
        routes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut metric = encoder.encode_descriptor(
            "requests",
            "Requests by route and outcome: allowed (passed at once), delayed (passed after a \
             shaping wait), limited (rejected), dry_run (would have been rejected, passed).",
            None,
            MetricType::Counter,
        )?;
        for (route, counters) in routes {
            for (outcome, n) in counters.outcomes().labelled() {
                let labels = [("route", route.as_str()), ("outcome", outcome)];
                ConstCounter::new(n).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    fn encode_connections(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(loads) = self.connections.get() else {
            return Ok(());
        };
        let mut metric = encoder.encode_descriptor(
            "connections",
            "Client connections served, by worker (0: no workers, the caller's runtime; \
             lingering ones not counted).",
            None,
            MetricType::Gauge,
        )?;
        for (worker, open) in loads.by_worker() {
            let worker = worker.to_string();
            let labels = [("worker", worker.as_str())];
            ConstGauge::new(open as u64).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// Each route's adaptive limit: the limit, in flight, queued, and refused so far (by this
    /// limiter: a reload that changes the setting starts a new one).
    fn encode_adaptive(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let layers = self.adaptive.lock().clone();
        if layers.is_empty() {
            return Ok(());
        }
        let series = [
            (
                "adaptive_limit",
                MetricType::Gauge,
                "The adaptive concurrency limit.",
            ),
            (
                "adaptive_in_flight",
                MetricType::Gauge,
                "Requests holding a place.",
            ),
            (
                "adaptive_queued",
                MetricType::Gauge,
                "Requests waiting for a place.",
            ),
            (
                "adaptive_rejected",
                MetricType::Counter,
                "Requests refused (503).",
            ),
        ];
        for (name, kind, help) in series {
            let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
            for (route, layer) in &layers {
                let m = layer.metrics();
                let labels = [("route", route.as_str())];
                let family = metric.encode_family(&labels)?;
                match name {
                    "adaptive_limit" => ConstGauge::new(u64::from(m.limit)).encode(family)?,
                    "adaptive_in_flight" => {
                        ConstGauge::new(u64::from(m.in_flight)).encode(family)?;
                    }
                    "adaptive_queued" => ConstGauge::new(m.queued as u64).encode(family)?,
                    _ => ConstCounter::new(m.rejected).encode(family)?,
                }
            }
        }
        Ok(())
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_requests(&mut encoder)?;
        let websockets = encoder.encode_descriptor(
            "websockets",
            "WebSocket tunnels open (a 101 passed on, not yet closed).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.websockets_open.load(Ordering::Relaxed)).encode(websockets)?;
        self.encode_connections(&mut encoder)?;
        self.encode_adaptive(&mut encoder)
    }
}
