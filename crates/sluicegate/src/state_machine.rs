//! The contract every algorithm keeps: a pure function of (parameters, state, now, permits).

use std::num::NonZeroU64;

use crate::cell::StateCell;
use crate::clock::Micros;
use crate::decision::{Admission, Decision};
use crate::error::CheckError;

/// What a request asks of a limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Take the permits if they are available now; otherwise a denial with `retry_after`.
    Check,
    /// Report what [`Op::Check`] would answer, consuming nothing. Since nothing is taken, its
    /// [`Decision::remaining`] is what is available now: a peek of 3 with 7 left reports 7
    /// (where a granted check would report 4).
    Peek,
    /// Reserve the permits and report how long to wait before using them (`acquire`). With
    /// `max_wait`, reserve only if that wait is at most `max_wait` (Guava's
    /// `tryAcquire(permits, timeout)`); otherwise deny and consume nothing. Only the algorithms
    /// that reserve support it.
    Reserve {
        /// The longest acceptable wait, or `None` to reserve whatever the wait.
        max_wait: Option<Micros>,
    },
    /// Give back permits taken earlier (concurrency limits only).
    Release,
    /// Take the permits whatever the outcome: the decision says whether they fit, and if they
    /// did not, the state still counts them, so a denied request uses up budget too.
    ///
    /// This is envoyproxy/ratelimit's counting (add the hits to the counter, then compare it
    /// with the limit), for services that must report the same numbers. An allowed `Charge`
    /// is exactly a [`Op::Check`]; a denied one reports `remaining: 0` and a `retry_after`
    /// until the same request would fit given the charged state. More permits than the
    /// limiter's capacity are still [`CheckError::InsufficientCapacity`] and charge nothing.
    /// Supported by the counting algorithms whose state can hold an overdraft: fixed and
    /// sliding windows, GCRA and the leaky bucket; the others answer
    /// [`CheckError::Unsupported`].
    Charge,
}

impl Op {
    /// The name used in traces and error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Check => "check",
            Op::Peek => "peek",
            Op::Reserve { max_wait: None } => "acquire",
            Op::Reserve { max_wait: Some(_) } => "try_acquire_for",
            Op::Release => "release",
            Op::Charge => "charge",
        }
    }

    /// Whether an allowed decision for this op changes the state.
    pub fn consumes(&self) -> bool {
        !matches!(self, Op::Peek)
    }

    /// Whether a decision for this op that `allowed` (or not) changes the state: an allowed
    /// one unless the op is a peek, a denied one only for [`Op::Charge`].
    pub fn changes_state(&self, allowed: bool) -> bool {
        match self {
            Op::Peek => false,
            Op::Charge => true,
            _ => allowed,
        }
    }
}

/// State an algorithm keeps per limiter (or per key), and how a store holds it.
pub trait AlgorithmState: Clone + Send + Sync + 'static {
    /// The cell a direct limiter keeps it in: a lock-free atomic word for one-word states, a
    /// small lock otherwise.
    type Cell: StateCell<Self>;
}

/// A rate limiting algorithm as a pure state machine.
///
/// `decide` must be deterministic in its arguments and must leave `state` untouched when it
/// denies, when `op` is [`Op::Peek`], and when it returns an error: a denied request consumes
/// nothing. The one exception is [`Op::Charge`], which by its definition changes the state
/// whether it is allowed or not (but still not on an error). Stores call it under their own atomicity (a compare-and-swap loop or a lock), so it
/// may be called more than once for one request.
pub trait Algorithm: Send + Sync + 'static {
    /// The per-limiter (or per-key) state.
    type State: AlgorithmState;

    /// The algorithm's name as written in specs and rule files (`gcra`, `token-bucket`, ...).
    fn name(&self) -> &'static str;

    /// The quota's size reported as [`Decision::limit`].
    fn limit(&self) -> u64;

    /// The most permits a single request can ever be granted; more is
    /// [`CheckError::InsufficientCapacity`].
    fn capacity(&self) -> u64;

    /// The state of a limiter created at `created_at` that has not been used yet.
    fn initial_state(&self, created_at: Micros) -> Self::State;

    /// Answers a request for `permits` at `now`, updating `state` if and only if permits are
    /// consumed (or, for [`Op::Release`], given back; for [`Op::Charge`], also when denied).
    fn decide(
        &self,
        state: &mut Self::State,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError>;

    /// [`Algorithm::decide`] for a caller that only needs to know whether a request passes at
    /// once (a middleware's allowed path): the same state change, but a request allowed with
    /// no wait may be answered [`Admission::Passed`], its decision's numbers not computed.
    /// The default asks `decide`.
    #[inline]
    fn admit(
        &self,
        state: &mut Self::State,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Admission, CheckError> {
        self.decide(state, now, permits, op).map(Admission::Decided)
    }

    /// Whether `state` is back to fresh at `now`: indistinguishable, from now on, from the
    /// initial state of a limiter created long ago. Keyed limiters drop such keys.
    fn is_fresh(&self, state: &Self::State, now: Micros) -> bool;

    /// Carries `state`, kept under `self`'s parameters, over to `new`'s parameters at `now`
    /// (`set_rate`): buckets keep their fill ratio (a debt reserved beyond empty keeps the time
    /// it ends), windows keep their counts. The default keeps the state as it is.
    fn carry_over(&self, new: &Self, state: &mut Self::State, now: Micros) {
        let _ = (new, state, now);
    }

    /// Whether this algorithm takes `op` at all (rather than answering
    /// [`CheckError::Unsupported`]), found by asking a fresh state for one permit.
    fn supports(&self, op: Op) -> bool {
        let mut state = self.initial_state(0);
        !matches!(
            self.decide(&mut state, 0, NonZeroU64::MIN, op),
            Err(CheckError::Unsupported { .. })
        )
    }
}

/// What a store hands back from an algorithm: a whole [`Decision`] ([`Algorithm::decide`]) or
/// an [`Admission`] ([`Algorithm::admit`]); generic code runs either.
pub(crate) trait Answer: Sized {
    /// Whether the permits were granted (and so, unless peeked, taken).
    fn allowed(&self) -> bool;

    /// `algorithm`'s answer of this kind.
    fn from_algorithm<A: Algorithm + ?Sized>(
        algorithm: &A,
        state: &mut A::State,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Self, CheckError>;
}

impl Answer for Decision {
    #[inline]
    fn allowed(&self) -> bool {
        Decision::allowed(self)
    }

    #[inline(always)]
    fn from_algorithm<A: Algorithm + ?Sized>(
        algorithm: &A,
        state: &mut A::State,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        algorithm.decide(state, now, permits, op)
    }
}

impl Answer for Admission {
    #[inline]
    fn allowed(&self) -> bool {
        Admission::allowed(self)
    }

    #[inline(always)]
    fn from_algorithm<A: Algorithm + ?Sized>(
        algorithm: &A,
        state: &mut A::State,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Admission, CheckError> {
        algorithm.admit(state, now, permits, op)
    }
}

/// Rejects `permits` above `capacity` with the error callers can tell from a denial.
#[inline]
pub(crate) fn ensure_capacity(permits: NonZeroU64, capacity: u64) -> Result<u64, CheckError> {
    let requested = permits.get();
    if requested > capacity {
        Err(CheckError::InsufficientCapacity {
            requested,
            capacity,
        })
    } else {
        Ok(requested)
    }
}

/// The error for an op the algorithm does not support.
pub(crate) fn unsupported(algorithm: &'static str, op: Op) -> CheckError {
    CheckError::Unsupported {
        algorithm,
        operation: op.name(),
    }
}

/// Algorithms whose permits are held and given back: concurrency limits (and
/// [`AnyAlgorithm`](crate::AnyAlgorithm), which may be one, and otherwise answers
/// [`CheckError::Unsupported`] at run time). Only their limiters have a `release`, so
/// releasing a rate limit is a compile error rather than an error at run time:
///
/// ```compile_fail
/// use sluicegate::{DirectLimiter, Gcra, Rate};
/// use std::num::NonZeroU64;
///
/// let limiter = DirectLimiter::new(Gcra::new(Rate::per_second(1)?, 1)?);
/// let _ = limiter.release(NonZeroU64::MIN); // no such method: a GCRA holds nothing
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// ```
/// use sluicegate::{Concurrency, DirectLimiter};
/// use std::num::NonZeroU64;
///
/// let limiter = DirectLimiter::new(Concurrency::new(2)?);
/// assert!(limiter.check()?.allowed());
/// assert_eq!(limiter.release(NonZeroU64::MIN)?.remaining(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Releasable: Algorithm {}

impl Releasable for crate::algorithm::Concurrency {}

impl Releasable for crate::spec::AnyAlgorithm {}
