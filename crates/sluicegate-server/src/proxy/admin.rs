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

use crate::plumbing::{
    AdminApp, AdminStats, BackendStats, KeyCount, LatencyPercentiles, Mode, ModeError, ModeTable,
    Reloads, RuleEntry,
};
use crate::proxy::connection::State;
use crate::proxy::limit_counters::LimitCounters;
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
        if let LimitCounters::Redis(redis) = &self.state.limit_counters {
            let stats = redis.redis().over_limit_stats();
            self.state.metrics.over_limit.update(stats);
            self.state.metrics.lease.update(redis.redis().lease_stats());
        }
        self.state.metrics.render()
    }

    fn live_stats(&self) -> AdminStats {
        let now = self.clock.now();
        let modes = self.state.modes.table();
        let rules = self.state.rules.lock().clone();
        let routes = rules
            .routes
            .iter()
            .enumerate()
            .map(|(index, def)| {
                let place = rules.route_position(index);
                RuleEntry {
                    id: def.name.clone(),
                    domain: "proxy".to_owned(),
                    file: self.rules_path.display().to_string(),
                    line: place.line,
                    column: place.column,
                    mode: modes.of(&def.name),
                    shadow_mode: def.dry_run,
                    series: self.series.series(&def.name, now),
                    top_limited: Vec::new(),
                }
            })
            .collect();
        let metrics = &self.state.metrics;
        let reloads = Reloads {
            success: metrics.reloads_ok.get(),
            failure: metrics.reloads_failed.get(),
        };
        let backend = match &self.state.limit_counters {
            LimitCounters::Memory => BackendStats::memory(reloads),
            LimitCounters::Redis(redis) => BackendStats::redis(redis.redis(), reloads),
        };
        // The proxy times no decision on its own and keeps no key count across its limits:
        // null, as the page shows what it does not know.
        AdminStats::at(
            now,
            modes.as_ref().clone(),
            backend,
            LatencyPercentiles::default(),
            KeyCount::default(),
            routes,
        )
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
