//! A lease taken from and given back to one algorithm's state.

use std::num::NonZeroU64;

use crate::algorithm::bucket::BucketShape;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::CheckError;
use crate::spec::{AnyAlgorithm, any::AnyState};
use crate::state_machine::{Algorithm as _, Op};

/// How an algorithm's permits are leased (see the [module](super) docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseKind {
    /// Counted in the window in force; the lease ends with it.
    FixedWindow,
    /// Counted in the current slot (a whole window in the weighted mode); the lease ends with
    /// it.
    SlidingWindow,
    /// GCRA and the token bucket: charged as granted at the lease's last microsecond.
    Bucket,
    /// The leaky bucket as a meter: poured as at the lease's last microsecond.
    LeakyMeter,
}

/// Whether `algorithm` leases, and how; `None` keeps the plain path.
pub fn lease_kind(algorithm: &AnyAlgorithm) -> Option<LeaseKind> {
    match algorithm {
        AnyAlgorithm::FixedWindow(_) => Some(LeaseKind::FixedWindow),
        AnyAlgorithm::SlidingWindow(_) => Some(LeaseKind::SlidingWindow),
        AnyAlgorithm::Gcra(_) | AnyAlgorithm::TokenBucket(_) => Some(LeaseKind::Bucket),
        AnyAlgorithm::LeakyBucket(_) => Some(LeaseKind::LeakyMeter),
        AnyAlgorithm::SlidingLog(_)
        | AnyAlgorithm::LeakyQueue(_)
        | AnyAlgorithm::SmoothBursty(_)
        | AnyAlgorithm::SmoothWarmup(_)
        | AnyAlgorithm::Concurrency(_) => None,
    }
}

/// A lease as the limit's state counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// When it was taken.
    pub taken_at: Micros,
    /// The permits leased (beyond the request that took it).
    pub permits: u64,
    /// Its permits may be used before this (exclusive): they were charged as granted at
    /// `end - 1`.
    pub end: Micros,
}

impl LeaseTerms {
    /// The time its permits were charged at.
    pub fn charged_at(&self) -> Micros {
        self.end.saturating_sub(1)
    }
}

/// A request's decision, and the lease taken with it, if any.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Leased {
    /// The request's own decision, exactly the plain [`Op::Check`]'s. Its `remaining`
    /// includes the leased permits: it is what the caller, holding them, has left.
    pub decision: Decision,
    /// The lease, if permits were leased.
    pub terms: Option<LeaseTerms>,
}

/// The bucket of a bucket algorithm (GCRA, token bucket, leaky meter).
fn bucket_of(algorithm: &AnyAlgorithm) -> Option<&BucketShape> {
    match algorithm {
        AnyAlgorithm::Gcra(a) => Some(a.shape()),
        AnyAlgorithm::TokenBucket(a) => Some(a.shape()),
        AnyAlgorithm::LeakyBucket(a) => Some(a.shape()),
        _ => None,
    }
}

/// The most permits a lease of `algorithm` with `life` may hold (beyond the request). A
/// window's lease may hold what its window has left. A bucket's lease is charged as at its
/// end, which the bucket counts as debt from now: so that the debt never passes the bucket's
/// tolerance (which would deny every other caller until the lease's end), a lease of `k`
/// ends within `tolerance - k` intervals' time. A lease holds at most what leaves it usable
/// for `min(life, half the tolerance)`.
pub fn lease_permits(algorithm: &AnyAlgorithm, life: Micros) -> u64 {
    let Some(shape) = bucket_of(algorithm) else {
        return u64::MAX;
    };
    let per_micro = shape.pace.ticks_per_micro;
    let usable = life.saturating_sub(1).min(shape.tolerance / per_micro / 2);
    // `usable × per_micro` is at most half the tolerance: no underflow.
    (shape.tolerance - usable * per_micro) / shape.pace.interval
}

/// When a lease of `permits` of `algorithm` taken at `now` for `life` ends: `now + life`, but
/// no later than the window or slot that counts it, nor (a bucket) than keeps its charge within
/// the bucket's tolerance (see [`lease_permits`]). `None` if nothing can be leased now (an
/// algorithm that does not lease, a clock gone back behind the state, a life of zero).
pub fn lease_end(
    algorithm: &AnyAlgorithm,
    state: &AnyState,
    now: Micros,
    life: Micros,
    permits: u64,
) -> Option<Micros> {
    let end = now.checked_add(life).filter(|_| life > 0)?;
    let bound = match (algorithm, state) {
        (AnyAlgorithm::FixedWindow(a), AnyState::FixedWindow(s)) => a.lease_end(s, now)?,
        (AnyAlgorithm::SlidingWindow(a), AnyState::SlidingWindow(s)) => a.lease_end(s, now)?,
        (AnyAlgorithm::Gcra(_), AnyState::Gcra(_))
        | (AnyAlgorithm::TokenBucket(_), AnyState::TokenBucket(_))
        | (AnyAlgorithm::LeakyBucket(_), AnyState::LeakyBucket(_)) => {
            let shape = bucket_of(algorithm)?;
            let charge = permits.checked_mul(shape.pace.interval)?;
            let ahead = shape.tolerance.checked_sub(charge)? / shape.pace.ticks_per_micro;
            now.saturating_add(ahead).saturating_add(1)
        }
        _ => return None,
    };
    Some(end.min(bound)).filter(|&end| end > now)
}

/// Charges a lease of `permits` taken at `now` and ending at `end` (from [`lease_end`]) to
/// `state`. An error, the state untouched, if they do not fit at `now`.
pub fn charge_lease(
    algorithm: &AnyAlgorithm,
    state: &mut AnyState,
    now: Micros,
    permits: NonZeroU64,
    end: Micros,
) -> Result<(), CheckError> {
    let does_not_fit = || CheckError::InsufficientCapacity {
        requested: permits.get(),
        capacity: algorithm.capacity(),
    };
    let charged_at = end.saturating_sub(1).max(now);
    let decision = match (algorithm, &mut *state) {
        (AnyAlgorithm::LeakyBucket(a), AnyState::LeakyBucket(s)) => {
            return if a.pour_as_at(s, now, charged_at, permits.get()) {
                Ok(())
            } else {
                Err(does_not_fit())
            };
        }
        (AnyAlgorithm::Gcra(_) | AnyAlgorithm::TokenBucket(_), _) => {
            // They fit at `now`, so at any later time too: checked at `now` first, then
            // charged at `charged_at` (on a copy, so a denial leaves the state alone).
            let mut peeked = state.clone();
            if !algorithm
                .decide(&mut peeked, now, permits, Op::Check)?
                .allowed()
            {
                return Err(does_not_fit());
            }
            algorithm.decide(state, charged_at, permits, Op::Check)?
        }
        // The windows count the lease in the window or slot of `now`, which `end` is in.
        _ => algorithm.decide(state, now, permits, Op::Check)?,
    };
    if decision.allowed() {
        Ok(())
    } else {
        Err(does_not_fit())
    }
}

/// Decides a request of `permits` at `now` ([`Op::Check`]) and, if allowed, leases up to
/// `want` more permits for `life` with it, as many as fit at `now` (none if the algorithm
/// does not lease). The request's own decision is exactly the plain check's.
pub fn take_lease(
    algorithm: &AnyAlgorithm,
    state: &mut AnyState,
    now: Micros,
    permits: NonZeroU64,
    want: u64,
    life: Micros,
) -> Result<Leased, CheckError> {
    let decision = algorithm.decide(state, now, permits, Op::Check)?;
    let leased = Leased {
        decision,
        terms: None,
    };
    if !decision.allowed() {
        return Ok(leased);
    }
    let k = want
        .min(decision.remaining())
        .min(lease_permits(algorithm, life));
    let Some(k) = NonZeroU64::new(k) else {
        return Ok(leased);
    };
    let Some(end) = lease_end(algorithm, state, now, life, k.get()) else {
        return Ok(leased);
    };
    Ok(match charge_lease(algorithm, state, now, k, end) {
        Ok(()) => Leased {
            decision,
            terms: Some(LeaseTerms {
                taken_at: now,
                permits: k.get(),
                end,
            }),
        },
        Err(_) => leased,
    })
}

/// Gives back up to `unused` permits of the lease `terms` at `now`, where that is exact: a
/// window's lease while its window or slot is kept (see the [module](super) docs). The
/// permits given back (0: they stay spent).
///
/// A bucket takes nothing back: a later lease charged at a later end lifts the TAT to its own
/// charge time, absorbing this one's charge, and the state cannot tell which lease the debt
/// above a charge time belongs to; lowering it could uncount another lease's permits.
pub fn give_back(
    algorithm: &AnyAlgorithm,
    state: &mut AnyState,
    now: Micros,
    terms: &LeaseTerms,
    unused: u64,
) -> u64 {
    let unused = unused.min(terms.permits);
    match (algorithm, state) {
        (AnyAlgorithm::FixedWindow(a), AnyState::FixedWindow(s)) => {
            a.give_back(s, now, terms.taken_at, unused)
        }
        (AnyAlgorithm::SlidingWindow(a), AnyState::SlidingWindow(s)) => {
            a.give_back(s, terms.taken_at, unused)
        }
        _ => 0,
    }
}
