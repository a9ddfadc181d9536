//! From the decisions of a call's checks to its answer: each descriptor's tightest limit, the
//! call's overall code, the headers, and each descriptor's decision recorded once.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::clock::micros_ceil;
use sluicegate::{Decision, Micros};

use crate::serve::check::{Check, Decided, Role};
use crate::serve::decision_totals::{DecisionTotals, Outcome};
use crate::serve::headers::{HeaderOptions, headers_for, standing};
use crate::serve::protocol::{CallVerdict, Code, DescriptorVerdict, Statuses};
use crate::serve::recorder::RuleRecords;

/// What is recorded of a descriptor: the totals of its domain and its rule's stats key (empty
/// when no rule matched), how its limits take part, and whether its rule is unlimited.
pub(crate) struct DescriptorStats {
    pub(crate) totals: Arc<DecisionTotals>,
    pub(crate) role: Role,
    pub(crate) unlimited: bool,
    /// The matched rule's index, for its live windows.
    pub(crate) rule: Option<usize>,
}

/// The answer to a call of `descriptors` descriptors, decided at `now`, each descriptor's
/// decision recorded in `records`; with `shadow_mode` (the whole service's), always OK.
pub(crate) fn verdict<L>(
    descriptors: usize,
    stats: &[DescriptorStats],
    decided: Decided<'_, L>,
    records: &RuleRecords,
    now: Micros,
    shadow_mode: bool,
    header_options: &HeaderOptions,
) -> CallVerdict {
    let mut statuses = Statuses::from_elem(DescriptorVerdict::unlimited(), descriptors);
    for (check, decision) in decided {
        if !decision.is_some_and(|d| d.allowed()) && check.role != Role::CheckOnly {
            let rule = stats[check.descriptor].rule;
            records.record_limited_key(rule, &check.key, check.permits.get(), now);
        }
        let status = verdict_for(check, decision, || now);
        let slot = &mut statuses[check.descriptor];
        if tighter(&status, slot) {
            *slot = status;
        }
    }
    // Quota-mode descriptors over their limit fail the call only if all of them are.
    let (mut quotas, mut quotas_over) = (0, 0);
    for (status, stats) in statuses.iter().zip(stats) {
        if stats.role == Role::Quota && status.current_limit.is_some() {
            quotas += 1;
            quotas_over += usize::from(status.code == Code::OverLimit);
        }
    }
    let mut overall = Code::Ok;
    for (status, stats) in statuses.iter_mut().zip(stats) {
        let outcome = settle(status, stats);
        let fails_call = stats.role == Role::Enforce || quotas_over == quotas;
        if outcome == Outcome::Denied && fails_call {
            overall = Code::OverLimit;
        }
        records.record(&stats.totals, stats.rule, outcome, now);
    }
    if shadow_mode {
        overall = Code::Ok;
    }
    let mut headers = headers_for(&statuses, header_options);
    if overall == Code::Ok && quotas_over > 0 {
        // A quota over its limit does not fail a call another quota lets through.
        headers.retain(|(name, _)| name != "Retry-After");
    }
    CallVerdict {
        overall,
        statuses,
        headers,
    }
}

/// A descriptor's answer as its role makes it (shadow and check-only ones answer OK), and its
/// outcome.
fn settle(status: &mut DescriptorVerdict, stats: &DescriptorStats) -> Outcome {
    let Some(limit) = &status.current_limit else {
        if stats.unlimited {
            status.limit_remaining = u32::MAX;
        }
        return Outcome::NoLimit;
    };
    if status.code == Code::OverLimit {
        match stats.role {
            Role::Shadow => {
                status.code = Code::Ok;
                return Outcome::ShadowDenied;
            }
            Role::Quota | Role::Enforce => return Outcome::Denied,
            // Nothing was asked for: nothing is over (as upstream, whose counter plus zero is
            // never above the limit).
            Role::CheckOnly => status.code = Code::Ok,
        }
    }
    let near_limit = u64::from(status.limit_remaining) * 5 < u64::from(limit.requests_per_unit);
    Outcome::Allowed { near_limit }
}

/// One check's answer. A fixed window resets at its window's end whether or not anything was
/// counted in it (as envoyproxy/ratelimit reports it), so its reset is read from the clock
/// (`now`) where the decision has none.
fn verdict_for<L>(
    check: &Check<L>,
    decision: Option<Decision>,
    now: impl FnOnce() -> Micros,
) -> DescriptorVerdict {
    let window = check.report.window;
    let to_window_end = |now: Micros| {
        let period = micros_ceil(window).max(1);
        Duration::from_micros(period - now % period)
    };
    match decision {
        Some(d) => DescriptorVerdict {
            code: if d.allowed() {
                Code::Ok
            } else {
                Code::OverLimit
            },
            limit_remaining: u32::try_from(d.remaining()).unwrap_or(u32::MAX),
            duration_until_reset: Some(if check.report.aligned && d.reset_after_micros() == 0 {
                to_window_end(now())
            } else {
                d.reset_after()
            }),
            retry_after: d.retry_after(),
            current_limit: Some(check.report.clone()),
        },
        // Can never pass: zero requests allowed, or more hits than the limit holds.
        None => DescriptorVerdict {
            code: Code::OverLimit,
            limit_remaining: 0,
            duration_until_reset: Some(if check.report.aligned {
                to_window_end(now())
            } else {
                window
            }),
            retry_after: None,
            current_limit: Some(check.report.clone()),
        },
    }
}

/// Whether `candidate` describes a descriptor better than `current`, by the rule the headers
/// pick the tightest descriptor with.
fn tighter(candidate: &DescriptorVerdict, current: &DescriptorVerdict) -> bool {
    current.current_limit.is_none() || standing(candidate).is_tighter_than(&standing(current))
}
