//! A call decided in this process's memory: the enforcing limits together, all charged or
//! none (or, with `--count-denied`, every one charged), then the shadow-mode limits each on
//! its own. Also the Redis backend's `local` fallback.

use sluicegate::{Algorithm as _, CheckError, Decision, LimitTarget, Op, decide_together};
use smallvec::SmallVec;

use crate::serve::engine::{Check, Decided};
use crate::serve::limiter_table::Enforcer;

/// A few checks of a call, inline.
type CheckRefs<'a> = SmallVec<[&'a Check; 2]>;

/// The decide-together targets of a call's enforcing in-memory limits.
type Targets<'a> =
    SmallVec<[LimitTarget<'a, String, sluicegate::AnyAlgorithm, sluicegate::SystemClock>; 2]>;

/// Decides a call in memory: the enforcing limits together, all charged or none, then each
/// shadow-mode limit on its own (charged only if the enforcing ones allowed); with
/// `count_denied`, as [`charge_in_memory`] does.
pub(crate) fn decide_in_memory(checks: &[Check], count_denied: bool) -> Decided<'_> {
    if count_denied {
        return charge_in_memory(checks);
    }
    // The usual call, one enforcing limit: decided alone, as deciding it together would
    // (a request it can never grant errs, and its peek answers as below), without the
    // bookkeeping for several.
    if let [check] = checks {
        if let (false, Enforcer::Limiter(limiter)) = (check.shadow, &check.enforcer) {
            let answer = match limiter.decide(&check.key, check.permits, Op::Check) {
                Ok(decision) => Some(decision),
                Err(_) => peek_fitting(check),
            };
            let mut decided = Decided::new();
            decided.push((check, answer));
            return decided;
        }
    }
    let never = checks
        .iter()
        .any(|c| !c.shadow && matches!(c.enforcer, Enforcer::Never));
    let enforced: CheckRefs<'_> = checks.iter().filter(|c| !c.shadow).collect();

    // Enforcing limits are decided together; if any can never pass, none is charged.
    let mut decided = Decided::with_capacity(checks.len());
    let op = if never { Op::Peek } else { Op::Check };
    let targets = targets_of(&enforced);
    let together = decide_targets(&targets, op);
    let mut enforced_allowed = !never;
    match together {
        Ok((allowed, decisions)) => {
            enforced_allowed &= allowed;
            let mut answers = decisions.into_iter();
            for check in &enforced {
                let answer = match check.enforcer {
                    Enforcer::Never => None,
                    Enforcer::Limiter(_) => answers.next(),
                };
                decided.push((check, answer));
            }
        }
        // More hits than a limit can ever grant: that limit can never pass.
        Err(_) => {
            enforced_allowed = false;
            for check in &enforced {
                decided.push((check, peek_fitting(check)));
            }
        }
    }
    for check in checks.iter().filter(|c| c.shadow) {
        let op = if enforced_allowed {
            Op::Check
        } else {
            Op::Peek
        };
        decided.push((check, decide_one(check, op)));
    }

    decided
}

/// Decides a call in memory as envoyproxy/ratelimit counts (`--count-denied`): every limit
/// the call names is charged its hits, allowed or denied, shadow-mode ones included. A limit
/// that can never pass (zero requests, or more hits than it holds) is over the limit and,
/// unlike envoyproxy/ratelimit's counter, charged nothing: there is no count to keep past a
/// limit that cannot be met.
fn charge_in_memory(checks: &[Check]) -> Decided<'_> {
    let can_pass = |check: &Check| match &check.enforcer {
        Enforcer::Limiter(limiter) => check.permits.get() <= limiter.algorithm().capacity(),
        Enforcer::Never => false,
    };
    let chargeable: CheckRefs<'_> = checks.iter().filter(|c| can_pass(c)).collect();
    // Every algorithm was checked to count denials when the rules were loaded, and every
    // request fits its limit's capacity, so this does not fail; if it did, nothing is charged.
    let together = decide_targets(&targets_of(&chargeable), Op::Charge);
    let mut answers = together
        .as_ref()
        .ok()
        .map(|(_, decisions)| decisions.iter());
    checks
        .iter()
        .map(|check| {
            let answer = if !can_pass(check) {
                None
            } else if let Some(answers) = &mut answers {
                answers.next().copied()
            } else {
                decide_one(check, Op::Peek)
            };
            (check, answer)
        })
        .collect()
}

/// [`decide_together`]'s answer (all allowed, each decision), without its result vector for
/// the usual single target: one limit decided together is that limit decided alone.
fn decide_targets(
    targets: &[LimitTarget<'_, String, sluicegate::AnyAlgorithm, sluicegate::SystemClock>],
    op: Op,
) -> Result<(bool, SmallVec<[Decision; 2]>), CheckError> {
    if let [only] = targets {
        let decision = only.limiter.decide(only.key, only.permits, op)?;
        let mut decisions = SmallVec::new();
        decisions.push(decision);
        return Ok((decision.allowed(), decisions));
    }
    let multi = decide_together(targets, op)?;
    Ok((multi.allowed, SmallVec::from_vec(multi.decisions)))
}

/// The decide-together targets of the enforcing limiters.
fn targets_of<'a>(checks: &[&'a Check]) -> Targets<'a> {
    checks
        .iter()
        .filter_map(|check| match &check.enforcer {
            Enforcer::Limiter(limiter) => Some(LimitTarget {
                limiter: limiter.as_ref(),
                key: &check.key,
                permits: check.permits,
            }),
            Enforcer::Never => None,
        })
        .collect()
}

/// One limit on its own (shadow-mode rules, which never block the others).
pub(crate) fn decide_one(check: &Check, op: Op) -> Option<Decision> {
    match &check.enforcer {
        Enforcer::Limiter(limiter) => limiter.decide(&check.key, check.permits, op).ok(),
        Enforcer::Never => None,
    }
}

/// A peek for a limit whose capacity the hits fit; `None` (never passes) otherwise.
fn peek_fitting(check: &Check) -> Option<Decision> {
    decide_one(check, Op::Peek)
}
