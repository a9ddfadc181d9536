//! A call decided in Redis: every enforcing limit in one `decide_all` script call (all charged
//! or none, as in memory), then each shadow-mode limit on its own. The whole call is bounded
//! by the Redis timeout; when Redis fails, the failure policy answers: `open` allows,
//! `closed` denies, `local` decides the call in this process's memory.
//!
//! Redis Cluster: a script can only touch keys of one slot, and a limit's keys are tagged by
//! its counter key (so every call on that counter, whatever else it names, finds the same
//! keys). The limits of a call are grouped by counter key, one script call per group; with
//! several groups, all are peeked first and charged only if all allow. That keeps "all or
//! nothing" except against a concurrent call that takes the last permit of one group between
//! the peek and the charge (then the other groups are charged alone). A single server
//! decides every call in one script call, exactly.

use std::num::NonZeroU64;
use std::time::Duration;

use sluicegate::{Decision, Op, micros_ceil};
use sluicegate_redis::{FailurePolicy, LimitRequest, Now, RedisLimitError, RedisStore};
use tokio::time::Instant;

use crate::serve::backend::{BackendFailure, RedisBackend};
use crate::serve::check::{Check, Decided, Role};
use crate::serve::key_cap::KeyCap;
use crate::serve::memory_decide::{decide_in_memory, decide_one};
use crate::serve::metrics::Metrics;
use crate::serve::redis_table::RedisEnforcer;

/// Decides `checks` in Redis at `now`, or by the failure policy if Redis fails. With
/// `count_denied`, every limit is charged whatever the answer (`Op::Charge`), shadow-mode and
/// quota-mode ones included; check-only ones are always peeked.
pub(crate) async fn decide_on_redis<'a>(
    backend: &RedisBackend,
    metrics: &Metrics,
    checks: &'a [Check],
    count_denied: bool,
    keys: &KeyCap,
    now: Now,
) -> Decided<'a> {
    let timeout = backend.options().timeout;
    let policy = backend.options().failure_policy;
    let deadline = Instant::now() + timeout;
    let store = backend.store();
    let outcome = match &store {
        Ok(store) => {
            let decide = async {
                let (enforced, mut over_quota) =
                    with_quotas(store, checks, count_denied, now).await?;
                let all_over = !over_quota.is_empty()
                    && checks.iter().filter(|c| c.role == Role::Quota).count() == over_quota.len();
                let (mut decided, allowed) = decide_enforced(
                    store,
                    backend.is_cluster(),
                    &enforced,
                    count_denied,
                    all_over,
                    now,
                )
                .await?;
                decided.append(&mut over_quota);
                Ok::<_, RedisLimitError>((decided, allowed))
            };
            match tokio::time::timeout_at(deadline, decide).await {
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(error)) => Err(BackendFailure::Redis(error)),
                Err(_) => Err(BackendFailure::Timeout(timeout)),
            }
        }
        Err(failure) => Err(failure.again()),
    };
    let (mut decided, allowed) = match outcome {
        Ok(outcome) => {
            // A call whose limits all never pass asked Redis nothing: no news of it.
            if checks.iter().any(|c| c.redis.is_some()) {
                backend.note_success();
            }
            outcome
        }
        Err(failure) => {
            backend.note_failure(metrics, &failure);
            if policy == FailurePolicy::Local {
                return decide_in_memory(checks, count_denied, keys);
            }
            let enforced: Vec<&Check> = checks
                .iter()
                .filter(|c| matches!(c.role, Role::Enforce | Role::Quota))
                .collect();
            by_policy(policy, &enforced, timeout)
        }
    };
    for check in checks {
        let op = match (check.role, count_denied, allowed) {
            (Role::Enforce | Role::Quota, _, _) => continue,
            (Role::CheckOnly, _, _) => Op::Peek,
            (Role::Shadow, true, _) => Op::Charge,
            (Role::Shadow, false, true) => Op::Check,
            (Role::Shadow, false, false) => Op::Peek,
        };
        let decision = match (&store, &check.redis) {
            (_, None) => None,
            (_, Some(enforcer)) if check.permits.get() > enforcer.limit.capacity() => None,
            (Ok(store), Some(enforcer)) => {
                let request = [LimitRequest {
                    limit: &enforcer.limit,
                    name: &enforcer.name,
                    key: check.key.as_bytes(),
                    permits: check.permits,
                }];
                let decide = store.decide_all(&request, op, now);
                match tokio::time::timeout_at(deadline, decide).await {
                    Ok(Ok(multi)) => multi.decisions.into_iter().next(),
                    Ok(Err(error)) => shadow_fallback(
                        backend,
                        metrics,
                        check,
                        op,
                        keys,
                        BackendFailure::Redis(error),
                    ),
                    Err(_) => shadow_fallback(
                        backend,
                        metrics,
                        check,
                        op,
                        keys,
                        BackendFailure::Timeout(timeout),
                    ),
                }
            }
            (Err(failure), Some(_)) => {
                shadow_fallback(backend, metrics, check, op, keys, failure.again())
            }
        };
        decided.push((check, decision));
    }
    decided
}

/// The limits decided together: the enforcing ones, and the quota-mode ones that would allow
/// (peeked first, in one call) or, counting denials, all of them. Also returns the quota-mode
/// ones over their limit, with their peeks.
async fn with_quotas<'a>(
    store: &RedisStore,
    checks: &'a [Check],
    count_denied: bool,
    now: Now,
) -> Result<(Vec<&'a Check>, Decided<'a>), RedisLimitError> {
    let mut enforced: Vec<&Check> = Vec::with_capacity(checks.len());
    let mut quotas: Vec<&Check> = Vec::new();
    for check in checks {
        match check.role {
            Role::Enforce => enforced.push(check),
            Role::Quota if count_denied => enforced.push(check),
            Role::Quota => quotas.push(check),
            Role::Shadow | Role::CheckOnly => {}
        }
    }
    let mut over = Decided::new();
    if quotas.is_empty() {
        return Ok((enforced, over));
    }
    // Peeked one by one: one call may name a key only once, and two quota descriptors may
    // share a counter.
    for check in quotas {
        let peeked = match &check.redis {
            Some(enforcer) if check.permits.get() <= enforcer.limit.capacity() => {
                let request = [LimitRequest {
                    limit: &enforcer.limit,
                    name: &enforcer.name,
                    key: check.key.as_bytes(),
                    permits: check.permits,
                }];
                let multi = store.decide_all(&request, Op::Peek, now).await?;
                multi.decisions.into_iter().next()
            }
            _ => None,
        };
        match peeked {
            Some(decision) if decision.allowed() => enforced.push(check),
            other => over.push((check, other)),
        }
    }
    Ok((enforced, over))
}

/// A shadow-mode limit's answer when Redis failed on it.
fn shadow_fallback(
    backend: &RedisBackend,
    metrics: &Metrics,
    check: &Check,
    op: Op,
    keys: &KeyCap,
    failure: BackendFailure,
) -> Option<Decision> {
    backend.note_failure(metrics, &failure);
    let policy = backend.options().failure_policy;
    match (policy, &check.redis) {
        (FailurePolicy::Local, _) => decide_one(check, op, keys),
        (_, Some(enforcer)) => Some(policy_decision(
            policy,
            enforcer,
            check.permits,
            backend.options().timeout,
        )),
        (_, None) => None,
    }
}

/// The enforcing limits in Redis: one script call (per hash tag under Cluster). Returns each
/// check's decision and whether the call is allowed (and was charged).
async fn decide_enforced<'a>(
    store: &RedisStore,
    cluster: bool,
    enforced: &[&'a Check],
    count_denied: bool,
    over_quota: bool,
    now: Now,
) -> Result<(Decided<'a>, bool), RedisLimitError> {
    // The same limit on the same counter twice in one call (two identical descriptors) is
    // asked once for the sum of their hits: one script call may name a key only once.
    let mut asked: Vec<(&RedisEnforcer, &str, u64)> = Vec::new();
    let mut slot_of = Vec::with_capacity(enforced.len());
    let mut never = false;
    for check in enforced {
        let Some(enforcer) = &check.redis else {
            never = true;
            slot_of.push(None);
            continue;
        };
        let same = asked
            .iter()
            .position(|(e, key, _)| e.name == enforcer.name && *key == check.key);
        let slot = match same {
            Some(slot) => {
                asked[slot].2 = asked[slot].2.saturating_add(check.permits.get());
                slot
            }
            None => {
                asked.push((enforcer, &check.key, check.permits.get()));
                asked.len() - 1
            }
        };
        slot_of.push(Some(slot));
    }
    // More hits than a limit can ever grant: that limit never passes, the others are peeked
    // (or, counting denials, charged).
    let fits: Vec<bool> = asked
        .iter()
        .map(|(enforcer, _, permits)| *permits <= enforcer.limit.capacity())
        .collect();
    never |= fits.contains(&false) || over_quota;
    let op = match (count_denied, never) {
        (true, _) => Op::Charge,
        (false, true) => Op::Peek,
        (false, false) => Op::Check,
    };
    let requests: Vec<LimitRequest<'_>> = asked
        .iter()
        .zip(&fits)
        .filter(|(_, fits)| **fits)
        .map(|((enforcer, key, permits), _)| LimitRequest {
            limit: &enforcer.limit,
            name: &enforcer.name,
            key: key.as_bytes(),
            permits: NonZeroU64::new(*permits).unwrap_or(NonZeroU64::MIN),
        })
        .collect();
    let answers = decide_requests(store, cluster, &requests, op, now).await?;
    let allowed = !never && answers.iter().all(|d| d.allowed());
    // Back from the requests asked to every slot, then to every check.
    let mut answers = answers.into_iter();
    let by_slot: Vec<Option<Decision>> = fits
        .iter()
        .map(|fits| if *fits { answers.next() } else { None })
        .collect();
    let decided = enforced
        .iter()
        .zip(slot_of)
        .map(|(check, slot)| (*check, slot.and_then(|s| by_slot[s])))
        .collect();
    Ok((decided, allowed))
}

/// Decides `requests` together: one `decide_all` on a single server; under Cluster, one per
/// counter key, peeked first when there are several (see the module docs), except charges,
/// which every group takes whatever the others answer.
async fn decide_requests(
    store: &RedisStore,
    cluster: bool,
    requests: &[LimitRequest<'_>],
    op: Op,
    now: Now,
) -> Result<Vec<Decision>, RedisLimitError> {
    let Some(first) = requests.first() else {
        return Ok(Vec::new());
    };
    if !cluster || requests.iter().all(|r| r.key == first.key) {
        return Ok(store.decide_all(requests, op, now).await?.decisions);
    }
    let mut groups: Vec<(&[u8], Vec<usize>)> = Vec::new();
    for (index, request) in requests.iter().enumerate() {
        match groups.iter_mut().find(|(key, _)| *key == request.key) {
            Some((_, members)) => members.push(index),
            None => groups.push((request.key, vec![index])),
        }
    }
    let run = async |op| -> Result<Vec<Decision>, RedisLimitError> {
        let mut decisions: Vec<Option<Decision>> = vec![None; requests.len()];
        for (_, members) in &groups {
            let group: Vec<LimitRequest<'_>> = members.iter().map(|&i| requests[i]).collect();
            let multi = store.decide_all(&group, op, now).await?;
            for (&i, decision) in members.iter().zip(multi.decisions) {
                decisions[i] = Some(decision);
            }
        }
        decisions
            .into_iter()
            .map(|d| d.ok_or_else(|| RedisLimitError::UnexpectedReply("missing decision".into())))
            .collect()
    };
    if op == Op::Charge {
        // Charged whatever the answer: nothing to peek first.
        return run(op).await;
    }
    let peeked = run(Op::Peek).await?;
    if !op.consumes() || !peeked.iter().all(|d| d.allowed()) {
        return Ok(peeked);
    }
    run(op).await
}

/// What the `open` and `closed` policies answer for the enforcing limits. A limit that can
/// never pass still denies: it needs no Redis to know.
fn by_policy<'a>(
    policy: FailurePolicy,
    enforced: &[&'a Check],
    timeout: Duration,
) -> (Decided<'a>, bool) {
    let never = enforced.iter().any(|check| {
        check
            .redis
            .as_ref()
            .is_none_or(|e| check.permits.get() > e.limit.capacity())
    });
    let decided: Decided<'a> = enforced
        .iter()
        .map(|check| {
            let decision = check
                .redis
                .as_ref()
                .filter(|e| check.permits.get() <= e.limit.capacity())
                .map(|e| policy_decision(policy, e, check.permits, timeout));
            (*check, decision)
        })
        .collect();
    (decided, !never && policy == FailurePolicy::Open)
}

/// One limit's answer by `open` (allowed, nothing known of the budget) or `closed` (denied,
/// retry after the timeout).
fn policy_decision(
    policy: FailurePolicy,
    enforcer: &RedisEnforcer,
    permits: NonZeroU64,
    timeout: Duration,
) -> Decision {
    let limit = enforcer.limit.capacity();
    let allowed = policy == FailurePolicy::Open;
    if allowed {
        Decision::allow(limit, limit - permits.get().min(limit), 0)
    } else {
        Decision::deny(limit, 0, 0, Some(micros_ceil(timeout)))
    }
}
