//! The live page's statistics of each rule in force, kept by rule id across reloads (a rule
//! that stays keeps its history) and found by rule index on the decision path.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use sluicegate::Micros;
use sluicegate_rules::RuleSet;

use crate::plumbing::{HeavyHitters, LatencyWindow, RuleStats};
use crate::serve::decision_totals::Outcome;

/// What the page shows of one rule. Each part is made when first used (about 10 KB for the
/// counts, 46 KB for the keys, which only a rule that denies needs): rules that see no traffic
/// cost nothing, however many the files hold.
#[derive(Debug, Default)]
pub(crate) struct RuleLive {
    stats: OnceLock<RuleStats>,
    top: OnceLock<HeavyHitters>,
}

impl RuleLive {
    /// Allowed, denied, shadow-denied and near-limit decisions per second.
    #[inline]
    fn stats(&self) -> &RuleStats {
        self.stats.get_or_init(RuleStats::default)
    }

    /// Counts one decision at `now` in its window (a decision no limit applied to has none).
    #[inline]
    pub(crate) fn record(&self, outcome: Outcome, now: Micros) {
        let windows = match outcome {
            Outcome::NoLimit => return,
            Outcome::Allowed { near_limit } => {
                if near_limit {
                    self.stats().near_limit.add(now, 1);
                }
                &self.stats().allowed
            }
            Outcome::Denied => &self.stats().denied,
            Outcome::ShadowDenied => &self.stats().shadow_denied,
        };
        windows.add(now, 1);
    }

    /// The keys it denied most in the last minute.
    pub(crate) fn top(&self) -> &HeavyHitters {
        self.top.get_or_init(HeavyHitters::default)
    }

    /// The counts, if any decision was recorded.
    pub(crate) fn recorded_stats(&self) -> Option<&RuleStats> {
        self.stats.get()
    }

    /// The keys, if any denial was recorded.
    pub(crate) fn recorded_top(&self) -> Option<&HeavyHitters> {
        self.top.get()
    }
}

/// Every rule's [`RuleLive`], and the decision latency of the whole service.
#[derive(Debug, Default)]
pub(crate) struct LiveStats {
    pub(crate) latency: LatencyWindow,
    by_rule: Mutex<HashMap<String, Arc<RuleLive>>>,
}

impl LiveStats {
    /// Each rule's statistics by rule index, kept from before for rules that stay; those of
    /// rules no longer in force are dropped, so memory follows the rules, never the traffic.
    pub(crate) fn for_rules(&self, rules: &RuleSet) -> Vec<Option<Arc<RuleLive>>> {
        let mut by_rule = self.by_rule.lock();
        let mut kept = HashMap::with_capacity(rules.rule_count());
        let mut by_index = vec![None; rules.rule_count()];
        for domain in rules.domains() {
            for rule in rules.rules(domain) {
                let live = by_rule.remove(&rule.id).unwrap_or_default();
                if let Some(slot) = by_index.get_mut(rule.index()) {
                    *slot = Some(Arc::clone(&live));
                }
                kept.insert(rule.id.clone(), live);
            }
        }
        *by_rule = kept;
        by_index
    }
}
