//! A call decided in this process's memory: the enforcing limits together, all charged or
//! none (or, with `--count-denied`, every one charged), then the shadow-mode and check-only
//! limits each on its own. Also the Redis backend's `local` fallback.

use sluicegate::{Algorithm as _, CheckError, Decision, LimitTarget, Op, decide_together};
use smallvec::SmallVec;

use crate::serve::check::{Check, Decided, Role};
use crate::serve::clock::ServiceClock;
use crate::serve::key_cap::KeyCap;
use crate::serve::limiter_table::Enforcer;

/// A few checks of a call, inline.
type CheckRefs<'a> = SmallVec<[&'a Check; 2]>;

/// The decide-together targets of a call's enforcing in-memory limits.
type Targets<'a> = SmallVec<[LimitTarget<'a, String, sluicegate::AnyAlgorithm, ServiceClock>; 2]>;

/// How long a request refused at the key cap is told to wait: about when the engine next
/// sweeps for fresh keys.
const RETRY_AT_KEY_CAP: sluicegate::Micros = 1_000_000;

/// Decides a call in memory: the enforcing limits (with the quota-mode ones that would allow)
/// together, all charged or none; then each shadow-mode limit on its own (charged only if the
/// enforcing ones allowed) and each check-only one peeked. With `count_denied`, as
/// [`charge_in_memory`] does.
pub(crate) fn decide_in_memory<'a>(
    checks: &'a [Check],
    count_denied: bool,
    keys: &KeyCap,
) -> Decided<'a> {
    if count_denied {
        return charge_in_memory(checks, keys);
    }
    // The usual call, one enforcing limit: decided alone, as deciding it together would
    // (a request it can never grant errs, and its peek answers as below), without the
    // bookkeeping for several.
    if let [check] = checks {
        if let (Role::Enforce, Enforcer::Limiter(limiter)) = (check.role, &check.enforcer) {
            let answer = match limiter.decide(&check.key, check.permits, Op::Check) {
                Ok(decision) => Some(decision),
                Err(CheckError::KeyCapacityReached { .. }) => {
                    at_key_cap(&[check], keys).pop().and_then(|(_, d)| d)
                }
                Err(_) => peek(check),
            };
            let mut decided = Decided::new();
            decided.push((check, answer));
            return decided;
        }
    }
    let mut decided = Decided::with_capacity(checks.len());
    // Quota-mode limits that would allow join the enforcing ones; if there are some and none
    // would, the call is over its quotas and nothing is charged.
    let mut quotas = 0;
    let mut enforced: CheckRefs<'_> = SmallVec::new();
    for check in checks {
        match check.role {
            Role::Enforce => enforced.push(check),
            Role::Quota => {
                quotas += 1;
                match peek(check) {
                    Some(decision) if decision.allowed() => enforced.push(check),
                    over => decided.push((check, over)),
                }
            }
            Role::Shadow | Role::CheckOnly => {}
        }
    }
    let over_quota = quotas > 0 && quotas == decided.len();
    let never = enforced
        .iter()
        .any(|c| matches!(c.enforcer, Enforcer::Never));

    // If any can never pass, or every quota is spent, none is charged.
    let op = if never || over_quota {
        Op::Peek
    } else {
        Op::Check
    };
    let mut enforced_allowed = !never && !over_quota;
    match decide_targets(&targets_of(&enforced), op) {
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
        Err(CheckError::KeyCapacityReached { .. }) => {
            let answers = at_key_cap(&enforced, keys);
            enforced_allowed &= answers.iter().all(|(_, d)| d.is_some_and(|d| d.allowed()));
            decided.extend(answers);
        }
        // More hits than a limit can ever grant: that limit can never pass.
        Err(_) => {
            enforced_allowed = false;
            for check in &enforced {
                decided.push((check, peek(check)));
            }
        }
    }
    for check in checks {
        let op = match check.role {
            Role::Shadow if enforced_allowed => Op::Check,
            Role::Shadow | Role::CheckOnly => Op::Peek,
            Role::Enforce | Role::Quota => continue,
        };
        decided.push((check, decide_one(check, op, keys)));
    }
    decided
}

/// Decides a call in memory as envoyproxy/ratelimit counts (`--count-denied`): every limit
/// the call names is charged its hits, allowed or denied, shadow-mode and quota-mode ones
/// included (check-only ones are peeked). A limit that can never pass (zero requests, or more
/// hits than it holds) is over the limit and, unlike envoyproxy/ratelimit's counter, charged
/// nothing: there is no count to keep past a limit that cannot be met.
fn charge_in_memory<'a>(checks: &'a [Check], keys: &KeyCap) -> Decided<'a> {
    let can_pass = |check: &Check| match &check.enforcer {
        Enforcer::Limiter(limiter) => check.permits.get() <= limiter.algorithm().capacity(),
        Enforcer::Never => false,
    };
    let chargeable: CheckRefs<'_> = checks
        .iter()
        .filter(|c| c.role != Role::CheckOnly && can_pass(c))
        .collect();
    // Every algorithm was checked to count denials when the rules were loaded, and every
    // request fits its limit's capacity, so this fails only at the key cap, where nothing is
    // charged.
    let together = decide_targets(&targets_of(&chargeable), Op::Charge);
    let mut answers = match together {
        Ok((_, decisions)) => Some(decisions.into_iter()),
        Err(_) => None,
    };
    let at_cap = answers.is_none();
    let mut decided: Decided<'a> = checks
        .iter()
        .map(|check| {
            let answer = if !can_pass(check) {
                None
            } else if check.role == Role::CheckOnly {
                peek(check)
            } else if let Some(answers) = &mut answers {
                answers.next()
            } else {
                None
            };
            (check, answer)
        })
        .collect();
    if at_cap {
        let refused = at_key_cap(&chargeable, keys);
        for (check, answer) in &mut decided {
            if let Some((_, refusal)) = refused.iter().find(|(c, _)| std::ptr::eq(*c, *check)) {
                *answer = *refusal;
            }
        }
    }
    decided
}

/// The answers at the key cap, where a new key could not be made for one of `checks`: each is
/// peeked (nothing is charged, and a key already over its limit still denies), and if they
/// would all allow, the `closed` policy denies them all.
fn at_key_cap<'a>(checks: &[&'a Check], keys: &KeyCap) -> Decided<'a> {
    keys.refused();
    let mut peeked: Decided<'a> = checks.iter().map(|c| (*c, peek(c))).collect();
    let all_allow = peeked.iter().all(|(_, d)| d.is_some_and(|d| d.allowed()));
    if all_allow && keys.denies() {
        for (_, answer) in &mut peeked {
            *answer = answer.map(|d| {
                Decision::deny(
                    d.limit(),
                    d.remaining(),
                    d.reset_after_micros(),
                    Some(RETRY_AT_KEY_CAP),
                )
            });
        }
    }
    peeked
}

/// [`decide_together`]'s answer (all allowed, each decision), without its result vector for
/// the usual single target: one limit decided together is that limit decided alone.
fn decide_targets(
    targets: &[LimitTarget<'_, String, sluicegate::AnyAlgorithm, ServiceClock>],
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

/// One limit on its own (shadow-mode, check-only and quota-mode rules, and the `local`
/// fallback's shadow limits). At the key cap, a charge is refused and peeked instead.
pub(crate) fn decide_one(check: &Check, op: Op, keys: &KeyCap) -> Option<Decision> {
    match &check.enforcer {
        Enforcer::Limiter(limiter) => match limiter.decide(&check.key, check.permits, op) {
            Ok(decision) => Some(decision),
            Err(CheckError::KeyCapacityReached { .. }) => {
                keys.refused();
                peek(check)
            }
            Err(_) => None,
        },
        Enforcer::Never => None,
    }
}

/// A peek for a limit whose capacity the hits fit; `None` (never passes) otherwise. A peek
/// makes no key, so it never meets the key cap.
fn peek(check: &Check) -> Option<Decision> {
    match &check.enforcer {
        Enforcer::Limiter(limiter) => limiter.decide(&check.key, check.permits, Op::Peek).ok(),
        Enforcer::Never => None,
    }
}
