//! The proxy's side of the shared admin listener: its metrics, its live page (a "rule" a
//! route, by route name) and the manual switch over its routes.
//!
//! What each mode means for a route (serve's modes, applied to the route's limits):
//! `enforce` as the rule file says; `shadow` decides and counts but passes, as `dry_run: true`;
//! `open` passes without deciding or charging anything; `closed` answers every request the
//! route matches with its denial `status`, charging nothing. A route's adaptive limit has no
//! dry run: it applies in `enforce` only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use sluicegate::{Clock, SystemClock};

use crate::plumbing::{AdminApp, Mode, ModeError, ModeTable};
use crate::proxy::backing::Backing;
use crate::proxy::connection::State;
use crate::proxy::live::RouteSeries;

/// What the proxy answers on its admin listener.
pub(crate) struct ProxyAdmin {
    pub(crate) state: Arc<State>,
    pub(crate) series: Arc<RouteSeries>,
    /// The rule file, which the page names as each route's place.
    pub(crate) rules_path: PathBuf,
    pub(crate) clock: SystemClock,
}

impl AdminApp for ProxyAdmin {
    fn render_metrics(&self) -> String {
        self.state.metrics.render()
    }

    fn live_stats(&self) -> serde_json::Value {
        let now = self.clock.now();
        let modes = self.state.modes.table();
        let rules = self.state.rules.lock().clone();
        let routes: Vec<serde_json::Value> = rules
            .routes
            .iter()
            .enumerate()
            .map(|(index, def)| {
                let series = self.series.series(&def.name, now);
                let place = rules.route_position(index);
                serde_json::json!({
                    "id": def.name,
                    "domain": "proxy",
                    "file": self.rules_path.display().to_string(),
                    "line": place.line,
                    "column": place.column,
                    "mode": modes.of(&def.name),
                    "shadow_mode": def.dry_run,
                    "end_second": series.end_second,
                    "allowed": series.allowed,
                    "denied": series.denied,
                    "shadow_denied": series.shadow_denied,
                    "near_limit": series.near_limit,
                    "top_limited": [],
                })
            })
            .collect();
        let metrics = &self.state.metrics;
        let reloads = serde_json::json!({
            "success": metrics.reloads_ok.get(),
            "failure": metrics.reloads_failed.get(),
        });
        let backend = match &self.state.backing {
            Backing::Memory => serde_json::json!({
                "store": "memory",
                "errors": 0,
                "reloads": reloads,
            }),
            Backing::Redis(shared) => serde_json::json!({
                "store": "redis",
                "redis_up": shared.redis().is_up(),
                "failure_policy":
                    format!("{:?}", shared.redis().settings().failure_policy).to_lowercase(),
                "errors": shared.redis().failures(),
                "reloads": reloads,
            }),
        };
        // The proxy times no decision on its own and keeps no key count across its limits:
        // null, as the page shows what it does not know.
        serde_json::json!({
            "now": now as f64 / 1e6,
            "window_seconds": 300,
            "modes": modes.as_ref(),
            "backend": backend,
            "latency_micros": {"p50": null, "p90": null, "p99": null, "p999": null},
            "keys": {"live": null, "max": null},
            "rules": routes,
        })
    }

    fn mode_table(&self) -> ModeTable {
        self.state.modes.table().as_ref().clone()
    }

    fn set_mode(&self, rule: &str, mode: Mode, caller: SocketAddr) -> Result<Mode, ModeError> {
        let previous = self.state.set_mode(rule, mode)?;
        tracing::warn!(
            route = rule,
            mode = mode.name(),
            previous = previous.name(),
            %caller,
            "proxy: mode changed by the manual switch"
        );
        Ok(previous)
    }
}
