//! The one place `serve` records what it decided and how long it took: each descriptor's
//! decision once, each call's duration once. `/metrics` reads the decision totals at scrape
//! time (`decision_metrics.rs`) and the duration histograms; the live page reads the rules'
//! windows and the latency window. Nothing on the request path looks a map up: each rule's
//! totals and windows are found when the rules load.

use std::sync::Arc;

use prometheus_client::metrics::histogram::Histogram;
use sluicegate::Micros;
use sluicegate_rules::RuleSet;

use crate::plumbing::{LATENCY_QUANTILES, LatencyPercentiles};
use crate::serve::clock::ServiceClock;
use crate::serve::decision_totals::{DecisionTotals, DecisionTotalsByKey, Outcome};
use crate::serve::live_rules::{LiveStats, RuleLive};
use crate::serve::metrics::{KindLabel, Metrics};
use crate::serve::request_timer::{RequestStart, RequestTimer, Transport};

/// Records decisions and durations for `/metrics` and the live page.
#[derive(Debug)]
pub(crate) struct Recorder {
    totals: Arc<DecisionTotalsByKey>,
    live: LiveStats,
    timer: RequestTimer,
    // Found once: a family lookup per call costs a lock and a hash.
    grpc_seconds: Histogram,
    http_seconds: Histogram,
}

impl Recorder {
    /// A recorder whose totals and histograms `metrics` exposes, timing calls for a service on
    /// `clock`.
    pub(crate) fn new(metrics: &Metrics, clock: &ServiceClock) -> Recorder {
        let histogram = |transport: Transport| {
            let kind = transport.label();
            metrics
                .request_seconds
                .get_or_create(&KindLabel { kind })
                .clone()
        };
        Recorder {
            totals: Arc::clone(&metrics.decision_totals),
            live: LiveStats::default(),
            timer: RequestTimer::new(clock),
            grpc_seconds: histogram(Transport::Grpc),
            http_seconds: histogram(Transport::Http),
        }
    }

    /// Every (domain, stats key)'s totals, for the descriptors no rule's own id counts.
    pub(crate) fn totals(&self) -> &DecisionTotalsByKey {
        &self.totals
    }

    /// Each rule's totals (under its id) and windows by rule index; a rule that stays keeps
    /// its windows, those of rules gone are dropped.
    pub(crate) fn for_rules(&self, rules: &RuleSet) -> RuleRecords {
        let mut windows = self.live.for_rules(rules);
        let mut records: Vec<Option<RuleRecord>> = Vec::new();
        records.resize_with(windows.len(), || None);
        for domain in rules.domains() {
            for rule in rules.rules(domain) {
                let live = windows.get_mut(rule.index()).and_then(Option::take);
                if let (Some(slot), Some(live)) = (records.get_mut(rule.index()), live) {
                    *slot = Some(RuleRecord {
                        totals: self.totals.get(domain, &rule.id),
                        live,
                    });
                }
            }
        }
        RuleRecords(records)
    }

    /// A call arrives.
    #[inline]
    pub(crate) fn start_request(&self) -> RequestStart {
        self.timer.start()
    }

    /// A call that came by `transport` is answered: its duration goes to the histogram and to
    /// the live page's latency window.
    pub(crate) fn finish_request(&self, transport: Transport, start: RequestStart) {
        let (took, ended) = self.timer.finish(start);
        let histogram = match transport {
            Transport::Grpc => &self.grpc_seconds,
            Transport::Http => &self.http_seconds,
        };
        histogram.observe(took as f64 / 1e6);
        self.live.latency.record(ended, took);
    }

    /// The latency percentiles of the minute before `now`; none (null) without a call in it,
    /// rather than zeros.
    pub(crate) fn latency(&self, now: Micros) -> LatencyPercentiles {
        if self.live.latency.count(now) == 0 {
            return LatencyPercentiles::default();
        }
        LatencyPercentiles::from_values(&self.live.latency.percentiles(now, &LATENCY_QUANTILES))
    }
}

/// Each rule in force's place in the recorder, by rule index; swapped with the rules.
#[derive(Debug)]
pub(crate) struct RuleRecords(Vec<Option<RuleRecord>>);

#[derive(Debug)]
struct RuleRecord {
    /// Under the rule's id, where most of its matches count.
    totals: Arc<DecisionTotals>,
    live: Arc<RuleLive>,
}

impl RuleRecords {
    /// The totals under rule `index`'s id.
    pub(crate) fn totals_of(&self, index: usize) -> Option<&Arc<DecisionTotals>> {
        self.entry(index).map(|entry| &entry.totals)
    }

    /// Rule `index`'s windows.
    pub(crate) fn live_of(&self, index: usize) -> Option<&RuleLive> {
        self.entry(index).map(|entry| &*entry.live)
    }

    fn entry(&self, index: usize) -> Option<&RuleRecord> {
        self.0.get(index).and_then(Option::as_ref)
    }

    /// Records one descriptor's decision at `now`: in `totals` (its stats key's), and in the
    /// windows of `rule` (the rule it matched, if any).
    #[inline]
    pub(crate) fn record(
        &self,
        totals: &DecisionTotals,
        rule: Option<usize>,
        outcome: Outcome,
        now: Micros,
    ) {
        totals.count(outcome);
        if let Some(live) = rule.and_then(|index| self.live_of(index)) {
            live.record(outcome, now);
        }
    }

    /// Records that `rule` denied `permits` to counter key `key` at `now`, for its most
    /// limited keys.
    pub(crate) fn record_limited_key(
        &self,
        rule: Option<usize>,
        key: &str,
        permits: u64,
        now: Micros,
    ) {
        if let Some(live) = rule.and_then(|index| self.live_of(index)) {
            live.top().add(now, key, permits);
        }
    }
}
