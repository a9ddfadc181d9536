//! CPU time per direct check, ours against governor, from a plain loop: less exposed to other
//! load on a shared machine than criterion's wall-clock times, since a thread's CPU time (from
//! `/proc/thread-self/schedstat`) does not count the time it waits for a core.
//!
//! ```text
//! cargo run --release -p sluicegate --example cpu_per_check
//! ```
//!
//! Prints, for each case, the best of five runs of 10^7 checks, in ns of CPU time per check.
//! A first argument sets another number of checks per run (a small one for
//! `valgrind --tool=callgrind`, whose instruction counts compare the code paths on a noisy
//! machine), a second runs only the cases whose names contain it.

use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroU64};

use governor::clock::MonotonicClock;
use governor::{Quota, RateLimiter};
use sluicegate::state_machine::Op;
use sluicegate::{Clock, DirectLimiter, Gcra, Rate, SystemClock, TokenBucket};

/// A named loop body.
type Case<'a> = (&'static str, Box<dyn FnMut() + 'a>);

const DEFAULT_CHECKS: u64 = 10_000_000;
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

/// The best (least disturbed) of `RUNS` runs of `checks` calls to `check`, in ns per call.
fn best(checks: u64, mut check: impl FnMut()) -> Result<f64, Box<dyn std::error::Error>> {
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let start = cpu_nanos()?;
        for _ in 0..checks {
            check();
        }
        let spent = (cpu_nanos()? - start) as f64 / checks as f64;
        best = best.min(spent);
    }
    Ok(best)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let checks = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => DEFAULT_CHECKS,
    };
    // Every check allowed: one permit a microsecond, a burst no run can drain.
    let rate = Rate::per_second(1_000_000)?;
    let burst = 1_000_000_000;
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).ok_or("rate")?)
        .allow_burst(NonZeroU32::new(burst).ok_or("burst")?);
    let gcra = DirectLimiter::new(Gcra::new(rate, u64::from(burst))?);
    let bucket = DirectLimiter::new(TokenBucket::new(rate, u64::from(burst))?);
    let governor = RateLimiter::direct(quota);
    let governor_instant = RateLimiter::direct_with_clock(quota, MonotonicClock);
    // Every check denied: one permit an hour, taken before measuring.
    let gcra_denied = DirectLimiter::new(Gcra::new(Rate::per_hour(1)?, 1)?);
    let governor_denied = RateLimiter::direct(Quota::per_hour(NonZeroU32::MIN));
    let _ = gcra_denied.check()?;
    let _ = governor_denied.check();
    let clock = SystemClock::new();
    let quanta = quanta::Clock::new();
    let now = clock.now();

    let cases: [Case<'_>; 9] = [
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
            "ours gcra denied",
            Box::new(|| drop(black_box(black_box(&gcra_denied).check()))),
        ),
        (
            "governor denied",
            Box::new(|| drop(black_box(black_box(&governor_denied).check()))),
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
    let only = std::env::args().nth(2).unwrap_or_default();
    for (name, check) in cases.into_iter().filter(|(name, _)| name.contains(&only)) {
        println!("{name:<26} {:6.1} ns", best(checks, check)?);
    }
    Ok(())
}
