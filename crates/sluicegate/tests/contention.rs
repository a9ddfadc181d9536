//! Many threads on one key grant exactly what the algorithm allows: not one permit more.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use sluicegate::{
    Algorithm, Concurrency, DirectLimiter, FixedWindow, Gcra, KeyedLimiter, LeakyBucket,
    LeakyQueue, ManualClock, QueueDelay, Rate, SlidingLog, SlidingWindow, SmoothBursty,
    TokenBucket,
};

const THREADS: usize = 8;
const TRIES_PER_THREAD: usize = 5_000;

/// Hammers one key from several threads with the clock stopped; returns the permits granted.
fn granted_by<A: Algorithm>(algorithm: A) -> u64 {
    let clock = ManualClock::new(0);
    let keyed = Arc::new(KeyedLimiter::with_clock(algorithm, clock.clone()));
    // Created at 0, hammered at 1 s: long enough for Guava's bursty limiter to store permits.
    clock.set(1_000_000);
    let granted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (keyed, granted) = (Arc::clone(&keyed), Arc::clone(&granted));
            std::thread::spawn(move || {
                for _ in 0..TRIES_PER_THREAD {
                    if keyed.check(&42u64).is_ok_and(|d| d.allowed()) {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    granted.load(Ordering::Relaxed)
}

fn granted_by_direct<A: Algorithm>(algorithm: A) -> u64 {
    let clock = ManualClock::new(0);
    let limiter = DirectLimiter::with_clock(algorithm, clock.clone());
    clock.set(1_000_000);
    let granted = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..TRIES_PER_THREAD {
                    if limiter.check_n(NonZeroU64::MIN).is_ok_and(|d| d.allowed()) {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    granted.load(Ordering::Relaxed)
}

#[test]
fn gcra_grants_exactly_its_burst() {
    let gcra = || Gcra::new(Rate::per_hour(1).expect("rate"), 1_000).expect("gcra");
    assert_eq!(granted_by(gcra()), 1_000);
    assert_eq!(granted_by_direct(gcra()), 1_000);
}

#[test]
fn token_bucket_grants_exactly_its_burst() {
    let bucket = || TokenBucket::new(Rate::per_hour(1).expect("rate"), 777).expect("bucket");
    assert_eq!(granted_by(bucket()), 777);
    assert_eq!(granted_by_direct(bucket()), 777);
}

#[test]
fn concurrency_grants_exactly_its_limit() {
    let limit = || Concurrency::new(123).expect("limit");
    assert_eq!(granted_by(limit()), 123);
    assert_eq!(granted_by_direct(limit()), 123);
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn fixed_window_grants_exactly_its_limit() {
    let window = || FixedWindow::new(500, HOUR).expect("window");
    assert_eq!(granted_by(window()), 500);
    assert_eq!(granted_by_direct(window()), 500);
}

#[test]
fn sliding_log_grants_exactly_its_limit() {
    let log = || SlidingLog::new(300, HOUR).expect("log");
    assert_eq!(granted_by(log()), 300);
    assert_eq!(granted_by_direct(log()), 300);
}

#[test]
fn sliding_windows_grant_exactly_their_limit() {
    let bucketed = || SlidingWindow::new(400, HOUR, Some(6)).expect("bucketed");
    assert_eq!(granted_by(bucketed()), 400);
    assert_eq!(granted_by_direct(bucketed()), 400);
    let weighted = || SlidingWindow::new(250, HOUR, None).expect("weighted");
    assert_eq!(granted_by(weighted()), 250);
    assert_eq!(granted_by_direct(weighted()), 250);
}

#[test]
fn leaky_bucket_and_queue_grant_exactly_their_capacity() {
    let rate = || Rate::per_hour(1).expect("rate");
    let meter = || LeakyBucket::new(rate(), 321).expect("meter");
    assert_eq!(granted_by(meter()), 321);
    assert_eq!(granted_by_direct(meter()), 321);
    // nginx counts the request in service apart from the burst: burst + 1 at once.
    let queue = || LeakyQueue::new(rate(), 99, QueueDelay::NoDelay).expect("queue");
    assert_eq!(granted_by(queue()), 100);
    assert_eq!(granted_by_direct(queue()), 100);
}

#[test]
fn smooth_bursty_grants_its_stored_permits_plus_one_paid_later() {
    // 100/s with one second of burst, idle for a second: 100 stored permits, and Guava lets
    // one more through at once, paid for by whoever comes next.
    let bursty = || SmoothBursty::per_second(100.0).expect("bursty");
    assert_eq!(granted_by(bursty()), 101);
    assert_eq!(granted_by_direct(bursty()), 101);
}
