//! Each (domain, stats key)'s metric counters, found in the metric families once and kept, so
//! that counting a decision is one atomic add instead of a family lookup (a lock, and hashing
//! the label strings) per descriptor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::serve::metrics::{DecisionLabels, Metrics, RuleLabels};

/// Hashed with foldhash (the limiters' hasher), not SipHash: looked up for every descriptor.
type FastMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The counters of one domain and stats key (empty: no rule matched). Each is taken from its
/// family the first time it counts, not before, so `/metrics` lists only label sets that
/// counted something, as it did when every count looked its family up.
#[derive(Debug)]
pub(crate) struct RuleCounters {
    labels: RuleLabels,
    /// `no_rule` without a rule, `unlimited` with one.
    no_limit: OnceLock<Counter>,
    ok: OnceLock<Counter>,
    over_limit: OnceLock<Counter>,
    shadow_over_limit: OnceLock<Counter>,
    near_limit: OnceLock<Counter>,
    shadow_mode: OnceLock<Counter>,
}

impl RuleCounters {
    fn new(domain: Arc<String>, rule: Arc<String>) -> RuleCounters {
        RuleCounters {
            labels: RuleLabels { domain, rule },
            no_limit: OnceLock::new(),
            ok: OnceLock::new(),
            over_limit: OnceLock::new(),
            shadow_over_limit: OnceLock::new(),
            near_limit: OnceLock::new(),
            shadow_mode: OnceLock::new(),
        }
    }

    /// A descriptor no limit applied to: no rule matched, or its rule is unlimited.
    pub(crate) fn count_no_limit(&self, metrics: &Metrics) {
        let outcome = if self.labels.rule.is_empty() {
            "no_rule"
        } else {
            "unlimited"
        };
        self.decision(&self.no_limit, metrics, outcome).inc();
    }

    /// An allowed descriptor.
    pub(crate) fn count_ok(&self, metrics: &Metrics) {
        self.decision(&self.ok, metrics, "ok").inc();
    }

    /// A denied descriptor.
    pub(crate) fn count_over_limit(&self, metrics: &Metrics) {
        self.decision(&self.over_limit, metrics, "over_limit").inc();
    }

    /// A descriptor a shadow-mode rule would have denied.
    pub(crate) fn count_shadow_over_limit(&self, metrics: &Metrics) {
        self.decision(&self.shadow_over_limit, metrics, "shadow_over_limit")
            .inc();
        self.per_rule(&self.shadow_mode, &metrics.shadow_mode).inc();
    }

    /// An allowed descriptor that used more than 80% of its limit.
    pub(crate) fn count_near_limit(&self, metrics: &Metrics) {
        self.per_rule(&self.near_limit, &metrics.near_limit).inc();
    }

    fn decision<'a>(
        &'a self,
        slot: &'a OnceLock<Counter>,
        metrics: &Metrics,
        outcome: &'static str,
    ) -> &'a Counter {
        slot.get_or_init(|| {
            // A clone shares the family's counter: adding to it is adding to the family's.
            metrics
                .decisions
                .get_or_create(&DecisionLabels {
                    domain: Arc::clone(&self.labels.domain),
                    rule: Arc::clone(&self.labels.rule),
                    outcome,
                })
                .clone()
        })
    }

    fn per_rule<'a>(
        &'a self,
        slot: &'a OnceLock<Counter>,
        family: &Family<RuleLabels, Counter>,
    ) -> &'a Counter {
        slot.get_or_init(|| family.get_or_create(&self.labels).clone())
    }
}

/// Every (domain, stats key)'s counters met so far; no more entries than the metric
/// families themselves hold label sets.
#[derive(Debug, Default)]
pub(crate) struct CounterCache {
    by_domain: RwLock<FastMap<FastMap<Arc<RuleCounters>>>>,
    /// Entries made by [`CounterCache::get_if_room`], from request values.
    from_requests: AtomicUsize,
}

/// Stats keys made from request values (`detailed_metric`, `value_to_metric`) kept at most:
/// past this many, such a match counts under its rule's id, so that no client can grow the
/// metric series without bound.
pub(crate) const MAX_STATS_KEYS_FROM_REQUESTS: usize = 10_000;

impl CounterCache {
    /// The counters of a stats key made from a request's values, unless
    /// [`MAX_STATS_KEYS_FROM_REQUESTS`] such keys are held already and this one is new.
    pub(crate) fn get_if_room(&self, domain: &str, rule: &str) -> Option<Arc<RuleCounters>> {
        if let Some(found) = self.find(domain, rule) {
            return Some(found);
        }
        let taken = self
            .from_requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_STATS_KEYS_FROM_REQUESTS).then_some(n + 1)
            });
        taken.ok().map(|_| self.get(domain, rule))
    }

    fn find(&self, domain: &str, rule: &str) -> Option<Arc<RuleCounters>> {
        self.by_domain
            .read()
            .get(domain)
            .and_then(|rules| rules.get(rule))
            .cloned()
    }

    /// The counters of `rule` (a stats key, or empty for no rule) in `domain`, both from the
    /// rules (a client's names go through [`CounterCache::get_if_room`]).
    pub(crate) fn get(&self, domain: &str, rule: &str) -> Arc<RuleCounters> {
        if let Some(found) = self
            .by_domain
            .read()
            .get(domain)
            .and_then(|rules| rules.get(rule))
        {
            return Arc::clone(found);
        }
        let mut by_domain = self.by_domain.write();
        let rules = by_domain.entry(domain.to_owned()).or_default();
        let found = rules.entry(rule.to_owned()).or_insert_with(|| {
            Arc::new(RuleCounters::new(
                Arc::new(domain.to_owned()),
                Arc::new(rule.to_owned()),
            ))
        });
        Arc::clone(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_the_families_and_only_what_counted_is_listed() {
        let metrics = Metrics::new();
        let cache = CounterCache::default();
        let rule = cache.get("d", "d.k");
        rule.count_ok(&metrics);
        rule.count_ok(&metrics);
        cache.get("d", "d.k").count_near_limit(&metrics);
        cache.get("d", "").count_no_limit(&metrics);
        cache.get("e", "e.k").count_shadow_over_limit(&metrics);
        let text = metrics.render();
        for line in [
            r#"sluicegate_decisions_total{domain="d",rule="d.k",outcome="ok"} 2"#,
            r#"sluicegate_near_limit_total{domain="d",rule="d.k"} 1"#,
            r#"sluicegate_decisions_total{domain="d",rule="",outcome="no_rule"} 1"#,
            r#"sluicegate_decisions_total{domain="e",rule="e.k",outcome="shadow_over_limit"} 1"#,
            r#"sluicegate_shadow_mode_total{domain="e",rule="e.k"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"outcome="over_limit""#), "{text}");
        assert!(!text.contains("unlimited"), "{text}");
    }

    #[test]
    fn stats_keys_from_requests_stop_at_their_cap() {
        let cache = CounterCache::default();
        for n in 0..MAX_STATS_KEYS_FROM_REQUESTS {
            assert!(cache.get_if_room("d", &format!("d.k_{n}")).is_some());
        }
        assert!(cache.get_if_room("d", "d.k_new").is_none(), "past the cap");
        assert!(
            cache.get_if_room("d", "d.k_0").is_some(),
            "one held is still found"
        );
    }

    #[test]
    fn domains_and_rules_are_told_apart_even_when_they_join_alike() {
        let cache = CounterCache::default();
        let one = cache.get("a.b", "c");
        let two = cache.get("a", "b.c");
        assert!(!Arc::ptr_eq(&one, &two));
        assert!(Arc::ptr_eq(&one, &cache.get("a.b", "c")));
    }
}
