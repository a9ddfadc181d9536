//! Prometheus metrics in one prometheus-client registry: requests by route and outcome,
//! upstream errors, client body errors, reloads, Redis failures, connections, WebSockets and
//! the adaptive limits. Counters bumped on the hot path are handles resolved once (a route's
//! when its table is built, the others when the registry is), so counting is one atomic add.

mod scraped;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use sluicegate_http::adaptive::AdaptiveLimitLayer;

use crate::plumbing::Loads;
use crate::plumbing::{LeaseMetrics, OverLimitMetrics};
use scraped::Scraped;
pub(crate) use scraped::{Outcomes, RouteCounters};

/// A label naming a kind of event (`kind`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

/// A reload's result (`result`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Every count the admin address serves.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    /// What is read from its owners at each scrape.
    scraped: Arc<Scraped>,
    pub(crate) upstream_connect_errors: Counter,
    pub(crate) upstream_timeouts: Counter,
    pub(crate) upstream_other_errors: Counter,
    /// Requests answered 408: their body stopped coming.
    pub(crate) client_body_timeouts: Counter,
    /// Requests answered 413: their body was longer than the proxy takes.
    pub(crate) client_body_too_large: Counter,
    /// WebSocket tunnels open (shared with the upstream pools, which open them).
    pub(crate) websockets_open: Arc<AtomicU64>,
    pub(crate) reloads_ok: Counter,
    pub(crate) reloads_failed: Counter,
    /// Calls Redis did not answer (the failure policy did), by kind (as
    /// `sluicegate_redis::FAILURE_LABELS`).
    backend_errors: Vec<Counter>,
    /// The Redis over-limit cache's hits and entries (updated when `/metrics` is read).
    pub(crate) over_limit: OverLimitMetrics,
    /// Redis permit leasing's counts (updated when `/metrics` is read).
    pub(crate) lease: LeaseMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sluicegate_proxy");
        let upstream_errors = Family::<KindLabel, Counter>::default();
        registry.register(
            "upstream_errors",
            "Requests the upstream did not answer: connect (502), timeout (504), other (502).",
            upstream_errors.clone(),
        );
        let client_body_timeouts = Counter::default();
        registry.register(
            "client_body_timeouts",
            "Requests answered 408: nothing more of their body came for the client body \
             timeout.",
            client_body_timeouts.clone(),
        );
        let client_body_too_large = Counter::default();
        registry.register(
            "client_body_too_large",
            "Requests answered 413: their body was longer than the client max body size.",
            client_body_too_large.clone(),
        );
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reloads",
            "Rule file reloads: ok, or failed (old rules kept).",
            reloads.clone(),
        );
        let backend_errors = Family::<KindLabel, Counter>::default();
        registry.register(
            "backend_errors",
            "Decisions Redis did not make, by kind (down: marked down by the breaker; timeout; \
             connection; refused: the script failed; other): the failure policy answered.",
            backend_errors.clone(),
        );
        let over_limit = OverLimitMetrics::register(&mut registry);
        let lease = LeaseMetrics::register(&mut registry);
        let websockets_open = Arc::new(AtomicU64::new(0));
        let scraped = Arc::new(Scraped::new(Arc::clone(&websockets_open)));
        registry.register_collector(Box::new(Arc::clone(&scraped)));
        let kind = |family: &Family<KindLabel, Counter>, kind| {
            family.get_or_create(&KindLabel { kind }).clone()
        };
        let result = |result| reloads.get_or_create(&ResultLabel { result }).clone();
        Metrics {
            registry,
            scraped,
            upstream_connect_errors: kind(&upstream_errors, "connect"),
            upstream_timeouts: kind(&upstream_errors, "timeout"),
            upstream_other_errors: kind(&upstream_errors, "other"),
            client_body_timeouts,
            client_body_too_large,
            websockets_open,
            reloads_ok: result("ok"),
            reloads_failed: result("failed"),
            backend_errors: sluicegate_redis::FAILURE_LABELS
                .iter()
                .map(|label| kind(&backend_errors, label))
                .collect(),
            over_limit,
            lease,
        }
    }
}

impl Metrics {
    /// The counters of route `name`, made on first use.
    pub(crate) fn route(&self, name: &str) -> Arc<RouteCounters> {
        self.scraped.route(name)
    }

    /// Each route's requests by outcome, by route name.
    pub(crate) fn route_outcomes(&self) -> Vec<(String, Outcomes)> {
        self.scraped.route_outcomes()
    }

    /// Reports the client connections `loads` counts.
    pub(crate) fn connections(&self, loads: Arc<Loads>) {
        self.scraped.connections(loads);
    }

    /// The adaptive limits to report from now on (those of the rules just built).
    pub(crate) fn adaptive(&self, layers: Vec<(String, AdaptiveLimitLayer)>) {
        self.scraped.adaptive(layers);
    }

    /// Counts a call Redis did not answer, of kind `kind` (one of
    /// `sluicegate_redis::FAILURE_LABELS`; another is counted as the last, `other`).
    pub(crate) fn backend_error(&self, kind: &str) {
        let labels = sluicegate_redis::FAILURE_LABELS;
        let index = labels.iter().position(|label| *label == kind);
        if let Some(counter) = index
            .and_then(|i| self.backend_errors.get(i))
            .or(self.backend_errors.last())
        {
            Metrics::count(counter);
        }
    }

    /// Counts one event.
    pub(crate) fn count(counter: &Counter) {
        counter.inc();
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, series: &str) -> Option<u64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn counts_are_exposed_under_the_documented_names_and_labels() {
        let metrics = Metrics::default();
        let route = metrics.route("/api/");
        Metrics::count(&route.passed);
        Metrics::count(&route.passed);
        Metrics::count(&metrics.upstream_connect_errors);
        Metrics::count(&metrics.upstream_timeouts);
        Metrics::count(&metrics.client_body_too_large);
        Metrics::count(&metrics.reloads_failed);
        metrics.backend_error("down");
        metrics.backend_error("no such kind");
        metrics
            .websockets_open
            .store(3, std::sync::atomic::Ordering::Relaxed);
        let text = metrics.render();
        let expected = [
            (
                "sluicegate_proxy_requests_total{route=\"/api/\",outcome=\"allowed\"}",
                2,
            ),
            (
                "sluicegate_proxy_requests_total{route=\"/api/\",outcome=\"limited\"}",
                0,
            ),
            (
                "sluicegate_proxy_upstream_errors_total{kind=\"connect\"}",
                1,
            ),
            (
                "sluicegate_proxy_upstream_errors_total{kind=\"timeout\"}",
                1,
            ),
            ("sluicegate_proxy_upstream_errors_total{kind=\"other\"}", 0),
            ("sluicegate_proxy_client_body_timeouts_total", 0),
            ("sluicegate_proxy_client_body_too_large_total", 1),
            ("sluicegate_proxy_reloads_total{result=\"ok\"}", 0),
            ("sluicegate_proxy_reloads_total{result=\"failed\"}", 1),
            ("sluicegate_proxy_backend_errors_total{kind=\"down\"}", 1),
            ("sluicegate_proxy_backend_errors_total{kind=\"other\"}", 1),
            ("sluicegate_proxy_websockets", 3),
        ];
        for (series, value) in expected {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
    }
}
