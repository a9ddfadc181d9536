//! CPU time per direct check, ours against governor, from a plain loop: less exposed to other
//! load on a shared machine than criterion's wall-clock times, since a thread's CPU time (from
//! `/proc/thread-self/schedstat`) does not count the time it waits for a core.
//!
//! ```text
//! cargo run --release -p sluicegate --example cpu_per_check
//! ```
//!
//! Prints, for each case, the best of five runs of 10^7 checks, in ns of CPU time per check.

use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroU64};

use governor::clock::MonotonicClock;
use governor::{Quota, RateLimiter};
use sluicegate::{Clock, DirectLimiter, Gcra, Op, Rate, SystemClock, TokenBucket};

/// A named loop body.
type Case<'a> = (&'static str, Box<dyn FnMut() + 'a>);

const CHECKS: u64 = 10_000_000;
const RUNS: usize = 5;

/// This thread's CPU time so far, in nanoseconds.
fn cpu_nanos() -> Result<u64, Box<dyn std::error::Error>> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    let first = schedstat
        .split_whitespace()
        .next()
        .ok_or("empty schedstat")?;
    Ok(first.parse()?)
}

/// The best (least disturbed) of `RUNS` runs of `CHECKS` calls to `check`, in ns per call.
fn best(mut check: impl FnMut()) -> Result<f64, Box<dyn std::error::Error>> {
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let start = cpu_nanos()?;
        for _ in 0..CHECKS {
            check();
        }
        let spent = (cpu_nanos()? - start) as f64 / CHECKS as f64;
        best = best.min(spent);
    }
    Ok(best)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every check allowed: one permit a microsecond, a burst no run can drain.
    let rate = Rate::per_second(1_000_000)?;
    let burst = 1_000_000_000;
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).ok_or("rate")?)
        .allow_burst(NonZeroU32::new(burst).ok_or("burst")?);
    let gcra = DirectLimiter::new(Gcra::new(rate, u64::from(burst))?);
    let bucket = DirectLimiter::new(TokenBucket::new(rate, u64::from(burst))?);
    let governor = RateLimiter::direct(quota);
    let governor_instant = RateLimiter::direct_with_clock(quota, MonotonicClock);
    let clock = SystemClock::new();
    let quanta = quanta::Clock::new();
    let now = clock.now();

    let cases: [Case<'_>; 7] = [
        (
            "ours gcra (SystemClock)",
            Box::new(|| drop(black_box(black_box(&gcra).check()))),
        ),
        (
            "ours token bucket",
            Box::new(|| drop(black_box(black_box(&bucket).check()))),
        ),
        (
            "ours gcra, time given",
            Box::new(|| {
                let d = black_box(&gcra).decide_at(black_box(now), NonZeroU64::MIN, Op::Check);
                drop(black_box(d));
            }),
        ),
        (
            "governor (quanta)",
            Box::new(|| drop(black_box(black_box(&governor).check()))),
        ),
        (
            "governor on Instant",
            Box::new(|| drop(black_box(black_box(&governor_instant).check()))),
        ),
        (
            "SystemClock::now",
            Box::new(|| {
                black_box(black_box(&clock).now());
            }),
        ),
        (
            "quanta raw read",
            Box::new(|| {
                black_box(black_box(&quanta).raw());
            }),
        ),
    ];
    for (name, check) in cases {
        println!("{name:<26} {:6.1} ns", best(check)?);
    }
    Ok(())
}
