//! One seam between whoever decides requests (the rate limit service, the HTTP layer) and
//! whatever holds the limiters' state (this process's memory, Redis, Redis behind a failure
//! policy): "decide these limits for these keys, all or nothing, with this op, at this time".
//!
//! A [`Store`] prepares its own form of a limit once ([`Store::Limit`]: a [`KeyedLimiter`] in
//! memory, a Redis limit and its name in Redis), so a call only borrows it. [`MemoryStore`]
//! is this crate's: its answer is ready the first time its future is polled.
//!
//! Concurrency permits an allowed call takes are given back with [`Store::release`], with
//! what its [`StoreDecision::held`] names (a store's ids for them, such as Redis's leases; nothing
//! in memory, where the key finds them). A store whose permits expire unless renewed (Redis's
//! leases, [`Store::lease`]) has their holder renew them with [`Store::renew`] while it keeps
//! them.

use std::future::{Future, Ready, ready};
use std::hash::Hash;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, Micros, SystemClock};
use crate::decision::Decision;
use crate::error::CheckError;
use crate::limiter::{KeyedLimiter, LimitTarget, decide_together_at};
use crate::spec::AnyAlgorithm;
use crate::state_machine::{Algorithm, Op};

/// Where the time of a decision comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Now {
    /// The store's own clock (a limiter's clock in memory, `TIME` in Redis).
    #[default]
    Store,
    /// This time, in the store's clock's microseconds (a manual clock in tests, a replay).
    At(Micros),
}

/// One limit of a call: `limit` counted for `key`, asked `permits`.
#[derive(Debug)]
pub struct Request<'a, L, K: ?Sized> {
    /// The limit, in the store's form.
    pub limit: &'a L,
    /// Whose budget is counted (a user, an IP, a rule's counter key).
    pub key: &'a K,
    /// Permits asked of this limit.
    pub permits: NonZeroU64,
}

impl<L, K: ?Sized> Clone for Request<'_, L, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L, K: ?Sized> Copy for Request<'_, L, K> {}

/// A store's answer to a call: whether every limit allowed (and so, unless it was a peek,
/// every limit was charged), each limit's decision in request order, and the concurrency
/// permits the store holds for the call under an id of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDecision {
    /// Every limit allowed the call.
    pub allowed: bool,
    /// Each limit's decision, in request order.
    pub decisions: Decisions,
    /// The permits the call holds under a store's id (Redis's leases), to hand to
    /// [`Store::release`]; empty for a store that finds permits by key (memory).
    pub held: Vec<Held>,
}

impl StoreDecision {
    /// The outcome of one limit alone.
    pub fn one(decision: Decision) -> StoreDecision {
        StoreDecision {
            allowed: decision.allowed(),
            decisions: Decisions::One(decision),
            held: Vec::new(),
        }
    }

    /// The outcome of several limits (allowed only if each allowed).
    pub fn many(decisions: Vec<Decision>) -> StoreDecision {
        StoreDecision {
            allowed: decisions.iter().all(Decision::allowed),
            decisions: Decisions::Many(decisions),
            held: Vec::new(),
        }
    }

    /// The same outcome, holding `held`.
    pub fn holding(mut self, held: Vec<Held>) -> StoreDecision {
        self.held = held;
        self
    }
}

/// Concurrency permits a call holds in a store under the store's id for them (a Redis
/// lease), until [`Store::release`] gives them back or they expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The request of the call that took them (its index).
    pub request: usize,
    /// The store's id for them.
    pub id: String,
}

/// Decisions in request order; one is kept inline, so the usual call allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decisions {
    /// A single limit's.
    One(Decision),
    /// Several limits' (or none).
    Many(Vec<Decision>),
}

impl Decisions {
    /// The decisions as a slice.
    pub fn as_slice(&self) -> &[Decision] {
        match self {
            Decisions::One(one) => std::slice::from_ref(one),
            Decisions::Many(many) => many,
        }
    }
}

impl std::ops::Deref for Decisions {
    type Target = [Decision];

    fn deref(&self) -> &[Decision] {
        self.as_slice()
    }
}

impl IntoIterator for Decisions {
    type Item = Decision;
    type IntoIter = DecisionsIter;

    fn into_iter(self) -> DecisionsIter {
        match self {
            Decisions::One(one) => DecisionsIter::One(Some(one)),
            Decisions::Many(many) => DecisionsIter::Many(many.into_iter()),
        }
    }
}

/// The decisions of a [`StoreDecision`], by value.
#[derive(Debug)]
pub enum DecisionsIter {
    /// A single limit's, until taken.
    One(Option<Decision>),
    /// Several limits'.
    Many(std::vec::IntoIter<Decision>),
}

impl Iterator for DecisionsIter {
    type Item = Decision;

    fn next(&mut self) -> Option<Decision> {
        match self {
            DecisionsIter::One(one) => one.take(),
            DecisionsIter::Many(many) => many.next(),
        }
    }
}

/// What kind of failure a store's error is, so that a caller (a failure policy) knows whether
/// another store could answer instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The call itself cannot be answered (more permits than a limit holds, an op its
    /// algorithm does not take): every store answers the same, so no fallback helps.
    Request,
    /// The store holds as many keys as it may: a new key is refused.
    KeyCapacity,
    /// The store is unreachable or too slow (a timeout, a lost connection).
    Outage,
    /// The store answered this call with an error (refused work, corrupt state, not
    /// connected yet): not an outage, but no decision either.
    Refused,
}

/// An error a [`Store`] answers with.
pub trait StoreError: std::error::Error + Send + Sync + 'static {
    /// What kind of failure this is.
    fn kind(&self) -> FailureKind;
}

impl StoreError for CheckError {
    fn kind(&self) -> FailureKind {
        match self {
            CheckError::KeyCapacityReached { .. } => FailureKind::KeyCapacity,
            _ => FailureKind::Request,
        }
    }
}

/// Decides limits for keys of type `K` (`String`, `str`, `[u8]`: an owned type), all or
/// nothing.
///
/// `decide` applies `op` to every request together: with [`Op::Check`] the call is allowed
/// only if every limit allows, and then every limit is charged; if one denies, none is, and
/// each reports what it has now. [`Op::Peek`] charges nothing; [`Op::Charge`] charges every
/// limit whatever the others answer (envoyproxy/ratelimit's counting).
pub trait Store<K: ?Sized + 'static>: Send + Sync {
    /// This store's form of a limit, made once and borrowed by every call.
    type Limit: Send + Sync;
    /// Why a call was not decided.
    type Error: StoreError;

    /// The most permits one request can ever be granted by `limit`: asking more is an error
    /// ([`FailureKind::Request`]), never a denial.
    fn capacity(&self, limit: &Self::Limit) -> u64;

    /// Applies `op` to every request together at `now`.
    fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        op: Op,
        now: Now,
    ) -> impl Future<Output = Result<StoreDecision, Self::Error>> + Send + 'a;

    /// Gives back the concurrency permits an allowed call on `requests` took, `held` being
    /// what its [`StoreDecision`] said it holds: a store that counts permits by key (memory) gives
    /// back those of each request whose limit holds permits (`concurrency`), one that leases
    /// them (Redis) each lease in `held`. A permit no longer held (its lease ran out) is no
    /// error. Call it once per allowed call, with the same requests.
    fn release<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        held: &'a [Held],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'a;

    /// How long the permits `limit` holds stay held without [`renew`](Store::renew): `None`
    /// (the default) for a limit that holds none, or whose permits never expire (memory).
    fn lease(&self, limit: &Self::Limit) -> Option<Duration> {
        let _ = limit;
        None
    }

    /// Extends the permits in `held`, taken by an allowed call on `requests`, for another
    /// [`lease`](Store::lease) from `now`, so that a holder keeping them longer than a lease
    /// keeps its place; `Ok(false)` if one was no longer held (it ran out, or was released),
    /// which is no error and is not taken again. The default, for stores whose permits never
    /// expire, does nothing and answers `true`.
    ///
    /// A store that overrides [`lease`](Store::lease) overrides this too (and a store wrapping
    /// another forwards both), or its holders lose their permits after a lease.
    fn renew<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        held: &'a [Held],
        now: Now,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send + 'a {
        let _ = (requests, held, now);
        ready(Ok(true))
    }

    /// Whether the store answers now (a failure policy's probe while the store is down). A
    /// store in this process always does.
    fn ping(&self) -> impl Future<Output = Result<(), Self::Error>> + Send + '_ {
        ready(Ok(()))
    }
}

/// The store of this process's memory: each limit a shared [`KeyedLimiter`], several decided
/// together with [`decide_together_at`]. Its futures are ready when first polled.
pub struct MemoryStore<A = AnyAlgorithm, C = SystemClock> {
    _limits: PhantomData<fn() -> (A, C)>,
}

impl<A, C> MemoryStore<A, C> {
    /// The memory store (it holds nothing: the limiters are the limits).
    pub const fn new() -> Self {
        MemoryStore {
            _limits: PhantomData,
        }
    }
}

impl<A, C> Default for MemoryStore<A, C> {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl<A, C> std::fmt::Debug for MemoryStore<A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl<K, A, C> Store<K> for MemoryStore<A, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm + Send + Sync,
    A::State: Send,
    C: Clock + Send + Sync,
{
    type Limit = Arc<KeyedLimiter<K, A, C>>;
    type Error = CheckError;

    fn capacity(&self, limit: &Self::Limit) -> u64 {
        limit.algorithm().capacity()
    }

    // The concrete future says what callers may rely on: ready when first polled.
    #[allow(refining_impl_trait)]
    #[inline]
    fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        op: Op,
        now: Now,
    ) -> Ready<Result<StoreDecision, CheckError>> {
        ready(decide_in_memory(requests, op, now))
    }

    #[allow(refining_impl_trait)]
    fn release<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        _held: &'a [Held],
    ) -> Ready<Result<(), CheckError>> {
        let released = requests
            .iter()
            .filter(|request| request.limit.algorithm().supports(Op::Release))
            .try_for_each(|request| {
                request
                    .limit
                    .decide(request.key, request.permits, Op::Release)
                    .map(drop)
            });
        ready(released)
    }
}

/// A request of the memory store.
type MemoryRequest<'a, K, A, C> = Request<'a, Arc<KeyedLimiter<K, A, C>>, K>;

/// [`MemoryStore`]'s answer; one or two limits without a vector of targets.
#[inline]
fn decide_in_memory<'a, K, A, C>(
    requests: &[MemoryRequest<'a, K, A, C>],
    op: Op,
    now: Now,
) -> Result<StoreDecision, CheckError>
where
    K: Hash + Eq + Clone,
    A: Algorithm,
    C: Clock,
{
    let at = |limiter: &KeyedLimiter<K, A, C>| match now {
        Now::Store => limiter.clock().now(),
        Now::At(micros) => micros,
    };
    let target = |r: &MemoryRequest<'a, K, A, C>| LimitTarget {
        limiter: r.limit.as_ref(),
        key: r.key,
        permits: r.permits,
    };
    match requests {
        [] => Ok(StoreDecision::many(Vec::new())),
        [only] => {
            let decision = match now {
                Now::Store => only.limit.decide(only.key, only.permits, op)?,
                Now::At(micros) => only.limit.decide_at(only.key, micros, only.permits, op)?,
            };
            Ok(StoreDecision::one(decision))
        }
        [a, b] => {
            let multi = decide_together_at(&[target(a), target(b)], at(a.limit), op)?;
            Ok(StoreDecision {
                allowed: multi.allowed,
                decisions: Decisions::Many(multi.decisions),
                held: Vec::new(),
            })
        }
        [first, ..] => {
            let targets: Vec<_> = requests.iter().map(target).collect();
            let multi = decide_together_at(&targets, at(first.limit), op)?;
            Ok(StoreDecision {
                allowed: multi.allowed,
                decisions: Decisions::Many(multi.decisions),
                held: Vec::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindow, ManualClock};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    type Limiter = Arc<KeyedLimiter<String, AnyAlgorithm, ManualClock>>;

    fn limiter(limit: u64, clock: &ManualClock) -> Result<Limiter, Box<dyn std::error::Error>> {
        let window = FixedWindow::new(limit, Duration::from_secs(60))?;
        Ok(Arc::new(KeyedLimiter::with_clock(
            AnyAlgorithm::from(window),
            clock.clone(),
        )))
    }

    /// Polls once with a waker that does nothing, as the HTTP layer does.
    fn at_once<F: Future>(future: F) -> Option<F::Output> {
        let mut future = std::pin::pin!(future);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        }
    }

    #[test]
    fn memory_decides_all_or_nothing_at_once() -> Result<(), Box<dyn std::error::Error>> {
        let clock = ManualClock::new(0);
        let (wide, narrow) = (limiter(5, &clock)?, limiter(1, &clock)?);
        let store = MemoryStore::<AnyAlgorithm, ManualClock>::new();
        let key = "u".to_owned();
        let one = NonZeroU64::MIN;
        let requests = [
            Request {
                limit: &wide,
                key: &key,
                permits: one,
            },
            Request {
                limit: &narrow,
                key: &key,
                permits: one,
            },
        ];
        let first = at_once(store.decide(&requests, Op::Check, Now::Store)).ok_or("pending")??;
        assert!(first.allowed);
        let second = at_once(store.decide(&requests, Op::Check, Now::Store)).ok_or("pending")??;
        assert!(!second.allowed);
        // Denied by the narrow limit, the wide one was not charged: 4 left, as after one.
        assert_eq!(second.decisions[0].remaining(), 4);
        let peek =
            at_once(store.decide(&requests[..1], Op::Peek, Now::At(0))).ok_or("pending")??;
        assert_eq!(peek.decisions.as_slice().len(), 1);
        assert_eq!(peek.decisions[0].remaining(), 4);
        let too_many = [Request {
            limit: &narrow,
            key: &key,
            permits: NonZeroU64::new(2).ok_or("2")?,
        }];
        let err = at_once(store.decide(&too_many, Op::Check, Now::Store)).ok_or("pending")?;
        assert!(matches!(err, Err(ref e) if e.kind() == FailureKind::Request));
        Ok(())
    }

    #[test]
    fn memory_releases_the_permits_of_its_concurrency_limits_by_key()
    -> Result<(), Box<dyn std::error::Error>> {
        let clock = ManualClock::new(0);
        let window = limiter(5, &clock)?;
        let in_flight: Limiter = Arc::new(KeyedLimiter::with_clock(
            AnyAlgorithm::from(crate::Concurrency::new(1)?),
            clock.clone(),
        ));
        let store = MemoryStore::<AnyAlgorithm, ManualClock>::new();
        let key = "u".to_owned();
        let one = NonZeroU64::MIN;
        let requests = [
            Request {
                limit: &window,
                key: &key,
                permits: one,
            },
            Request {
                limit: &in_flight,
                key: &key,
                permits: one,
            },
        ];
        let first = at_once(store.decide(&requests, Op::Check, Now::Store)).ok_or("pending")??;
        assert!(first.allowed);
        assert!(first.held.is_empty(), "memory finds permits by key");
        let second = at_once(store.decide(&requests, Op::Check, Now::Store)).ok_or("pending")??;
        assert!(!second.allowed);
        at_once(store.release(&requests, &first.held)).ok_or("pending")??;
        let third = at_once(store.decide(&requests, Op::Check, Now::Store)).ok_or("pending")??;
        assert!(third.allowed, "the permit came back");
        // Only the concurrency limit gave back: the window counted all three calls' two passes.
        assert_eq!(third.decisions[0].remaining(), 3);
        // Nothing held: giving back again is an error, and no permit is made up.
        at_once(store.release(&requests, &third.held)).ok_or("pending")??;
        let err = at_once(store.release(&requests, &third.held)).ok_or("pending")?;
        assert!(err.is_err());
        Ok(())
    }
}
