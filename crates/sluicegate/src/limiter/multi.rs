//! Several limits on one request (per user per 10 s, per user per hour, global), decided
//! together: the request passes only if every limit allows it, and then it is charged to all
//! of them; if one denies, none is charged. ([`Op::Charge`] instead charges every limit
//! whatever the others say, as envoyproxy/ratelimit counts.)

use std::hash::Hash;
use std::num::NonZeroU64;

use parking_lot::MutexGuard;

use crate::clock::{Clock, Micros};
use crate::decision::Decision;
use crate::error::CheckError;
use crate::limiter::KeyedLimiter;
use crate::limiter::keyed::ShardKeys;
use crate::state_machine::{Algorithm, Op};

/// One limit of a multi-limit request: a key of a keyed limiter and the permits it is asked for.
/// (A global limit is a keyed limiter used with a single key such as `()` or `"global"`.)
#[derive(Debug)]
pub struct LimitTarget<'a, K, A: Algorithm, C: Clock> {
    /// The limiter.
    pub limiter: &'a KeyedLimiter<K, A, C>,
    /// The key within it.
    pub key: &'a K,
    /// Permits asked of this limit.
    pub permits: NonZeroU64,
}

/// The answer to a multi-limit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiDecision {
    /// Every limit allowed the request, and (unless it was a peek) every limit was charged.
    pub allowed: bool,
    /// Each limit's own decision, in the order of the targets. When the request as a whole is
    /// denied, nothing is charged and every limit's `remaining` is what it has now: the limits
    /// that would have allowed it report a peek, as if asked alone (with [`Op::Charge`],
    /// every limit reports what it has left after its charge).
    pub decisions: Vec<Decision>,
}

/// Decides `targets` together at the first target's clock time, all or nothing (see the module
/// docs). `op` is [`Op::Check`] or [`Op::Peek`] (or a reservation, applied to every limit).
///
/// With [`Op::Charge`] the request is still allowed only if every limit allows it, but every
/// limit is charged whatever the others decide, and reports its own decision. An error (more
/// permits than a limit's capacity, an algorithm that cannot charge) charges no limit.
///
/// Shards are locked in one global order (by limiter address, then shard), so concurrent
/// multi-limit requests over overlapping limits cannot deadlock; a limit named twice with the
/// same key is charged twice, in order.
///
/// ```
/// use sluicegate::{Gcra, KeyedLimiter, ManualClock, Rate};
/// use sluicegate::limiter::{LimitTarget, decide_together};
/// use sluicegate::state_machine::Op;
/// use std::num::NonZeroU64;
///
/// let clock = ManualClock::new(0);
/// let per_user = KeyedLimiter::with_clock(Gcra::new(Rate::per_minute(10)?, 10)?, clock.clone());
/// let global = KeyedLimiter::with_clock(Gcra::new(Rate::per_minute(1)?, 1)?, clock.clone());
/// let one = NonZeroU64::MIN;
/// let request = |user| [
///     LimitTarget { limiter: &per_user, key: user, permits: one },
///     LimitTarget { limiter: &global, key: &"all", permits: one },
/// ];
/// assert!(decide_together(&request(&"alice"), Op::Check)?.allowed);
/// // The global limit is spent: bob is denied, and his own limit is not charged: it
/// // reports its 10 permits, all still there.
/// let denied = decide_together(&request(&"bob"), Op::Check)?;
/// assert!(!denied.allowed);
/// assert_eq!(denied.decisions[0].remaining(), 10);
/// assert_eq!(per_user.peek(&"bob", one)?.remaining(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decide_together<K, A, C>(
    targets: &[LimitTarget<'_, K, A, C>],
    op: Op,
) -> Result<MultiDecision, CheckError>
where
    K: Hash + Eq + Clone,
    A: Algorithm,
    C: Clock,
{
    let now = match targets.first() {
        Some(first) => first.limiter.clock().now(),
        None => 0,
    };
    decide_together_at(targets, now, op)
}

/// [`decide_together`] at `now` (a time of the limiters' clock) rather than the first
/// target's clock reading: for a store told the time by its caller.
pub fn decide_together_at<K, A, C>(
    targets: &[LimitTarget<'_, K, A, C>],
    now: Micros,
    op: Op,
) -> Result<MultiDecision, CheckError>
where
    K: Hash + Eq + Clone,
    A: Algorithm,
    C: Clock,
{
    match targets {
        [] => {
            return Ok(MultiDecision {
                allowed: true,
                decisions: Vec::new(),
            });
        }
        // One limit decided together is that limit decided alone: no scratch state needed.
        [only] => {
            let decision = only.limiter.decide_at(only.key, now, only.permits, op)?;
            return Ok(MultiDecision {
                allowed: decision.allowed(),
                decisions: vec![decision],
            });
        }
        _ => {}
    }
    let located: Vec<(usize, u64, usize)> = targets
        .iter()
        .map(|t| {
            let (hash, shard) = t.limiter.locate(t.key);
            (limiter_id(t.limiter), hash, shard)
        })
        .collect();

    // Lock every (limiter, shard) once, in a global order; `slot[i]` is target i's lock.
    let mut order: Vec<(usize, usize, usize)> = located
        .iter()
        .enumerate()
        .map(|(i, &(id, _, shard))| (id, shard, i))
        .collect();
    order.sort_unstable();
    let mut slot = vec![0; targets.len()];
    let mut locks: Vec<MutexGuard<'_, ShardKeys<K, A>>> = Vec::with_capacity(order.len());
    let mut lock_shard = Vec::with_capacity(order.len());
    let mut previous = None;
    for &(id, shard, i) in &order {
        if previous != Some((id, shard)) {
            locks.push(targets[i].limiter.shard_table(shard).lock());
            lock_shard.push((i, shard));
            previous = Some((id, shard));
        }
        slot[i] = locks.len() - 1;
    }
    // `first[i]`: the first target naming the same (limiter, key) as target i.
    let first: Vec<usize> = (0..targets.len())
        .map(|i| {
            (0..i)
                .find(|&j| located[j].0 == located[i].0 && targets[j].key == targets[i].key)
                .unwrap_or(i)
        })
        .collect();

    // Room for every new key before any state is read: a sweep drops fresh entries, which must
    // not happen to an entry after its state was read (its charge would be lost), and a full
    // table must not leave the request half charged.
    if op.consumes() {
        let mut absent = vec![0usize; locks.len()];
        for i in (0..targets.len()).filter(|&i| first[i] == i) {
            let hash = located[i].1;
            if locks[slot[i]]
                .find(hash, |(k, _)| k == targets[i].key)
                .is_none()
            {
                absent[slot[i]] += 1;
            }
        }
        for (lock, &count) in absent.iter().enumerate().filter(|(_, count)| **count > 0) {
            let (opener, shard) = lock_shard[lock];
            targets[opener]
                .limiter
                .make_room_in(shard, &mut *locks[lock], now, count)?;
        }
    }

    // Decide each limit on a scratch copy; a repeated (limiter, key) continues from the copy.
    let mut scratch: Vec<A::State> = Vec::with_capacity(targets.len());
    let mut decisions = Vec::with_capacity(targets.len());
    for (i, target) in targets.iter().enumerate() {
        let mut state = if first[i] == i {
            let hash = located[i].1;
            match locks[slot[i]].find(hash, |(k, _)| k == target.key) {
                Some((_, state)) => state.clone(),
                // Absent, or dropped as fresh by the sweep above: the same thing.
                None => target.limiter.new_key_state(&locks[slot[i]]),
            }
        } else {
            let earlier = (0..i).rev().find(|&j| first[j] == first[i]).unwrap_or(i);
            scratch[earlier].clone()
        };
        let original = state.clone();
        let decision = locks[slot[i]]
            .algorithm
            .decide(&mut state, now, target.permits, op)?;
        decisions.push((decision, original));
        scratch.push(state);
    }

    let allowed = decisions.iter().all(|(d, _)| d.allowed());
    // A charge is kept by every limit, allowed or not: only the others undo theirs.
    if !allowed && op != Op::Charge {
        // Nothing is charged, so every limit reports what it has now, from its stored state:
        // the ones that allowed report a peek, and a limit named again, decided after its
        // earlier charge on the scratch copy, keeps its answer with the stored availability.
        let mut reported = Vec::with_capacity(targets.len());
        for (i, target) in targets.iter().enumerate() {
            let decision = decisions[i].0;
            if first[i] == i && !decision.allowed() {
                reported.push(decision);
                continue;
            }
            let mut stored = decisions[first[i]].1.clone();
            let peek =
                locks[slot[i]]
                    .algorithm
                    .decide(&mut stored, now, target.permits, Op::Peek)?;
            reported.push(if decision.allowed() {
                peek
            } else {
                decision.with_remaining(peek.remaining())
            });
        }
        return Ok(MultiDecision {
            allowed,
            decisions: reported,
        });
    }

    if op.consumes() {
        // The last decision of each (limiter, key) holds its final state.
        for i in
            (0..targets.len()).filter(|&i| !(i + 1..targets.len()).any(|j| first[j] == first[i]))
        {
            let hash = located[i].1;
            let table = &mut locks[slot[i]];
            let state = scratch[i].clone();
            match table.find_mut(hash, |(k, _)| k == targets[i].key) {
                Some((_, held)) => *held = state,
                None => targets[i]
                    .limiter
                    .insert_new(table, hash, targets[i].key.clone(), state),
            }
        }
    }
    Ok(MultiDecision {
        allowed,
        decisions: decisions.into_iter().map(|(d, _)| d).collect(),
    })
}

fn limiter_id<K, A: Algorithm, C: Clock>(limiter: &KeyedLimiter<K, A, C>) -> usize {
    std::ptr::from_ref(limiter) as usize
}
