//! The service's Prometheus metrics, in one registry served at `GET /metrics`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::plumbing::{LeaseMetrics, OverLimitMetrics};
use crate::serve::decision_metrics::DecisionMetrics;
use crate::serve::decision_totals::DecisionTotalsByKey;

/// A rule's mode, set by the manual switch.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    /// The rule's id, or `*` for the whole service.
    pub rule: String,
    /// `shadow`, `open` or `closed`.
    pub mode: &'static str,
}

/// A label naming a kind of event (`transport`, `result`, `kind`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The kind.
    pub kind: &'static str,
}

/// Every metric the service keeps.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Decisions per domain, stats key and outcome, read by the registry at scrape time
    /// (`sluicegate_decisions_total`, `_near_limit_total`, `_shadow_mode_total`).
    pub(crate) decision_totals: Arc<DecisionTotalsByKey>,
    /// Backend failures by kind (`timeout`, `connection`, ...).
    pub backend_errors: Family<KindLabel, Counter>,
    /// Rule loads by result (`success`, `failure`).
    pub config_loads: Family<KindLabel, Counter>,
    /// Rules in force.
    pub rules_loaded: Gauge,
    /// Time to answer a call, by transport (`grpc`, `http`).
    pub request_seconds: Family<KindLabel, Histogram>,
    /// Live counter keys in memory, across every limit (updated when `/metrics` is read).
    pub keys: Gauge,
    /// Requests that needed a new counter key at the `--max-keys` cap.
    pub key_cap_refusals: Counter,
    /// 1 for each rule (or `*`) the manual switch holds in a mode other than `enforce`.
    pub modes: Family<ModeLabels, Gauge>,
    /// Changes made with the manual switch.
    pub mode_changes: Counter,
    /// Calls refused as too large (`--max-descriptors`, `--max-entries`,
    /// `--max-descriptor-bytes`).
    pub oversized_calls: Counter,
    /// The Redis over-limit cache's hits and entries (updated when `/metrics` is read).
    pub(crate) over_limit: OverLimitMetrics,
    /// Redis permit leasing's counts (updated when `/metrics` is read).
    pub(crate) lease: LeaseMetrics,
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sluicegate");
        let decision_totals = Arc::new(DecisionTotalsByKey::default());
        registry.register_collector(Box::new(DecisionMetrics(Arc::clone(&decision_totals))));
        let backend_errors = Family::<KindLabel, Counter>::default();
        let config_loads = Family::<KindLabel, Counter>::default();
        let rules_loaded = Gauge::default();
        let request_seconds = Family::<KindLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_025, 2.0, 16))
        });
        registry.register("backend_errors", "Backend failures", backend_errors.clone());
        registry.register("config_loads", "Rule file loads", config_loads.clone());
        registry.register("rules_loaded", "Rules in force", rules_loaded.clone());
        let keys = Gauge::default();
        let key_cap_refusals = Counter::default();
        let oversized_calls = Counter::default();
        registry.register("keys", "Live counter keys in memory", keys.clone());
        let modes = Family::<ModeLabels, Gauge>::default();
        let mode_changes = Counter::default();
        registry.register(
            "mode",
            "Rules held by the manual switch in a mode other than enforce",
            modes.clone(),
        );
        registry.register(
            "mode_changes",
            "Changes made with the manual switch",
            mode_changes.clone(),
        );
        registry.register(
            "key_cap_refusals",
            "Requests that needed a new counter key at the --max-keys cap",
            key_cap_refusals.clone(),
        );
        registry.register(
            "oversized_calls",
            "Calls refused for too many descriptors or entries, or too long a descriptor",
            oversized_calls.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time to answer a rate limit call",
            request_seconds.clone(),
        );
        let over_limit = OverLimitMetrics::register(&mut registry);
        let lease = LeaseMetrics::register(&mut registry);
        Metrics {
            registry,
            over_limit,
            lease,
            decision_totals,
            backend_errors,
            config_loads,
            rules_loaded,
            request_seconds,
            keys,
            modes,
            mode_changes,
            key_cap_refusals,
            oversized_calls,
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
