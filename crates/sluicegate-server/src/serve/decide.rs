//! A call decided through the backend seam ([`sluicegate::store::Store`]), the same whatever
//! holds the state (this process's memory, or Redis behind its failure policy): the enforcing
//! limits together, all charged or none (or, with `--count-denied`, every one charged), then
//! the shadow-mode and check-only limits each on its own. A store at its key cap refuses a new
//! key; the call is then peeked and answered by the key cap's policy.

use sluicegate::Decision;
use sluicegate::state_machine::Op;
use sluicegate::store::{FailureKind, Now, Request, Store, StoreError as _};
use smallvec::SmallVec;

use crate::serve::check::{Check, Decided, Role};
use crate::serve::key_cap::{CallCap, KeyCap};

/// A few checks of a call, inline.
type CheckRefs<'a, L> = SmallVec<[&'a Check<L>; 2]>;

/// How long a request refused at the key cap is told to wait: about when the engine next
/// sweeps for fresh keys.
const RETRY_AT_KEY_CAP: sluicegate::Micros = 1_000_000;

/// Decides `checks` in `store` at `now`: the enforcing limits (with the quota-mode ones that
/// would allow) together, all charged or none; then each shadow-mode limit on its own (charged
/// only if the enforcing ones allowed) and each check-only one peeked. With `count_denied`, as
/// [`charge_all`] does.
pub(crate) async fn decide_call<'a, S: Store<String>>(
    store: &S,
    checks: &'a [Check<S::Limit>],
    count_denied: bool,
    keys: &KeyCap,
    now: Now,
) -> Decided<'a, S::Limit> {
    // The usual call, one enforcing limit: decided alone, as deciding it together would,
    // without the bookkeeping for several. The rest is boxed: its state, inline, would make
    // this future (moved on every call) several times larger.
    if let [check] = checks
        && check.role == Role::Enforce
        && !count_denied
        && let Some(limit) = &check.limit
    {
        let answer = match decide_one(store, limit, check, Op::Check, now).await {
            Ok(decision) => Some(decision),
            Err(FailureKind::KeyCapacity) => {
                let cap = keys.for_call();
                Box::pin(at_key_cap(store, &[check], &cap, now))
                    .await
                    .pop()
                    .and_then(|(_, d)| d)
            }
            // More hits than the limit can ever grant: it never passes.
            Err(_) => None,
        };
        let mut decided = Decided::new();
        decided.push((check, answer));
        return decided;
    }
    let cap = keys.for_call();
    if count_denied {
        return Box::pin(charge_all(store, checks, &cap, now)).await;
    }
    Box::pin(decide_several(store, checks, &cap, now)).await
}

/// [`decide_call`] for any call but the usual one.
async fn decide_several<'a, S: Store<String>>(
    store: &S,
    checks: &'a [Check<S::Limit>],
    keys: &CallCap<'_>,
    now: Now,
) -> Decided<'a, S::Limit> {
    let mut decided = Decided::with_capacity(checks.len());
    // Quota-mode limits that would allow join the enforcing ones; if there are some and none
    // would, the call is over its quotas and nothing is charged.
    let mut quotas = 0;
    let mut enforced: CheckRefs<'a, S::Limit> = SmallVec::new();
    for check in checks {
        match check.role {
            Role::Enforce => enforced.push(check),
            Role::Quota => {
                quotas += 1;
                match peek(store, check, now).await {
                    Some(decision) if decision.allowed() => enforced.push(check),
                    over => decided.push((check, over)),
                }
            }
            Role::Shadow | Role::CheckOnly => {}
        }
    }
    let over_quota = quotas > 0 && quotas == decided.len();
    let never = enforced.iter().any(|c| !fits(store, c));
    // If any can never pass, or every quota is spent, none is charged: the others are peeked.
    let op = if never || over_quota {
        Op::Peek
    } else {
        Op::Check
    };
    let mut enforced_allowed = !never && !over_quota;
    let asked: CheckRefs<'a, S::Limit> = enforced
        .iter()
        .copied()
        .filter(|c| fits(store, c))
        .collect();
    match decide_together(store, &asked, op, now).await {
        Ok((allowed, decisions)) => {
            enforced_allowed &= allowed;
            let mut answers = decisions.into_iter();
            for check in &enforced {
                let answer = if fits(store, check) {
                    answers.next()
                } else {
                    None
                };
                decided.push((check, answer));
            }
        }
        Err(FailureKind::KeyCapacity) => {
            let answers = at_key_cap(store, &enforced, keys, now).await;
            enforced_allowed &= answers.iter().all(|(_, d)| d.is_some_and(|d| d.allowed()));
            decided.extend(answers);
        }
        // The same limit and counter named twice, together more than it can ever grant.
        Err(_) => {
            enforced_allowed = false;
            for check in &enforced {
                decided.push((check, None));
            }
        }
    }
    for check in checks {
        let op = match check.role {
            Role::Shadow if enforced_allowed => Op::Check,
            Role::Shadow | Role::CheckOnly => Op::Peek,
            Role::Enforce | Role::Quota => continue,
        };
        decided.push((check, decide_alone(store, check, op, keys, now).await));
    }
    decided
}

/// Decides a call as envoyproxy/ratelimit counts (`--count-denied`): every limit the call
/// names is charged its hits, allowed or denied, shadow-mode and quota-mode ones included
/// (check-only ones are peeked). A limit that can never pass (zero requests, or more hits than
/// it holds) is over the limit and, unlike envoyproxy/ratelimit's counter, charged nothing:
/// there is no count to keep past a limit that cannot be met.
async fn charge_all<'a, S: Store<String>>(
    store: &S,
    checks: &'a [Check<S::Limit>],
    keys: &CallCap<'_>,
    now: Now,
) -> Decided<'a, S::Limit> {
    let chargeable: CheckRefs<'a, S::Limit> = checks
        .iter()
        .filter(|c| c.role != Role::CheckOnly && fits(store, c))
        .collect();
    // Every algorithm was checked to count denials when the rules were loaded, and every
    // request fits its limit's capacity, so this fails only at the key cap (where nothing is
    // charged) or when the store fails a request no policy answers.
    let together = decide_together(store, &chargeable, Op::Charge, now).await;
    let at_cap = matches!(together, Err(FailureKind::KeyCapacity));
    let mut answers = together.ok().map(|(_, decisions)| decisions.into_iter());
    let mut decided: Decided<'a, S::Limit> = SmallVec::with_capacity(checks.len());
    for check in checks {
        let answer = if !fits(store, check) {
            None
        } else if check.role == Role::CheckOnly {
            peek(store, check, now).await
        } else if let Some(answers) = &mut answers {
            answers.next()
        } else {
            None
        };
        decided.push((check, answer));
    }
    if at_cap {
        let refused = at_key_cap(store, &chargeable, keys, now).await;
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
async fn at_key_cap<'a, S: Store<String>>(
    store: &S,
    checks: &[&'a Check<S::Limit>],
    keys: &CallCap<'_>,
    now: Now,
) -> Decided<'a, S::Limit> {
    keys.refused();
    let mut peeked: Decided<'a, S::Limit> = SmallVec::with_capacity(checks.len());
    for check in checks {
        peeked.push((*check, peek(store, check, now).await));
    }
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

/// Whether the check's hits fit its limit (a limit of nothing fits nothing).
fn fits<S: Store<String>>(store: &S, check: &Check<S::Limit>) -> bool {
    check
        .limit
        .as_ref()
        .is_some_and(|limit| check.permits.get() <= store.capacity(limit))
}

/// `checks` (each with a limit) decided together: whether all allowed, and each decision.
async fn decide_together<S: Store<String>>(
    store: &S,
    checks: &[&Check<S::Limit>],
    op: Op,
    now: Now,
) -> Result<(bool, sluicegate::store::Decisions), FailureKind> {
    let requests: SmallVec<[Request<'_, S::Limit, String>; 2]> = checks
        .iter()
        .filter_map(|check| {
            Some(Request {
                limit: check.limit.as_ref()?,
                key: &check.key,
                permits: check.permits,
            })
        })
        .collect();
    if requests.is_empty() {
        return Ok((true, sluicegate::store::Decisions::Many(Vec::new())));
    }
    match store.decide(&requests, op, now).await {
        Ok(outcome) => Ok((outcome.allowed, outcome.decisions)),
        Err(error) => Err(error.kind()),
    }
}

/// One limit decided alone.
async fn decide_one<S: Store<String>>(
    store: &S,
    limit: &S::Limit,
    check: &Check<S::Limit>,
    op: Op,
    now: Now,
) -> Result<Decision, FailureKind> {
    let request = [Request {
        limit,
        key: &check.key,
        permits: check.permits,
    }];
    match store.decide(&request, op, now).await {
        Ok(outcome) => outcome
            .decisions
            .first()
            .copied()
            .ok_or(FailureKind::Refused),
        Err(error) => Err(error.kind()),
    }
}

/// One limit on its own (shadow-mode and check-only rules). At the key cap, a charge is
/// refused and peeked instead.
async fn decide_alone<S: Store<String>>(
    store: &S,
    check: &Check<S::Limit>,
    op: Op,
    keys: &CallCap<'_>,
    now: Now,
) -> Option<Decision> {
    let limit = check.limit.as_ref().filter(|_| fits(store, check))?;
    match decide_one(store, limit, check, op, now).await {
        Ok(decision) => Some(decision),
        Err(FailureKind::KeyCapacity) => {
            keys.refused();
            peek(store, check, now).await
        }
        Err(_) => None,
    }
}

/// A peek for a limit whose capacity the hits fit; `None` (never passes) otherwise. A peek
/// makes no key, so it never meets the key cap.
async fn peek<S: Store<String>>(store: &S, check: &Check<S::Limit>, now: Now) -> Option<Decision> {
    let limit = check.limit.as_ref()?;
    decide_one(store, limit, check, Op::Peek, now).await.ok()
}
