//! The service's side of the shared admin listener ([`crate::plumbing::admin_router`]): its
//! metrics, the live page's statistics of its rules, and the manual switch over them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use sluicegate::Clock as _;

use crate::plumbing::{
    AdminApp, AdminStats, BackendStats, KeyCount, LimitedKey, Mode, ModeError, ModeTable, Reloads,
    RuleEntry, RuleStats,
};
use crate::serve::engine::Engine;
use crate::serve::live_rules::RuleLive;
use crate::serve::metrics::KindLabel;

/// The most limited keys the live page lists per rule.
const TOP_KEYS: usize = 20;

impl AdminApp for Engine {
    fn render_metrics(&self) -> String {
        Engine::render_metrics(self)
    }

    /// As `GET /admin/stats` answers it (documented in the README).
    fn live_stats(&self) -> AdminStats {
        let now = self.clock().now();
        let loaded = self.rules();
        let modes = self.modes().table();
        let idle = RuleStats::default();
        let mut rules = Vec::new();
        for domain in loaded.rules.domains() {
            for rule in loaded.rules.rules(domain) {
                let live = loaded.records.live_of(rule.index());
                let top_limited = live
                    .and_then(RuleLive::recorded_top)
                    .map(|top| top.top(now, TOP_KEYS))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(key, count)| LimitedKey { key, count })
                    .collect();
                rules.push(RuleEntry {
                    id: rule.id.clone(),
                    domain: domain.to_owned(),
                    file: rule.source.file.display().to_string(),
                    line: rule.source.position.line,
                    column: rule.source.position.column,
                    mode: modes.of(&rule.id),
                    shadow_mode: rule.shadow_mode,
                    series: live
                        .and_then(RuleLive::recorded_stats)
                        .unwrap_or(&idle)
                        .series(now),
                    top_limited,
                });
            }
        }
        let reloads = |kind| {
            self.metrics()
                .config_loads
                .get_or_create(&KindLabel { kind })
                .get()
        };
        let reloads = Reloads {
            success: reloads("success"),
            failure: reloads("failure"),
        };
        let backend = match self.redis() {
            None => BackendStats::memory(reloads),
            Some(redis) => BackendStats::redis(redis, reloads),
        };
        let budget = self.keys().budget();
        let keys = KeyCount {
            live: Some(budget.live()),
            max: Some(budget.max_keys()),
        };
        let latency = self.recorder().latency(now);
        AdminStats::at(now, modes.as_ref().clone(), backend, latency, keys, rules)
    }

    fn mode_table(&self) -> ModeTable {
        self.modes().table().as_ref().clone()
    }

    fn set_mode(&self, rule: &str, mode: Mode, caller: SocketAddr) -> Result<Mode, ModeError> {
        Engine::set_mode(self, rule, mode, caller)
    }
}

/// The admin routes, answering from `engine`; with `token`, the API requires it.
pub fn admin_router(engine: Arc<Engine>, token: Option<String>) -> Router {
    crate::plumbing::admin_router(engine, token)
}
