//! What to answer when a store cannot: allow, deny, or decide in a local store by the same
//! rules. [`FailSafe`] wraps any store of the backend seam (Redis, in practice) with a local
//! fallback store (this process's memory) and is itself a store, so whoever decides through
//! the seam gets the failure policy without knowing it is there.
//!
//! A circuit breaker keeps an outage cheap: after [`FAILURES_TO_OPEN`] outage failures in a
//! row (timeouts, lost connections) the store is marked down and calls are answered by the
//! policy at once, instead of each waiting out the timeout, while one background task pings
//! the store with backoff and marks it up again when it answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use sluicegate::Decision;
use sluicegate::clock::micros_ceil;
use sluicegate::state_machine::Op;
use sluicegate::store::{FailureKind, Held, Now, Request, Store, StoreDecision, StoreError};
use tokio::time::Instant;

/// The answer given when the store is down, slow, or refusing work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Allow every request (availability over enforcement).
    Open,
    /// Deny every request, with `retry_after` set to the store's timeout.
    Closed,
    /// Decide in memory, in this process, with the same algorithm and parameters.
    Local,
}

/// Consecutive outage failures that mark the store down.
pub const FAILURES_TO_OPEN: u32 = 3;

/// The first probe of a store marked down, after this long; then twice as long each time, up
/// to [`PROBE_AT_MOST_EVERY`]: a `PING` twice a second costs Redis nothing, and decisions go
/// back to it within half a second of its return.
const FIRST_PROBE_AFTER: Duration = Duration::from_millis(50);
const PROBE_AT_MOST_EVERY: Duration = Duration::from_millis(500);

/// A limit of a [`FailSafe`] store: the store's form and the fallback's.
#[derive(Debug, Clone)]
pub struct FailSafeLimit<P, L> {
    /// The limit in the store.
    pub primary: P,
    /// The same limit in the local fallback.
    pub local: L,
}

/// Why the store did not decide a call, as reported to the [`FailSafe`]'s observer.
#[derive(Debug)]
pub enum Failure<'a, E> {
    /// Marked down by the breaker: not asked until a probe finds it up again.
    Down,
    /// The call took longer than the timeout.
    Timeout(Duration),
    /// The store failed.
    Store(&'a E),
}

impl<E: StoreError> Failure<'_, E> {
    /// Whether the failure says the store is unreachable or too slow (not that it refused one
    /// call): what the breaker counts.
    pub fn is_outage(&self) -> bool {
        match self {
            Failure::Down => false,
            Failure::Timeout(_) => true,
            Failure::Store(error) => error.kind() == FailureKind::Outage,
        }
    }
}

impl<E: std::fmt::Display> std::fmt::Display for Failure<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Down => write!(f, "the store is down; probing it in the background"),
            Failure::Timeout(timeout) => write!(f, "the store did not answer within {timeout:?}"),
            Failure::Store(error) => write!(f, "{error}"),
        }
    }
}

/// An error of a [`FailSafe`] store: one the policy does not cover (a request no store can
/// answer, a full key table), from the store or from the fallback.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FailSafeError<P, L> {
    /// The store's error.
    #[error(transparent)]
    Primary(P),
    /// The local fallback's error.
    #[error(transparent)]
    Local(L),
    /// More permits were asked for than a limit can ever grant at once.
    #[error("{requested} permits requested but at most {capacity} can ever be granted at once")]
    InsufficientCapacity {
        /// Permits asked for.
        requested: u64,
        /// The most the limit grants to one request.
        capacity: u64,
    },
    /// The store did not answer a call no policy answers in its place (a lease's renewal)
    /// within the timeout.
    #[error("the store did not answer within {0:?}")]
    TimedOut(Duration),
}

impl<P: StoreError, L: StoreError> StoreError for FailSafeError<P, L> {
    fn kind(&self) -> FailureKind {
        match self {
            FailSafeError::Primary(error) => error.kind(),
            FailSafeError::Local(error) => error.kind(),
            FailSafeError::InsufficientCapacity { .. } => FailureKind::Request,
            FailSafeError::TimedOut(_) => FailureKind::Outage,
        }
    }
}

/// What a [`FailSafe`] tells its observer.
#[derive(Debug)]
pub enum FailSafeEvent<'a, E> {
    /// The store failed a call; the policy answered it.
    Failed(&'a Failure<'a, E>),
    /// The breaker marked the store down after this many outage failures in a row.
    MarkedDown {
        /// Outage failures in a row.
        failures_in_a_row: u32,
    },
    /// A probe found the store up again: calls go back to it.
    BackUp,
}

/// A request of a [`FailSafe`] store over `P` and `L`.
type Asked<'a, P, L, K> =
    Request<'a, FailSafeLimit<<P as Store<K>>::Limit, <L as Store<K>>::Limit>, K>;

/// The primary store's form of `requests`.
fn primary_requests<'a, P: Store<K>, L: Store<K>, K: ?Sized>(
    requests: &'a [Asked<'a, P, L, K>],
) -> smallvec::SmallVec<[Request<'a, P::Limit, K>; 2]> {
    requests
        .iter()
        .map(|r| Request {
            limit: &r.limit.primary,
            key: r.key,
            permits: r.permits,
        })
        .collect()
}

/// The fallback store's form of `requests`.
fn local_requests<'a, P: Store<K>, L: Store<K>, K: ?Sized>(
    requests: &'a [Asked<'a, P, L, K>],
) -> smallvec::SmallVec<[Request<'a, L::Limit, K>; 2]> {
    requests
        .iter()
        .map(|r| Request {
            limit: &r.limit.local,
            key: r.key,
            permits: r.permits,
        })
        .collect()
}

/// Told of every failure of the store and of the breaker's changes (to count and log them).
type Observer<E> = Arc<dyn Fn(&FailSafeEvent<'_, E>) + Send + Sync>;

/// A store that still answers, within its timeout, when the wrapped store does not: by its
/// [`FailurePolicy`], the `local` one deciding in the fallback store. Errors about the request
/// itself ([`FailureKind::Request`], [`FailureKind::KeyCapacity`]) are returned whatever the
/// policy: falling back would hide them.
pub struct FailSafe<P: Store<K>, L, K: ?Sized + 'static> {
    primary: Arc<P>,
    local: L,
    policy: FailurePolicy,
    timeout: Duration,
    breaker: Arc<Breaker>,
    observer: Option<Observer<P::Error>>,
}

/// The breaker's state, shared with its probe.
#[derive(Debug, Default)]
struct Breaker {
    failures_in_a_row: AtomicU32,
    down: AtomicBool,
    /// Every failure since start.
    failures: AtomicU64,
}

impl<P: Store<K>, L, K: ?Sized + 'static> std::fmt::Debug for FailSafe<P, L, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailSafe")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker)
            .finish_non_exhaustive()
    }
}

impl<P, L, K> FailSafe<P, L, K>
where
    K: ?Sized + Sync + 'static,
    P: Store<K> + 'static,
    L: Store<K>,
{
    /// `primary` answered by `policy` when it fails or takes longer than `timeout`; `local`
    /// decides under [`FailurePolicy::Local`].
    pub fn new(primary: Arc<P>, local: L, policy: FailurePolicy, timeout: Duration) -> Self {
        FailSafe {
            primary,
            local,
            policy,
            timeout,
            breaker: Arc::default(),
            observer: None,
        }
    }

    /// Tells `observer` of every failure of the store and of the breaker's changes.
    pub fn with_observer(
        mut self,
        observer: impl Fn(&FailSafeEvent<'_, P::Error>) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The wrapped store.
    pub fn primary(&self) -> &Arc<P> {
        &self.primary
    }

    /// The policy.
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// The longest a call waits for the store.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the store is marked down by the breaker.
    pub fn is_down(&self) -> bool {
        self.breaker.down.load(Ordering::Relaxed)
    }

    /// Failures since start.
    pub fn failures(&self) -> u64 {
        self.breaker.failures.load(Ordering::Relaxed)
    }

    /// This store with every call, together, bounded by `deadline` rather than each by the
    /// timeout: a caller that makes several calls for one request (a quota's peek, then the
    /// enforcing limits) waits at most once.
    pub fn until(&self, deadline: Instant) -> FailSafeWithDeadline<'_, P, L, K> {
        FailSafeWithDeadline {
            store: self,
            deadline,
        }
    }

    /// Applies `op` by the store, or by the policy if the store fails before `deadline`.
    async fn decide_by<'a>(
        &'a self,
        requests: &'a [Asked<'a, P, L, K>],
        op: Op,
        now: Now,
        deadline: Instant,
    ) -> Result<StoreDecision, FailSafeError<P::Error, L::Error>> {
        if self.is_down() {
            self.failed(&Failure::Down);
            return self.by_policy(requests, op, now).await;
        }
        let asked = primary_requests::<P, L, K>(requests);
        let answer = tokio::time::timeout_at(deadline, self.primary.decide(&asked, op, now)).await;
        match answer {
            Ok(Ok(outcome)) => {
                // Read first: a write on every call would bounce the line between cores.
                if self.breaker.failures_in_a_row.load(Ordering::Relaxed) != 0 {
                    self.breaker.failures_in_a_row.store(0, Ordering::Relaxed);
                }
                Ok(outcome)
            }
            Ok(Err(error))
                if matches!(
                    error.kind(),
                    FailureKind::Request | FailureKind::KeyCapacity
                ) =>
            {
                Err(FailSafeError::Primary(error))
            }
            Ok(Err(error)) => {
                self.failed(&Failure::Store(&error));
                self.by_policy(requests, op, now).await
            }
            Err(_) => {
                self.failed(&Failure::Timeout(self.timeout));
                self.by_policy(requests, op, now).await
            }
        }
    }

    /// Counts a failure, tells the observer, and lets the breaker see it.
    fn failed(&self, failure: &Failure<'_, P::Error>) {
        self.breaker.failures.fetch_add(1, Ordering::Relaxed);
        if let Some(observer) = &self.observer {
            observer(&FailSafeEvent::Failed(failure));
        }
        if !failure.is_outage() {
            return;
        }
        let in_a_row = self
            .breaker
            .failures_in_a_row
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if in_a_row < FAILURES_TO_OPEN || self.breaker.down.swap(true, Ordering::AcqRel) {
            return;
        }
        // Outside a runtime nothing could probe: stay up instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.breaker.down.store(false, Ordering::Release);
            return;
        };
        if let Some(observer) = &self.observer {
            observer(&FailSafeEvent::MarkedDown {
                failures_in_a_row: in_a_row,
            });
        }
        drop(runtime.spawn(probe_until_up::<P, K>(
            Arc::clone(&self.breaker),
            Arc::clone(&self.primary),
            self.observer.clone(),
        )));
    }

    /// Gives back what an allowed call holds: in the store, if it holds leases there; in the
    /// fallback, if the call was answered there (`local`, no leases); otherwise nothing (the
    /// policy took nothing, or no limit of the call holds permits). A primary store that holds
    /// permits must report them in [`StoreDecision::held`].
    async fn release_held<'a>(
        &'a self,
        requests: &'a [Asked<'a, P, L, K>],
        held: &'a [Held],
    ) -> Result<(), FailSafeError<P::Error, L::Error>> {
        if !held.is_empty() {
            let asked = primary_requests::<P, L, K>(requests);
            return self
                .primary
                .release(&asked, held)
                .await
                .map_err(FailSafeError::Primary);
        }
        if self.policy != FailurePolicy::Local {
            return Ok(());
        }
        let asked = local_requests::<P, L, K>(requests);
        self.local
            .release(&asked, held)
            .await
            .map_err(FailSafeError::Local)
    }

    /// Renews the leases in `held`: the primary's (the fallback's permits, held in memory,
    /// never expire), by `deadline`. While the primary is down nothing is asked of it (the
    /// breaker's probe is what finds it back) and the answer is "still held": the holder's
    /// next renewal after that tells.
    async fn renew_by<'a>(
        &'a self,
        requests: &'a [Asked<'a, P, L, K>],
        held: &'a [Held],
        now: Now,
        deadline: Instant,
    ) -> Result<bool, FailSafeError<P::Error, L::Error>> {
        if held.is_empty() || self.is_down() {
            return Ok(true);
        }
        let asked = primary_requests::<P, L, K>(requests);
        match tokio::time::timeout_at(deadline, self.primary.renew(&asked, held, now)).await {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(error)) => {
                self.failed(&Failure::Store(&error));
                Err(FailSafeError::Primary(error))
            }
            Err(_) => {
                self.failed(&Failure::Timeout(self.timeout));
                Err(FailSafeError::TimedOut(self.timeout))
            }
        }
    }

    /// The policy's answer: the fallback's decision, or every limit allowed (`open`, nothing
    /// known of the budget) or denied (`closed`, retry after the timeout).
    async fn by_policy<'a>(
        &'a self,
        requests: &'a [Asked<'a, P, L, K>],
        op: Op,
        now: Now,
    ) -> Result<StoreDecision, FailSafeError<P::Error, L::Error>> {
        if self.policy == FailurePolicy::Local {
            let asked = local_requests::<P, L, K>(requests);
            return self
                .local
                .decide(&asked, op, now)
                .await
                .map_err(FailSafeError::Local);
        }
        let mut decisions = Vec::with_capacity(requests.len());
        for request in requests {
            let capacity = self.primary.capacity(&request.limit.primary);
            let permits = request.permits.get();
            if permits > capacity {
                return Err(FailSafeError::InsufficientCapacity {
                    requested: permits,
                    capacity,
                });
            }
            decisions.push(match self.policy {
                FailurePolicy::Open => Decision::allow(capacity, capacity - permits, 0),
                _ => Decision::deny(capacity, 0, 0, Some(micros_ceil(self.timeout))),
            });
        }
        Ok(match <[Decision; 1]>::try_from(decisions) {
            Ok([one]) => StoreDecision::one(one),
            Err(many) => StoreDecision::many(many),
        })
    }
}

/// Pings the store with backoff until it answers, then marks it up.
async fn probe_until_up<P: Store<K>, K: ?Sized + 'static>(
    breaker: Arc<Breaker>,
    store: Arc<P>,
    observer: Option<Observer<P::Error>>,
) {
    let mut wait = FIRST_PROBE_AFTER;
    loop {
        tokio::time::sleep(wait).await;
        if store.ping().await.is_ok() {
            breaker.failures_in_a_row.store(0, Ordering::Relaxed);
            breaker.down.store(false, Ordering::Release);
            if let Some(observer) = &observer {
                observer(&FailSafeEvent::BackUp);
            }
            return;
        }
        wait = (wait * 2).min(PROBE_AT_MOST_EVERY);
    }
}

impl<P, L, K> Store<K> for FailSafe<P, L, K>
where
    K: ?Sized + Sync + 'static,
    P: Store<K> + 'static,
    L: Store<K>,
{
    type Limit = FailSafeLimit<P::Limit, L::Limit>;
    type Error = FailSafeError<P::Error, L::Error>;

    fn capacity(&self, limit: &Self::Limit) -> u64 {
        self.primary.capacity(&limit.primary)
    }

    async fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        op: Op,
        now: Now,
    ) -> Result<StoreDecision, Self::Error> {
        self.decide_by(requests, op, now, Instant::now() + self.timeout)
            .await
    }

    async fn release<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        held: &'a [Held],
    ) -> Result<(), Self::Error> {
        self.release_held(requests, held).await
    }

    fn lease(&self, limit: &Self::Limit) -> Option<Duration> {
        self.primary.lease(&limit.primary)
    }

    async fn renew<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        held: &'a [Held],
        now: Now,
    ) -> Result<bool, Self::Error> {
        self.renew_by(requests, held, now, Instant::now() + self.timeout)
            .await
    }

    async fn ping(&self) -> Result<(), Self::Error> {
        self.primary.ping().await.map_err(FailSafeError::Primary)
    }
}

/// A [`FailSafe`] store whose calls share one deadline ([`FailSafe::until`]).
pub struct FailSafeWithDeadline<'s, P: Store<K>, L, K: ?Sized + 'static> {
    store: &'s FailSafe<P, L, K>,
    deadline: Instant,
}

impl<P, L, K> Store<K> for FailSafeWithDeadline<'_, P, L, K>
where
    K: ?Sized + Sync + 'static,
    P: Store<K> + 'static,
    L: Store<K>,
{
    type Limit = FailSafeLimit<P::Limit, L::Limit>;
    type Error = FailSafeError<P::Error, L::Error>;

    fn capacity(&self, limit: &Self::Limit) -> u64 {
        self.store.capacity(limit)
    }

    async fn decide<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        op: Op,
        now: Now,
    ) -> Result<StoreDecision, Self::Error> {
        self.store.decide_by(requests, op, now, self.deadline).await
    }

    async fn release<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        held: &'a [Held],
    ) -> Result<(), Self::Error> {
        self.store.release_held(requests, held).await
    }

    fn lease(&self, limit: &Self::Limit) -> Option<Duration> {
        Store::<K>::lease(self.store, limit)
    }

    async fn renew<'a>(
        &'a self,
        requests: &'a [Request<'a, Self::Limit, K>],
        held: &'a [Held],
        now: Now,
    ) -> Result<bool, Self::Error> {
        self.store
            .renew_by(requests, held, now, self.deadline)
            .await
    }

    async fn ping(&self) -> Result<(), Self::Error> {
        self.store.ping().await
    }
}
