//! The adaptive limiter: permits up to the controller's current limit, an optional bounded
//! wait queue, and partitions.

#[cfg(feature = "tokio")]
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "tokio")]
use std::time::Duration;

use parking_lot::Mutex;

use crate::adaptive::partition::{PartitionId, PartitionMetrics, Partitions};
use crate::adaptive::permit::{Held, Permit, Release};
use crate::adaptive::sample::{Controller, Outcome, Sample};
use crate::clock::{Clock, Micros, SystemClock};
use crate::error::ConfigError;

/// Grants permits up to the limit its [`Controller`] sets from the samples its permits report.
///
/// - [`try_acquire`](Self::try_acquire) answers at once; `acquire` (with the `tokio` feature)
///   waits in a bounded FIFO queue up to a timeout.
/// - Permits in flight never exceed the limit when one is granted. When the limit falls below
///   the permits already in flight, none is granted until enough have finished.
/// - With partitions, each named partition is guaranteed a fraction of the limit. The shares
///   matter only once the limiter is full: until then any partition may borrow whatever is
///   free. Once full, a freed place goes first to the longest-waiting request of a partition
///   below its share, then to the longest-waiting request of any. Unlike Netflix's
///   partitioned limiter, which admits a partition under its share even past the limit, a
///   guarantee here is a claim on the next places freed, never a licence to exceed the limit,
///   so it is the waiting (`acquire`) callers whom it serves.
/// - Latencies are measured on the limiter's [`Clock`] (a [`ManualClock`](crate::ManualClock)
///   in tests), from the grant to the permit's completion.
///
/// Cloning gives another handle to the same limiter.
pub struct AdaptiveLimiter<C, K = SystemClock> {
    shared: Arc<Shared<C, K>>,
}

impl<C, K> Clone for AdaptiveLimiter<C, K> {
    fn clone(&self) -> Self {
        AdaptiveLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The limiter's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdaptiveMetrics {
    /// The current limit.
    pub limit: u32,
    /// Permits held.
    pub in_flight: u32,
    /// Requests waiting in the queue.
    pub queued: usize,
    /// Requests refused so far: at once, for a full queue, or after waiting their timeout.
    pub rejected: u64,
}

/// Why `acquire` returned without a permit.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// The limit is reached and as many requests as the queue holds are already waiting.
    #[error("concurrency limit reached and the wait queue is full ({capacity} waiting)")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// No place freed up within the timeout.
    #[error("no permit within {waited:?}")]
    Timeout {
        /// The timeout that ran out.
        waited: Duration,
    },
}

/// Builds an [`AdaptiveLimiter`].
pub struct AdaptiveLimiterBuilder<C, K = SystemClock> {
    controller: C,
    clock: K,
    partitions: Vec<(String, f64)>,
    #[cfg(feature = "tokio")]
    queue_capacity: usize,
}

/// Requests that may wait for a place unless told otherwise (Netflix bounds its delayed
/// threads at the same number).
#[cfg(feature = "tokio")]
const DEFAULT_QUEUE_CAPACITY: usize = 100;

impl<C: Controller + 'static, K: Clock + 'static> AdaptiveLimiterBuilder<C, K> {
    fn new(controller: C, clock: K) -> Self {
        AdaptiveLimiterBuilder {
            controller,
            clock,
            partitions: Vec::new(),
            #[cfg(feature = "tokio")]
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
        }
    }

    /// Measures latencies on `clock` instead.
    pub fn clock<K2: Clock + 'static>(self, clock: K2) -> AdaptiveLimiterBuilder<C, K2> {
        AdaptiveLimiterBuilder {
            controller: self.controller,
            clock,
            partitions: self.partitions,
            #[cfg(feature = "tokio")]
            queue_capacity: self.queue_capacity,
        }
    }

    /// Adds a partition guaranteed `fraction` (in `[0, 1]`) of the limit; the fractions may
    /// sum to at most 1, and the rest is shared by requests that name no partition.
    pub fn partition(mut self, name: impl Into<String>, fraction: f64) -> Self {
        self.partitions.push((name.into(), fraction));
        self
    }

    /// How many requests may wait for a place at once (default 100; 0: none wait).
    #[cfg(feature = "tokio")]
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity;
        self
    }

    /// The limiter, or what is wrong with its partitions.
    pub fn build(mut self) -> Result<AdaptiveLimiter<C, K>, ConfigError> {
        let specs = std::mem::take(&mut self.partitions);
        let partitions = Partitions::new(specs, self.controller.limit().max(1))?;
        Ok(self.assemble(partitions))
    }

    fn assemble(self, partitions: Partitions) -> AdaptiveLimiter<C, K> {
        let limit = self.controller.limit().max(1);
        AdaptiveLimiter {
            shared: Arc::new(Shared {
                clock: self.clock,
                rejected: AtomicU64::new(0),
                #[cfg(feature = "tokio")]
                queue_capacity: self.queue_capacity,
                state: Mutex::new(State {
                    controller: self.controller,
                    limit,
                    in_flight: 0,
                    partitions,
                    #[cfg(feature = "tokio")]
                    queue: VecDeque::new(),
                    #[cfg(feature = "tokio")]
                    next_waiter: 0,
                }),
            }),
        }
    }
}

impl<C: Controller + 'static> AdaptiveLimiter<C, SystemClock> {
    /// A limiter on the system clock, without partitions, with the default queue.
    pub fn new(controller: C) -> Self {
        Self::with_clock(controller, SystemClock::new())
    }

    /// A builder for partitions, the queue or the clock.
    pub fn builder(controller: C) -> AdaptiveLimiterBuilder<C, SystemClock> {
        AdaptiveLimiterBuilder::new(controller, SystemClock::new())
    }
}

impl<C: Controller + 'static, K: Clock + 'static> AdaptiveLimiter<C, K> {
    /// A limiter measuring latencies on `clock`, without partitions, with the default queue.
    pub fn with_clock(controller: C, clock: K) -> Self {
        let limit = controller.limit().max(1);
        AdaptiveLimiterBuilder::new(controller, clock).assemble(Partitions::unpartitioned(limit))
    }

    /// A permit if one is free now (for requests that name no partition), else `None`.
    pub fn try_acquire(&self) -> Option<Permit> {
        self.try_acquire_in(PartitionId::UNPARTITIONED)
    }

    /// A permit for `partition` if one is free now, else `None`.
    pub fn try_acquire_in(&self, partition: PartitionId) -> Option<Permit> {
        let mut state = self.shared.state.lock();
        let index = state.partitions.index(partition);
        let permit = self.shared.grant_if_free(&mut state, index);
        drop(state);
        if permit.is_none() {
            self.shared.rejected.fetch_add(1, Ordering::Relaxed);
        }
        permit
    }

    /// A permit (for requests that name no partition), waiting up to `timeout` in the queue
    /// if none is free. The wait is timed on tokio's timer (pause it in tests), whatever the
    /// limiter's clock.
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, timeout: Duration) -> Result<Permit, AcquireError> {
        self.acquire_in(PartitionId::UNPARTITIONED, timeout).await
    }

    /// A permit for `partition`, waiting up to `timeout` in the queue if none is free.
    ///
    /// A full queue answers [`AcquireError::QueueFull`] at once; a wait that runs out answers
    /// [`AcquireError::Timeout`] (unless a place was granted at that very moment, which is
    /// then kept). Dropping the future leaves the queue.
    #[cfg(feature = "tokio")]
    pub async fn acquire_in(
        &self,
        partition: PartitionId,
        timeout: Duration,
    ) -> Result<Permit, AcquireError> {
        let waiting = {
            let mut state = self.shared.state.lock();
            let index = state.partitions.index(partition);
            if let Some(permit) = self.shared.grant_if_free(&mut state, index) {
                return Ok(permit);
            }
            if state.queue.len() >= self.shared.queue_capacity {
                drop(state);
                self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(AcquireError::QueueFull {
                    capacity: self.shared.queue_capacity,
                });
            }
            let (sender, receiver) = tokio::sync::oneshot::channel();
            let id = state.next_waiter;
            state.next_waiter += 1;
            state.queue.push_back(Waiter {
                id,
                partition: index,
                sender,
            });
            Waiting {
                shared: &self.shared,
                id,
                receiver,
                settled: false,
            }
        };
        waiting.wait(timeout).await
    }

    /// The partition called `name`, if the limiter has one.
    pub fn partition(&self, name: &str) -> Option<PartitionId> {
        self.shared.state.lock().partitions.find(name)
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.shared.state.lock().limit
    }

    /// Permits held.
    pub fn in_flight(&self) -> u32 {
        self.shared.state.lock().in_flight
    }

    /// All the counters at once.
    pub fn metrics(&self) -> AdaptiveMetrics {
        let state = self.shared.state.lock();
        AdaptiveMetrics {
            limit: state.limit,
            in_flight: state.in_flight,
            queued: state.queued(),
            rejected: self.shared.rejected.load(Ordering::Relaxed),
        }
    }

    /// Each partition's share and permits in flight, in the order they were added.
    pub fn partition_metrics(&self) -> Vec<PartitionMetrics> {
        self.shared.state.lock().partitions.metrics()
    }

    /// Runs `f` on the controller (to read its state for metrics), under the limiter's lock.
    pub fn with_controller<R>(&self, f: impl FnOnce(&C) -> R) -> R {
        f(&self.shared.state.lock().controller)
    }
}

impl<C, K> fmt::Debug for AdaptiveLimiter<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("AdaptiveLimiter")
            .field("limit", &state.limit)
            .field("in_flight", &state.in_flight)
            .field("queued", &state.queued())
            .finish_non_exhaustive()
    }
}

struct Shared<C, K> {
    clock: K,
    state: Mutex<State<C>>,
    rejected: AtomicU64,
    #[cfg(feature = "tokio")]
    queue_capacity: usize,
}

struct State<C> {
    controller: C,
    /// The controller's limit, at least 1: a limit of 0 would admit no request, and so
    /// receive no sample that could raise it.
    limit: u32,
    in_flight: u32,
    partitions: Partitions,
    /// Requests waiting, oldest first. Never empty while a place is free: every place freed
    /// goes to a waiter first.
    #[cfg(feature = "tokio")]
    queue: VecDeque<Waiter>,
    #[cfg(feature = "tokio")]
    next_waiter: u64,
}

impl<C> State<C> {
    fn queued(&self) -> usize {
        #[cfg(feature = "tokio")]
        return self.queue.len();
        #[cfg(not(feature = "tokio"))]
        0
    }
}

impl<C: Controller + 'static, K: Clock + 'static> Shared<C, K> {
    /// A permit in `partition` if a place is free and nobody waits for one.
    fn grant_if_free(self: &Arc<Self>, state: &mut State<C>, partition: usize) -> Option<Permit> {
        if state.in_flight >= state.limit || state.queued() > 0 {
            return None;
        }
        let now = self.clock.now();
        Some(self.grant(state, now, partition))
    }

    fn grant(self: &Arc<Self>, state: &mut State<C>, now: Micros, partition: usize) -> Permit {
        state.in_flight += 1;
        state.partitions.take(partition);
        let owner: Arc<dyn Release> = Arc::clone(self) as Arc<dyn Release>;
        Permit::new(
            owner,
            Held {
                start: now,
                in_flight: state.in_flight,
                partition,
            },
        )
    }

    /// Hands free places to waiters: first to the oldest of a partition below its share,
    /// else to the oldest.
    #[cfg(feature = "tokio")]
    fn grant_waiters(self: &Arc<Self>, state: &mut State<C>, now: Micros) {
        while state.in_flight < state.limit {
            let partitions = &state.partitions;
            let pick = state
                .queue
                .iter()
                .position(|w| partitions.below_share(w.partition))
                .unwrap_or(0);
            let Some(waiter) = state.queue.remove(pick) else {
                return;
            };
            let permit = self.grant(state, now, waiter.partition);
            if let Err(undelivered) = waiter.sender.send(permit) {
                // Unreachable while a waiter leaves the queue under this lock before dropping
                // its receiver; undone rather than leaking a place if that ever changes. Here,
                // under the lock, because a dropped permit would take the lock again.
                let held = undelivered.disarm();
                state.in_flight -= 1;
                state.partitions.give_back(held.partition);
            }
        }
    }

    #[cfg(not(feature = "tokio"))]
    fn grant_waiters(self: &Arc<Self>, _state: &mut State<C>, _now: Micros) {}
}

impl<C: Controller + 'static, K: Clock + 'static> Release for Shared<C, K> {
    fn release(self: Arc<Self>, held: &Held, outcome: Option<Outcome>) {
        let mut state = self.state.lock();
        let now = self.clock.now();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.partitions.give_back(held.partition);
        if let Some(outcome) = outcome {
            let sample = Sample {
                start: held.start,
                rtt: now.saturating_sub(held.start),
                in_flight: held.in_flight,
                outcome,
            };
            let limit = state.controller.on_sample(now, sample).max(1);
            if limit != state.limit {
                state.limit = limit;
                state.partitions.set_limit(limit);
            }
        }
        self.grant_waiters(&mut state, now);
    }
}

/// A request waiting in the queue.
#[cfg(feature = "tokio")]
struct Waiter {
    id: u64,
    partition: usize,
    sender: tokio::sync::oneshot::Sender<Permit>,
}

/// One `acquire` call's place in the queue; leaves it when dropped unanswered.
#[cfg(feature = "tokio")]
struct Waiting<'a, C: Controller + 'static, K: Clock + 'static> {
    shared: &'a Arc<Shared<C, K>>,
    id: u64,
    receiver: tokio::sync::oneshot::Receiver<Permit>,
    settled: bool,
}

#[cfg(feature = "tokio")]
impl<C: Controller + 'static, K: Clock + 'static> Waiting<'_, C, K> {
    async fn wait(mut self, timeout: Duration) -> Result<Permit, AcquireError> {
        if let Ok(Ok(permit)) = tokio::time::timeout(timeout, &mut self.receiver).await {
            self.settled = true;
            return Ok(permit);
        }
        self.settled = true;
        if self.leave_queue() {
            self.shared.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(AcquireError::Timeout { waited: timeout });
        }
        // Granted as the timer fired: the place is ours, so keep it.
        self.receiver
            .try_recv()
            .map_err(|_| AcquireError::Timeout { waited: timeout })
    }

    /// Takes this request out of the queue; false if it was granted a place already.
    fn leave_queue(&self) -> bool {
        let mut state = self.shared.state.lock();
        match state.queue.iter().position(|w| w.id == self.id) {
            Some(at) => {
                state.queue.remove(at);
                true
            }
            None => false,
        }
    }
}

#[cfg(feature = "tokio")]
impl<C: Controller + 'static, K: Clock + 'static> Drop for Waiting<'_, C, K> {
    fn drop(&mut self) {
        if self.settled || self.leave_queue() {
            return;
        }
        // Granted, but the caller is gone: give the place back without a sample (no work
        // was done with it).
        if let Ok(permit) = self.receiver.try_recv() {
            permit.ignore();
        }
    }
}
