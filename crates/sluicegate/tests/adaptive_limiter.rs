//! The adaptive limiter with a manual clock for latencies and tokio's paused clock for waits:
//! never more in flight than the limit, samples as the permits report them (abandoned ones as
//! drops), partitions' guarantees and borrowing, and the wait queue's answers.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::ManualClock;
use sluicegate::adaptive::{
    AcquireError, AdaptiveLimiter, Aimd, Controller, Gradient2, Outcome, PartitionId, Permit,
    Sample, Vegas,
};

type BoxError = Box<dyn std::error::Error>;

/// A controller with a limit set by hand that records the samples it is given.
#[derive(Debug)]
struct Recorder {
    limit: u32,
    samples: Vec<(u64, Sample)>,
}

impl Recorder {
    fn new(limit: u32) -> Recorder {
        Recorder {
            limit,
            samples: Vec::new(),
        }
    }
}

impl Controller for Recorder {
    fn on_sample(&mut self, now: u64, sample: Sample) -> u32 {
        self.samples.push((now, sample));
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

/// A fixed limit: AIMD held between equal bounds.
fn fixed(limit: u32) -> Result<Aimd, BoxError> {
    Ok(Aimd::builder()
        .min_limit(limit)
        .initial_limit(limit)
        .max_limit(limit)
        .build()?)
}

#[test]
fn permits_report_their_latency_and_outcome() -> Result<(), BoxError> {
    let clock = ManualClock::new(1_000);
    let limiter = AdaptiveLimiter::with_clock(Recorder::new(10), clock.clone());
    let a = limiter.try_acquire().ok_or("a")?;
    clock.advance_micros(5);
    let b = limiter.try_acquire().ok_or("b")?;
    let c = limiter.try_acquire().ok_or("c")?;
    let d = limiter.try_acquire().ok_or("d")?;
    let e = limiter.try_acquire().ok_or("e")?;
    assert_eq!((a.start(), a.in_flight_at_start()), (1_000, 1));
    assert_eq!((b.start(), b.in_flight_at_start()), (1_005, 2));
    clock.advance_micros(10);
    a.success();
    b.timeout();
    clock.advance_micros(10);
    c.dropped();
    // No sample for an ignored permit.
    d.ignore();
    e.complete(Outcome::Ok);
    let samples = limiter.with_controller(|r| r.samples.clone());
    assert_eq!(
        samples,
        [
            (1_015, Sample::ok(1_000, 15, 1)),
            (1_015, Sample::timeout(1_005, 10, 2)),
            (1_025, Sample::dropped(1_005, 20, 3)),
            (1_025, Sample::ok(1_005, 20, 5)),
        ]
    );
    assert_eq!(limiter.in_flight(), 0);
    Ok(())
}

#[test]
fn abandoned_permits_count_as_dropped() -> Result<(), BoxError> {
    let clock = ManualClock::new(0);
    let limiter = AdaptiveLimiter::with_clock(Recorder::new(10), clock.clone());
    let permit = limiter.try_acquire().ok_or("free")?;
    clock.advance(Duration::from_millis(7));
    // Moved into a thread that gives up without completing it.
    std::thread::spawn(move || drop(permit))
        .join()
        .map_err(|_| "thread panicked")?;
    {
        let _forgotten = limiter.try_acquire().ok_or("free")?;
    }
    let samples = limiter.with_controller(|r| r.samples.clone());
    assert_eq!(
        samples,
        [
            (7_000, Sample::dropped(0, 7_000, 1)),
            (7_000, Sample::dropped(7_000, 0, 1)),
        ]
    );
    assert_eq!(limiter.in_flight(), 0);
    Ok(())
}

#[test]
fn a_lowered_limit_lets_in_flight_drain() -> Result<(), BoxError> {
    let clock = ManualClock::new(0);
    let aimd = Aimd::builder()
        .min_limit(1)
        .initial_limit(4)
        .max_limit(4)
        .backoff_ratio(0.5)
        .build()?;
    let limiter = AdaptiveLimiter::with_clock(aimd, clock);
    let mut held: Vec<Permit> = (0..4).filter_map(|_| limiter.try_acquire()).collect();
    assert_eq!(held.len(), 4);
    // A drop halves the limit to 2 with 3 still in flight: nothing is granted until fewer
    // than 2 are.
    held.pop().ok_or("held")?.dropped();
    assert_eq!((limiter.limit(), limiter.in_flight()), (2, 3));
    assert!(limiter.try_acquire().is_none());
    // 3 of 2 in flight is at least half: +1 -> 3, with 2 in flight.
    held.pop().ok_or("held")?.success();
    assert_eq!((limiter.limit(), limiter.in_flight()), (3, 2));
    let third = limiter.try_acquire().ok_or("a place is free")?;
    assert!(limiter.try_acquire().is_none());
    drop((third, held));
    assert_eq!(limiter.in_flight(), 0);
    // Refused twice: while draining, and when full again.
    assert_eq!(limiter.metrics().rejected, 2);
    Ok(())
}

/// What a random trace does next.
#[derive(Debug, Clone)]
enum Op {
    Acquire,
    /// Completes the permit at this index (modulo those held), with this outcome (`None`:
    /// dropped without completing).
    Complete(usize, Option<Outcome>),
    Advance(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let outcome = prop_oneof![
        4 => Just(Some(Outcome::Ok)),
        1 => Just(Some(Outcome::Dropped)),
        1 => Just(Some(Outcome::Timeout)),
        1 => Just(None),
    ];
    let op = prop_oneof![
        4 => Just(Op::Acquire),
        3 => (any::<usize>(), outcome).prop_map(|(i, o)| Op::Complete(i, o)),
        2 => (0..50_000u64).prop_map(Op::Advance),
    ];
    prop::collection::vec(op, 1..200)
}

fn run_trace(controller: Box<dyn Controller>, ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(0);
    let limiter = AdaptiveLimiter::with_clock(controller, clock.clone());
    let mut held: Vec<Permit> = Vec::new();
    for op in ops {
        match op {
            Op::Acquire => {
                let before = limiter.metrics();
                match limiter.try_acquire() {
                    Some(permit) => {
                        prop_assert!(before.in_flight < before.limit, "{:?}", before);
                        prop_assert_eq!(permit.in_flight_at_start(), before.in_flight + 1);
                        held.push(permit);
                    }
                    None => prop_assert!(before.in_flight >= before.limit, "{:?}", before),
                }
            }
            Op::Complete(i, outcome) => {
                if !held.is_empty() {
                    let permit = held.swap_remove(i % held.len());
                    match outcome {
                        Some(outcome) => permit.complete(*outcome),
                        None => drop(permit),
                    }
                }
            }
            Op::Advance(micros) => clock.advance_micros(*micros),
        }
        let metrics = limiter.metrics();
        prop_assert_eq!(metrics.in_flight as usize, held.len());
        prop_assert!(metrics.limit >= 1);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn never_more_in_flight_than_the_limit(ops in ops(), kind in 0..3u8) {
        let controller: Box<dyn Controller> = match kind {
            0 => Box::new(
                Aimd::builder()
                    .min_limit(1)
                    .initial_limit(3)
                    .max_limit(8)
                    .backoff_ratio(0.5)
                    .timeout(Duration::from_millis(30))
                    .build()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
            ),
            1 => Box::new(
                Vegas::builder()
                    .initial_limit(5)
                    .max_limit(40)
                    .build()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
            ),
            _ => Box::new(
                Gradient2::builder()
                    .min_limit(1)
                    .initial_limit(4)
                    .max_limit(30)
                    .smoothing(1.0)
                    .build()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
            ),
        };
        run_trace(controller, &ops)?;
    }
}

#[test]
fn partitions_borrow_idle_capacity() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(fixed(10)?)
        .partition("live", 0.8)
        .partition("batch", 0.2)
        .clock(ManualClock::new(0))
        .build()?;
    let batch = limiter.partition("batch").ok_or("batch")?;
    // Batch is guaranteed 2, but live is idle: it takes all 10.
    let held: Vec<Permit> = (0..12)
        .filter_map(|_| limiter.try_acquire_in(batch))
        .collect();
    assert_eq!(held.len(), 10);
    let shares: Vec<(String, u32, u32)> = limiter
        .partition_metrics()
        .into_iter()
        .map(|m| (m.name, m.guaranteed, m.in_flight))
        .collect();
    assert_eq!(shares, [("live".into(), 8, 0), ("batch".into(), 2, 10)]);
    // Full: live cannot exceed the limit either, whatever its share.
    let live = limiter.partition("live").ok_or("live")?;
    assert!(limiter.try_acquire_in(live).is_none());
    assert_eq!(limiter.partition("nightly"), None);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn partitions_get_their_guaranteed_share_under_contention() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(fixed(10)?)
        .partition("a", 0.5)
        .partition("b", 0.3)
        .clock(ManualClock::new(0))
        .build()?;
    let a = limiter.partition("a").ok_or("a")?;
    let b = limiter.partition("b").ok_or("b")?;
    // A borrows everything while nobody else asks.
    let mut borrowed: Vec<Permit> = (0..10).filter_map(|_| limiter.try_acquire_in(a)).collect();
    assert_eq!(borrowed.len(), 10);
    // Then everyone wants more: ten of A queue first, then ten unpartitioned, then ten of B.
    let wait = |partition: PartitionId| {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire_in(partition, Duration::from_secs(60)).await })
    };
    let mut a_waiting: Vec<_> = (0..10).map(|_| wait(a)).collect();
    let _unpartitioned_waiting: Vec<_> =
        (0..10).map(|_| wait(PartitionId::UNPARTITIONED)).collect();
    let mut b_waiting: Vec<_> = (0..10).map(|_| wait(b)).collect();
    while limiter.metrics().queued < 30 {
        tokio::task::yield_now().await;
    }
    let in_flight = |name: &str| {
        limiter
            .partition_metrics()
            .into_iter()
            .find(|m| m.name == name)
            .map_or(0, |m| m.in_flight)
    };
    // As A's borrowed places free up, B, below its guaranteed 3, gets the first three
    // although it queued last; then A (at or above its 5) gets the rest, in queue order,
    // ahead of the unpartitioned requests queued after it.
    for freed in 1..=10u32 {
        borrowed.pop().ok_or("borrowed")?.success();
        assert_eq!(in_flight("b"), freed.min(3), "after {freed} freed");
        assert_eq!(
            in_flight("a"),
            10 - freed + freed.saturating_sub(3),
            "after {freed} freed"
        );
    }
    let metrics = limiter.metrics();
    assert_eq!((metrics.in_flight, metrics.queued), (10, 20));
    // B keeps its share: a place it frees goes to its own next waiter, ahead of the older
    // A and unpartitioned waiters.
    b_waiting.remove(0).await??.success();
    assert_eq!(in_flight("b"), 3);
    assert_eq!(limiter.metrics().queued, 19);
    b_waiting.remove(2).await??.success();
    assert_eq!(in_flight("b"), 3);
    // A, at 7 of its 5, frees one: nobody is below their share, so the oldest waiter, A's
    // eighth, gets it.
    a_waiting.remove(0).await??.success();
    assert_eq!(in_flight("a"), 7);
    assert_eq!(limiter.metrics().queued, 17);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn queue_timeout_answers_on_time() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(fixed(1)?)
        .clock(ManualClock::new(0))
        .build()?;
    let _held = limiter.try_acquire().ok_or("free")?;
    let start = tokio::time::Instant::now();
    let answer = limiter.acquire(Duration::from_millis(50)).await;
    assert_eq!(
        answer.err(),
        Some(AcquireError::Timeout {
            waited: Duration::from_millis(50)
        })
    );
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    let metrics = limiter.metrics();
    assert_eq!((metrics.queued, metrics.rejected), (0, 1));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_answers_at_once() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(fixed(1)?)
        .queue_capacity(1)
        .clock(ManualClock::new(0))
        .build()?;
    let _held = limiter.try_acquire().ok_or("free")?;
    let waiter = limiter.clone();
    let _waiting =
        tokio::spawn(async move { waiter.acquire(Duration::from_secs(1)).await.map(drop) });
    while limiter.metrics().queued < 1 {
        tokio::task::yield_now().await;
    }
    let start = tokio::time::Instant::now();
    let answer = limiter.acquire(Duration::from_secs(1)).await;
    assert_eq!(answer.err(), Some(AcquireError::QueueFull { capacity: 1 }));
    assert_eq!(start.elapsed(), Duration::ZERO);
    // No queue at all: the limit reached answers at once too.
    let no_queue = AdaptiveLimiter::builder(fixed(1)?)
        .queue_capacity(0)
        .build()?;
    let _held = no_queue.try_acquire().ok_or("free")?;
    assert!(matches!(
        no_queue.acquire(Duration::from_secs(1)).await,
        Err(AcquireError::QueueFull { capacity: 0 })
    ));
    assert_eq!(no_queue.metrics().rejected, 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn waiters_get_freed_places_in_order() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(fixed(1)?)
        .clock(ManualClock::new(0))
        .build()?;
    let held = limiter.try_acquire().ok_or("free")?;
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (mine, order) = (limiter.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let permit = mine.acquire(Duration::from_secs(1)).await?;
            order.lock().push((i, tokio::time::Instant::now()));
            assert_eq!(mine.in_flight(), 1);
            tokio::time::sleep(Duration::from_millis(5)).await;
            permit.success();
            Ok::<(), AcquireError>(())
        }));
        // Each joins the queue before the next is spawned.
        while limiter.metrics().queued < i + 1 {
            tokio::task::yield_now().await;
        }
    }
    let start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(10)).await;
    held.success();
    for task in tasks {
        task.await??;
    }
    let order: Vec<(usize, Duration)> = order
        .lock()
        .iter()
        .map(|&(i, at)| (i, at - start))
        .collect();
    // Each gets the place the moment the one before gives it back.
    let ms = Duration::from_millis;
    assert_eq!(order, [(0, ms(10)), (1, ms(15)), (2, ms(20))]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_leaves_the_queue() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(Recorder::new(1))
        .clock(ManualClock::new(0))
        .build()?;
    let held = limiter.try_acquire().ok_or("free")?;
    let waiter = limiter.clone();
    let task = tokio::spawn(async move { waiter.acquire(Duration::from_secs(1)).await });
    while limiter.metrics().queued < 1 {
        tokio::task::yield_now().await;
    }
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(limiter.metrics().queued, 0);
    held.success();
    assert_eq!(limiter.in_flight(), 0);
    assert!(limiter.try_acquire().is_some());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_place_granted_to_a_cancelled_wait_comes_back_without_a_sample() -> Result<(), BoxError> {
    let limiter = AdaptiveLimiter::builder(Recorder::new(1))
        .clock(ManualClock::new(0))
        .build()?;
    let held = limiter.try_acquire().ok_or("free")?;
    let waiter = limiter.clone();
    let task = tokio::spawn(async move { waiter.acquire(Duration::from_secs(1)).await });
    while limiter.metrics().queued < 1 {
        tokio::task::yield_now().await;
    }
    // The place goes to the waiter, which is cancelled before it runs to take it.
    held.success();
    assert_eq!((limiter.in_flight(), limiter.metrics().queued), (1, 0));
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(limiter.in_flight(), 0);
    // Only the first permit's sample: the undelivered one did no work.
    assert_eq!(limiter.with_controller(|r| r.samples.len()), 1);
    Ok(())
}

#[test]
fn limiter_permit_and_wait_can_move_between_threads() -> Result<(), BoxError> {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let limiter = AdaptiveLimiter::new(Box::new(fixed(1)?) as Box<dyn Controller>);
    send_sync(&limiter);
    let permit = limiter.try_acquire().ok_or("free")?;
    send(&permit);
    // A spawned task can wait (the tower layer and the proxy will).
    let waiting = limiter.acquire(Duration::from_millis(1));
    send(&waiting);
    drop(waiting);
    permit.success();
    Ok(())
}
