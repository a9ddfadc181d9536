//! A route's limits decided with counters in Redis: concurrency limits in the proxy, the others
//! in Redis (see [`redis_counters`](crate::proxy::redis_counters)), all or nothing.

use std::num::NonZeroU64;
use std::sync::Arc;

use sluicegate::limiter::{LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::store::Request;
use sluicegate::{AnyAlgorithm, Decision};
use sluicegate_redis::FailSafeLimit;
use smallvec::SmallVec;

use crate::proxy::key::{KeyBytes, RouteKeys};
use crate::proxy::limiter::Limiter;
use crate::proxy::redis_counters::{RedisCounters, SharedLimit};
use sluicegate_http::rate_limit::{BackendError, LimitInfo, Verdict};

/// Decides a route's limits for `keys`, all or nothing: the proxy's own (concurrency) first,
/// then the shared ones in Redis, giving back the proxy's permits if Redis denies.
pub(crate) async fn decide_route(
    redis: &RedisCounters,
    limiters: &[Arc<Limiter>],
    infos: &Arc<[LimitInfo]>,
    keys: &RouteKeys,
    permits: NonZeroU64,
) -> Result<Verdict, BackendError> {
    // Each limit counted (its key could be made), in route order, kept here or shared.
    let counted: SmallVec<[(usize, &Limiter, &KeyBytes); 4]> = limiters
        .iter()
        .zip(&keys.0)
        .enumerate()
        .filter_map(|(i, (l, key))| key.as_ref().map(|key| (i, &**l, key)))
        .collect();
    let local: SmallVec<[LimitTarget<'_, KeyBytes, AnyAlgorithm, _>; 2]> = counted
        .iter()
        .filter(|(_, l, _)| l.redis.is_none())
        .map(|(_, l, key)| LimitTarget {
            limiter: &*l.limiter,
            key: *key,
            permits,
        })
        .collect();
    let taken = decide_together(&local, Op::Check)?;
    let mut decisions: Vec<Decision> = Vec::with_capacity(counted.len());
    let mut allowed = taken.allowed;
    let mut local_decisions = taken.decisions.into_iter();
    let shared_limits: SmallVec<[SharedLimit; 4]> = counted
        .iter()
        .filter_map(|(_, l, _)| {
            l.redis.as_ref().map(|named| FailSafeLimit {
                primary: Arc::clone(named),
                local: Arc::clone(&l.limiter),
            })
        })
        .collect();
    let mut shared_decisions = None;
    if allowed && !shared_limits.is_empty() {
        let shared_keys = counted.iter().filter(|(_, l, _)| l.redis.is_some());
        let requests: SmallVec<[Request<'_, _, KeyBytes>; 4]> = shared_limits
            .iter()
            .zip(shared_keys)
            .map(|(limit, (_, _, key))| Request {
                limit,
                key: *key,
                permits,
            })
            .collect();
        let outcome = match redis.decide(&requests, key_cap(&counted)).await {
            Ok(outcome) => outcome,
            Err(error) => {
                give_back(&local, permits);
                return Err(error);
            }
        };
        if !outcome.allowed {
            give_back(&local, permits);
            allowed = false;
        }
        shared_decisions = Some(outcome.decisions.into_iter());
    }
    // Decisions in route order; a shared limit not asked (the proxy's own denied first)
    // is left out, and the verdict then describes only the limits that answered.
    let mut answered: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, limiter, _) in &counted {
        let decision = match limiter.redis {
            None => local_decisions.next(),
            Some(_) => shared_decisions.as_mut().and_then(Iterator::next),
        };
        if let Some(decision) = decision {
            decisions.push(decision);
            answered.push(*i);
        }
    }
    let holds = allowed && !local.is_empty();
    let verdict = Verdict::new(allowed, decisions).holding_permits(holds);
    if answered.len() == limiters.len() {
        return Ok(verdict);
    }
    let infos: Arc<[LimitInfo]> = answered.iter().map(|&i| infos[i].clone()).collect();
    Ok(verdict.with_limits(infos))
}

/// The key cap of the limits counted (for the error at the cap).
fn key_cap(counted: &[(usize, &Limiter, &KeyBytes)]) -> usize {
    counted
        .iter()
        .map(|(_, l, _)| l.def.max_keys)
        .min()
        .unwrap_or(0)
}

/// Gives back the proxy's own permits a denied or failed call took.
fn give_back(
    local: &[LimitTarget<'_, KeyBytes, AnyAlgorithm, sluicegate::SystemClock>],
    permits: NonZeroU64,
) {
    for target in local {
        // Cannot fail: these permits were just taken.
        let _ = target.limiter.decide(target.key, permits, Op::Release);
    }
}
