//! What each (domain, stats key) decided since start: one atomic add per decision, read by
//! `/metrics` at scrape time (`decision_metrics.rs`). Found once per rule when the rules load,
//! so that recording a decision looks nothing up.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

/// Hashed with foldhash (the limiters' hasher), not SipHash: a stats key made from a
/// request's values is looked up per descriptor.
type FastMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// How one descriptor's decision came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No limit applied: no rule matched, or its rule is unlimited.
    NoLimit,
    /// Allowed; `near_limit` when it left less than a fifth of the limit.
    Allowed { near_limit: bool },
    /// Answered over the limit.
    Denied,
    /// Over the limit, answered OK: its rule is in shadow mode.
    ShadowDenied,
}

/// The decisions of one domain and stats key (empty: no rule matched).
#[derive(Debug, Default)]
pub(crate) struct DecisionTotals {
    pub(crate) no_limit: AtomicU64,
    pub(crate) ok: AtomicU64,
    pub(crate) over_limit: AtomicU64,
    /// Also `sluicegate_shadow_mode_total`, which counts the same decisions.
    pub(crate) shadow_over_limit: AtomicU64,
    pub(crate) near_limit: AtomicU64,
}

impl DecisionTotals {
    /// Counts one decision.
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        // Relaxed: each total is an independent statistic, read on its own at scrape time.
        let one = |total: &AtomicU64| total.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::NoLimit => one(&self.no_limit),
            Outcome::Allowed { near_limit } => {
                if near_limit {
                    one(&self.near_limit);
                }
                one(&self.ok)
            }
            Outcome::Denied => one(&self.over_limit),
            Outcome::ShadowDenied => one(&self.shadow_over_limit),
        };
    }
}

/// Every (domain, stats key)'s totals met so far.
#[derive(Debug, Default)]
pub(crate) struct DecisionTotalsByKey {
    by_domain: RwLock<FastMap<FastMap<Arc<DecisionTotals>>>>,
    /// Entries made by [`DecisionTotalsByKey::get_if_room`], from request values (written
    /// under `by_domain`'s write lock).
    from_requests: AtomicUsize,
}

/// Stats keys made from request values (`detailed_metric`, `value_to_metric`) kept at most:
/// past this many, such a match counts under its rule's id, so that no client can grow the
/// metric series without bound.
pub(crate) const MAX_STATS_KEYS_FROM_REQUESTS: usize = 10_000;

impl DecisionTotalsByKey {
    /// The totals of a stats key made from a request's values, unless
    /// [`MAX_STATS_KEYS_FROM_REQUESTS`] such keys are held already and this one is new.
    pub(crate) fn get_if_room(&self, domain: &str, rule: &str) -> Option<Arc<DecisionTotals>> {
        if let Some(found) = self.find(domain, rule) {
            return Some(found);
        }
        // Counted under the write lock, where the entry is made: two calls for the same new
        // key take one place, not two.
        let mut by_domain = self.by_domain.write();
        let rules = by_domain.entry(domain.to_owned()).or_default();
        if let Some(found) = rules.get(rule) {
            return Some(Arc::clone(found));
        }
        let taken = self.from_requests.load(Ordering::Relaxed);
        if taken >= MAX_STATS_KEYS_FROM_REQUESTS {
            return None;
        }
        self.from_requests.store(taken + 1, Ordering::Relaxed);
        Some(Arc::clone(rules.entry(rule.to_owned()).or_default()))
    }

    fn find(&self, domain: &str, rule: &str) -> Option<Arc<DecisionTotals>> {
        self.by_domain
            .read()
            .get(domain)
            .and_then(|rules| rules.get(rule))
            .cloned()
    }

    /// The totals of `rule` (a stats key, or empty for no rule) in `domain`, both from the
    /// rules (a client's names go through [`DecisionTotalsByKey::get_if_room`]).
    pub(crate) fn get(&self, domain: &str, rule: &str) -> Arc<DecisionTotals> {
        if let Some(found) = self.find(domain, rule) {
            return found;
        }
        let mut by_domain = self.by_domain.write();
        let rules = by_domain.entry(domain.to_owned()).or_default();
        Arc::clone(rules.entry(rule.to_owned()).or_default())
    }

    /// Calls `f` with each domain, stats key and totals held.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&str, &str, &DecisionTotals)) {
        for (domain, rules) in self.by_domain.read().iter() {
            for (rule, totals) in rules {
                f(domain, rule, totals);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_counts_in_its_total_and_near_limit_also_as_ok() {
        let totals = DecisionTotals::default();
        totals.count(Outcome::Allowed { near_limit: false });
        totals.count(Outcome::Allowed { near_limit: true });
        totals.count(Outcome::Denied);
        totals.count(Outcome::ShadowDenied);
        totals.count(Outcome::NoLimit);
        let read = |total: &AtomicU64| total.load(Ordering::Relaxed);
        assert_eq!(read(&totals.ok), 2);
        assert_eq!(read(&totals.near_limit), 1);
        assert_eq!(read(&totals.over_limit), 1);
        assert_eq!(read(&totals.shadow_over_limit), 1);
        assert_eq!(read(&totals.no_limit), 1);
    }

    #[test]
    fn stats_keys_from_requests_stop_at_their_cap() {
        let totals = DecisionTotalsByKey::default();
        for n in 0..MAX_STATS_KEYS_FROM_REQUESTS {
            assert!(totals.get_if_room("d", &format!("d.k_{n}")).is_some());
        }
        assert!(totals.get_if_room("d", "d.k_new").is_none(), "past the cap");
        assert!(
            totals.get_if_room("d", "d.k_0").is_some(),
            "one held is still found"
        );
    }

    #[test]
    fn a_key_asked_for_from_many_threads_at_once_takes_one_place() {
        let totals = DecisionTotalsByKey::default();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for n in 0..200 {
                        totals.get_if_room("d", &format!("d.k_{n}"));
                    }
                });
            }
        });
        assert_eq!(totals.from_requests.load(Ordering::Relaxed), 200);
    }

    #[test]
    fn domains_and_rules_are_told_apart_even_when_they_join_alike() {
        let totals = DecisionTotalsByKey::default();
        let one = totals.get("a.b", "c");
        let two = totals.get("a", "b.c");
        assert!(!Arc::ptr_eq(&one, &two));
        assert!(Arc::ptr_eq(&one, &totals.get("a.b", "c")));
    }
}
