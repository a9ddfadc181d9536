//! Many threads on one key grant exactly what the algorithm allows: not one permit more.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluicegate::{
    Algorithm, Concurrency, DirectLimiter, Gcra, KeyedLimiter, ManualClock, Rate, TokenBucket,
};

const THREADS: usize = 8;
const TRIES_PER_THREAD: usize = 5_000;

/// Hammers one key from several threads with the clock stopped; returns the permits granted.
fn granted_by<A: Algorithm>(algorithm: A) -> u64 {
    let keyed = Arc::new(KeyedLimiter::with_clock(
        algorithm,
        ManualClock::new(1_000_000),
    ));
    let granted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (keyed, granted) = (Arc::clone(&keyed), Arc::clone(&granted));
            std::thread::spawn(move || {
                for _ in 0..TRIES_PER_THREAD {
                    if keyed.check(&42u64).is_ok_and(|d| d.allowed) {
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
    let limiter = Arc::new(DirectLimiter::with_clock(
        algorithm,
        ManualClock::new(1_000_000),
    ));
    let granted = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..TRIES_PER_THREAD {
                    if limiter.check_n(NonZeroU64::MIN).is_ok_and(|d| d.allowed) {
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
