//! Prometheus metrics: requests by route and outcome, upstream errors, reloads.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::proxy::loads::Loads;
use sluicegate_http::adaptive::AdaptiveLimitLayer;
use sluicegate_http::rate_limit::Stats;

/// One route's counts, kept across reloads (by route name).
#[derive(Default)]
pub(crate) struct RouteCounters {
    /// Requests passed on to the upstream.
    pub(crate) passed: AtomicU64,
    /// What the route's layers counted, those replaced by a reload folded in.
    folded: Mutex<Stats>,
    /// The current layer's counts, read at each scrape.
    current: Mutex<Option<Box<dyn Fn() -> Stats + Send + Sync>>>,
}

impl RouteCounters {
    /// Counts from now on what `stats` reads (the new layer), folding in the old layer's.
    pub(crate) fn follow(&self, stats: Option<Box<dyn Fn() -> Stats + Send + Sync>>) {
        let mut current = self.current.lock();
        if let Some(old) = current.take() {
            let old = old();
            let mut folded = self.folded.lock();
            folded.delayed += old.delayed;
            folded.denied += old.denied;
            folded.dry_run_denied += old.dry_run_denied;
            folded.backend_errors += old.backend_errors;
            folded.missing_key += old.missing_key;
        }
        *current = stats;
    }

    fn stats(&self) -> Stats {
        let mut stats = *self.folded.lock();
        if let Some(now) = self.current.lock().as_ref() {
            let now = now();
            stats.delayed += now.delayed;
            stats.denied += now.denied;
            stats.dry_run_denied += now.dry_run_denied;
            stats.backend_errors += now.backend_errors;
        }
        stats
    }
}

/// Every count the admin address serves.
#[derive(Default)]
pub(crate) struct Metrics {
    routes: Mutex<HashMap<String, Arc<RouteCounters>>>,
    pub(crate) upstream_connect_errors: AtomicU64,
    pub(crate) upstream_timeouts: AtomicU64,
    pub(crate) upstream_other_errors: AtomicU64,
    /// Requests answered 408: their body stopped coming.
    pub(crate) client_body_timeouts: AtomicU64,
    /// Requests answered 413: their body was longer than the proxy takes.
    pub(crate) client_body_too_large: AtomicU64,
    /// WebSocket tunnels open (shared with the upstream pools, which open them).
    pub(crate) websockets_open: Arc<AtomicU64>,
    pub(crate) reloads_ok: AtomicU64,
    pub(crate) reloads_failed: AtomicU64,
    /// Calls Redis did not answer (the failure policy did), by kind (as
    /// `sluicegate_redis::FAILURE_LABELS`).
    backend_errors: [AtomicU64; sluicegate_redis::FAILURE_LABELS.len()],
    /// The adaptive limits of the rules in force, by route name.
    adaptive: Mutex<Vec<(String, AdaptiveLimitLayer)>>,
    /// Client connections served by worker (set once the listener is up).
    connections: OnceLock<Arc<Loads>>,
}

impl Metrics {
    /// The counters of route `name`, made on first use.
    pub(crate) fn route(&self, name: &str) -> Arc<RouteCounters> {
        Arc::clone(self.routes.lock().entry(name.to_owned()).or_default())
    }

    /// Reports the client connections `loads` counts.
    pub(crate) fn connections(&self, loads: Arc<Loads>) {
        let _ = self.connections.set(loads);
    }

    /// The adaptive limits to report from now on (those of the rules just built).
    pub(crate) fn adaptive(&self, mut layers: Vec<(String, AdaptiveLimitLayer)>) {
        layers.sort_by(|a, b| a.0.cmp(&b.0));
        *self.adaptive.lock() = layers;
    }

    /// Counts a call Redis did not answer, of kind `kind` (one of
    /// `sluicegate_redis::FAILURE_LABELS`).
    pub(crate) fn backend_error(&self, kind: &str) {
        let labels = sluicegate_redis::FAILURE_LABELS;
        let index = labels
            .iter()
            .position(|label| *label == kind)
            .unwrap_or(labels.len() - 1);
        Metrics::count(&self.backend_errors[index]);
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.push_str(
            "# HELP sluicegate_proxy_requests_total Requests by route and outcome: allowed \
             (passed at once), delayed (passed after a shaping wait), limited (rejected), \
             dry_run (would have been rejected, passed).\n\
             # TYPE sluicegate_proxy_requests_total counter\n",
        );
        let mut routes: Vec<(String, Arc<RouteCounters>)> = self
            .routes
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        routes.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, counters) in routes {
            let stats = counters.stats();
            let passed = read(&counters.passed);
            let allowed = passed.saturating_sub(stats.delayed + stats.dry_run_denied);
            let outcomes = [
                ("allowed", allowed),
                ("delayed", stats.delayed),
                ("limited", stats.denied + stats.backend_errors),
                ("dry_run", stats.dry_run_denied),
            ];
            for (outcome, n) in outcomes {
                let _ = writeln!(
                    out,
                    "sluicegate_proxy_requests_total{{route=\"{}\",outcome=\"{outcome}\"}} {n}",
                    escape(&name)
                );
            }
        }
        out.push_str(
            "# HELP sluicegate_proxy_upstream_errors_total Requests the upstream did not answer: \
             connect (502), timeout (504), other (502).\n\
             # TYPE sluicegate_proxy_upstream_errors_total counter\n",
        );
        for (kind, c) in [
            ("connect", &self.upstream_connect_errors),
            ("timeout", &self.upstream_timeouts),
            ("other", &self.upstream_other_errors),
        ] {
            let _ = writeln!(
                out,
                "sluicegate_proxy_upstream_errors_total{{kind=\"{kind}\"}} {}",
                read(c)
            );
        }
        out.push_str(
            "# HELP sluicegate_proxy_client_body_timeouts_total Requests answered 408: nothing \
             more of their body came for the client body timeout.\n\
             # TYPE sluicegate_proxy_client_body_timeouts_total counter\n",
        );
        let _ = writeln!(
            out,
            "sluicegate_proxy_client_body_timeouts_total {}",
            read(&self.client_body_timeouts)
        );
        out.push_str(
            "# HELP sluicegate_proxy_client_body_too_large_total Requests answered 413: their \
             body was longer than the client max body size.\n\
             # TYPE sluicegate_proxy_client_body_too_large_total counter\n",
        );
        let _ = writeln!(
            out,
            "sluicegate_proxy_client_body_too_large_total {}",
            read(&self.client_body_too_large)
        );
        out.push_str(
            "# HELP sluicegate_proxy_websockets WebSocket tunnels open (a 101 passed on, not yet \
             closed).\n# TYPE sluicegate_proxy_websockets gauge\n",
        );
        let _ = writeln!(
            out,
            "sluicegate_proxy_websockets {}",
            read(&self.websockets_open)
        );
        out.push_str(
            "# HELP sluicegate_proxy_reloads_total Rule file reloads: ok, or failed (old rules \
             kept).\n# TYPE sluicegate_proxy_reloads_total counter\n",
        );
        let _ = writeln!(
            out,
            "sluicegate_proxy_reloads_total{{result=\"ok\"}} {}",
            read(&self.reloads_ok)
        );
        let _ = writeln!(
            out,
            "sluicegate_proxy_reloads_total{{result=\"failed\"}} {}",
            read(&self.reloads_failed)
        );
        {
            out.push_str(
                "# HELP sluicegate_proxy_backend_errors_total Decisions Redis did not make, by \
                 kind (down: marked down by the breaker; timeout; connection; refused: the script \
                 failed; other): the failure policy answered.\n\
                 # TYPE sluicegate_proxy_backend_errors_total counter\n",
            );
            for (kind, counter) in sluicegate_redis::FAILURE_LABELS
                .iter()
                .zip(&self.backend_errors)
            {
                let _ = writeln!(
                    out,
                    "sluicegate_proxy_backend_errors_total{{kind=\"{kind}\"}} {}",
                    read(counter)
                );
            }
        }
        if let Some(loads) = self.connections.get() {
            out.push_str(
                "# HELP sluicegate_proxy_connections Client connections served, by worker (0: no \
                 workers, the caller's runtime; lingering ones not counted).\n\
                 # TYPE sluicegate_proxy_connections gauge\n",
            );
            for (worker, open) in loads.by_worker() {
                let _ = writeln!(
                    out,
                    "sluicegate_proxy_connections{{worker=\"{worker}\"}} {open}"
                );
            }
        }
        self.render_adaptive(&mut out);
        out
    }

    /// Each route's adaptive limit: the limit, in flight, queued, and refused so far (by this
    /// limiter: a reload that changes the setting starts a new one).
    fn render_adaptive(&self, out: &mut String) {
        let layers = self.adaptive.lock().clone();
        if layers.is_empty() {
            return;
        }
        let series = [
            ("limit", "gauge", "The adaptive concurrency limit."),
            ("in_flight", "gauge", "Requests holding a place."),
            ("queued", "gauge", "Requests waiting for a place."),
            ("rejected_total", "counter", "Requests refused (503)."),
        ];
        for (name, kind, help) in series {
            let _ = writeln!(
                out,
                "# HELP sluicegate_proxy_adaptive_{name} {help}\n\
                 # TYPE sluicegate_proxy_adaptive_{name} {kind}"
            );
            for (route, layer) in &layers {
                let m = layer.metrics();
                let value = match name {
                    "limit" => u64::from(m.limit),
                    "in_flight" => u64::from(m.in_flight),
                    "queued" => m.queued as u64,
                    _ => m.rejected,
                };
                let _ = writeln!(
                    out,
                    "sluicegate_proxy_adaptive_{name}{{route=\"{}\"}} {value}",
                    escape(route)
                );
            }
        }
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
